#include "coordinator/checkpoint_store.h"

#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/sharded_tensor.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {
namespace fs = std::filesystem;

// Two ranks, each holding half of one [4, 2] tensor (rows split), as a real writer would.
std::vector<ShardedTensor> HalfTensors(int rank) {
  ShardedTensor t;
  t.name = "w";
  t.offset = 0;
  t.size = 4;
  t.global_shape = {4, 2};
  t.local_shape = {2, 2};
  t.global_offset = {2 * rank, 0};
  return {t};
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class CheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::path(::testing::TempDir()) /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(base_);
    auto store = CheckpointStore::Open((base_ / "store").string(), /*keep_last=*/2);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  // Writes step `step` as two ranks would (values depend on the step) into a scratch
  // directory and returns the manifest's bytes; the shard files stay there.
  std::string WriteSource(int64_t step) {
    const std::string dir = (base_ / "src" / CheckpointDirName(step)).string();
    std::vector<RankShardRecords> records;
    for (int rank = 0; rank < 2; ++rank) {
      std::vector<float> params(4), m(4), v(4);
      for (int i = 0; i < 4; ++i) {
        params[i] = float(step * 100 + rank * 10 + i);
        m[i] = params[i] / 2;
        v[i] = params[i] / 4;
      }
      auto written =
          WriteRankShards(dir, rank, step, HalfTensors(rank), params.data(), m.data(), v.data());
      EXPECT_TRUE(written.ok()) << written.status();
      records.push_back(*written);
    }
    TrainingState state;
    state.set_step(step);
    SetRngSeed(7, &state);
    auto manifest = BuildManifest("job-1", {1, 2, 1}, state, records);
    EXPECT_TRUE(manifest.ok()) << manifest.status();
    return SerializeManifest(*manifest);
  }

  // Uploads `bytes` as `file` in chunks of `chunk` bytes.
  absl::Status Upload(int64_t generation, int64_t step, const std::string& file,
                      const std::string& bytes, size_t chunk = 7) {
    auto upload = store_->BeginFile("job-1", generation, step, file);
    if (!upload.ok()) return upload.status();
    for (size_t offset = 0; offset < bytes.size(); offset += chunk) {
      absl::Status s = (*upload)->Append(offset, absl::string_view(bytes).substr(offset, chunk));
      if (!s.ok()) return s;
    }
    auto finished = (*upload)->Finish();
    if (!finished.ok()) return finished.status();
    EXPECT_EQ(*finished, bytes.size());
    return absl::OkStatus();
  }

  absl::Status UploadCheckpoint(int64_t generation, int64_t step) {
    const std::string manifest = WriteSource(step);
    const std::string src = (base_ / "src" / CheckpointDirName(step)).string();
    for (const char* file : {"rank-00000.bin", "rank-00001.bin"}) {
      absl::Status s = Upload(generation, step, file, ReadAll(src + "/" + file));
      if (!s.ok()) return s;
    }
    return Upload(generation, step, "MANIFEST", manifest);
  }

  // `bytes` as an upload stream's chunks of `chunk` bytes, the last one marked.
  static std::vector<CheckpointChunk> Chunks(int64_t generation, int64_t step,
                                             const std::string& file, const std::string& bytes,
                                             size_t chunk = 7) {
    std::vector<CheckpointChunk> chunks;
    size_t offset = 0;
    do {
      CheckpointChunk& c = chunks.emplace_back();
      c.set_job_id("job-1");
      c.set_generation(generation);
      c.set_step(step);
      c.set_file(file);
      c.set_offset(offset);
      c.set_data(bytes.substr(offset, chunk));
      offset += c.data().size();
      c.set_last(offset >= bytes.size());
    } while (offset < bytes.size());
    return chunks;
  }

  // Hands `chunks` to ReceiveFile as an upload stream would.
  absl::StatusOr<ReceivedCheckpointFile> Receive(const std::vector<CheckpointChunk>& chunks) {
    size_t next = 1;
    return store_->ReceiveFile(chunks.at(0), [&](CheckpointChunk* chunk) {
      if (next == chunks.size()) return false;
      *chunk = chunks[next++];
      return true;
    });
  }

  // Reads a committed file back through a download, checking each chunk's header.
  absl::StatusOr<std::string> Download(int64_t step, const std::string& file,
                                       int* num_chunks = nullptr) {
    absl::StatusOr<std::unique_ptr<CheckpointFileDownload>> download =
        store_->OpenDownload("job-1", step, file);
    if (!download.ok()) return download.status();
    std::string bytes;
    if (num_chunks != nullptr) *num_chunks = 0;
    while (true) {
      absl::StatusOr<CheckpointChunk> chunk = (*download)->Next();
      if (!chunk.ok()) return chunk.status();
      EXPECT_EQ(chunk->job_id(), "job-1");
      EXPECT_EQ(chunk->step(), step);
      EXPECT_EQ(chunk->file(), file);
      EXPECT_EQ(chunk->offset(), bytes.size());
      EXPECT_LE(chunk->data().size(), CheckpointFileDownload::kChunkBytes);
      bytes += chunk->data();
      if (num_chunks != nullptr) ++*num_chunks;
      if (chunk->last()) return bytes;
    }
  }

  std::string Committed(int64_t step, const std::string& file) {
    return (base_ / "store" / "job-1" / CheckpointDirName(step) / file).string();
  }

  fs::path base_;
  std::unique_ptr<CheckpointStore> store_;
};

