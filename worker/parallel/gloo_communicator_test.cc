// Members of a group run as threads of this process, each with its own Gloo device (as
// separate processes would have) and real TCP connections over loopback. They rendezvous
// through one DirectoryStore in the test's temporary directory.
#include "worker/parallel/gloo_communicator.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/parallel/key_value_store.h"

namespace mtrain {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(30);
constexpr int kFirstGlobalRank = 10;  // so group ranks and global ranks differ

using Body = std::function<void(int rank, Communicator& group)>;

std::string FreshDirectory() {
  const char* root = std::getenv("TEST_TMPDIR");
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = absl::StrCat(test->test_suite_name(), "-", test->name());
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return absl::StrCat(root != nullptr ? root : "/tmp", "/gloo-", name, "-", ::getpid());
}

GroupSpec Spec(const std::string& name, int size, int rank, absl::Duration timeout) {
  GroupSpec spec;
  spec.name = name;
  for (int r = 0; r < size; ++r) spec.members.push_back(kFirstGlobalRank + r);
  spec.global_rank = kFirstGlobalRank + rank;
  spec.timeout = timeout;
  return spec;
}

// The watchdog's verdict: what follows "did not arrive: " up to the transport's words.
std::string NotArrived(const absl::Status& status) {
  const std::string message(status.message());
  const size_t start = message.find("did not arrive: ");
  if (start == std::string::npos) return "";
  const size_t end = message.find("; Gloo: ", start);
  return message.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// Passes through to a real store until told to fail, like a coordinator that goes away.
class FailingStore : public KeyValueStore {
 public:
  explicit FailingStore(KeyValueStore* inner) : inner_(inner) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    if (failing) return absl::UnavailableError("store down");
    return inner_->Set(key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key) override {
    if (failing) return absl::UnavailableError("store down");
    return inner_->Get(key);
  }
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override {
    if (failing) return absl::UnavailableError("store down");
    return inner_->Wait(keys, timeout);
  }
  std::atomic<bool> failing{false};

 private:
  KeyValueStore* inner_;
};

bool Contains(const absl::Status& status, const std::string& text) {
  return status.message().find(text) != absl::string_view::npos;
}

class GlooGroupTest : public ::testing::Test {
 public:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<DirectoryStore>> store = DirectoryStore::Open(FreshDirectory());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  // Connects the `size` members of group `name` on `size` threads and runs body on each.
  // `store` defaults to store_; `adjust` may change a member's spec.
  void RunMembers(const std::string& name, int size, absl::Duration timeout, const Body& body,
                  KeyValueStore* store = nullptr,
                  const std::function<void(int rank, GroupSpec&)>& adjust = nullptr) {
    std::vector<std::thread> threads;
    for (int rank = 0; rank < size; ++rank) {
      threads.emplace_back([&, rank] {
        absl::StatusOr<GlooDevice> device = CreateGlooDevice("127.0.0.1");
        ASSERT_TRUE(device.ok()) << device.status();
        GroupSpec spec = Spec(name, size, rank, timeout);
        if (adjust) adjust(rank, spec);
        absl::StatusOr<std::unique_ptr<Communicator>> group =
            ConnectGlooGroup(store != nullptr ? *store : *store_, *device, spec);
        ASSERT_TRUE(group.ok()) << group.status();
        ASSERT_EQ((*group)->rank(), rank);
        ASSERT_EQ((*group)->size(), size);
        body(rank, **group);
      });
    }
    for (std::thread& thread : threads) thread.join();
  }

  std::unique_ptr<DirectoryStore> store_;
};

// Group sizes 1 to 4: 1 is the local special case, 3 is not a power of two.
class GlooCollectiveTest : public GlooGroupTest, public ::testing::WithParamInterface<int> {
 protected:
  int n() const { return GetParam(); }
  std::string GroupName(const std::string& what) const { return absl::StrCat(what, "-", n()); }

  // Integer-valued contributions make every sum exact in float, whatever the order.
  template <typename T>
  void CheckAllReduce(size_t count);
};

template <typename T>
void GlooCollectiveTest::CheckAllReduce(size_t count) {
  const int n = this->n();
  RunMembers(GroupName("allreduce"), n, kTimeout, [&](int rank, Communicator& group) {
    std::vector<T> sum(count), max(count);
    for (size_t i = 0; i < count; ++i) {
      sum[i] = static_cast<T>((rank + 1) * static_cast<int>(i % 1000) - rank);
      max[i] = static_cast<T>(static_cast<int>((i * 7 + rank * 13) % 101) - 50);
    }
    ASSERT_TRUE(group.AllReduce(sum.data(), count, ReduceOp::kSum).ok());
    ASSERT_TRUE(group.AllReduce(max.data(), count, ReduceOp::kMax).ok());
    const int rank_sum = n * (n + 1) / 2;  // sum of (r + 1)
    const int minus = n * (n - 1) / 2;     // sum of r
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(sum[i], static_cast<T>(rank_sum * static_cast<int>(i % 1000) - minus))
          << "rank " << rank << " element " << i;
      int expected_max = std::numeric_limits<int>::min();
      for (int r = 0; r < n; ++r) {
        expected_max = std::max(expected_max, static_cast<int>((i * 7 + r * 13) % 101) - 50);
      }
      ASSERT_EQ(max[i], static_cast<T>(expected_max)) << "rank " << rank << " element " << i;
    }
  });
}

TEST_P(GlooCollectiveTest, AllReduceFloatIsExact) { CheckAllReduce<float>(1037); }

TEST_P(GlooCollectiveTest, AllReduceDoubleIsExact) { CheckAllReduce<double>(1037); }

// 3 MiB of floats: Gloo's ring then cuts every block into several 1 MiB segments.
TEST_P(GlooCollectiveTest, AllReduceLargeIsExact) {
  CheckAllReduce<float>(3 * 1024 * 1024 / 4 + 3);
}

// Random values, where the order of additions changes the last bits: every member must
// still hold the same bits, and the result must be a correctly-ordered-enough sum.
TEST_P(GlooCollectiveTest, AllReduceResultsAreBitIdenticalOnEveryMember) {
  constexpr size_t kCount = 100003;
  std::vector<std::vector<float>> results(n());
  std::vector<std::vector<double>> double_results(n());
  RunMembers(GroupName("bits"), n(), kTimeout, [&](int rank, Communicator& group) {
    std::mt19937 random(1234 + rank);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<float> data(kCount);
    for (float& x : data) x = value(random) * std::ldexp(1.0f, rank);
    std::vector<double> doubles(data.begin(), data.end());
    for (double& x : doubles) x *= 1.0 + 1e-9 * rank;
    ASSERT_TRUE(group.AllReduce(data.data(), kCount, ReduceOp::kSum).ok());
    ASSERT_TRUE(group.AllReduce(doubles.data(), kCount, ReduceOp::kSum).ok());
    results[rank] = std::move(data);
    double_results[rank] = std::move(doubles);
  });
  // The reference sum, in double.
  std::vector<double> reference(kCount, 0.0);
  for (int rank = 0; rank < n(); ++rank) {
    std::mt19937 random(1234 + rank);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (size_t i = 0; i < kCount; ++i) {
      reference[i] += static_cast<double>(value(random) * std::ldexp(1.0f, rank));
    }
  }
  for (int rank = 0; rank < n(); ++rank) {
    ASSERT_EQ(results[rank].size(), kCount);
    EXPECT_EQ(std::memcmp(results[rank].data(), results[0].data(), kCount * sizeof(float)), 0)
        << "float results of rank " << rank << " differ from rank 0's";
    EXPECT_EQ(
        std::memcmp(double_results[rank].data(), double_results[0].data(), kCount * sizeof(double)),
        0)
        << "double results of rank " << rank << " differ from rank 0's";
  }
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_NEAR(results[0][i], reference[i], 1e-5 * (1 << n())) << i;
  }
}

