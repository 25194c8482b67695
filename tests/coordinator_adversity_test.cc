// The coordinator's own troubles, end to end with real processes on loopback (issue 15):
//   - its --state_dir fills up (a small tmpfs) while a job trains: the checkpoint that does
//     not fit fails its generation, the job store's writes are held in memory, the job
//     waits for room without spending a restart, the failure shows in /metrics, the job's
//     status and its events, and once space is freed the job goes on and succeeds with
//     every step, without a coordinator restart;
//   - it is stopped (SIGSTOP) for longer than the heartbeat timeout and continued: no
//     healthy worker is declared dead and the job is not restarted;
//   - a rank process is stopped (SIGSTOP): its daemon reports it and the generation fails
//     within seconds, not at the 5-minute collective timeout.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/cluster_fixture.h"
#include "tests/metrics_scrape.h"

namespace mtrain {
namespace {

// A tiny GPT on one CPU worker: checkpoints of about 0.7 MB.
std::string SpecJson(int steps, int checkpoint_every, int max_restarts) {
  return absl::StrCat(
      R"({"name": "adversity", "model": {"num_layers": 4, "num_heads": 4, "hidden_size": 32,
          "seq_length": 16}, "parallel": {"micro_batch_size": 2, "global_batch_size": 4},
          "train": {"steps": )",
      steps, R"(, "checkpoint_every": )", checkpoint_every, R"(, "max_restarts": )", max_restarts,
      R"(, "seed": 5}, "device": "DEVICE_CPU"})");
}

class CoordinatorAdversityTest : public ClusterTest {
 protected:
  void TearDown() override {
    ClusterTest::TearDown();
    if (!mounted_.empty()) ::umount2(mounted_.c_str(), MNT_DETACH);
  }

  // The value of the sample `series` (name with labels, as exposed) on /metrics; -1 if
  // absent.
  double Sample(const std::string& series) {
    absl::StatusOr<HttpResponse> response = HttpGet(metrics_port_, "/metrics");
    if (!response.ok()) return -1;
    for (absl::string_view line : absl::StrSplit(response->body, '\n')) {
      if (!absl::ConsumePrefix(&line, series) || !absl::ConsumePrefix(&line, " ")) continue;
      double value = 0;
      if (absl::SimpleAtod(line, &value)) return value;
    }
    return -1;
  }

  std::vector<JobEvent> Events(const std::string& job) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ListJobEventsRequest request;
    request.set_job_id(job);
    ListJobEventsResponse response;
    grpc::Status status = Stub()->ListJobEvents(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return {response.events().begin(), response.events().end()};
  }

  static bool HasEvent(const std::vector<JobEvent>& events, const std::string& kind,
                       const std::string& text = "") {
    for (const JobEvent& e : events) {
      if (e.kind() == kind && absl::StrContains(e.message(), text)) return true;
    }
    return false;
  }

  static std::string Describe(const std::vector<JobEvent>& events) {
    std::string out;
    for (const JobEvent& e : events) absl::StrAppend(&out, e.kind(), ": ", e.message(), "\n");
    return out;
  }

