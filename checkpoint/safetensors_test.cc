#include "checkpoint/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  const std::vector<float> weights = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  const std::vector<int32_t> ids = {4, 5, 6};
  SafetensorsFile file;
  file.tensors["w"] = MakeF32Tensor({2, 3}, weights.data());
  file.tensors["ids"] = MakeI32Tensor({3}, ids.data());
  file.metadata["format"] = "pt";
  const std::string path = TempPath("round_trip.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, file).ok());
  absl::StatusOr<SafetensorsFile> read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->metadata.at("format"), "pt");
  EXPECT_EQ(read->tensors.at("w").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*TensorAsFloats(read->tensors.at("w")), weights);
  EXPECT_EQ(*TensorAsInt32(read->tensors.at("ids")), ids);
  EXPECT_FALSE(TensorAsInt32(read->tensors.at("w")).ok());
}

// The exact bytes of a small file, as the writer produced them before it used
// common/json_writer: safetensors files are hashed (by tests and by users), so a header's
// bytes must not change. Metadata holds every character the escaping treats specially.
TEST(SafetensorsTest, WritesTheSameBytesAsEver) {
  const std::vector<float> floats = {1.0f, -2.0f};
  const float scalar = 0.5f;
  const std::vector<int32_t> ints = {7, -1};
  SafetensorsFile file;
  file.tensors["b"] = MakeF32Tensor({2}, floats.data());
  file.tensors["a.weight"] = MakeI32Tensor({1, 2}, ints.data());
  file.tensors["s"] = MakeF32Tensor({}, &scalar);
  file.metadata["format"] = "pt";
  file.metadata["note"] = "q\"b\\s </x>\n\t\x01\x7f caf\xc3\xa9";
  const std::string path = TempPath("pinned.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, file).ok());
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"q\\\"b\\\\s </x>\\u000a\\u0009\\u0001\x7f "
      "caf\xc3\xa9\"},"
      "\"a.weight\":{\"dtype\":\"I32\",\"shape\":[1,2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
      "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[16,20]}}";
  const std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  std::string expected(8, '\0');
  for (int i = 0; i < 8; ++i) expected[i] = static_cast<char>((padded.size() >> (8 * i)) & 0xFF);
  expected += padded;
  expected.append(reinterpret_cast<const char*>(ints.data()), 8);
  expected.append(reinterpret_cast<const char*>(floats.data()), 8);
  expected.append(reinterpret_cast<const char*>(&scalar), 4);
  EXPECT_EQ(bytes, expected);
  EXPECT_EQ(padded.size(), 256u);  // the header as it was, spaces included

  absl::StatusOr<SafetensorsFile> read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->metadata, file.metadata);
}

TEST(SafetensorsTest, RejectsTruncatedAndMalformedFiles) {
  const std::vector<float> weights(100, 1.0f);
  SafetensorsFile file;
  file.tensors["w"] = MakeF32Tensor({100}, weights.data());
  const std::string path = TempPath("truncated.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, file).ok());
  std::ifstream in(path, std::ios::binary);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(content.data(), content.size() - 10);
  }
  absl::StatusOr<SafetensorsFile> read = ReadSafetensors(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find("outside"), absl::string_view::npos) << read.status();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write("\x05\x00\x00\x00\x00\x00\x00\x00{bad}", 13);
  }
  EXPECT_EQ(ReadSafetensors(path).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadSafetensors(TempPath("missing")).status().code(), absl::StatusCode::kNotFound);
}

// A file of the safetensors layout with an arbitrary header and `data_bytes` zero bytes.
std::string CraftedFile(const std::string& name, const std::string& header, size_t data_bytes = 16,
                        uint64_t header_length = UINT64_MAX) {
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t length = header_length != UINT64_MAX ? header_length : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xFF));
  out << header << std::string(data_bytes, '\0');
  return path;
}

void ExpectRefused(const std::string& path, absl::StatusCode code, const std::string& needle) {
  absl::StatusOr<SafetensorsFile> read = ReadSafetensors(path);
  EXPECT_EQ(read.status().code(), code) << read.status();
  EXPECT_NE(read.status().message().find(path), absl::string_view::npos) << read.status();
  EXPECT_NE(read.status().message().find(needle), absl::string_view::npos) << read.status();
}

// Text that is not UTF-8 is written as U+FFFD, so the header stays JSON that every reader
// accepts (written as it was, the header was refused: "non UTF-8 code points").
TEST(SafetensorsTest, WritesTextThatIsNotUtf8AsReplacementCharacters) {
  const float value = 1.0f;
  SafetensorsFile file;
  file.tensors["w\xff"] = MakeF32Tensor({1}, &value);
  file.metadata["note"] = "x\xfey";
  const std::string path = TempPath("not_utf8.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, file).ok());
  absl::StatusOr<SafetensorsFile> read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->metadata.at("note"), "x\xef\xbf\xbdy");
  EXPECT_EQ(read->tensors.count("w\xef\xbf\xbd"), 1u);
}