TEST_P(GlooCollectiveTest, MaxPropagatesNaN) {
  RunMembers(GroupName("nan"), n(), kTimeout, [&](int rank, Communicator& group) {
    std::vector<float> data = {1.0f, static_cast<float>(rank), -1.0f};
    if (rank == n() - 1) data[0] = std::nanf("");
    ASSERT_TRUE(group.AllReduce(data.data(), data.size(), ReduceOp::kMax).ok());
    EXPECT_TRUE(std::isnan(data[0]));
    EXPECT_EQ(data[1], static_cast<float>(n() - 1));
    EXPECT_EQ(data[2], -1.0f);
  });
}

TEST_P(GlooCollectiveTest, AllGather) {
  constexpr size_t kCount = 333;
  RunMembers(GroupName("allgather"), n(), kTimeout, [&](int rank, Communicator& group) {
    std::vector<float> in(kCount);
    for (size_t i = 0; i < kCount; ++i) in[i] = static_cast<float>(rank * 1000 + i);
    std::vector<float> out(kCount * n(), -1.0f);
    ASSERT_TRUE(group.AllGather(in.data(), out.data(), kCount).ok());
    for (int r = 0; r < n(); ++r) {
      for (size_t i = 0; i < kCount; ++i) {
        ASSERT_EQ(out[r * kCount + i], static_cast<float>(r * 1000 + i)) << r << " " << i;
      }
    }
    // Overlapping buffers are refused before anything is sent.
    EXPECT_EQ(group.AllGather(out.data(), out.data(), kCount).code(),
              absl::StatusCode::kInvalidArgument);
  });
}