  std::string mounted_;
};

TEST_F(CoordinatorAdversityTest,
       AFullStateDirIsSurvivedAndSurfacedAndTheJobFinishesAfterSpaceReturns) {
  const std::string state = Path("state");
  ASSERT_EQ(::mkdir(state.c_str(), 0755), 0) << std::strerror(errno);
  if (::mount("tmpfs", state.c_str(), "tmpfs", 0, "size=8m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs on " << state << " (" << std::strerror(errno)
                 << "): this test needs root and a sandbox that allows mounts";
  }
  mounted_ = state;
  StartCoordinator();
  StartWorkers(1);

  // The job is stored and placed, then the state dir fills up (in milliseconds, before
  // its rank has started): every write of the job store and the checkpoint store fails.
  constexpr int kSteps = 40;
  const std::string job = Submit(WriteSpec("job.json", SpecJson(kSteps, 10, 100)));
  ASSERT_FALSE(job.empty());
  const std::string filler = state + "/filler";
  {
    const int fd = ::open(filler.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    const std::string block(1 << 12, 'x');
    while (::write(fd, block.data(), block.size()) > 0) {
    }
    ::close(fd);
  }

  // Both failures are counted on /metrics: the checkpoint that does not fit (which fails
  // its generation) and the job store's writes (held in memory meanwhile).
  const std::string checkpoint_failures =
      R"(mtrain_state_dir_write_failures_total{store="checkpoints"})";
  const std::string job_store_failures = R"(mtrain_state_dir_write_failures_total{store="jobs"})";
  ASSERT_TRUE(WaitFor([&] { return Sample(checkpoint_failures) >= 1; }, absl::Seconds(90)))
      << "no checkpoint write failure seen; job: " << Status(job)->DebugString();
  ASSERT_TRUE(WaitFor([&] { return Sample(job_store_failures) >= 1; }, absl::Seconds(30)));
  // The failed generation left RUNNING, as the manager decided, though nothing of it could
  // be stored: the job waits for room, without spending a restart, and its status says so
  // and why it is not saved.
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<JobStatus> s = Status(job);
        return s.ok() && s->state() == JOB_STATE_PENDING &&
               absl::StrContains(s->message(), "waiting for room in the state dir") &&
               absl::StrContains(s->message(), "state dir refuses writes");
      },
      absl::Seconds(30)))
      << Status(job)->DebugString();
  // It stays so while the disk is full (no generation is wasted on it).
  absl::SleepFor(absl::Seconds(1));
  absl::StatusOr<JobStatus> waiting = Status(job);
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->state(), JOB_STATE_PENDING);
  EXPECT_EQ(waiting->generation(), 1);
  EXPECT_EQ(waiting->restarts(), 0);
  EXPECT_GE(Sample("mtrain_state_dir_writes_queued"), 1);

  // Space returns: no coordinator restart, the job goes on and finishes every step.
  ASSERT_EQ(::unlink(filler.c_str()), 0) << std::strerror(errno);
  const absl::Time freed = absl::Now();
  ASSERT_TRUE(
      WaitFor([&] { return Sample("mtrain_state_dir_writes_queued") == 0; }, absl::Seconds(30)));
  const absl::Duration caught_up = absl::Now() - freed;
  ASSERT_TRUE(WaitFor([&] { return StateOf(job) == JOB_STATE_SUCCEEDED; }, absl::Seconds(180)))
      << Status(job)->DebugString() << Describe(Events(job));
  std::printf(
      "full state dir: %.0f checkpoint and %.0f job store write failures; after space returned "
      "the store caught up in %.2f s and the job succeeded in %.2f s\n",
      Sample(checkpoint_failures), Sample(job_store_failures), absl::ToDoubleSeconds(caught_up),
      absl::ToDoubleSeconds(absl::Now() - freed));
  absl::StatusOr<JobStatus> done = Status(job);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->step(), kSteps);
  EXPECT_EQ(done->generation(), 2);
  EXPECT_EQ(done->restarts(), 0);  // the disk's failure, not the job's
  EXPECT_TRUE(done->message().empty()) << done->message();
  // The store took the held writes back: the log tells the whole story, in order.
  const std::vector<JobEvent> events = Events(job);
  std::cout << "events:\n" << Describe(events);
  EXPECT_TRUE(HasEvent(events, "checkpoint_write_failed", "not stored")) << Describe(events);
  EXPECT_TRUE(HasEvent(events, "generation_failed")) << Describe(events);
  EXPECT_TRUE(HasEvent(events, "state_dir_write_failed")) << Describe(events);
  EXPECT_TRUE(HasEvent(events, "state_dir_recovered")) << Describe(events);
  // No partial checkpoint is left behind; the final one is committed.
  std::vector<CheckpointInfo> checkpoints;
  {
    grpc::ClientContext context;
    ListCheckpointsRequest request;
    request.set_job_id(job);
    ListCheckpointsResponse response;
    ASSERT_TRUE(Stub()->ListCheckpoints(&context, request, &response).ok());
    checkpoints.assign(response.checkpoints().begin(), response.checkpoints().end());
  }
  ASSERT_FALSE(checkpoints.empty());
  EXPECT_EQ(checkpoints.back().step(), kSteps);
}