TEST_F(CheckpointStoreTest, CommittedCheckpointLoadsAndIsListed) {
  ASSERT_TRUE(UploadCheckpoint(1, 10).ok());
  const std::vector<CheckpointInfo> list = store_->List("job-1");
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].step(), 10);
  EXPECT_EQ(list[0].pipeline(), 2);
  EXPECT_EQ(list[0].num_files(), 2);
  EXPECT_FALSE(list[0].parameters_only());
  EXPECT_GT(list[0].total_bytes(), 2u * 64);
  EXPECT_TRUE(store_->Has("job-1", 10));
  // What was committed is a complete checkpoint, loadable in full.
  auto dir = store_->CheckpointDir("job-1", 10);
  ASSERT_TRUE(dir.ok());
  auto checkpoint = OpenCheckpoint(*dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ShardedTensor whole = HalfTensors(0)[0];
  whole.size = 8;
  whole.local_shape = {4, 2};
  whole.global_offset = {0, 0};
  std::vector<float> params(8);
  ASSERT_TRUE(LoadRankTensors(*checkpoint, {whole}, params.data(), nullptr, nullptr).ok());
  EXPECT_EQ(params[0], 1000);
  EXPECT_EQ(params[7], 1013);
  // Staging is gone once committed.
  EXPECT_FALSE(fs::exists(base_ / "store" / "job-1" / "staging" / "gen-1" / "step-00000010"));
}

TEST_F(CheckpointStoreTest, KeepsTheLastKAndDropsOlderGenerationsStaging) {
  ASSERT_TRUE(UploadCheckpoint(1, 10).ok());
  // Generation 1 dies half-way through step 20.
  ASSERT_TRUE(Upload(1, 20, "rank-00000.bin", "partial").ok());
  ASSERT_TRUE(UploadCheckpoint(2, 20).ok());
  ASSERT_TRUE(UploadCheckpoint(2, 30).ok());
  const std::vector<CheckpointInfo> list = store_->List("job-1");
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].step(), 20);
  EXPECT_EQ(list[1].step(), 30);
  EXPECT_FALSE(fs::exists(base_ / "store" / "job-1" / CheckpointDirName(10)));
  EXPECT_FALSE(fs::exists(base_ / "store" / "job-1" / "staging" / "gen-1"));
}