TEST_P(GlooCollectiveTest, ReduceScatterSumAndMax) {
  for (const size_t count : {size_t{1}, size_t{1000}, size_t{300000}}) {
    RunMembers(
        GroupName(absl::StrCat("reduce-scatter-", count)), n(), kTimeout,
        [&](int rank, Communicator& group) {
          std::vector<float> in(count * n());
          for (size_t j = 0; j < in.size(); ++j) {
            in[j] = static_cast<float>((rank + 1) * static_cast<int>(j % 977));
          }
          std::vector<float> sum(count, -1.0f), max(count, -1.0f);
          ASSERT_TRUE(group.ReduceScatter(in.data(), sum.data(), count, ReduceOp::kSum).ok());
          ASSERT_TRUE(group.ReduceScatter(in.data(), max.data(), count, ReduceOp::kMax).ok());
          const int rank_sum = n() * (n() + 1) / 2;
          for (size_t i = 0; i < count; ++i) {
            const int base = static_cast<int>((rank * count + i) % 977);
            ASSERT_EQ(sum[i], static_cast<float>(rank_sum * base)) << rank << " " << i;
            ASSERT_EQ(max[i], static_cast<float>(n() * base)) << rank << " " << i;
          }
        });
  }
}

TEST_P(GlooCollectiveTest, BroadcastFromEveryRoot) {
  constexpr size_t kCount = 100000;
  RunMembers(GroupName("broadcast"), n(), kTimeout, [&](int rank, Communicator& group) {
    for (int root = 0; root < n(); ++root) {
      std::vector<float> data(kCount);
      for (size_t i = 0; i < kCount; ++i) {
        data[i] = static_cast<float>(rank == root ? root * 100000 + static_cast<int>(i) : -7);
      }
      ASSERT_TRUE(group.Broadcast(data.data(), kCount, root).ok()) << "root " << root;
      for (size_t i = 0; i < kCount; ++i) {
        ASSERT_EQ(data[i], static_cast<float>(root * 100000 + static_cast<int>(i)))
            << "root " << root << " rank " << rank << " element " << i;
      }
    }
    EXPECT_EQ(group.Broadcast(nullptr, 0, n()).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(group.Broadcast(nullptr, 0, -1).code(), absl::StatusCode::kInvalidArgument);
  });
}

TEST_P(GlooCollectiveTest, BarrierWaitsForEveryMember) {
  std::atomic<int> arrived{0};
  RunMembers(GroupName("barrier"), n(), kTimeout, [&](int rank, Communicator& group) {
    for (int round = 1; round <= 3; ++round) {
      // Late arrivals: whoever leaves the barrier must see every member arrived.
      absl::SleepFor(absl::Milliseconds(20 * ((rank + round) % n())));
      arrived.fetch_add(1);
      ASSERT_TRUE(group.Barrier().ok());
      EXPECT_GE(arrived.load(), round * n())
          << "rank " << rank << " left round " << round << " early";
      ASSERT_TRUE(group.Barrier().ok());  // nobody starts the next round before all checked
    }
  });
}

TEST_P(GlooCollectiveTest, ZeroCountsAreNoOps) {
  RunMembers(GroupName("zero"), n(), kTimeout, [&](int rank, Communicator& group) {
    EXPECT_TRUE(group.AllReduce(static_cast<float*>(nullptr), 0, ReduceOp::kSum).ok());
    EXPECT_TRUE(group.AllGather(nullptr, nullptr, 0).ok());
    EXPECT_TRUE(group.ReduceScatter(nullptr, nullptr, 0, ReduceOp::kSum).ok());
    EXPECT_TRUE(group.Broadcast(nullptr, 0, 0).ok());
    // The group is still in step afterwards.
    float x = 1.0f;
    ASSERT_TRUE(group.AllReduce(&x, 1, ReduceOp::kSum).ok());
    EXPECT_EQ(x, static_cast<float>(n()));
  });
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, GlooCollectiveTest, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("n", info.param);
                         });