TEST_F(CoordinatorAdversityTest, APausedCoordinatorBlamesNoHealthyWorker) {
  StartCoordinator();
  StartWorkers(1);
  const std::string job = Submit(WriteSpec("job.json", SpecJson(100000, 0, 3)));
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitFor([&] { return StateOf(job) == JOB_STATE_RUNNING; }, absl::Seconds(60)))
      << Status(job)->DebugString();
  // Stopped for twice the heartbeat timeout (3 s in the fixture), then continued.
  ASSERT_EQ(::kill(coordinator_->pid(), SIGSTOP), 0);
  absl::SleepFor(absl::Seconds(6));
  ASSERT_EQ(::kill(coordinator_->pid(), SIGCONT), 0);
  // The pause is noticed and reported...
  ASSERT_TRUE(
      WaitFor([&] { return Sample("mtrain_coordinator_pauses_total") >= 1; }, absl::Seconds(20)));
  // ...and a few heartbeat windows later the worker and the job are untouched.
  absl::SleepFor(absl::Seconds(4));
  absl::StatusOr<JobStatus> status = Status(job);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), JOB_STATE_RUNNING) << status->DebugString();
  EXPECT_EQ(status->generation(), 1);
  EXPECT_EQ(status->restarts(), 0);
  EXPECT_EQ(Sample("mtrain_heartbeats_missed_total"), 0);
  const std::vector<JobEvent> events = Events(job);
  EXPECT_TRUE(HasEvent(events, "coordinator_paused", "does not count")) << Describe(events);
  EXPECT_FALSE(HasEvent(events, "generation_failed")) << Describe(events);
  EXPECT_EQ(Trainctl({"cancel", job}).first, 0);
}

TEST_F(CoordinatorAdversityTest, AStoppedRankFailsItsGenerationLongBeforeTheCollectiveTimeout) {
  StartCoordinator();  // the default --collective_timeout: 5 minutes
  StartWorkers(2);
  const std::string job = Submit(WriteSpec(
      "job.json", absl::StrCat(R"({"name": "stopped", "model": {"num_layers": 2, "num_heads": 4,
          "hidden_size": 32, "seq_length": 16}, "parallel": {"data": 2, "micro_batch_size": 2,
          "global_batch_size": 4}, "train": {"steps": 100000, "max_restarts": 2},
          "device": "DEVICE_CPU"})")));
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitFor([&] { return StateOf(job) == JOB_STATE_RUNNING; }, absl::Seconds(60)))
      << Status(job)->DebugString();
  const int rank_pid = RankProcessOf(workers_[1]->pid());
  ASSERT_GT(rank_pid, 0);
  const absl::Time stopped = absl::Now();
  ASSERT_EQ(::kill(rank_pid, SIGSTOP), 0);
  ASSERT_TRUE(
      WaitFor([&] { return HasEvent(Events(job), "generation_failed", "stopped (SIGSTOP)"); },
              absl::Seconds(60)))
      << Describe(Events(job));
  const absl::Duration detected = absl::Now() - stopped;
  std::printf(
      "stopped rank failed its generation after %.1f s (grace 10 s, collective timeout "
      "300 s)\n",
      absl::ToDoubleSeconds(detected));
  EXPECT_LT(detected, absl::Minutes(2));  // far below the collective timeout
  ::kill(rank_pid, SIGCONT);              // harmless if the daemon's abort already killed it
  // The job goes on with a new generation.
  EXPECT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<JobStatus> s = Status(job);
        return s.ok() && s->generation() >= 2 && s->state() == JOB_STATE_RUNNING;
      },
      absl::Seconds(60)))
      << Status(job)->DebugString() << Describe(Events(job));
  EXPECT_EQ(Trainctl({"cancel", job}).first, 0);
}

}  // namespace
}  // namespace mtrain