TEST_F(CheckpointStoreTest, DeleteJobRemovesCommittedStagingAndVerifiedState) {
  ASSERT_TRUE(UploadCheckpoint(1, 10).ok());
  ASSERT_TRUE(Upload(2, 20, "rank-00000.bin", "partial").ok());
  std::vector<std::string> damaged;
  ASSERT_TRUE(store_->LatestUsable("job-1", &damaged).has_value());
  ASSERT_TRUE(store_->DeleteJob("job-1").ok());
  EXPECT_FALSE(fs::exists(base_ / "store" / "job-1"));
  EXPECT_TRUE(store_->List("job-1").empty());
  EXPECT_FALSE(store_->LatestUsable("job-1", &damaged).has_value());
  // Nothing stored is fine; a job id that is a path is refused, not followed.
  EXPECT_TRUE(store_->DeleteJob("job-2").ok());
  EXPECT_EQ(store_->DeleteJob("..").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->DeleteJob("a/b").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(fs::exists(base_ / "store"));
}

TEST_F(CheckpointStoreTest, ARepeatedStepReplacesTheOlderCopy) {
  ASSERT_TRUE(UploadCheckpoint(1, 10).ok());
  ASSERT_TRUE(UploadCheckpoint(2, 10).ok());
  EXPECT_EQ(store_->List("job-1").size(), 1u);
  EXPECT_TRUE(OpenCheckpoint(*store_->CheckpointDir("job-1", 10)).ok());
}

TEST_F(CheckpointStoreTest, ManifestWithoutItsShardsIsNotCommitted) {
  const std::string manifest = WriteSource(10);
  const std::string src = (base_ / "src" / CheckpointDirName(10)).string();
  ASSERT_TRUE(Upload(1, 10, "rank-00000.bin", ReadAll(src + "/rank-00000.bin")).ok());
  absl::Status s = Upload(1, 10, "MANIFEST", manifest);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("rank-00001.bin"), std::string::npos) << s;
  EXPECT_FALSE(store_->Has("job-1", 10));
  // A shard whose bytes differ from what the manifest recorded.
  std::string flipped = ReadAll(src + "/rank-00001.bin");
  flipped[100] ^= 1;
  ASSERT_TRUE(Upload(1, 10, "rank-00001.bin", flipped).ok());
  s = Upload(1, 10, "MANIFEST", manifest);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_FALSE(store_->Has("job-1", 10));
}

TEST_F(CheckpointStoreTest, AFailedCommitLeavesNoFilesBehind) {
  const std::string manifest = WriteSource(10);
  const std::string src = (base_ / "src" / CheckpointDirName(10)).string();
  ASSERT_TRUE(Upload(1, 10, "rank-00000.bin", ReadAll(src + "/rank-00000.bin")).ok());
  EXPECT_FALSE(Upload(1, 10, "MANIFEST", manifest).ok());
  EXPECT_FALSE(fs::exists(base_ / "store" / "job-1" / "staging" / "gen-1" / "step-00000010"));
}

TEST_F(CheckpointStoreTest, AWriteTheDiskRefusesRemovesTheStepsUploadsAndIsReported) {
  std::vector<std::string> reported;
  store_->SetWriteFailureListener([&](const std::string& job_id, int64_t step,
                                      const absl::Status& failure, uint64_t bytes_lost) {
    reported.push_back(absl::StrCat(job_id, "/", step, ": ", failure.message()));
    // What had arrived: rank 0's whole file and the first chunk of rank 1's.
    EXPECT_GT(bytes_lost,
              ReadAll((base_ / "src" / CheckpointDirName(10) / "rank-00000.bin").string()).size());
  });
  const std::string manifest = WriteSource(10);
  const std::string src = (base_ / "src" / CheckpointDirName(10)).string();
  ASSERT_TRUE(Upload(1, 10, "rank-00000.bin", ReadAll(src + "/rank-00000.bin")).ok());
  absl::Status refused;
  {
    // A full disk, as far as this process's writes go: files cannot grow past 16 bytes.
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit saved{};
    getrlimit(RLIMIT_FSIZE, &saved);
    rlimit limited = saved;
    limited.rlim_cur = 16;
    setrlimit(RLIMIT_FSIZE, &limited);
    refused = Upload(1, 10, "rank-00001.bin", ReadAll(src + "/rank-00001.bin"), 4096);
    setrlimit(RLIMIT_FSIZE, &saved);
  }
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("not stored"), std::string::npos) << refused;
  ASSERT_EQ(reported.size(), 1u);
  EXPECT_EQ(reported[0].rfind("job-1/10: ", 0), 0u) << reported[0];
  // The rank that uploaded before lost its file too: the step is gone as a whole.
  EXPECT_FALSE(fs::exists(base_ / "store" / "job-1" / "staging" / "gen-1" / "step-00000010"));
  EXPECT_FALSE(store_->Has("job-1", 10));
  // With space back, the next generation stores the step.
  ASSERT_TRUE(UploadCheckpoint(2, 10).ok());
  EXPECT_TRUE(store_->Has("job-1", 10));
  EXPECT_GT(store_->FreeBytes().value_or(0), 0u);
  store_->SetWriteFailureListener(nullptr);
}