TEST_F(GlooGroupTest, GroupOfOneNeedsNoPeerAndRefusesSelfMessages) {
  RunMembers("solo", 1, kTimeout, [&](int, Communicator& group) {
    EXPECT_NE(group.name().find("solo"), std::string::npos);
    float in[3] = {1, 2, 3};
    float out[3] = {0, 0, 0};
    ASSERT_TRUE(group.ReduceScatter(in, out, 3, ReduceOp::kMax).ok());
    EXPECT_EQ(out[2], 3.0f);
    ASSERT_TRUE(group.Barrier().ok());
    EXPECT_EQ(group.StartSend(in, sizeof(in), 0, 1).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(group.Recv(out, sizeof(out), 0, 1).code(), absl::StatusCode::kInvalidArgument);
    group.Abort();
    EXPECT_EQ(group.Barrier().code(), absl::StatusCode::kFailedPrecondition);
  });
}

TEST_F(GlooGroupTest, MessagesWithDifferentTagsCanBeReceivedInAnyOrder) {
  RunMembers("p2p", 2, kTimeout, [&](int rank, Communicator& group) {
    const std::vector<int32_t> five(1000, 5);
    const std::vector<int32_t> seven(3000, 7);
    if (rank == 0) {
      auto send5 = group.StartSend(five.data(), five.size() * 4, 1, 5);
      auto send7 = group.StartSend(seven.data(), seven.size() * 4, 1, 7);
      ASSERT_TRUE(send5.ok()) << send5.status();
      ASSERT_TRUE(send7.ok()) << send7.status();
      // Wait in the order opposite to the receiver's.
      EXPECT_TRUE((*send5)->Wait().ok());
      EXPECT_TRUE((*send7)->Wait().ok());
      EXPECT_TRUE((*send7)->Wait().ok());  // waiting again returns the same result
    } else {
      std::vector<int32_t> got7(3000), got5(1000);
      ASSERT_TRUE(group.Recv(got7.data(), got7.size() * 4, 0, 7).ok());
      ASSERT_TRUE(group.Recv(got5.data(), got5.size() * 4, 0, 5).ok());
      EXPECT_EQ(got7, seven);
      EXPECT_EQ(got5, five);
    }
  });
}

TEST_F(GlooGroupTest, MessagesWithOneTagArriveInOrderBothWays) {
  constexpr int kMessages = 20;
  RunMembers("p2p-order", 2, kTimeout, [&](int rank, Communicator& group) {
    const int peer = 1 - rank;
    // Both members send first, then receive: StartSend must not block.
    std::vector<std::vector<int64_t>> outgoing;
    std::vector<std::unique_ptr<PendingSend>> pending;
    for (int i = 0; i < kMessages; ++i) {
      outgoing.push_back(std::vector<int64_t>(10 + i, rank * 1000 + i));
    }
    for (int i = 0; i < kMessages; ++i) {
      auto send = group.StartSend(outgoing[i].data(), outgoing[i].size() * 8, peer, 42);
      ASSERT_TRUE(send.ok()) << send.status();
      pending.push_back(std::move(*send));
    }
    for (int i = 0; i < kMessages; ++i) {
      std::vector<int64_t> got(10 + i);
      ASSERT_TRUE(group.Recv(got.data(), got.size() * 8, peer, 42).ok()) << i;
      EXPECT_EQ(got, std::vector<int64_t>(10 + i, peer * 1000 + i)) << i;
    }
    for (auto& send : pending) EXPECT_TRUE(send->Wait().ok());
  });
}

TEST_F(GlooGroupTest, LargeMessagesAndEmptyMessages) {
  constexpr size_t kBytes = 24 * 1024 * 1024 + 5;
  RunMembers("p2p-large", 3, kTimeout, [&](int rank, Communicator& group) {
    // A ring: everyone sends to the right and receives from the left, the pipeline's
    // send_forward_recv_forward pattern.
    const int right = (rank + 1) % 3;
    const int left = (rank + 2) % 3;
    std::vector<uint8_t> out(kBytes);
    for (size_t i = 0; i < kBytes; ++i) out[i] = static_cast<uint8_t>(i * 31 + rank);
    auto send = group.StartSend(out.data(), kBytes, right, 1);
    ASSERT_TRUE(send.ok()) << send.status();
    std::vector<uint8_t> in(kBytes);
    ASSERT_TRUE(group.Recv(in.data(), kBytes, left, 1).ok());
    ASSERT_TRUE((*send)->Wait().ok());
    for (size_t i = 0; i < kBytes; ++i) {
      ASSERT_EQ(in[i], static_cast<uint8_t>(i * 31 + left)) << i;
    }
    // An empty message is still a message.
    auto empty = group.StartSend(nullptr, 0, right, 2);
    ASSERT_TRUE(empty.ok()) << empty.status();
    ASSERT_TRUE(group.Recv(nullptr, 0, left, 2).ok());
    ASSERT_TRUE((*empty)->Wait().ok());
  });
}

TEST_F(GlooGroupTest, DestroyingAPendingSendWaitsForIt) {
  RunMembers("p2p-destroy", 2, kTimeout, [&](int rank, Communicator& group) {
    if (rank == 0) {
      std::vector<float> data(1000, 3.0f);
      {
        auto send = group.StartSend(data.data(), data.size() * 4, 1, 9);
        ASSERT_TRUE(send.ok());
      }                                 // blocks here until rank 1 has taken the message
      data.assign(data.size(), -1.0f);  // would corrupt the message had it not been sent
    } else {
      absl::SleepFor(absl::Milliseconds(200));
      std::vector<float> got(1000);
      ASSERT_TRUE(group.Recv(got.data(), got.size() * 4, 0, 9).ok());
      EXPECT_EQ(got, std::vector<float>(1000, 3.0f));
    }
    EXPECT_TRUE(group.Barrier().ok());
  });
}

TEST_F(GlooGroupTest, ASizeMismatchFailsBothSidesCleanly) {
  RunMembers("p2p-mismatch", 2, absl::Seconds(10), [&](int rank, Communicator& group) {
    std::vector<float> data(100, 1.0f);
    const absl::Time start = absl::Now();
    if (rank == 0) {
      const absl::Status status = group.Send(data.data(), 100 * 4, 1, 3);
      EXPECT_FALSE(status.ok());
      // The receiver's watchdog report tells the sender why its connection closed.
      EXPECT_TRUE(Contains(status,
                           "the peer reported: global rank 11 (group rank 1): failed in Recv #1 "
                           "from group rank 0 (global rank 10) with tag 3 (INVALID_ARGUMENT)"))
          << status;
    } else {
      const absl::Status status = group.Recv(data.data(), 50 * 4, 0, 3);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
      EXPECT_TRUE(Contains(status, "expected 200 bytes, the peer sent 400")) << status;
    }
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // nobody waited out the timeout
  });
}

TEST_F(GlooGroupTest, BadPointToPointArgumentsAreRefusedLocally) {
  RunMembers("p2p-args", 2, kTimeout, [&](int rank, Communicator& group) {
    char byte = 0;
    EXPECT_EQ(group.Recv(&byte, 1, 2, 0).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(group.Recv(&byte, 1, -1, 0).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(group.Recv(&byte, 1, rank, 0).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(group.StartSend(&byte, 1, 1 - rank, uint64_t{1} << 60).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(group.StartSend(nullptr, 1, 1 - rank, 0).status().code(),
              absl::StatusCode::kInvalidArgument);
    // None of that broke the group.
    EXPECT_TRUE(group.Barrier().ok());
  });
}

// Two groups over the same two "processes" (one device each), driven at once from two
// threads per process.
TEST_F(GlooGroupTest, TwoGroupsWorkConcurrently) {
  constexpr int kRounds = 50;
  std::vector<GlooDevice> devices;
  for (int process = 0; process < 2; ++process) {
    absl::StatusOr<GlooDevice> device = CreateGlooDevice("127.0.0.1");
    ASSERT_TRUE(device.ok()) << device.status();
    devices.push_back(*device);
  }
  std::vector<std::thread> threads;
  for (int process = 0; process < 2; ++process) {
    for (const std::string name : {"alpha", "beta"}) {
      threads.emplace_back([&, process, name] {
        absl::StatusOr<std::unique_ptr<Communicator>> group =
            ConnectGlooGroup(*store_, devices[process], Spec(name, 2, process, kTimeout));
        ASSERT_TRUE(group.ok()) << group.status();
        const float scale = name == "alpha" ? 1.0f : 100.0f;
        for (int round = 0; round < kRounds; ++round) {
          std::vector<float> data(5000, scale * (process + 1) * round);
          ASSERT_TRUE((*group)->AllReduce(data.data(), data.size(), ReduceOp::kSum).ok());
          ASSERT_EQ(data[4999], scale * 3 * round) << name << " round " << round;
          const uint64_t value = round * 2 + process;
          uint64_t got = 0;
          auto send = (*group)->StartSend(&value, 8, 1 - process, round);
          ASSERT_TRUE(send.ok());
          ASSERT_TRUE((*group)->Recv(&got, 8, 1 - process, round).ok());
          ASSERT_TRUE((*send)->Wait().ok());
          ASSERT_EQ(got, static_cast<uint64_t>(round * 2 + 1 - process));
        }
      });
    }
  }
  for (std::thread& thread : threads) thread.join();
}

TEST_F(GlooGroupTest, CollectiveAPeerNeverJoinsTimesOutNamingTheGroup) {
  constexpr absl::Duration kShort = absl::Seconds(1);
  std::atomic<bool> rank0_done{false};
  RunMembers("tensor-3", 2, kShort, [&](int rank, Communicator& group) {
    if (rank == 0) {
      std::vector<float> data(1000, 1.0f);
      const absl::Time start = absl::Now();
      const absl::Status status = group.AllReduce(data.data(), data.size(), ReduceOp::kSum);
      const absl::Duration took = absl::Now() - start;
      rank0_done = true;
      EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
      EXPECT_TRUE(Contains(status,
                           "AllReduce #1 in group tensor-3 (ranks 10,11) did not "
                           "complete within 1s"))
          << status;
      EXPECT_EQ(NotArrived(status),
                "did not arrive: global rank 11 (group rank 1): no watchdog report within 1s "
                "(hung, dead or behind)")
          << status;
      // The timeout, then the watchdog's wait (at most the timeout).
      EXPECT_GE(took, absl::Milliseconds(1900));
      EXPECT_LT(took, absl::Seconds(4));
      // The group is unusable afterwards.
      EXPECT_EQ(group.Barrier().code(), absl::StatusCode::kFailedPrecondition);
    } else {
      while (!rank0_done) absl::SleepFor(absl::Milliseconds(10));
      // The timed-out member closed its connections: this member fails at once rather
      // than after its own timeout, and its watchdog finds the peer's report at once.
      const absl::Time start = absl::Now();
      const absl::Status status = group.Barrier();
      EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
      EXPECT_TRUE(Contains(status,
                           "did not arrive: global rank 10 (group rank 0): timed out in "
                           "AllReduce #1 (members called different collectives as #1)"))
          << status;
      EXPECT_LT(absl::Now() - start, absl::Milliseconds(900));
    }
  });
}

// The hang the watchdog is for: one member of four never calls AllReduce #2 (as if stopped
// with SIGSTOP between two steps; gloo_communicator_multiprocess_test.cc does stop one).
// Every member that did call it must name that one, by global rank, and no other, and the
// members fail together, not one timeout after another.
//
// With a shorter `first_timeout`, member 0 times out while the others still have time
// left (as when members entered the collective at different moments): its watchdog wait
// must still hear from them when they time out later, and they, whose next transfer to
// member 0 may find its connections closed (UNAVAILABLE), must still report a timeout.
void ExpectEveryCallerNamesTheSkipper(GlooGroupTest& test, const std::string& name,
                                      absl::Duration first_timeout, absl::Duration others_timeout) {
  constexpr int kMembers = 4;
  constexpr int kSkipper = 2;  // global rank 12: neither end of the ring
  std::atomic<int> finished{0};
  std::vector<absl::Status> results(kMembers);
  std::vector<absl::Duration> took(kMembers);
  test.RunMembers(
      name, kMembers, others_timeout,
      [&](int rank, Communicator& group) {
        std::vector<float> data(10000, 1.0f);
        ASSERT_TRUE(group.AllReduce(data.data(), data.size(), ReduceOp::kSum).ok());
        if (rank == kSkipper) {
          // Stays connected, as a stopped process's sockets do, until the others are done.
          while (finished.load() < kMembers - 1) absl::SleepFor(absl::Milliseconds(10));
          return;
        }
        const absl::Time start = absl::Now();
        results[rank] = group.AllReduce(data.data(), data.size(), ReduceOp::kSum);
        took[rank] = absl::Now() - start;
        finished.fetch_add(1);
      },
      nullptr,
      [&](int rank, GroupSpec& spec) {
        // Not what the contract asks for (members pass the same timeout), only a way to
        // choose which member times out first.
        if (rank == 0) spec.timeout = first_timeout;
      });
  for (int rank = 0; rank < kMembers; ++rank) {
    if (rank == kSkipper) continue;
    const absl::Status& status = results[rank];
    const absl::Duration timeout = rank == 0 ? first_timeout : others_timeout;
    std::printf("%s rank %d: %s\n", name.c_str(), rank, status.ToString().c_str());
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded)
        << "rank " << rank << ": " << status;
    EXPECT_TRUE(Contains(status, absl::StrCat("AllReduce #2 in group ", name,
                                              " (ranks 10,11,12,13) did not complete within ",
                                              absl::FormatDuration(timeout))))
        << status;
    EXPECT_EQ(NotArrived(status),
              absl::StrCat("did not arrive: global rank 12 (group rank 2): no watchdog report "
                           "within ",
                           absl::FormatDuration(timeout), " (hung, dead or behind)"))
        << "rank " << rank << ": " << status;
    EXPECT_LT(took[rank], absl::Seconds(7)) << status;
  }
}

TEST_F(GlooGroupTest, EveryMemberOfAHungCollectiveNamesTheMemberThatSkippedIt) {
  ExpectEveryCallerNamesTheSkipper(*this, "data-skip", absl::Seconds(2), absl::Seconds(2));
}

TEST_F(GlooGroupTest, MembersThatTimeOutAtDifferentMomentsNameTheSkipperToo) {
  ExpectEveryCallerNamesTheSkipper(*this, "data-skip-skewed", absl::Seconds(1),
                                   absl::Milliseconds(1500));
}

// A chain of waits: 0 waits for 1, which waits for 2, which never sends. The member that
// waits for the silent one names it; the member further down the chain names what its
// peer is stuck in, which leads to the same culprit.
TEST_F(GlooGroupTest, RecvChainsLeadToTheSilentSender) {
  std::atomic<int> finished{0};
  std::vector<absl::Status> results(3);
  RunMembers("pipeline-chain", 3, absl::Seconds(1), [&](int rank, Communicator& group) {
    if (rank == 2) {
      while (finished.load() < 2) absl::SleepFor(absl::Milliseconds(10));
      return;
    }
    char buffer[8];
    results[rank] = group.Recv(buffer, sizeof(buffer), rank + 1, 1);
    finished.fetch_add(1);
  });
  EXPECT_EQ(results[1].code(), absl::StatusCode::kDeadlineExceeded) << results[1];
  EXPECT_EQ(NotArrived(results[1]),
            "did not arrive: global rank 12 (group rank 2): no watchdog report within 1s (hung, "
            "dead or behind)")
      << results[1];
  // DEADLINE_EXCEEDED or UNAVAILABLE, depending on whether 0's or 1's wait ran out first.
  EXPECT_FALSE(results[0].ok());
  EXPECT_TRUE(Contains(results[0],
                       "the peer reported: global rank 11 (group rank 1): timed out in Recv #1 "
                       "from group rank 2 (global rank 12) with tag 1"))
      << results[0];
}

TEST_F(GlooGroupTest, RecvFromASilentPeerTimesOutNamingThePeer) {
  std::atomic<bool> rank0_done{false};
  RunMembers("pipeline-0", 2, absl::Seconds(1), [&](int rank, Communicator& group) {
    if (rank == 0) {
      char buffer[16];
      const absl::Time start = absl::Now();
      const absl::Status status = group.Recv(buffer, sizeof(buffer), 1, 77);
      const absl::Duration took = absl::Now() - start;
      rank0_done = true;
      EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
      EXPECT_TRUE(Contains(status,
                           "Recv #1 from group rank 1 (global rank 11) with tag 77 in "
                           "group pipeline-0 (ranks 10,11) did not complete within 1s"))
          << status;
      EXPECT_EQ(NotArrived(status),
                "did not arrive: global rank 11 (group rank 1): no watchdog report within 1s "
                "(hung, dead or behind)")
          << status;
      EXPECT_GE(took, absl::Milliseconds(1900));
      EXPECT_LT(took, absl::Seconds(4));
    } else {
      while (!rank0_done) absl::SleepFor(absl::Milliseconds(10));
    }
  });
}

TEST_F(GlooGroupTest, SendToAPeerThatNeverReceivesTimesOut) {
  std::atomic<bool> rank0_done{false};
  RunMembers("pipeline-1", 2, absl::Seconds(1), [&](int rank, Communicator& group) {
    if (rank == 0) {
      const std::vector<char> data(1 << 20, 'x');
      const absl::Status status = group.Send(data.data(), data.size(), 1, 5);
      rank0_done = true;
      EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
      EXPECT_TRUE(Contains(status, "Send #1 to group rank 1 (global rank 11) with tag 5"))
          << status;
      EXPECT_TRUE(Contains(status, "did not arrive: global rank 11 (group rank 1)")) << status;
    } else {
      while (!rank0_done) absl::SleepFor(absl::Milliseconds(10));
    }
  });
}

// A store that fails when the watchdog needs it must not change the outcome: the
// operation still returns DEADLINE_EXCEEDED, saying why nobody was named.
TEST_F(GlooGroupTest, AFailingStoreLeavesTheTimeoutAndSaysWhyNobodyIsNamed) {
  FailingStore store(store_.get());
  std::atomic<bool> rank0_done{false};
  RunMembers(
      "tensor-store", 2, absl::Seconds(1),
      [&](int rank, Communicator& group) {
        if (rank == 0) {
          store.failing = true;  // after both connected
          float x = 1.0f;
          const absl::Status status = group.AllReduce(&x, 1, ReduceOp::kSum);
          rank0_done = true;
          EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
          EXPECT_TRUE(Contains(status,
                               "AllReduce #1 in group tensor-store (ranks 10,11) did not "
                               "complete within 1s; the watchdog could not tell who is "
                               "missing: publishing this member's report failed: store "
                               "down"))
              << status;
        } else {
          while (!rank0_done) absl::SleepFor(absl::Milliseconds(10));
        }
      },
      &store);
}

// No store traffic on the normal path: a healthy run leaves no watchdog key behind.
TEST_F(GlooGroupTest, AHealthyRunWritesNoWatchdogReports) {
  RunMembers("healthy", 3, kTimeout, [&](int rank, Communicator& group) {
    for (int round = 0; round < 5; ++round) {
      float x = 1.0f;
      ASSERT_TRUE(group.AllReduce(&x, 1, ReduceOp::kSum).ok());
      ASSERT_EQ(x, 3.0f);
      int64_t out = rank, in = -1;
      auto send = group.StartSend(&out, sizeof(out), (rank + 1) % 3, round);
      ASSERT_TRUE(send.ok());
      ASSERT_TRUE(group.Recv(&in, sizeof(in), (rank + 2) % 3, round).ok());
      ASSERT_TRUE((*send)->Wait().ok());
      ASSERT_TRUE(group.Barrier().ok());
    }
  });
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(store_->Get(absl::StrCat("healthy/watchdog/", rank)).status().code(),
              absl::StatusCode::kNotFound);
  }
}

TEST_F(GlooGroupTest, AbortFromAnotherThreadUnblocksRecvPromptly) {
  std::atomic<bool> rank0_done{false};
  RunMembers("abort-recv", 2, kTimeout, [&](int rank, Communicator& group) {
    if (rank == 0) {
      std::thread aborter([&group] {
        absl::SleepFor(absl::Milliseconds(300));
        group.Abort();
      });
      char buffer[64];
      const absl::Time start = absl::Now();
      const absl::Status status = group.Recv(buffer, sizeof(buffer), 1, 1);
      const absl::Duration took = absl::Now() - start;
      aborter.join();
      rank0_done = true;
      EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
      EXPECT_TRUE(Contains(status, "aborted")) << status;
      EXPECT_LT(took, absl::Seconds(2));
      // Everything afterwards fails at once.
      EXPECT_EQ(group.Barrier().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(group.StartSend(buffer, 1, 1, 1).status().code(),
                absl::StatusCode::kFailedPrecondition);
    } else {
      while (!rank0_done) absl::SleepFor(absl::Milliseconds(10));
      // The aborted member's connections are closed: the peer fails promptly too.
      const absl::Time start = absl::Now();
      EXPECT_FALSE(group.Barrier().ok());
      EXPECT_LT(absl::Now() - start, absl::Seconds(2));
    }
  });
}

TEST_F(GlooGroupTest, AbortFromAnotherThreadUnblocksCollectivesAndSends) {
  std::atomic<int> done{0};
  RunMembers("abort-collective", 3, kTimeout, [&](int rank, Communicator& group) {
    if (rank == 2) {  // never joins; just stays connected until the others finish
      while (done.load() < 2) absl::SleepFor(absl::Milliseconds(10));
      return;
    }
    std::thread aborter([&group] {
      absl::SleepFor(absl::Milliseconds(300));
      group.Abort();
      group.Abort();  // idempotent
    });
    const absl::Time start = absl::Now();
    absl::Status status;
    if (rank == 0) {
      std::vector<float> data(1 << 20, 1.0f);
      status = group.AllReduce(data.data(), data.size(), ReduceOp::kSum);
    } else {
      std::vector<char> data(8 << 20, 'x');
      absl::StatusOr<std::unique_ptr<PendingSend>> send =
          group.StartSend(data.data(), data.size(), 2, 4);
      status = send.ok() ? (*send)->Wait() : send.status();
    }
    const absl::Duration took = absl::Now() - start;
    aborter.join();
    done.fetch_add(1);
    EXPECT_FALSE(status.ok());
    EXPECT_TRUE(status.code() == absl::StatusCode::kFailedPrecondition ||
                status.code() == absl::StatusCode::kUnavailable)
        << status;  // UNAVAILABLE if the other member's abort closed the link first
    EXPECT_LT(took, absl::Seconds(3)) << status;
  });
}

TEST_F(GlooGroupTest, RendezvousTimesOutNamingTheGroupAndTheMissingMember) {
  absl::StatusOr<GlooDevice> device = CreateGlooDevice("127.0.0.1");
  ASSERT_TRUE(device.ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Communicator>> group =
      ConnectGlooGroup(*store_, *device, Spec("data-1", 2, 0, absl::Milliseconds(500)));
  EXPECT_EQ(group.status().code(), absl::StatusCode::kDeadlineExceeded) << group.status();
  EXPECT_TRUE(Contains(group.status(), "data-1 (ranks 10,11)")) << group.status();
  EXPECT_TRUE(Contains(group.status(), "data-1/gloo/1")) << group.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST_F(GlooGroupTest, BadSpecsAreInvalidArguments) {
  absl::StatusOr<GlooDevice> device = CreateGlooDevice("127.0.0.1");
  ASSERT_TRUE(device.ok());
  GroupSpec spec = Spec("bad", 2, 0, kTimeout);
  spec.global_rank = 99;
  EXPECT_EQ(ConnectGlooGroup(*store_, *device, spec).status().code(),
            absl::StatusCode::kInvalidArgument);
  spec = Spec("bad", 2, 0, kTimeout);
  spec.members = {10, 10};
  EXPECT_EQ(ConnectGlooGroup(*store_, *device, spec).status().code(),
            absl::StatusCode::kInvalidArgument);
  spec = Spec("", 1, 0, kTimeout);
  EXPECT_EQ(ConnectGlooGroup(*store_, *device, spec).status().code(),
            absl::StatusCode::kInvalidArgument);
  spec = Spec("bad", 1, 0, absl::ZeroDuration());
  EXPECT_EQ(ConnectGlooGroup(*store_, *device, spec).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateGlooDevice("no-such-host.invalid").status().code(),
            absl::StatusCode::kInvalidArgument);
  // Resolves, but is not an address of this machine.
  EXPECT_EQ(CreateGlooDevice("192.0.2.1").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtrain
