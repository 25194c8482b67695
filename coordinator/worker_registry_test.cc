#include "coordinator/worker_registry.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

WorkerInfo MakeWorker(const std::string& id, const std::string& incarnation) {
  WorkerInfo info;
  info.set_worker_id(id);
  info.set_incarnation_id(incarnation);
  info.set_host("127.0.0.1");
  info.set_device_kind(DEVICE_KIND_CPU);
  info.set_memory_bytes(1 << 30);
  return info;
}

HeartbeatRequest MakeHeartbeat(const std::string& id, const std::string& incarnation) {
  HeartbeatRequest request;
  request.set_worker_id(id);
  request.set_incarnation_id(incarnation);
  request.set_state(WORKER_STATE_IDLE);
  return request;
}

class WorkerRegistryTest : public ::testing::Test {
 protected:
  // Moves time as a running coordinator sees it: looking (its tick) every 200 ms, so a
  // silence this long is the workers', not a pause of the coordinator.
  void AdvanceTicking(absl::Duration d) {
    const absl::Duration tick = absl::Milliseconds(200);
    for (; d > tick; d -= tick) {
      clock_.Advance(tick);
      registry_.List();
    }
    clock_.Advance(d);
  }

  FakeClock clock_{absl::FromUnixSeconds(1000)};
  WorkerRegistry registry_{&clock_, {absl::Seconds(1), absl::Seconds(10)}};
};

TEST_F(WorkerRegistryTest, RegisteredWorkerIsListedAlive) {
  bool restarted = true;
  ASSERT_TRUE(registry_.Register(MakeWorker("w1", "a"), &restarted).ok());
  EXPECT_FALSE(restarted);
  std::vector<WorkerStatus> workers = registry_.List();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].worker().worker_id(), "w1");
  EXPECT_TRUE(workers[0].alive());
  EXPECT_EQ(registry_.CountAlive(), 1);
}

TEST_F(WorkerRegistryTest, MissedHeartbeatsPastTimeoutMarkDead) {
  bool restarted;
  ASSERT_TRUE(registry_.Register(MakeWorker("w1", "a"), &restarted).ok());
  AdvanceTicking(absl::Seconds(10));
  EXPECT_EQ(registry_.CountAlive(), 1) << "exactly at the timeout the worker still lives";
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_EQ(registry_.CountAlive(), 0);
  EXPECT_FALSE(registry_.List()[0].alive());
  EXPECT_EQ(registry_.List()[0].last_seen_ms_ago(), 10001);
  // A late heartbeat brings it back.
  ASSERT_TRUE(registry_.Heartbeat(MakeHeartbeat("w1", "a")).ok());
  EXPECT_EQ(registry_.CountAlive(), 1);
}