TEST_F(CheckpointStoreTest, RefusesBadNamesOffsetsAndManifests) {
  EXPECT_EQ(store_->BeginFile("job-1", 1, 10, "../x").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->BeginFile("job-1", 1, 10, "rank-00000.bin.tmp").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->BeginFile("../job", 1, 10, "MANIFEST").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->BeginFile("job-1", 1, -1, "MANIFEST").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto upload = store_->BeginFile("job-1", 1, 10, "rank-00000.bin");
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE((*upload)->Append(0, "abc").ok());
  absl::Status gap = (*upload)->Append(5, "def");
  EXPECT_EQ(gap.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(gap.message().find("offset"), std::string::npos) << gap;
  // A manifest of another step, and garbage.
  const std::string manifest = WriteSource(10);
  absl::Status wrong = Upload(1, 20, "MANIFEST", manifest);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument) << wrong;
  EXPECT_EQ(Upload(1, 10, "MANIFEST", "not a manifest").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->FilePath("job-1", 10, "../../etc/passwd").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->FilePath("job-1", 10, "MANIFEST").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointStoreTest, ReceivedStreamsStoreShardsAndTheManifestCommits) {
  const std::string manifest = WriteSource(10);
  const std::string src = (base_ / "src" / CheckpointDirName(10)).string();
  for (const char* file : {"rank-00000.bin", "rank-00001.bin"}) {
    const std::string bytes = ReadAll(src + "/" + file);
    absl::StatusOr<ReceivedCheckpointFile> received = Receive(Chunks(1, 10, file, bytes));
    ASSERT_TRUE(received.ok()) << received.status();
    EXPECT_EQ(received->bytes_received, bytes.size());
    EXPECT_FALSE(received->committed.has_value()) << file;
    EXPECT_FALSE(store_->Has("job-1", 10));
  }
  absl::StatusOr<ReceivedCheckpointFile> received =
      Receive(Chunks(1, 10, "MANIFEST", manifest, /*chunk=*/1 << 20));
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(received->bytes_received, manifest.size());
  ASSERT_TRUE(received->committed.has_value());
  EXPECT_EQ(received->committed->step(), 10);
  EXPECT_EQ(received->committed->num_files(), 2);
  EXPECT_EQ(received->committed->pipeline(), 2);
  EXPECT_TRUE(store_->Has("job-1", 10));
  EXPECT_TRUE(OpenCheckpoint(*store_->CheckpointDir("job-1", 10)).ok());
}

// keep_last is 2: a step older than the two newest is stored and dropped at once, so
// nothing is reported committed.
TEST_F(CheckpointStoreTest, AReceivedManifestOfAStepRetentionDropsCommitsNothing) {
  ASSERT_TRUE(UploadCheckpoint(1, 20).ok());
  ASSERT_TRUE(UploadCheckpoint(1, 30).ok());
  const std::string manifest = WriteSource(10);
  const std::string src = (base_ / "src" / CheckpointDirName(10)).string();
  for (const char* file : {"rank-00000.bin", "rank-00001.bin"}) {
    ASSERT_TRUE(Receive(Chunks(2, 10, file, ReadAll(src + "/" + file))).ok());
  }
  absl::StatusOr<ReceivedCheckpointFile> received = Receive(Chunks(2, 10, "MANIFEST", manifest));
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_FALSE(received->committed.has_value());
  EXPECT_FALSE(store_->Has("job-1", 10));
}

TEST_F(CheckpointStoreTest, ReceiveRefusesStreamsThatBreakTheirRules) {
  const std::string bytes(50, 'x');
  // A chunk of another file in the stream.
  std::vector<CheckpointChunk> chunks = Chunks(1, 10, "rank-00000.bin", bytes);
  chunks[2].set_file("rank-00001.bin");
  absl::Status status = Receive(chunks).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("one file per upload stream"), std::string::npos) << status;
  // ... of another generation or step.
  chunks = Chunks(1, 10, "rank-00000.bin", bytes);
  chunks[1].set_generation(2);
  EXPECT_EQ(Receive(chunks).status().code(), absl::StatusCode::kInvalidArgument);
  chunks = Chunks(1, 10, "rank-00000.bin", bytes);
  chunks[3].set_step(11);
  EXPECT_EQ(Receive(chunks).status().code(), absl::StatusCode::kInvalidArgument);
  // A stream cut off before its last chunk.
  chunks = Chunks(1, 10, "rank-00000.bin", bytes);
  chunks.pop_back();
  status = Receive(chunks).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("rank-00000.bin: the stream ended without a chunk with `last`"),
            std::string::npos)
      << status;
  // A gap.
  chunks = Chunks(1, 10, "rank-00000.bin", bytes);
  chunks.erase(chunks.begin() + 1);
  status = Receive(chunks).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("offset"), std::string::npos) << status;
  // A name that is no checkpoint file.
  EXPECT_EQ(Receive(Chunks(1, 10, "../rank-00000.bin", bytes)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // None of them left a file behind: a refused stream stores nothing.
  const fs::path staging = base_ / "store" / "job-1" / "staging" / "gen-1" / "step-00000010";
  std::error_code ignored;
  for (const fs::directory_entry& entry : fs::directory_iterator(staging, ignored)) {
    ADD_FAILURE() << "left behind: " << entry.path();
  }
  // A manifest that commits nothing is refused like Commit refuses it.
  EXPECT_EQ(Receive(Chunks(1, 10, "MANIFEST", "not a manifest")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(store_->Has("job-1", 10));
}

TEST_F(CheckpointStoreTest, DownloadsReadCommittedFilesBackInChunks) {
  ASSERT_TRUE(UploadCheckpoint(1, 10).ok());
  for (const char* file : {"MANIFEST", "rank-00000.bin", "rank-00001.bin"}) {
    int chunks = 0;
    absl::StatusOr<std::string> bytes = Download(10, file, &chunks);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, ReadAll(Committed(10, file))) << file;
    EXPECT_EQ(chunks, 1) << file;
  }
}

// A file over the chunk size comes in several chunks, each at most kChunkBytes.
TEST_F(CheckpointStoreTest, ALargeFileDownloadsInSeveralChunks) {
  const std::string dir = (base_ / "src_large").string();
  ShardedTensor t;
  t.name = "w";
  t.size = 300000;  // 1.2 MB of floats
  t.global_shape = {300000};
  t.local_shape = {300000};
  t.global_offset = {0};
  std::vector<float> params(t.size);
  for (size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i);
  absl::StatusOr<RankShardRecords> records =
      WriteRankShards(dir, 0, 5, {t}, params.data(), nullptr, nullptr);
  ASSERT_TRUE(records.ok()) << records.status();
  TrainingState state;
  state.set_step(5);
  absl::StatusOr<CheckpointManifest> manifest = BuildManifest("job-1", {}, state, {*records});
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  const std::string shard = ReadAll(dir + "/rank-00000.bin");
  ASSERT_TRUE(Receive(Chunks(1, 5, "rank-00000.bin", shard, 1 << 16)).ok());
  ASSERT_TRUE(Receive(Chunks(1, 5, "MANIFEST", SerializeManifest(*manifest))).ok());
  int chunks = 0;
  absl::StatusOr<std::string> bytes = Download(5, "rank-00000.bin", &chunks);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, shard);
  EXPECT_EQ(chunks, 2);
}

TEST_F(CheckpointStoreTest, DownloadsRefuseBadNamesAndWhatIsNotThere) {
  ASSERT_TRUE(UploadCheckpoint(1, 10).ok());
  EXPECT_EQ(store_->OpenDownload("job-1", 10, "../../etc/passwd").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->OpenDownload("../job", 10, "MANIFEST").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->OpenDownload("job-1", 20, "MANIFEST").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->OpenDownload("job-1", 10, "rank-00007.bin").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->OpenDownload("job-2", 10, "MANIFEST").status().code(),
            absl::StatusCode::kNotFound);
}

// Flips one bit of a committed file, keeping its size and, with keep_time, its
// modification time (damage the store's record of verified files cannot see).
void FlipBit(const std::string& path, bool keep_time) {
  const auto mtime = fs::last_write_time(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(80);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(80);
    f.write(&c, 1);
  }
  if (keep_time) fs::last_write_time(path, mtime);
}

TEST_F(CheckpointStoreTest, DamagedNewestFallsBackToThePreviousAndIsMovedAside) {
  ASSERT_TRUE(UploadCheckpoint(1, 10).ok());
  ASSERT_TRUE(UploadCheckpoint(1, 20).ok());
  std::vector<std::string> damaged;
  auto latest = store_->LatestUsable("job-1", &damaged);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step(), 20);
  EXPECT_TRUE(damaged.empty());

  // One bit flipped in a shard of step 20, after it was verified and cached.
  FlipBit(Committed(20, "rank-00001.bin"), /*keep_time=*/false);
  latest = store_->LatestUsable("job-1", &damaged);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step(), 10);
  ASSERT_EQ(damaged.size(), 1u);
  EXPECT_NE(damaged[0].find("step 20"), std::string::npos) << damaged[0];
  EXPECT_NE(damaged[0].find("DATA_LOSS"), std::string::npos) << damaged[0];
  EXPECT_NE(damaged[0].find("rank-00001.bin"), std::string::npos) << damaged[0];
  EXPECT_TRUE(fs::exists(base_ / "store" / "job-1" / "damaged-step-00000020" / "MANIFEST"));
  EXPECT_FALSE(store_->Has("job-1", 20));

  // A truncated shard of step 10: nothing usable remains.
  fs::resize_file(Committed(10, "rank-00000.bin"), 70);
  damaged.clear();
  EXPECT_FALSE(store_->LatestUsable("job-1", &damaged).has_value());
  ASSERT_EQ(damaged.size(), 1u);
  EXPECT_NE(damaged[0].find("step 10"), std::string::npos) << damaged[0];
}