TEST(SafetensorsTest, RefusesFilesThatAreNotRegularBeforeReadingThem) {
  // /dev/zero never ends: reading it whole used to abort the rank with std::bad_alloc.
  ExpectRefused("/dev/zero", absl::StatusCode::kInvalidArgument, "a character device");
  ExpectRefused(TempPath(""), absl::StatusCode::kInvalidArgument, "a directory");
  // Opening a FIFO for reading would wait for a writer forever.
  const std::string fifo = TempPath("weights.fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ExpectRefused(fifo, absl::StatusCode::kInvalidArgument, "a FIFO");
}

TEST(SafetensorsTest, ChecksEveryHeaderFieldAgainstTheFileBeforeAllocating) {
  const absl::StatusCode loss = absl::StatusCode::kDataLoss;
  {
    const std::string path = TempPath("tiny.safetensors");
    std::ofstream(path, std::ios::binary) << "abc";
    ExpectRefused(path, loss, "shorter than the 8-byte header length");
  }
  ExpectRefused(CraftedFile("huge_header.safetensors", "{}", 0, uint64_t{1} << 62), loss,
                "header length 4611686018427387904 exceeds the limit");
  ExpectRefused(CraftedFile("long_header.safetensors", "{}", 0, 4096), loss,
                "header length 4096 exceeds the file (10 bytes)");
  ExpectRefused(CraftedFile("not_json.safetensors", "{not json"), loss, "header JSON");
  ExpectRefused(CraftedFile("not_object.safetensors", R"({"w": 5})"), loss,
                "'w' is not a JSON object");
  ExpectRefused(CraftedFile("no_offsets.safetensors", R"({"w": {"dtype": "F32", "shape": [4]}})"),
                loss, "tensor 'w' lacks");
  ExpectRefused(CraftedFile("dtype.safetensors",
                            R"({"w": {"dtype": "Q7", "shape": [4], "data_offsets": [0, 16]}})"),
                loss, "unknown dtype 'Q7'");
  // Shapes: too large for any file, overflowing int64 when multiplied, negative,
  // fractional, not numbers.
  for (const std::string shape :
       {"[1e30]", "[1099511627776, 1099511627776]", "[4294967296, 4294967296, 4294967296]", "[-4]",
        "[2.5]", "[\"4\"]"}) {
    SCOPED_TRACE(shape);
    ExpectRefused(CraftedFile("shape.safetensors", R"({"w": {"dtype": "F32", "shape": )" + shape +
                                                       R"(, "data_offsets": [0, 16]}})"),
                  loss, "tensor 'w' shape");
  }
  ExpectRefused(CraftedFile("offsets.safetensors",
                            R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 1e300]}})"),
                loss, "data_offsets[1]");
  ExpectRefused(CraftedFile("outside.safetensors",
                            R"({"w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})"),
                loss, "outside the 16 data bytes");
  ExpectRefused(CraftedFile("mismatch.safetensors",
                            R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})"),
                loss, "does not match its 16 bytes");
  // A zero-sized tensor is valid.
  absl::StatusOr<SafetensorsFile> empty = ReadSafetensors(
      CraftedFile("empty_tensor.safetensors",
                  R"({"w": {"dtype": "F32", "shape": [0, 7], "data_offsets": [0, 0]}})"));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->tensors.at("w").num_elements(), 0);
}

// Mutations of a valid file (random bytes overwritten, the file cut short, fixed seed):
// reading never crashes, and either succeeds or is DATA_LOSS, with every tensor's bytes
// matching its shape when it succeeds.
TEST(SafetensorsTest, MutatedFilesAreReadOrRefusedNeverCrash) {
  const std::vector<float> weights = {1, 2, 3, 4, 5, 6};
  SafetensorsFile file;
  file.tensors["a.weight"] = MakeF32Tensor({2, 3}, weights.data());
  file.tensors["b"] = MakeF32Tensor({6}, weights.data());
  file.metadata["format"] = "pt";
  const std::string valid_path = TempPath("valid.safetensors");
  ASSERT_TRUE(WriteSafetensors(valid_path, file).ok());
  std::ifstream in(valid_path, std::ios::binary);
  const std::string valid((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::mt19937 rng(15);
  const std::string path = TempPath("mutated.safetensors");
  const char kInteresting[] = "0123456789[]{},:\"-.eE \xff\x00";
  int read = 0, refused = 0;
  for (int i = 0; i < 1000; ++i) {
    std::string bytes = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % bytes.size();
      bytes[at] = (rng() % 2 == 0) ? static_cast<char>(rng() % 256)
                                   : kInteresting[rng() % (sizeof(kInteresting) - 1)];
    }
    if (rng() % 8 == 0) bytes.resize(rng() % bytes.size());
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    absl::StatusOr<SafetensorsFile> result = ReadSafetensors(path);
    if (result.ok()) {
      ++read;
      for (const auto& [name, tensor] : result->tensors) {
        int size = 0;
        if (tensor.dtype == "F32" || tensor.dtype == "I32") size = 4;
        if (tensor.dtype == "F64" || tensor.dtype == "I64") size = 8;
        if (size > 0) {
          EXPECT_EQ(tensor.bytes.size(), static_cast<size_t>(tensor.num_elements()) * size) << name;
        }
      }
    } else {
      ++refused;
      ASSERT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status();
    }
  }
  EXPECT_GT(read, 0);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace mtrain