TEST_F(WorkerRegistryTest, OnlyDeadWorkersAreRemovedAndMayRegisterAgain) {
  bool restarted;
  ASSERT_TRUE(registry_.Register(MakeWorker("w1", "a"), &restarted).ok());
  ASSERT_TRUE(registry_.Register(MakeWorker("w2", "b"), &restarted).ok());
  EXPECT_EQ(registry_.Remove("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.Remove("w9").code(), absl::StatusCode::kNotFound);
  const absl::Status alive = registry_.Remove("w1");
  EXPECT_EQ(alive.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(alive.message().find("is alive"), absl::string_view::npos) << alive;
  AdvanceTicking(absl::Seconds(11));
  ASSERT_TRUE(registry_.Heartbeat(MakeHeartbeat("w2", "b")).ok());  // w2 lives on
  ASSERT_TRUE(registry_.Remove("w1").ok());
  ASSERT_EQ(registry_.List().size(), 1u);
  EXPECT_EQ(registry_.List()[0].worker().worker_id(), "w2");
  EXPECT_EQ(registry_.Heartbeat(MakeHeartbeat("w1", "a")).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(registry_.Register(MakeWorker("w1", "c"), &restarted).ok());
  EXPECT_EQ(registry_.CountAlive(), 2);
}

TEST_F(WorkerRegistryTest, TheCensusCountsAndNamesOnlyTheDead) {
  bool restarted;
  ASSERT_TRUE(registry_.Register(MakeWorker("w1", "a"), &restarted).ok());
  ASSERT_TRUE(registry_.Register(MakeWorker("w2", "b"), &restarted).ok());
  ASSERT_TRUE(registry_.Register(MakeWorker("w3", "c"), &restarted).ok());
  AdvanceTicking(absl::Seconds(6));
  ASSERT_TRUE(registry_.Heartbeat(MakeHeartbeat("w1", "a")).ok());
  ASSERT_TRUE(registry_.Heartbeat(MakeHeartbeat("w3", "c")).ok());
  AdvanceTicking(absl::Seconds(5));  // w2 silent for 11 s
  WorkerRegistry::Census census = registry_.TakeCensus();
  EXPECT_EQ(census.registered, 3);
  EXPECT_EQ(census.alive, 2);
  EXPECT_EQ(census.dead, (std::set<std::string>{"w2"}));
  EXPECT_TRUE(registry_.IsRegistered("w2"));
  ASSERT_TRUE(registry_.Remove("w2").ok());
  EXPECT_FALSE(registry_.IsRegistered("w2"));
  EXPECT_EQ(registry_.AreRegistered({"w3", "w2", "w1", "w9", "w3"}),
            (std::vector<bool>{true, false, true, false, true}));
  EXPECT_TRUE(registry_.AreRegistered({}).empty());
  census = registry_.TakeCensus();
  EXPECT_EQ(census.registered, 2);
  EXPECT_TRUE(census.dead.empty());
}

// The census skips its walk while no live worker can have timed out (worker_registry.h):
// at every moment of a life with silences, returns, re-registrations and removals, with a
// census taken at every tick, it must say what a full walk (List) says.
TEST_F(WorkerRegistryTest, TheCensusShortcutAgreesWithAFullWalkAtEveryTick) {
  bool restarted;
  for (const char* id : {"w1", "w2", "w3", "w4"}) {
    ASSERT_TRUE(registry_.Register(MakeWorker(id, "a"), &restarted).ok());
  }
  const auto check = [&](int second) {
    WorkerRegistry::Census census = registry_.TakeCensus();
    std::set<std::string> dead;
    int alive = 0;
    for (const WorkerStatus& w : registry_.List()) {
      if (w.alive()) {
        ++alive;
      } else {
        dead.insert(w.worker().worker_id());
      }
    }
    EXPECT_EQ(census.alive, alive) << "second " << second;
    EXPECT_EQ(census.dead, dead) << "second " << second;
    EXPECT_EQ(census.registered, static_cast<int>(registry_.List().size())) << second;
    return census;
  };
  int dead_seen = 0;
  for (int second = 1; second <= 60; ++second) {
    for (int tick = 0; tick < 5; ++tick) {
      clock_.Advance(absl::Milliseconds(200));
      if (check(second).dead.count("w2") > 0) ++dead_seen;
    }
    // w1 always beats; w2 falls silent from 5 s to 25 s, then beats again; w3 is silent from
    // 10 s, re-registers at 40 s; w4 is silent from the start and removed at 30 s.
    ASSERT_TRUE(registry_.Heartbeat(MakeHeartbeat("w1", "a")).ok());
    if (second < 5 || second >= 25) {
      ASSERT_TRUE(registry_.Heartbeat(MakeHeartbeat("w2", "a")).ok());
    }
    if (second < 10) {
      ASSERT_TRUE(registry_.Heartbeat(MakeHeartbeat("w3", "a")).ok());
    }
    if (second == 40) {
      ASSERT_TRUE(registry_.Register(MakeWorker("w3", "b"), &restarted).ok());
    }
    if (second > 40) {
      ASSERT_TRUE(registry_.Heartbeat(MakeHeartbeat("w3", "b")).ok());
    }
    if (second == 30) {
      ASSERT_TRUE(registry_.Remove("w4").ok());
    }
  }
  EXPECT_GT(dead_seen, 0) << "w2's silence was never seen: the check proves nothing";
  const WorkerRegistry::Census last = registry_.TakeCensus();
  EXPECT_EQ(last.alive, 3);
  EXPECT_TRUE(last.dead.empty());
}

TEST_F(WorkerRegistryTest, HeartbeatsKeepWorkerAlive) {
  bool restarted;
  ASSERT_TRUE(registry_.Register(MakeWorker("w1", "a"), &restarted).ok());
  for (int i = 0; i < 30; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(registry_.Heartbeat(MakeHeartbeat("w1", "a")).ok());
  }
  EXPECT_EQ(registry_.CountAlive(), 1);
}

TEST_F(WorkerRegistryTest, UnknownWorkerHeartbeatIsNotFound) {
  EXPECT_EQ(registry_.Heartbeat(MakeHeartbeat("ghost", "a")).code(), absl::StatusCode::kNotFound);
}

TEST_F(WorkerRegistryTest, NewIncarnationReplacesOldAndStaleHeartbeatIsRefused) {
  bool restarted;
  ASSERT_TRUE(registry_.Register(MakeWorker("w1", "a"), &restarted).ok());
  ASSERT_TRUE(registry_.Register(MakeWorker("w1", "b"), &restarted).ok());
  EXPECT_TRUE(restarted);
  EXPECT_EQ(registry_.Heartbeat(MakeHeartbeat("w1", "a")).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(registry_.Heartbeat(MakeHeartbeat("w1", "b")).ok());
  EXPECT_EQ(registry_.List().size(), 1u);
}

TEST_F(WorkerRegistryTest, BadRegistrationsNameTheField) {
  bool restarted;
  absl::Status status = registry_.Register(MakeWorker("", "a"), &restarted);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("worker.worker_id"), absl::string_view::npos);
  status = registry_.Register(MakeWorker("w", ""), &restarted);
  EXPECT_NE(status.message().find("worker.incarnation_id"), absl::string_view::npos);
  WorkerInfo negative = MakeWorker("w", "a");
  negative.set_device_count(-1);
  status = registry_.Register(negative, &restarted);
  EXPECT_NE(status.message().find("worker.device_count"), absl::string_view::npos);
  EXPECT_TRUE(registry_.List().empty());
}

TEST_F(WorkerRegistryTest, ListIsOrderedByWorkerId) {
  bool restarted;
  for (const char* id : {"w3", "w1", "w2"}) {
    ASSERT_TRUE(registry_.Register(MakeWorker(id, "x"), &restarted).ok());
  }
  std::vector<WorkerStatus> workers = registry_.List();
  ASSERT_EQ(workers.size(), 3u);
  EXPECT_EQ(workers[0].worker().worker_id(), "w1");
  EXPECT_EQ(workers[2].worker().worker_id(), "w3");
}

TEST_F(WorkerRegistryTest, APauseOfTheCoordinatorGivesLiveWorkersAFreshWindow) {
  bool restarted;
  ASSERT_TRUE(registry_.Register(MakeWorker("w1", "a"), &restarted).ok());
  ASSERT_TRUE(registry_.Register(MakeWorker("w2", "b"), &restarted).ok());
  ASSERT_TRUE(registry_.Register(MakeWorker("dead", "c"), &restarted).ok());
  AdvanceTicking(absl::Seconds(11));  // "dead" stops heartbeating; w1 and w2 go on
  ASSERT_TRUE(registry_.Heartbeat(MakeHeartbeat("w1", "a")).ok());
  ASSERT_TRUE(registry_.Heartbeat(MakeHeartbeat("w2", "b")).ok());
  EXPECT_EQ(registry_.CountAlive(), 2);
  // SIGSTOP for 15 s: nothing is looked at; the first thing after SIGCONT is w1's heartbeat.
  clock_.Advance(absl::Seconds(15));
  ASSERT_TRUE(registry_.Heartbeat(MakeHeartbeat("w1", "a")).ok());
  // w2's heartbeat is 15 s old but the coordinator was not listening: still alive.
  EXPECT_EQ(registry_.CountAlive(), 2);
  EXPECT_EQ(registry_.pauses().count, 1);
  EXPECT_EQ(registry_.pauses().newest, absl::Seconds(15));
  for (const WorkerStatus& w : registry_.List()) {
    EXPECT_EQ(w.alive(), w.worker().worker_id() != "dead") << w.worker().worker_id();
  }
  // The fresh window is one window: a w2 that stays silent is dead a timeout later.
  AdvanceTicking(absl::Seconds(10) + absl::Milliseconds(1));
  ASSERT_TRUE(registry_.Heartbeat(MakeHeartbeat("w1", "a")).ok());
  EXPECT_EQ(registry_.CountAlive(), 1);
  EXPECT_EQ(registry_.pauses().count, 1);
}

TEST_F(WorkerRegistryTest, ASlowStartIsNotAPause) {
  WorkerRegistry registry(&clock_, WorkerRegistryOptions{});
  clock_.Advance(absl::Seconds(30));  // the daemon opens a large state dir
  bool restarted;
  ASSERT_TRUE(registry.Register(MakeWorker("w1", "a"), &restarted).ok());
  EXPECT_EQ(registry.pauses().count, 0);
}

TEST_F(WorkerRegistryTest, PauseDetectionCanBeTurnedOff) {
  WorkerRegistryOptions options;
  options.pause_threshold = absl::InfiniteDuration();
  WorkerRegistry registry(&clock_, options);
  bool restarted;
  ASSERT_TRUE(registry.Register(MakeWorker("w1", "a"), &restarted).ok());
  clock_.Advance(absl::Seconds(15));
  EXPECT_EQ(registry.CountAlive(), 0);
  EXPECT_EQ(registry.pauses().count, 0);
}

TEST_F(WorkerRegistryTest, OversizedStringsAndUnknownDeviceKindsAreRefusedByName) {
  bool restarted = false;
  WorkerInfo long_id = MakeWorker(std::string(kMaxWorkerStringBytes + 1, 'w'), "a");
  absl::Status status = registry_.Register(long_id, &restarted);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(status.message(), "worker.worker_id: 257 bytes")) << status;
  WorkerInfo long_host = MakeWorker("w1", "a");
  long_host.set_host(std::string(3 << 20, 'h'));
  status = registry_.Register(long_host, &restarted);
  EXPECT_TRUE(absl::StartsWith(status.message(), "worker.host:")) << status;
  WorkerInfo odd_kind = MakeWorker("w1", "a");
  odd_kind.set_device_kind(static_cast<DeviceKind>(99));
  status = registry_.Register(odd_kind, &restarted);
  EXPECT_TRUE(absl::StartsWith(status.message(), "worker.device_kind: 99")) << status;
  // The CPU profile's names and numbers (issue 32) are checked like the rest.
  WorkerInfo long_kernel = MakeWorker("w1", "a");
  long_kernel.mutable_profile()->set_gemm_kernel(std::string(kMaxWorkerStringBytes + 1, 'k'));
  status = registry_.Register(long_kernel, &restarted);
  EXPECT_TRUE(absl::StartsWith(status.message(), "worker.profile.gemm_kernel: 257 bytes"))
      << status;
  WorkerInfo negative_clock = MakeWorker("w1", "a");
  negative_clock.mutable_profile()->set_clock_hz(-3e9);
  status = registry_.Register(negative_clock, &restarted);
  EXPECT_TRUE(absl::StartsWith(status.message(), "worker.profile.clock_hz: must be finite"))
      << status;
  EXPECT_TRUE(registry_.List().empty());
}

TEST(WorkerRegistryBoundTest, AFullRegistryMakesRoomFromTheLongestDeadOrRefuses) {
  FakeClock clock(absl::FromUnixSeconds(1000));
  WorkerRegistryOptions options{absl::Seconds(1), absl::Seconds(10)};
  options.pause_threshold = absl::InfiniteDuration();
  options.max_workers = 2;
  WorkerRegistry registry(&clock, options);
  bool restarted = false;
  ASSERT_TRUE(registry.Register(MakeWorker("w1", "a"), &restarted).ok());
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(registry.Register(MakeWorker("w2", "a"), &restarted).ok());
  const absl::Status full = registry.Register(MakeWorker("w3", "a"), &restarted);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_TRUE(absl::StrContains(full.message(), "at most 2 workers")) << full;
  // A known worker may always register again.
  EXPECT_TRUE(registry.Register(MakeWorker("w2", "b"), &restarted).ok());

  clock.Advance(absl::Seconds(20));  // both dead; w1 the longest
  ASSERT_TRUE(registry.Register(MakeWorker("w3", "a"), &restarted).ok());
  std::vector<std::string> ids;
  for (const WorkerStatus& w : registry.List()) ids.push_back(w.worker().worker_id());
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{"w2", "w3"}));
}

}  // namespace
}  // namespace mtrain