TEST_F(CheckpointStoreTest, VerifyAheadReadsTheNewestSoLatestUsableNeedNot) {
  ASSERT_TRUE(UploadCheckpoint(1, 10).ok());
  ASSERT_TRUE(UploadCheckpoint(1, 20).ok());
  // A restarted coordinator: a new store on the same directory has verified nothing.
  auto reopened = CheckpointStore::Open((base_ / "store").string(), /*keep_last=*/2);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  (*reopened)->VerifyAhead("job-1");
  // Damage it cannot see (same size and time): LatestUsable relies on what VerifyAhead
  // read, so it offers step 20 without reading it again.
  FlipBit(Committed(20, "rank-00001.bin"), /*keep_time=*/true);
  std::vector<std::string> damaged;
  std::optional<CheckpointInfo> latest = (*reopened)->LatestUsable("job-1", &damaged);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step(), 20);
  EXPECT_TRUE(damaged.empty());
  // Without the record (another restart) the damage is found.
  auto cold = CheckpointStore::Open((base_ / "store").string(), /*keep_last=*/2);
  ASSERT_TRUE(cold.ok()) << cold.status();
  latest = (*cold)->LatestUsable("job-1", &damaged);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step(), 10);
  ASSERT_EQ(damaged.size(), 1u);
  EXPECT_NE(damaged[0].find("rank-00001.bin"), std::string::npos) << damaged[0];
}

