#include "worker/parallel/counting_communicator.h"

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/parallel/key_value_store.h"

namespace mtrain {
namespace {

// `members` Gloo members of one group on loopback, each on its own thread running `body`.
void RunGlooTestGroup(int members,
                      const std::function<void(int, std::unique_ptr<Communicator>)>& body) {
  // A fresh store per group: another group's keys under the same name would mislead the
  // rendezvous.
  static int groups = 0;
  const std::string dir = absl::StrCat(::testing::TempDir(), "/counting-store-", groups++);
  absl::StatusOr<std::unique_ptr<DirectoryStore>> store = DirectoryStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < members; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<GlooDevice> device = CreateGlooDevice("127.0.0.1");
      ASSERT_TRUE(device.ok()) << device.status();
      GroupSpec spec;
      spec.name = "counting";
      for (int r = 0; r < members; ++r) spec.members.push_back(r);
      spec.global_rank = rank;
      spec.timeout = absl::Seconds(30);
      absl::StatusOr<std::unique_ptr<Communicator>> group =
          ConnectGlooGroup(**store, *device, spec);
      ASSERT_TRUE(group.ok()) << group.status();
      body(rank, std::move(*group));
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// Ring volumes per member of a group of 4, checked on a real Gloo group (the calls must
// also still do what they did).
TEST(CountingCommunicatorTest, CountsRingVolumesAndPassesCallsThrough) {
  constexpr int kMembers = 4;
  std::vector<int64_t> sent(kMembers);
  std::vector<float> gathered_first(kMembers * 2);
  RunGlooTestGroup(kMembers, [&](int rank, std::unique_ptr<Communicator> group) {
    CountingCommunicator counting(std::move(group));
    std::vector<float> data(100, static_cast<float>(rank));
    ASSERT_TRUE(counting.AllReduce(data.data(), data.size(), ReduceOp::kSum).ok());
    EXPECT_EQ(data[0], 0 + 1 + 2 + 3);
    EXPECT_EQ(counting.bytes_sent(), 2 * 400 * 3 / 4);  // 600
    std::vector<float> mine = {static_cast<float>(rank), 1}, all(kMembers * 2);
    ASSERT_TRUE(counting.AllGather(mine.data(), all.data(), 2).ok());
    if (rank == 0) gathered_first = all;
    EXPECT_EQ(counting.bytes_sent(), 600 + 32 * 3 / 4);  // +24
    std::vector<float> whole(kMembers * 5, 1.0f), block(5);
    ASSERT_TRUE(counting.ReduceScatter(whole.data(), block.data(), 5, ReduceOp::kSum).ok());
    EXPECT_EQ(block[0], kMembers);
    EXPECT_EQ(counting.bytes_sent(), 624 + 80 * 3 / 4);  // +60
    if (rank == 0) {
      ASSERT_TRUE(counting.Send(data.data(), 12, 1, 7).ok());
    } else if (rank == 1) {
      ASSERT_TRUE(counting.Recv(data.data(), 12, 0, 7).ok());
    }
    sent[rank] = counting.bytes_sent();
    EXPECT_EQ(BytesSentBy(&counting), counting.bytes_sent());
  });
  EXPECT_EQ(sent[0], 684 + 12);  // the sender counts the message
  EXPECT_EQ(sent[1], 684);
  EXPECT_EQ(gathered_first[6], 3);
  EXPECT_EQ(BytesSentBy(nullptr), 0);
}

// Gloo has no reduction to one member: Reduce runs an all-reduce (the root's result is
// the sum) and is counted as one; a root out of range is refused.
TEST(CountingCommunicatorTest, ReduceOverABackendWithoutOneCountsAnAllReduce) {
  constexpr int kMembers = 2;
  RunGlooTestGroup(kMembers, [&](int rank, std::unique_ptr<Communicator> group) {
    CountingCommunicator counting(std::move(group));
    EXPECT_TRUE(counting.reduce_is_all_reduce());
    std::vector<float> data(10, static_cast<float>(rank + 1));
    ASSERT_TRUE(counting.Reduce(data.data(), data.size(), ReduceOp::kSum, 1).ok());
    if (rank == 1) {
      EXPECT_EQ(data[9], 1 + 2);
    }
    EXPECT_EQ(counting.bytes_sent(), 2 * 40 / 2);
    const absl::Status bad = counting.Reduce(data.data(), data.size(), ReduceOp::kSum, 2);
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.message().find("root out of range"), std::string::npos) << bad;
  });
}

}  // namespace
}  // namespace mtrain