TEST_F(CheckpointStoreTest, VerifyAheadRecordsDamageAndGoesOnToTheOneBefore) {
  ASSERT_TRUE(UploadCheckpoint(1, 10).ok());
  ASSERT_TRUE(UploadCheckpoint(1, 20).ok());
  FlipBit(Committed(20, "rank-00000.bin"), /*keep_time=*/false);
  auto reopened = CheckpointStore::Open((base_ / "store").string(), /*keep_last=*/2);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  (*reopened)->VerifyAhead("job-1");
  // Step 10 was read ahead too: damage it now unseen, and it is still offered.
  FlipBit(Committed(10, "rank-00001.bin"), /*keep_time=*/true);
  std::vector<std::string> damaged;
  std::optional<CheckpointInfo> latest = (*reopened)->LatestUsable("job-1", &damaged);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step(), 10);
  ASSERT_EQ(damaged.size(), 1u);
  EXPECT_NE(damaged[0].find("step 20"), std::string::npos) << damaged[0];
  EXPECT_NE(damaged[0].find("rank-00000.bin"), std::string::npos) << damaged[0];
  EXPECT_TRUE(fs::exists(base_ / "store" / "job-1" / "damaged-step-00000020" / "MANIFEST"));
}

TEST_F(CheckpointStoreTest, KeepLastMustBePositive) {
  EXPECT_EQ(CheckpointStore::Open((base_ / "x").string(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtrain
