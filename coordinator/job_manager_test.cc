#include "coordinator/job_manager.h"

#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "checkpoint/checkpoint_tensors.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_metrics.h"
#include "gtest/gtest.h"
#include "spec/job_spec_validation.h"

namespace mtrain {
namespace {

JobSpec Spec(const std::string& parallel, int max_restarts = 1) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(
      absl::StrCat(R"({"parallel": )", parallel, R"(, "train": {"steps": 2, "max_restarts": )",
                   max_restarts, "}}"));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// The SQLite store, refusing on demand: while an operation is set to fail, every call of
// it returns UNAVAILABLE. Failing GetJob as well stands for a store that cannot even read
// the job, so the RetryingJobStore in front of it cannot hold a write for a retry and
// hands the error to the manager; that is the case the manager must not swallow.
class FaultyJobStore : public JobStore {
 public:
  explicit FaultyJobStore(JobStore* real) : real_(real) {}

  // Operations by name ("Transition", "GetJob", ...).
  void Fail(std::set<std::string> operations) {
    MutexLock lock(&mutex_);
    failing_ = std::move(operations);
  }
  void Heal() { Fail({}); }

  absl::StatusOr<std::string> CreateJob(const JobSpec& spec, int64_t now_ms) override {
    RETURN_IF_ERROR(Refused("CreateJob"));
    return real_->CreateJob(spec, now_ms);
  }
  absl::StatusOr<JobStatus> GetJob(const std::string& job_id) const override {
    RETURN_IF_ERROR(Refused("GetJob"));
    return real_->GetJob(job_id);
  }
  absl::StatusOr<std::vector<JobStatus>> ListJobs() const override {
    RETURN_IF_ERROR(Refused("ListJobs"));
    return real_->ListJobs();
  }
  absl::StatusOr<JobListPage> ListJobs(const JobListQuery& query) const override {
    RETURN_IF_ERROR(Refused("ListJobs"));
    return real_->ListJobs(query);
  }
  absl::Status DeleteJob(const std::string& job_id) override {
    RETURN_IF_ERROR(Refused("DeleteJob"));
    return real_->DeleteJob(job_id);
  }
  absl::StatusOr<std::vector<std::string>> JobsEndedBy(int64_t unix_ms,
                                                       int64_t limit) const override {
    RETURN_IF_ERROR(Refused("JobsEndedBy"));
    return real_->JobsEndedBy(unix_ms, limit);
  }
  absl::Status Transition(const std::string& job_id, JobState to, const std::string& message,
                          int64_t now_ms) override {
    RETURN_IF_ERROR(Refused("Transition"));
    return real_->Transition(job_id, to, message, now_ms);
  }
  absl::Status SetPlacement(const std::string& job_id, int64_t generation, int32_t restarts,
                            const std::vector<std::string>& workers, int64_t now_ms) override {
    RETURN_IF_ERROR(Refused("SetPlacement"));
    return real_->SetPlacement(job_id, generation, restarts, workers, now_ms);
  }
  absl::Status RecordStep(const std::string& job_id, const StepMetrics& metrics,
                          int64_t now_ms) override {
    RETURN_IF_ERROR(Refused("RecordStep"));
    return real_->RecordStep(job_id, metrics, now_ms);
  }
  absl::StatusOr<std::vector<StepMetrics>> Steps(const std::string& job_id, int64_t after_step,
                                                 int64_t limit) const override {
    RETURN_IF_ERROR(Refused("Steps"));
    return real_->Steps(job_id, after_step, limit);
  }
  absl::Status AppendEvent(const std::string& job_id, const std::string& kind,
                           const std::string& message, int64_t now_ms) override {
    RETURN_IF_ERROR(Refused("AppendEvent"));
    return real_->AppendEvent(job_id, kind, message, now_ms);
  }
  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& job_id) const override {
    RETURN_IF_ERROR(Refused("Events"));
    return real_->Events(job_id);
  }
  absl::StatusOr<JobEventPage> Events(const std::string& job_id, int64_t after_event,
                                      int64_t max_events, int64_t max_bytes) const override {
    RETURN_IF_ERROR(Refused("Events"));
    return real_->Events(job_id, after_event, max_events, max_bytes);
  }

 private:
  absl::Status Refused(const std::string& operation) const {
    MutexLock lock(&mutex_);
    if (failing_.count(operation) == 0) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("injected: ", operation, ": disk I/O error"));
  }

  JobStore* const real_;
  mutable Mutex mutex_;
  std::set<std::string> failing_ ABSL_GUARDED_BY(mutex_);
};

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    path_ =
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/jobs-",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".sqlite");
    std::remove(path_.c_str());
    checkpoint_root_ =
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/checkpoints-",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(checkpoint_root_);
    absl::StatusOr<std::unique_ptr<CheckpointStore>> checkpoints =
        CheckpointStore::Open(checkpoint_root_, /*keep_last=*/3);
    ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
    checkpoints_ = std::move(*checkpoints);
    absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> metrics = CoordinatorMetrics::Start("");
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = std::move(*metrics);
    Reopen();
  }

  void Reopen() {
    manager_.reset();
    faulty_.reset();
    store_.reset();
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    faulty_ = std::make_unique<FaultyJobStore>(store_.get());
    absl::StatusOr<std::unique_ptr<JobManager>> manager =
        JobManager::Create(&clock_, &registry_, faulty_.get(), &rendezvous_, metrics_.get(),
                           options_, checkpoints_.get());
    ASSERT_TRUE(manager.ok()) << manager.status();
    manager_ = std::move(*manager);
  }

  void AddWorker(const std::string& id, const std::string& host,
                 DeviceKind kind = DEVICE_KIND_CPU) {
    WorkerInfo info;
    info.set_worker_id(id);
    info.set_host(host);
    info.set_device_kind(kind);
    info.set_incarnation_id("inc-" + id);
    bool restarted = false;
    ASSERT_TRUE(registry_.Register(info, &restarted).ok());
  }

  // A CPU worker that measured its device (worker/device_probe.h), as `parallel.auto` needs.
  void AddMeasuredWorker(const std::string& id, const std::string& host,
                         int64_t memory_bytes = int64_t{16} << 30) {
    WorkerInfo info;
    info.set_worker_id(id);
    info.set_host(host);
    info.set_device_kind(DEVICE_KIND_CPU);
    info.set_incarnation_id("inc-" + id);
    info.set_memory_bytes(memory_bytes);
    DeviceProfile* profile = info.mutable_profile();
    profile->set_name("cpu (measured)");
    profile->set_fp32_flops(1e11);
    profile->set_matmul_efficiency(1);
    profile->set_matmul_half_size(16);
    profile->set_memory_bandwidth_bytes_per_second(2e10);
    profile->set_memory_bytes(memory_bytes);
    bool restarted = false;
    ASSERT_TRUE(registry_.Register(info, &restarted).ok());
  }

  // One heartbeat from `id` in `state` (BUSY with the job and generation it was given).
  std::vector<WorkerCommand> Beat(const std::string& id, WorkerState state,
                                  const std::string& job = "", int64_t generation = 0) {
    HeartbeatRequest request;
    request.set_worker_id(id);
    request.set_incarnation_id("inc-" + id);
    request.set_state(state);
    request.set_job_id(job);
    request.set_generation(generation);
    EXPECT_TRUE(registry_.Heartbeat(request).ok());
    return manager_->OnHeartbeat(request);
  }

  JobState State(const std::string& job) {
    absl::StatusOr<JobStatus> status = manager_->Get(job);
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->state() : JOB_STATE_UNSPECIFIED;
  }

  // Delivers the assignments of `job` to `workers`; returns them by rank.
  std::map<int, Assignment> Deliver(const std::vector<std::string>& workers) {
    std::map<int, Assignment> by_rank;
    for (const std::string& w : workers) {
      for (const WorkerCommand& c : Beat(w, WORKER_STATE_IDLE)) {
        if (c.has_assign()) by_rank[c.assign().rank().global_rank()] = c.assign();
      }
    }
    return by_rank;
  }

  StepMetrics Step(const Assignment& a, int64_t step, double loss) {
    StepMetrics m;
    m.set_job_id(a.job_id());
    m.set_generation(a.generation());
    m.set_global_rank(a.rank().global_rank());
    m.set_step(step);
    m.set_loss(loss);
    return m;
  }

  RankResult Result(const Assignment& a, absl::StatusCode code, const std::string& message = "") {
    RankResult r;
    r.set_job_id(a.job_id());
    r.set_generation(a.generation());
    r.set_global_rank(a.rank().global_rank());
    r.set_code(static_cast<int>(code));
    r.set_message(message);
    return r;
  }

  // Commits a small parameters-only checkpoint of `step` for `job` from `generation`
  // through the store's upload path, as the gRPC adapter would.
  void CommitCheckpoint(const std::string& job, int64_t generation, int64_t step) {
    const std::string src = absl::StrCat(checkpoint_root_, "-src/", job, "-", step);
    std::map<std::string, FullTensor> tensors;
    tensors["w"] = FullTensor{{2, 2}, {1, 2, 3, float(step)}};
    absl::StatusOr<CheckpointManifest> manifest =
        WriteParameterCheckpoint(src, job, step, tensors, 1234);
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    for (const std::string file : {"rank-00000.bin", "MANIFEST"}) {
      std::ifstream in(src + "/" + file, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), {});
      ASSERT_TRUE(manager_->CheckCheckpointUpload(job, generation, step).ok());
      auto upload = checkpoints_->BeginFile(job, generation, step, file);
      ASSERT_TRUE(upload.ok()) << upload.status();
      ASSERT_TRUE((*upload)->Append(0, bytes).ok());
      ASSERT_TRUE((*upload)->Finish().ok());
    }
    for (const CheckpointInfo& info : checkpoints_->List(job)) {
      if (info.step() == step) manager_->OnCheckpointCommitted(job, info);
    }
  }

  std::string EventLog(const std::string& job) {
    std::string text;
    absl::StatusOr<std::vector<JobEvent>> events = manager_->Events(job);
    EXPECT_TRUE(events.ok());
    if (events.ok()) {
      for (const JobEvent& e : *events) absl::StrAppend(&text, e.kind(), ": ", e.message(), "\n");
    }
    return text;
  }

  // mtrain_coordinator_store_write_failures_total{operation=`operation`}.
  double StoreWriteFailures(const std::string& operation) {
    const std::string series = absl::StrCat(
        "mtrain_coordinator_store_write_failures_total{operation=\"", operation, "\"} ");
    for (absl::string_view line : absl::StrSplit(metrics_->Scrape(), '\n')) {
      double value = 0;
      if (absl::ConsumePrefix(&line, series) && absl::SimpleAtod(line, &value)) return value;
    }
    ADD_FAILURE() << "no series " << series;
    return -1;
  }

  std::string checkpoint_root_;
  JobManagerOptions options_;  // Reopen() applies changes.
  std::unique_ptr<CheckpointStore> checkpoints_;
  FakeClock clock_{absl::FromUnixSeconds(1000)};
  WorkerRegistry registry_{&clock_, WorkerRegistryOptions{}};
  RendezvousStore rendezvous_;
  std::string path_;
  std::unique_ptr<JobStore> store_;
  // In front of store_; healthy unless a test says otherwise.
  std::unique_ptr<FaultyJobStore> faulty_;
  std::unique_ptr<CoordinatorMetrics> metrics_;
  std::unique_ptr<JobManager> manager_;
};

TEST_F(JobManagerTest, RejectsJobsLargerThanTheLiveWorkersWithTheRule) {
  AddWorker("w0", "a");
  absl::StatusOr<std::string> id = manager_->Submit(Spec(R"({"tensor": 2})"));
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("needs tensor * pipeline * data = 2 workers"),
            absl::string_view::npos)
      << id.status();
  JobSpec bad;  // 4 heads (the default) cannot split over 3 tensor ranks
  bad.mutable_parallel()->set_tensor(3);
  absl::StatusOr<std::string> rejected = manager_->Submit(bad);
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rejected.status().message().find("model.num_heads"), absl::string_view::npos);
}

TEST_F(JobManagerTest, PlacesFourThousandRanksAndDeliversEachItsOwnAssignment) {
  // 4096 workers on 512 hosts, one data-parallel job over all of them: each worker's next
  // heartbeat carries its own rank, made from the generation's shared plan, with a
  // pipeline schedule of its group's ranks; the placement event names a few workers and
  // a count, not 4096 ids.
  constexpr int kWorkers = 4096;
  std::vector<std::string> ids;
  for (int w = 0; w < kWorkers; ++w) {
    ids.push_back(absl::StrCat("w", w));
    AddWorker(ids.back(), absl::StrCat("host", w / 8));
  }
  const auto start = absl::Now();
  absl::StatusOr<std::string> id =
      manager_->Submit(Spec(R"({"pipeline": 2, "data": 2048, "global_batch_size": 4096})"));
  ASSERT_TRUE(id.ok()) << id.status();
  std::printf("Submit + placement of %d ranks: %.1f ms\n", kWorkers,
              absl::ToDoubleMilliseconds(absl::Now() - start));
  EXPECT_EQ(State(*id), JOB_STATE_PLACING);
  std::map<int, std::string> worker_of_rank;
  for (const std::string& w : ids) {
    int assigns = 0;
    for (const WorkerCommand& c : Beat(w, WORKER_STATE_IDLE)) {
      if (!c.has_assign()) continue;
      ++assigns;
      const Assignment& a = c.assign();
      EXPECT_EQ(a.self().worker_id(), w);
      EXPECT_EQ(a.rank().world_size(), kWorkers);
      EXPECT_EQ(a.hosts_by_rank_count().at(8), kWorkers / 8);
      worker_of_rank[a.rank().global_rank()] = w;
      // Stage 0 sends forward to its own group's stage 1: rank + tensor * data.
      for (const PipelineAction& action : a.schedule().actions()) {
        if (action.kind() == PipelineAction::SEND_FORWARD) {
          EXPECT_EQ(action.peer_rank(), a.rank().global_rank() + 2048);
        }
        if (action.kind() == PipelineAction::RECV_FORWARD) {
          EXPECT_EQ(action.peer_rank(), a.rank().global_rank() - 2048);
        }
      }
    }
    EXPECT_EQ(assigns, 1) << w;
    // Delivered once: the next heartbeat has nothing more.
    EXPECT_TRUE(Beat(w, WORKER_STATE_BUSY, *id, 1).empty()) << w;
  }
  EXPECT_EQ(worker_of_rank.size(), static_cast<size_t>(kWorkers));
  absl::StatusOr<std::vector<JobEvent>> events = manager_->Events(*id);
  ASSERT_TRUE(events.ok());
  bool named = false;
  for (const JobEvent& event : *events) {
    EXPECT_LT(event.message().size(), 1000u) << event.kind();
    if (event.message().find("on 4096 workers: w") != std::string::npos) {
      named = true;
      EXPECT_NE(event.message().find("(4080 more)"), std::string::npos) << event.message();
    }
  }
  EXPECT_TRUE(named);
}

TEST_F(JobManagerTest, PlacesTensorGroupsOnOneHostRunsAndSucceeds) {
  // Two hosts, two workers each, interleaved ids: each tensor pair must share a host.
  AddWorker("w0", "hostA");
  AddWorker("w1", "hostB");
  AddWorker("w2", "hostA");
  AddWorker("w3", "hostB");
  absl::StatusOr<std::string> id =
      manager_->Submit(Spec(R"({"tensor": 2, "pipeline": 2, "global_batch_size": 2})"));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(State(*id), JOB_STATE_PLACING);
  std::map<int, Assignment> ranks = Deliver({"w0", "w1", "w2", "w3"});
  ASSERT_EQ(ranks.size(), 4u);
  for (int r = 0; r < 4; r += 2) {
    EXPECT_EQ(ranks[r].self().host(), ranks[r + 1].self().host()) << "tensor group " << r;
    EXPECT_EQ(ranks[r].self().global_rank(), r);
  }
  // Each assignment names its own worker and how the ranks share hosts: two hosts of two.
  EXPECT_EQ(ranks[0].hosts_by_rank_count().size(), 1u);
  EXPECT_EQ(ranks[3].hosts_by_rank_count().at(2), 2);
  EXPECT_EQ(ranks[0].generation(), 1);
  ASSERT_TRUE(manager_->OnMetrics(Step(ranks[2], 1, 5.5)).ok());  // rank 2: loss rank
  EXPECT_EQ(State(*id), JOB_STATE_RUNNING);
  EXPECT_EQ(manager_->Get(*id)->latest().loss(), 5.5);
  // Rank 0's first step says which engine trains: an "engine" event (once, not per step).
  StepMetrics first = Step(ranks[0], 1, 0);
  first.clear_loss();
  first.set_engine("engine: CUDA (device: DEVICE_AUTO), NVIDIA H100 #0, PRECISION_BF16");
  ASSERT_TRUE(manager_->OnMetrics(first).ok());
  EXPECT_NE(EventLog(*id).find("engine: generation 1, rank 0: engine: CUDA (device: "
                               "DEVICE_AUTO), NVIDIA H100 #0, PRECISION_BF16"),
            std::string::npos)
      << EventLog(*id);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(manager_->OnRankResult(Result(ranks[r], absl::StatusCode::kOk)).ok());
  }
  EXPECT_EQ(State(*id), JOB_STATE_SUCCEEDED);
  // A late report of the finished generation is refused as stale.
  EXPECT_EQ(manager_->OnMetrics(Step(ranks[2], 2, 5.0)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(JobManagerTest, ReportedStepsAreStoredByTheStepWriterAndCounted) {
  // Two single-rank jobs report steps from threads of their own: each acknowledged step is
  // stored, and the writer's transactions never outnumber the rows.
  AddWorker("w0", "h");
  AddWorker("w1", "h");
  absl::StatusOr<std::string> a = manager_->Submit(Spec("{}"));
  absl::StatusOr<std::string> b = manager_->Submit(Spec("{}"));
  ASSERT_TRUE(a.ok() && b.ok());
  std::map<std::string, Assignment> by_job;
  for (const std::string w : {"w0", "w1"}) {
    for (const WorkerCommand& c : Beat(w, WORKER_STATE_IDLE)) {
      if (c.has_assign()) by_job[c.assign().job_id()] = c.assign();
    }
  }
  ASSERT_EQ(by_job.size(), 2u);
  constexpr int kSteps = 20;  // each waits up to a step-writer tick (100 ms)
  std::vector<std::thread> ranks;
  for (auto& [job, assignment] : by_job) {
    ranks.emplace_back([&, assignment = assignment] {
      for (int step = 1; step <= kSteps; ++step) {
        ASSERT_TRUE(manager_->OnMetrics(Step(assignment, step, 3.0)).ok());
        // Acknowledged means stored.
        absl::StatusOr<JobStatus> job = manager_->Get(assignment.job_id());
        ASSERT_TRUE(job.ok());
        EXPECT_GE(job->step(), step);
      }
    });
  }
  for (std::thread& rank : ranks) rank.join();
  const StepWriter::Counts counts = manager_->StepWrites();
  EXPECT_EQ(counts.rows, 2 * kSteps);
  EXPECT_GE(counts.batches, 1);
  EXPECT_LE(counts.batches, 2 * kSteps);
  const std::string text = metrics_->Scrape();
  EXPECT_NE(text.find(absl::StrCat("mtrain_coordinator_step_rows_total ", 2 * kSteps)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(absl::StrCat("mtrain_coordinator_step_transactions_total ", counts.batches)),
            std::string::npos);
}

TEST_F(JobManagerTest, SecondJobWaitsForWorkersThenRuns) {
  for (int i = 0; i < 4; ++i) AddWorker(absl::StrCat("w", i), "h");
  absl::StatusOr<std::string> first =
      manager_->Submit(Spec(R"({"data": 4, "global_batch_size": 4})"));
  absl::StatusOr<std::string> second =
      manager_->Submit(Spec(R"({"data": 2, "global_batch_size": 2})"));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(State(*first), JOB_STATE_PLACING);
  EXPECT_EQ(State(*second), JOB_STATE_PENDING);
  std::map<int, Assignment> ranks = Deliver({"w0", "w1", "w2", "w3"});
  for (auto& [r, a] : ranks)
    ASSERT_TRUE(manager_->OnRankResult(Result(a, absl::StatusCode::kOk)).ok());
  EXPECT_EQ(State(*first), JOB_STATE_SUCCEEDED);
  EXPECT_EQ(State(*second), JOB_STATE_PLACING);
}

TEST_F(JobManagerTest, CancelAbortsTheGenerationAndFreesWorkers) {
  AddWorker("w0", "h");
  AddWorker("w1", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec(R"({"data": 2, "global_batch_size": 2})"));
  ASSERT_TRUE(id.ok());
  std::map<int, Assignment> ranks = Deliver({"w0", "w1"});
  ASSERT_TRUE(manager_->Cancel(*id).ok());
  EXPECT_EQ(State(*id), JOB_STATE_CANCELLED);
  std::vector<WorkerCommand> commands = Beat("w0", WORKER_STATE_BUSY, *id, 1);
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_TRUE(commands[0].has_abort());
  EXPECT_EQ(manager_->Cancel(*id).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager_->Cancel("job-99").code(), absl::StatusCode::kNotFound);
  // The workers take the next job once they report idle.
  Beat("w0", WORKER_STATE_IDLE);
  Beat("w1", WORKER_STATE_IDLE);
  absl::StatusOr<std::string> next =
      manager_->Submit(Spec(R"({"data": 2, "global_batch_size": 2})"));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(State(*next), JOB_STATE_PLACING);
}

TEST_F(JobManagerTest, FailedRankRestartsTheJobWithANewGenerationUntilTheBudgetIsSpent) {
  AddWorker("w0", "h");
  AddWorker("w1", "h");
  absl::StatusOr<std::string> id =
      manager_->Submit(Spec(R"({"data": 2, "global_batch_size": 2})", /*max_restarts=*/1));
  ASSERT_TRUE(id.ok());
  std::map<int, Assignment> ranks = Deliver({"w0", "w1"});
  ASSERT_TRUE(manager_->OnMetrics(Step(ranks[0], 1, 5.0)).ok());
  ASSERT_TRUE(manager_
                  ->OnRankResult(Result(ranks[1], absl::StatusCode::kDeadlineExceeded,
                                        "all-reduce in data-0 timed out"))
                  .ok());
  // The survivor is told to abort first, then gets its rank of the new generation.
  std::vector<WorkerCommand> commands = Beat("w0", WORKER_STATE_BUSY, *id, 1);
  ASSERT_FALSE(commands.empty());
  EXPECT_TRUE(commands[0].has_abort());
  std::map<int, Assignment> again = Deliver({"w0", "w1"});
  for (const WorkerCommand& c : commands) {
    if (c.has_assign()) again[c.assign().rank().global_rank()] = c.assign();
  }
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].generation(), 2);
  EXPECT_EQ(manager_->Get(*id)->restarts(), 1);
  // The old generation's reports are stale now.
  EXPECT_EQ(manager_->OnMetrics(Step(ranks[0], 2, 5.0)).code(),
            absl::StatusCode::kFailedPrecondition);
  // A second failure spends the budget.
  ASSERT_TRUE(manager_->OnRankResult(Result(again[0], absl::StatusCode::kInternal, "boom")).ok());
  EXPECT_EQ(State(*id), JOB_STATE_FAILED);
  EXPECT_NE(manager_->Get(*id)->message().find("boom"), std::string::npos);
}

TEST_F(JobManagerTest, ADeadWorkerFailsItsGeneration) {
  AddWorker("w0", "h");
  AddWorker("w1", "h");
  absl::StatusOr<std::string> id =
      manager_->Submit(Spec(R"({"data": 2, "global_batch_size": 2})", /*max_restarts=*/0));
  ASSERT_TRUE(id.ok());
  Deliver({"w0", "w1"});
  // w1 goes silent past the heartbeat timeout while w0 keeps beating.
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(absl::Seconds(1));
    Beat("w0", WORKER_STATE_BUSY, *id, 1);
  }
  manager_->Tick();
  EXPECT_EQ(State(*id), JOB_STATE_FAILED);
  EXPECT_NE(manager_->Get(*id)->message().find("w1"), std::string::npos);
}

// The tick looks at a job's ranks one by one only when a worker may have failed it; a
// worker forgotten between two ticks (dead, then removed, never seen dead by a census) is
// such a case.
TEST_F(JobManagerTest, ADeadWorkerRemovedBetweenTwoTicksFailsItsGeneration) {
  AddWorker("w0", "h");
  AddWorker("w1", "h");
  absl::StatusOr<std::string> id =
      manager_->Submit(Spec(R"({"data": 2, "global_batch_size": 2})", /*max_restarts=*/0));
  ASSERT_TRUE(id.ok());
  Deliver({"w0", "w1"});
  manager_->Tick();  // every rank's worker found registered
  manager_->Tick();
  EXPECT_NE(State(*id), JOB_STATE_FAILED);
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(absl::Seconds(1));
    Beat("w0", WORKER_STATE_BUSY, *id, 1);
  }
  ASSERT_TRUE(registry_.Remove("w1").ok());  // dead by now, so it may go
  manager_->Tick();
  EXPECT_EQ(State(*id), JOB_STATE_FAILED);
  EXPECT_NE(manager_->Get(*id)->message().find("worker w1 (rank 1) stopped heartbeating"),
            std::string::npos)
      << manager_->Get(*id)->message();
}

TEST_F(JobManagerTest, APauseOfTheCoordinatorBlamesNoWorker) {
  AddWorker("w0", "h");
  AddWorker("w1", "h");
  absl::StatusOr<std::string> id =
      manager_->Submit(Spec(R"({"data": 2, "global_batch_size": 2})", /*max_restarts=*/0));
  ASSERT_TRUE(id.ok());
  Deliver({"w0", "w1"});
  // The coordinator is stopped for 15 s; after SIGCONT w0's heartbeat is served first and
  // the ticker runs before w1's (sent during the pause) is.
  clock_.Advance(absl::Seconds(15));
  Beat("w0", WORKER_STATE_BUSY, *id, 1);
  manager_->Tick();
  Beat("w1", WORKER_STATE_BUSY, *id, 1);
  EXPECT_EQ(State(*id), JOB_STATE_PLACING);
  EXPECT_NE(EventLog(*id).find("coordinator_paused: the coordinator did not run for 15s"),
            std::string::npos)
      << EventLog(*id);
  // A worker that then really goes silent is still found, one timeout later.
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(absl::Seconds(1));
    Beat("w0", WORKER_STATE_BUSY, *id, 1);
    manager_->Tick();
  }
  EXPECT_EQ(State(*id), JOB_STATE_FAILED);
  EXPECT_NE(manager_->Get(*id)->message().find("w1"), std::string::npos);
}

TEST_F(JobManagerTest, ARankItsDaemonReportsStoppedFailsItsGenerationBeforeTheCollectiveTimeout) {
  AddWorker("w0", "h");
  AddWorker("w1", "h");
  absl::StatusOr<std::string> id =
      manager_->Submit(Spec(R"({"data": 2, "global_batch_size": 2})", /*max_restarts=*/1));
  ASSERT_TRUE(id.ok());
  Deliver({"w0", "w1"});
  auto beat_stopped = [&](absl::Duration stopped) {
    HeartbeatRequest request;
    request.set_worker_id("w1");
    request.set_incarnation_id("inc-w1");
    request.set_state(WORKER_STATE_BUSY);
    request.set_job_id(*id);
    request.set_generation(1);
    request.set_rank_stopped_ms(absl::ToInt64Milliseconds(stopped));
    EXPECT_TRUE(registry_.Heartbeat(request).ok());
    return manager_->OnHeartbeat(request);
  };
  // A short stop passes.
  EXPECT_TRUE(beat_stopped(absl::Seconds(2)).empty());
  EXPECT_EQ(manager_->Get(*id)->generation(), 1);
  // Past the grace (10 s), far short of the collective timeout (5 min): the generation
  // fails now, and the stopped rank is aborted with this very heartbeat.
  const std::vector<WorkerCommand> commands = beat_stopped(absl::Seconds(11));
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_TRUE(commands[0].has_abort());
  EXPECT_NE(EventLog(*id).find("rank 1 on worker w1 has been stopped (SIGSTOP) for 11s"),
            std::string::npos)
      << EventLog(*id);
  EXPECT_EQ(manager_->Get(*id)->restarts(), 1);
}

TEST_F(JobManagerTest, AStoppedRankIsLeftToTheCollectiveTimeoutWhenThatComesFirst) {
  JobManagerOptions options;
  options.collective_timeout = absl::Seconds(4);  // the peers time out and name it first
  absl::StatusOr<std::unique_ptr<JobManager>> manager = JobManager::Create(
      &clock_, &registry_, store_.get(), &rendezvous_, nullptr, options, checkpoints_.get());
  ASSERT_TRUE(manager.ok());
  manager_ = *std::move(manager);
  AddWorker("w0", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec("{}", /*max_restarts=*/1));
  ASSERT_TRUE(id.ok());
  Deliver({"w0"});
  HeartbeatRequest request;
  request.set_worker_id("w0");
  request.set_incarnation_id("inc-w0");
  request.set_state(WORKER_STATE_BUSY);
  request.set_job_id(*id);
  request.set_generation(1);
  request.set_rank_stopped_ms(60000);
  ASSERT_TRUE(registry_.Heartbeat(request).ok());
  EXPECT_TRUE(manager_->OnHeartbeat(request).empty());
  EXPECT_EQ(manager_->Get(*id)->restarts(), 0);
}

TEST_F(JobManagerTest, WithoutAReplacementTheJobShrinksDataParallelismKeepingTheBatch) {
  AddWorker("w0", "h");
  AddWorker("w1", "h");
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(
      R"({"parallel": {"data": 2, "min_data": 1, "micro_batch_size": 1, "global_batch_size": 4},
          "train": {"steps": 2, "max_restarts": 2}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<std::string> id = manager_->Submit(*spec);
  ASSERT_TRUE(id.ok());
  Deliver({"w0", "w1"});
  // w1 dies; w0 aborts its rank and waits, idle.
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(absl::Seconds(1));
    Beat("w0", WORKER_STATE_IDLE);
  }
  manager_->Tick();
  EXPECT_EQ(State(*id), JOB_STATE_PENDING);
  // No replacement within the grace period: one replica, the same global batch.
  std::map<int, Assignment> ranks;
  for (int i = 0; i < 31 && ranks.empty(); ++i) {
    clock_.Advance(absl::Seconds(1));
    for (const WorkerCommand& c : Beat("w0", WORKER_STATE_IDLE)) {
      if (c.has_assign()) ranks[c.assign().rank().global_rank()] = c.assign();
    }
    manager_->Tick();
    // Still waiting for a replacement before the grace period is over.
    if (i < 28) {
      EXPECT_EQ(State(*id), JOB_STATE_PENDING) << "second " << i;
    }
  }
  for (auto& [r, a] : Deliver({"w0"})) ranks[r] = a;
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].spec().parallel().data(), 1);
  EXPECT_EQ(ranks[0].spec().parallel().global_batch_size(), 4);
  EXPECT_EQ(ranks[0].schedule().num_microbatches(), 4);
  EXPECT_EQ(ranks[0].rank().world_size(), 1);
  absl::StatusOr<std::vector<JobEvent>> events = manager_->Events(*id);
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(std::any_of(events->begin(), events->end(),
                          [](const JobEvent& e) { return e.kind() == "shrunk"; }));
}

TEST_F(JobManagerTest, AutoPlansTheLayoutOnTheLiveWorkersAndRecordsThePrediction) {
  AddMeasuredWorker("w0", "h");
  AddMeasuredWorker("w1", "h");
  absl::StatusOr<std::string> id =
      manager_->Submit(Spec(R"({"auto": true, "global_batch_size": 4})"));
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<JobStatus> job = manager_->Get(*id);
  ASSERT_TRUE(job.ok());
  const ParallelSpec& chosen = job->spec().parallel();
  EXPECT_TRUE(chosen.auto_());
  EXPECT_EQ(chosen.global_batch_size(), 4) << "the batch stays the user's";
  EXPECT_LE(chosen.tensor() * chosen.pipeline() * chosen.data(), 2);
  const std::string log = EventLog(*id);
  EXPECT_NE(log.find("planned: chose t="), std::string::npos) << log;
  EXPECT_NE(log.find("predicted"), std::string::npos) << log;
  EXPECT_NE(log.find("tokens/s"), std::string::npos) << log;
}

TEST_F(JobManagerTest, ReplanKeepsTheLayoutGivenUntilWorkersAreLost) {
  AddMeasuredWorker("w0", "h");
  AddMeasuredWorker("w1", "h");
  absl::StatusOr<std::string> id =
      manager_->Submit(Spec(R"({"replan": true, "tensor": 2, "global_batch_size": 4})"));
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<JobStatus> job = manager_->Get(*id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->spec().parallel().tensor(), 2);
  EXPECT_EQ(job->spec().parallel().data(), 1);
  EXPECT_EQ(EventLog(*id).find("planned"), std::string::npos) << EventLog(*id);
}

TEST_F(JobManagerTest, AutoNeedsMeasuredWorkers) {
  AddWorker("w0", "h");  // reported no profile
  absl::StatusOr<std::string> id = manager_->Submit(Spec(R"({"auto": true})"));
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("parallel.auto: cannot plan"), absl::string_view::npos)
      << id.status();
  EXPECT_NE(id.status().message().find("measured device profile"), absl::string_view::npos)
      << id.status();
}

TEST_F(JobManagerTest, AutoRefusesAModelNoLayoutFitsWithTheReasons) {
  AddMeasuredWorker("w0", "h", /*memory_bytes=*/1 << 20);
  AddMeasuredWorker("w1", "h", /*memory_bytes=*/1 << 20);
  absl::StatusOr<std::string> id = manager_->Submit(Spec(R"({"auto": true})"));
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("no layout of this model fits the live workers"),
            absl::string_view::npos)
      << id.status();
  EXPECT_NE(id.status().message().find("does not fit: needs"), absl::string_view::npos)
      << id.status();
}

TEST_F(JobManagerTest, WithoutAReplacementAReplanJobIsReplannedForTheWorkersLeft) {
  AddMeasuredWorker("w0", "h");
  AddMeasuredWorker("w1", "h");
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(
      R"({"parallel": {"replan": true, "data": 2, "global_batch_size": 4},
          "train": {"steps": 2, "max_restarts": 2}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<std::string> id = manager_->Submit(*spec);
  ASSERT_TRUE(id.ok()) << id.status();
  Deliver({"w0", "w1"});
  // w1 dies; w0 aborts its rank and waits, idle, past the grace period.
  std::map<int, Assignment> ranks;
  for (int i = 0; i < 45 && ranks.empty(); ++i) {
    clock_.Advance(absl::Seconds(1));
    for (const WorkerCommand& c : Beat("w0", WORKER_STATE_IDLE)) {
      if (c.has_assign()) ranks[c.assign().rank().global_rank()] = c.assign();
    }
    manager_->Tick();
  }
  for (auto& [r, a] : Deliver({"w0"})) ranks[r] = a;
  ASSERT_EQ(ranks.size(), 1u);
  const ParallelSpec& replanned = ranks[0].spec().parallel();
  EXPECT_EQ(replanned.tensor() * replanned.pipeline() * replanned.data(), 1);
  EXPECT_EQ(replanned.global_batch_size(), 4);
  const std::string log = EventLog(*id);
  EXPECT_NE(log.find("replanned: no replacement worker within"), std::string::npos) << log;
  EXPECT_NE(log.find("-> t=1 p=1 d=1"), std::string::npos) << log;
}

TEST_F(JobManagerTest, ARankThatVanishedWithoutReportingIsNoticed) {
  AddWorker("w0", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec(R"({})", /*max_restarts=*/0));
  ASSERT_TRUE(id.ok());
  Deliver({"w0"});
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(absl::Seconds(1));
    Beat("w0", WORKER_STATE_IDLE);
  }
  manager_->Tick();
  EXPECT_EQ(State(*id), JOB_STATE_FAILED);
}

TEST_F(JobManagerTest, ARestartedCoordinatorQueuesItsRunningJobsAgain) {
  AddWorker("w0", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec(R"({})"));
  ASSERT_TRUE(id.ok());
  std::map<int, Assignment> ranks = Deliver({"w0"});
  ASSERT_TRUE(manager_->OnMetrics(Step(ranks[0], 1, 5.0)).ok());
  EXPECT_EQ(State(*id), JOB_STATE_RUNNING);
  Reopen();  // the same database, a new coordinator
  EXPECT_EQ(State(*id), JOB_STATE_PENDING);
  // Its worker still runs the old generation: it is told to stop, then gets the new one.
  std::vector<WorkerCommand> commands = Beat("w0", WORKER_STATE_BUSY, *id, 1);
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_TRUE(commands[0].has_abort());
  Beat("w0", WORKER_STATE_IDLE);
  manager_->Tick();
  std::map<int, Assignment> again = Deliver({"w0"});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].generation(), 2);
}

TEST_F(JobManagerTest, WatchersWakeOnChanges) {
  AddWorker("w0", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec(R"({})"));
  ASSERT_TRUE(id.ok());
  auto first = manager_->WaitForChange(*id, 0, absl::Seconds(1));
  ASSERT_TRUE(first.ok());
  // Nothing changes: the wait times out with the same version.
  auto quiet = manager_->WaitForChange(*id, first->second, absl::Milliseconds(50));
  ASSERT_TRUE(quiet.ok());
  EXPECT_EQ(quiet->second, first->second);
  ASSERT_TRUE(manager_->Cancel(*id).ok());
  auto changed = manager_->WaitForChange(*id, first->second, absl::Seconds(1));
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(changed->first.state(), JOB_STATE_CANCELLED);
  EXPECT_EQ(manager_->WaitForChange("job-404", 0, absl::Milliseconds(1)).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace mtrain

namespace mtrain {
namespace {

TEST_F(JobManagerTest, RestartsResumeFromTheNewestCheckpointOfTheLiveGeneration) {
  AddWorker("w0", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec("{}", /*max_restarts=*/2));
  ASSERT_TRUE(id.ok());
  std::map<int, Assignment> ranks = Deliver({"w0"});
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_FALSE(ranks[0].has_resume_step());  // nothing to resume from yet
  EXPECT_EQ(ranks[0].collective_timeout_ms(), 5 * 60 * 1000);
  // Only the live generation uploads; generation 0 only for initial weights.
  EXPECT_TRUE(manager_->CheckCheckpointUpload(*id, 1, 5).ok());
  EXPECT_EQ(manager_->CheckCheckpointUpload(*id, 2, 5).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager_->CheckCheckpointUpload(*id, 0, 0).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager_->CheckCheckpointUpload("job-99", 1, 5).code(), absl::StatusCode::kNotFound);
  for (int step = 1; step <= 10; ++step) {
    ASSERT_TRUE(manager_->OnMetrics(Step(ranks[0], step, 5.0)).ok());
  }
  CommitCheckpoint(*id, 1, 5);
  CommitCheckpoint(*id, 1, 10);
  EXPECT_NE(EventLog(*id).find("checkpoint of step 10 stored"), std::string::npos) << EventLog(*id);

  // The newest checkpoint is damaged: the restart takes the one before, and says so.
  {
    std::fstream f(checkpoint_root_ + "/" + *id + "/step-00000010/rank-00000.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(70);
    f.put('\x7f');
  }
  ASSERT_TRUE(manager_->OnRankResult(Result(ranks[0], absl::StatusCode::kInternal, "boom")).ok());
  std::map<int, Assignment> again = Deliver({"w0"});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].generation(), 2);
  ASSERT_TRUE(again[0].has_resume_step());
  EXPECT_EQ(again[0].resume_step(), 5);
  const std::string log = EventLog(*id);
  EXPECT_NE(log.find("checkpoint_damaged: checkpoint step 10 is damaged (DATA_LOSS"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("using checkpoint step 5"), std::string::npos) << log;
  EXPECT_NE(log.find("resume: generation 2 resumes from checkpoint step 5"), std::string::npos)
      << log;
}

// A rank died after its checkpoint of step 20 was committed but before its metrics of
// steps 13-20 (another stream) arrived: the restart resumes from step 10, which recomputes
// them, not from step 20, which would leave them out of the job's history for good. With
// nothing kept at or before the last recorded step, the newest is used and the gap said.
TEST_F(JobManagerTest, ARestartResumesNoLaterThanTheLastRecordedStep) {
  AddWorker("w0", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec("{}", /*max_restarts=*/2));
  ASSERT_TRUE(id.ok());
  std::map<int, Assignment> ranks = Deliver({"w0"});
  for (int step = 1; step <= 12; ++step) {
    ASSERT_TRUE(manager_->OnMetrics(Step(ranks[0], step, 5.0)).ok());
  }
  CommitCheckpoint(*id, 1, 10);
  CommitCheckpoint(*id, 1, 20);
  ASSERT_TRUE(manager_->OnRankResult(Result(ranks[0], absl::StatusCode::kInternal, "gone")).ok());
  std::map<int, Assignment> again = Deliver({"w0"});
  ASSERT_EQ(again.size(), 1u);
  ASSERT_TRUE(again[0].has_resume_step());
  EXPECT_EQ(again[0].resume_step(), 10);
  EXPECT_EQ(EventLog(*id).find("history_gap"), std::string::npos) << EventLog(*id);

  // Generation 2 records steps 11 and 12 again, commits 30 and 40 (the store keeps the
  // newest 3: 20, 30, 40), then dies: 12 is the last recorded step, and nothing at or
  // before it is kept any more.
  for (int step = 11; step <= 12; ++step) {
    ASSERT_TRUE(manager_->OnMetrics(Step(again[0], step, 5.0)).ok());
  }
  CommitCheckpoint(*id, 2, 30);
  CommitCheckpoint(*id, 2, 40);
  ASSERT_TRUE(manager_->OnRankResult(Result(again[0], absl::StatusCode::kInternal, "gone")).ok());
  std::map<int, Assignment> third = Deliver({"w0"});
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].resume_step(), 40);
  EXPECT_NE(EventLog(*id).find("history_gap: no checkpoint kept at or before the last recorded "
                               "step 12: resuming from step 40, steps 13-40 stay unrecorded"),
            std::string::npos)
      << EventLog(*id);
}

TEST_F(JobManagerTest, ACheckpointTheStateDirCannotStoreSpendsNoRestart) {
  AddWorker("w0", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec("{}", /*max_restarts=*/0));
  ASSERT_TRUE(id.ok());
  std::map<int, Assignment> ranks = Deliver({"w0"});
  ASSERT_EQ(ranks.size(), 1u);
  ASSERT_TRUE(manager_->OnMetrics(Step(ranks[0], 1, 5.0)).ok());
  // The upload of step 5 fails for want of space (files of this process cannot grow).
  {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit saved{};
    getrlimit(RLIMIT_FSIZE, &saved);
    rlimit limited = saved;
    limited.rlim_cur = 16;
    setrlimit(RLIMIT_FSIZE, &limited);
    absl::StatusOr<std::unique_ptr<CheckpointFileUpload>> upload =
        checkpoints_->BeginFile(*id, 1, 5, "rank-00000.bin");
    absl::Status appended =
        upload.ok() ? (*upload)->Append(0, std::string(4096, 'x')) : upload.status();
    setrlimit(RLIMIT_FSIZE, &saved);
    ASSERT_FALSE(appended.ok());
    // The rank reports its failed upload.
    ASSERT_TRUE(manager_
                    ->OnRankResult(Result(ranks[0], absl::StatusCode::kInternal,
                                          std::string(appended.message())))
                    .ok());
  }
  const std::string log = EventLog(*id);
  EXPECT_NE(log.find("checkpoint_write_failed"), std::string::npos) << log;
  EXPECT_NE(log.find("waiting for room in the state dir: checkpoint step 5"), std::string::npos)
      << log;
  // There is room on this disk: the next Tick places it again, with its budget of zero
  // restarts untouched (it would have FAILED otherwise).
  manager_->Tick();
  std::map<int, Assignment> again = Deliver({"w0"});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].generation(), 2);
  EXPECT_EQ(manager_->Get(*id)->restarts(), 0);
  EXPECT_EQ(State(*id), JOB_STATE_PLACING);
}

// Damage that keeps a file's size and modification time escapes the store's record of
// verified files; a rank that loads the file reports DATA_LOSS. The restart then waits for
// the next Tick, which reads every checkpoint again outside the manager's lock, and
// resumes from the newest intact one.
TEST_F(JobManagerTest, ARankDataLossReadsTheCheckpointsAgainBeforeTheRestart) {
  AddWorker("w0", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec("{}", /*max_restarts=*/2));
  ASSERT_TRUE(id.ok());
  std::map<int, Assignment> ranks = Deliver({"w0"});
  ASSERT_EQ(ranks.size(), 1u);
  CommitCheckpoint(*id, 1, 5);
  CommitCheckpoint(*id, 1, 10);
  {
    const std::string shard = checkpoint_root_ + "/" + *id + "/step-00000010/rank-00000.bin";
    const auto mtime = std::filesystem::last_write_time(shard);
    {
      std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(70);
      f.put('\x7f');
    }
    std::filesystem::last_write_time(shard, mtime);
  }
  ASSERT_TRUE(manager_
                  ->OnRankResult(Result(ranks[0], absl::StatusCode::kDataLoss,
                                        "DATA_LOSS: rank-00000.bin: CRC-32C mismatch"))
                  .ok());
  // OnRankResult ticks once itself (the worker is free again): the job went back to
  // PENDING, then the tick read the checkpoints and placed it.
  const std::string log = EventLog(*id);
  const size_t pending = log.find("PLACING -> PENDING: checking every checkpoint file again");
  const size_t damaged = log.find("checkpoint step 10 is damaged (DATA_LOSS");
  ASSERT_NE(pending, std::string::npos) << log;
  ASSERT_NE(damaged, std::string::npos) << log;
  EXPECT_LT(pending, damaged) << log;
  std::map<int, Assignment> again = Deliver({"w0"});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].generation(), 2);
  ASSERT_TRUE(again[0].has_resume_step());
  EXPECT_EQ(again[0].resume_step(), 5);
}

TEST_F(JobManagerTest, SubmitCountsOnlyWorkersOfAKindTheJobCanRunOn) {
  AddWorker("w0", "h");
  AddWorker("w1", "h");
  JobSpec cuda = Spec("{}");
  cuda.set_device(DEVICE_CUDA);
  absl::StatusOr<std::string> refused = manager_->Submit(cuda);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("1 workers of one kind (CUDA"), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("only 0 CUDA are registered"), std::string::npos)
      << refused.status();
  // DEVICE_AUTO in bf16 needs CUDA workers too (the CPU engine trains in fp32 only).
  JobSpec bf16 = Spec("{}");
  bf16.set_precision(PRECISION_BF16);
  EXPECT_EQ(manager_->Submit(bf16).status().code(), absl::StatusCode::kInvalidArgument);
  // In fp32 it runs on the CPU workers.
  EXPECT_TRUE(manager_->Submit(Spec("{}")).ok());
}

TEST_F(JobManagerTest, AJobWaitingForGpusDoesNotHoldBackCpuJobs) {
  AddWorker("cpu0", "h");
  AddWorker("gpu0", "g", DEVICE_KIND_CUDA);
  // The GPU is taken by a first CUDA job, so a second one waits; a CPU job submitted
  // after it starts on the idle CPU worker all the same.
  JobSpec cuda = Spec("{}");
  cuda.set_device(DEVICE_CUDA);
  absl::StatusOr<std::string> first = manager_->Submit(cuda);
  absl::StatusOr<std::string> second = manager_->Submit(cuda);
  JobSpec cpu = Spec("{}");
  cpu.set_device(DEVICE_CPU);
  absl::StatusOr<std::string> third = manager_->Submit(cpu);
  ASSERT_TRUE(first.ok() && second.ok() && third.ok());
  EXPECT_EQ(State(*first), JOB_STATE_PLACING);
  EXPECT_EQ(State(*second), JOB_STATE_PENDING);
  EXPECT_EQ(State(*third), JOB_STATE_PLACING);
  // A DEVICE_AUTO job may want the GPU too: it queues behind the CUDA job, and starts on
  // a free CPU worker ahead of it only as a backfill (here, before the CUDA job has
  // waited the backfill window).
  AddWorker("cpu1", "h");
  absl::StatusOr<std::string> fourth = manager_->Submit(Spec("{}"));
  ASSERT_TRUE(fourth.ok());
  EXPECT_EQ(State(*fourth), JOB_STATE_PLACING);
  absl::StatusOr<std::vector<JobEvent>> events = manager_->Events(*fourth);
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(std::any_of(events->begin(), events->end(), [&](const JobEvent& e) {
    return e.kind() == "backfilled" && absl::StrContains(e.message(), *second);
  }));
}

TEST_F(JobManagerTest, StrictFirstComeFirstServedWithoutABackfillWindow) {
  options_.backfill_window = absl::ZeroDuration();
  Reopen();
  for (int i = 0; i < 3; ++i) AddWorker(absl::StrCat("w", i), "h");
  absl::StatusOr<std::string> running =
      manager_->Submit(Spec(R"({"data": 2, "global_batch_size": 2})"));
  absl::StatusOr<std::string> big =
      manager_->Submit(Spec(R"({"data": 3, "global_batch_size": 3})"));
  absl::StatusOr<std::string> small = manager_->Submit(Spec("{}"));
  ASSERT_TRUE(running.ok() && big.ok() && small.ok());
  EXPECT_EQ(State(*running), JOB_STATE_PLACING);
  EXPECT_EQ(State(*big), JOB_STATE_PENDING);
  EXPECT_EQ(State(*small), JOB_STATE_PENDING) << "a free worker, but the big job came first";
}

TEST_F(JobManagerTest, BackfillStartsJobsThatFitUntilTheHeadHasWaitedItsWindow) {
  // Four workers; a 2-rank job runs, a 4-rank job waits (the head), 1-rank jobs behind it
  // backfill the two free workers until the head has waited the window; then they wait,
  // and the workers the running jobs free go to the head first.
  for (int i = 0; i < 4; ++i) AddWorker(absl::StrCat("w", i), "h");
  absl::StatusOr<std::string> running =
      manager_->Submit(Spec(R"({"data": 2, "global_batch_size": 2})"));
  ASSERT_TRUE(running.ok());
  std::map<int, Assignment> running_ranks = Deliver({"w0", "w1", "w2", "w3"});
  ASSERT_EQ(running_ranks.size(), 2u);
  absl::StatusOr<std::string> big =
      manager_->Submit(Spec(R"({"data": 4, "global_batch_size": 4})"));
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(State(*big), JOB_STATE_PENDING);
  absl::StatusOr<std::string> first_small = manager_->Submit(Spec("{}"));
  ASSERT_TRUE(first_small.ok());
  EXPECT_EQ(State(*first_small), JOB_STATE_PLACING) << "backfilled on a free worker";
  std::map<int, Assignment> small_ranks;
  for (const std::string w : {"w0", "w1", "w2", "w3"}) {
    for (const WorkerCommand& c : Beat(w, WORKER_STATE_IDLE)) {
      if (c.has_assign()) small_ranks[0] = c.assign();
    }
  }
  ASSERT_EQ(small_ranks.size(), 1u);

  // The head has now waited past the window (the workers kept heartbeating): a second
  // small job no longer overtakes it, though a worker is free.
  const std::string busy_small = small_ranks[0].self().worker_id();
  for (int second = 0; second < 301; second += 5) {
    clock_.Advance(absl::Seconds(5));
    for (const std::string w : {"w0", "w1", "w2", "w3"}) {
      if (w == running_ranks[0].self().worker_id() || w == running_ranks[1].self().worker_id()) {
        Beat(w, WORKER_STATE_BUSY, *running, 1);
      } else if (w == busy_small) {
        Beat(w, WORKER_STATE_BUSY, *first_small, 1);
      } else {
        Beat(w, WORKER_STATE_IDLE);
      }
    }
    manager_->Tick();
  }
  absl::StatusOr<std::string> second_small = manager_->Submit(Spec("{}"));
  ASSERT_TRUE(second_small.ok());
  EXPECT_EQ(State(*second_small), JOB_STATE_PENDING) << "the head is reserved";
  EXPECT_EQ(State(*big), JOB_STATE_PENDING);

  // The running jobs end: the head gets all four workers, the later job still waits.
  for (auto& [r, a] : running_ranks) {
    ASSERT_TRUE(manager_->OnRankResult(Result(a, absl::StatusCode::kOk)).ok());
  }
  for (auto& [r, a] : running_ranks) Beat(a.self().worker_id(), WORKER_STATE_IDLE);
  manager_->Tick();
  EXPECT_EQ(State(*big), JOB_STATE_PENDING) << "three workers free, four needed";
  EXPECT_EQ(State(*second_small), JOB_STATE_PENDING);
  ASSERT_TRUE(manager_->OnRankResult(Result(small_ranks[0], absl::StatusCode::kOk)).ok());
  // Their workers report IDLE once their processes have exited.
  for (const std::string w : {"w0", "w1", "w2", "w3"}) Beat(w, WORKER_STATE_IDLE);
  manager_->Tick();
  EXPECT_EQ(State(*big), JOB_STATE_PLACING);
  EXPECT_EQ(State(*second_small), JOB_STATE_PENDING);
}

TEST_F(JobManagerTest, ARankRefusingItsSpecFailsTheJobWithoutRestarts) {
  AddWorker("w0", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec("{}", /*max_restarts=*/3));
  ASSERT_TRUE(id.ok());
  std::map<int, Assignment> ranks = Deliver({"w0"});
  ASSERT_EQ(ranks.size(), 1u);
  ASSERT_TRUE(manager_
                  ->OnRankResult(Result(ranks[0], absl::StatusCode::kUnimplemented,
                                        "the CPU engine trains in fp32 only"))
                  .ok());
  absl::StatusOr<JobStatus> status = manager_->Get(*id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), JOB_STATE_FAILED);
  EXPECT_EQ(status->restarts(), 0);
  EXPECT_NE(status->message().find("not restarted: the job would fail the same way again"),
            std::string::npos)
      << status->message();
}

TEST_F(JobManagerTest, AJobAwaitingItsInitialWeightsWaitsWithoutBlockingOthers) {
  AddWorker("w0", "h");
  AddWorker("w1", "h");
  JobSpec with_init = Spec("{}");
  with_init.mutable_train()->set_init_from("gpt2.safetensors");
  absl::StatusOr<std::string> waiting = manager_->Submit(with_init);
  ASSERT_TRUE(waiting.ok());
  absl::StatusOr<std::string> other = manager_->Submit(Spec("{}"));
  ASSERT_TRUE(other.ok());
  manager_->Tick();
  EXPECT_EQ(State(*waiting), JOB_STATE_PENDING);
  EXPECT_EQ(State(*other), JOB_STATE_PLACING);  // not held back by the older job
  // Its status says what it waits for (and what to do if the upload died).
  absl::StatusOr<JobStatus> status = manager_->Get(*waiting);
  ASSERT_TRUE(status.ok());
  EXPECT_NE(status->message().find("waiting for its initial weights"), std::string::npos)
      << status->message();
  // Generation 0 may upload step 0 only, and only while the weights are missing.
  EXPECT_EQ(manager_->CheckCheckpointUpload(*waiting, 0, 3).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager_->CheckCheckpointUpload(*other, 0, 0).code(),
            absl::StatusCode::kFailedPrecondition);
  CommitCheckpoint(*waiting, 0, 0);
  EXPECT_EQ(State(*waiting), JOB_STATE_PLACING);
  EXPECT_EQ(manager_->Get(*waiting)->message(), "");
  EXPECT_EQ(manager_->CheckCheckpointUpload(*waiting, 0, 0).code(),
            absl::StatusCode::kFailedPrecondition);
  std::map<int, Assignment> ranks = Deliver({"w0", "w1"});
  bool found = false;
  for (const auto& [rank, a] : ranks) {
    if (a.job_id() != *waiting) continue;
    found = true;
    ASSERT_TRUE(a.has_resume_step());
    EXPECT_EQ(a.resume_step(), 0);
  }
  EXPECT_TRUE(found);
  EXPECT_NE(EventLog(*waiting).find("initial weights of step 0 stored"), std::string::npos);
}

// Ranks rendezvous only while their generation lives: a placement opens its prefix (with a
// budget for its size), and failure, success and cancel each close it, deleting its keys.
TEST_F(JobManagerTest, TheRendezvousIsOpenOnlyWhileItsGenerationLives) {
  AddWorker("w0", "a");
  AddWorker("w1", "a");
  absl::StatusOr<std::string> id =
      manager_->Submit(Spec(R"({"data": 2, "global_batch_size": 2})", /*max_restarts=*/1));
  ASSERT_TRUE(id.ok()) << id.status();
  std::map<int, Assignment> first = Deliver({"w0", "w1"});
  ASSERT_EQ(first.size(), 2u);
  const std::string gen1 = first[0].rendezvous_prefix();
  ASSERT_TRUE(rendezvous_.Set(gen1 + "rank-0", "address").ok());
  EXPECT_GT(rendezvous_.GenerationBytes(gen1), 0u);
  // The budget follows the world size: a world of 2 holds no 1 MiB value.
  EXPECT_EQ(rendezvous_.Set(gen1 + "big", std::string(kMaxRendezvousValueBytes, 'x')).code(),
            absl::StatusCode::kResourceExhausted);

  // Failure: generation 1's keys are gone and it takes no more; generation 2 is open.
  ASSERT_TRUE(manager_->OnRankResult(Result(first[0], absl::StatusCode::kInternal, "boom")).ok());
  EXPECT_EQ(rendezvous_.TotalBytes(), 0u);
  EXPECT_EQ(rendezvous_.Set(gen1 + "rank-0", "address").code(),
            absl::StatusCode::kFailedPrecondition);
  std::map<int, Assignment> second = Deliver({"w0", "w1"});
  ASSERT_EQ(second.size(), 2u);
  const std::string gen2 = second[0].rendezvous_prefix();
  EXPECT_NE(gen1, gen2);
  ASSERT_TRUE(rendezvous_.Set(gen2 + "rank-0", "address").ok());

  // Success closes it too.
  ASSERT_TRUE(manager_->OnRankResult(Result(second[0], absl::StatusCode::kOk)).ok());
  ASSERT_TRUE(manager_->OnRankResult(Result(second[1], absl::StatusCode::kOk)).ok());
  EXPECT_EQ(State(*id), JOB_STATE_SUCCEEDED);
  EXPECT_EQ(rendezvous_.TotalBytes(), 0u);
  EXPECT_EQ(rendezvous_.Get(gen2 + "rank-0").status().code(),
            absl::StatusCode::kFailedPrecondition);

  // And so does a cancel.
  absl::StatusOr<std::string> other =
      manager_->Submit(Spec(R"({"data": 2, "global_batch_size": 2})"));
  ASSERT_TRUE(other.ok()) << other.status();
  std::map<int, Assignment> third = Deliver({"w0", "w1"});
  ASSERT_EQ(third.size(), 2u);
  ASSERT_TRUE(rendezvous_.Set(third[1].rendezvous_prefix() + "rank-1", "address").ok());
  ASSERT_TRUE(manager_->Cancel(*other).ok());
  EXPECT_EQ(rendezvous_.TotalBytes(), 0u);
  EXPECT_EQ(rendezvous_.Set(third[1].rendezvous_prefix() + "rank-1", "address").code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(JobManagerTest, DeleteRefusesALiveJobAndRemovesAnEndedOneWithItsCheckpoints) {
  AddWorker("w0", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec(R"({"data": 1})"));
  ASSERT_TRUE(id.ok()) << id.status();
  std::map<int, Assignment> ranks = Deliver({"w0"});
  ASSERT_TRUE(manager_->OnMetrics(Step(ranks[0], 1, 5.5)).ok());
  CommitCheckpoint(*id, 1, 1);
  ASSERT_EQ(checkpoints_->List(*id).size(), 1u);

  const absl::Status running = manager_->Delete(*id);
  EXPECT_EQ(running.code(), absl::StatusCode::kFailedPrecondition) << running;
  EXPECT_NE(running.message().find("cancel it first"), std::string::npos) << running;
  EXPECT_EQ(State(*id), JOB_STATE_RUNNING);

  ASSERT_TRUE(manager_->Cancel(*id).ok());
  ASSERT_TRUE(manager_->Delete(*id).ok());
  EXPECT_EQ(manager_->Get(*id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(manager_->Events(*id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(checkpoints_->List(*id).empty());
  EXPECT_FALSE(std::filesystem::exists(checkpoint_root_ + "/" + *id));
  EXPECT_EQ(manager_->Delete(*id).code(), absl::StatusCode::kNotFound);
  // A watcher of the deleted job learns it is gone instead of waiting.
  EXPECT_EQ(manager_->WaitForChange(*id, 5, absl::Seconds(5)).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, RetentionDeletesEndedJobsOnceTheyEndedLongEnoughAgo) {
  options_.job_retention = absl::Hours(1);
  Reopen();
  AddWorker("w0", "h");
  absl::StatusOr<std::string> first = manager_->Submit(Spec(R"({"data": 1})"));
  absl::StatusOr<std::string> second = manager_->Submit(Spec(R"({"data": 1})"));
  absl::StatusOr<std::string> waiting = manager_->Submit(Spec(R"({"data": 1})"));
  ASSERT_TRUE(first.ok() && second.ok() && waiting.ok());
  std::map<int, Assignment> ranks = Deliver({"w0"});
  ASSERT_TRUE(manager_->OnMetrics(Step(ranks[0], 1, 5.5)).ok());
  CommitCheckpoint(*first, 1, 1);
  ASSERT_TRUE(manager_->Cancel(*first).ok());
  clock_.Advance(absl::Minutes(30));
  ASSERT_TRUE(manager_->Cancel(*second).ok());

  clock_.Advance(absl::Minutes(29));
  manager_->Tick();
  EXPECT_EQ(State(*first), JOB_STATE_CANCELLED) << "ended 59 minutes ago: kept";

  clock_.Advance(absl::Minutes(2));
  manager_->Tick();
  EXPECT_EQ(manager_->Get(*first).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(checkpoint_root_ + "/" + *first));
  EXPECT_EQ(State(*second), JOB_STATE_CANCELLED) << "ended 31 minutes ago: kept";

  // Long after: ended jobs go, a job that has not ended stays however old it is.
  clock_.Advance(absl::Hours(24));
  manager_->Tick();
  EXPECT_EQ(manager_->Get(*second).status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(State(*waiting), JOB_STATE_UNSPECIFIED);
  absl::StatusOr<std::vector<JobStatus>> left = manager_->List();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].job_id(), *waiting);
}

TEST_F(JobManagerTest, WithoutRetentionEndedJobsStay) {
  AddWorker("w0", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec(R"({"data": 1})"));
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(manager_->Cancel(*id).ok());
  clock_.Advance(absl::Hours(24 * 3650));
  manager_->Tick();
  EXPECT_EQ(State(*id), JOB_STATE_CANCELLED);
}

TEST_F(JobManagerTest, ListPagesWithFilters) {
  AddWorker("w0", "h");
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    JobSpec spec = Spec(R"({"data": 1})");
    spec.set_name(i % 2 ? "odd" : "even");
    absl::StatusOr<std::string> id = manager_->Submit(spec);
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  JobListQuery query;
  query.name_prefix = "ev";
  query.states = {JOB_STATE_PENDING};
  query.max_jobs = 1;
  absl::StatusOr<JobListPage> page = manager_->List(query);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs[0].job_id(), ids[2]) << "job 1 is PLACING on the only worker";
  query.after_job = page->next_after_job;
  page = manager_->List(query);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs[0].job_id(), ids[4]);
  EXPECT_EQ(page->next_after_job, 0);
}

TEST_F(JobManagerTest, RefusesASpecNeedingMoreMemoryPerRankThanAnyLiveWorkerHas) {
  WorkerInfo info;
  info.set_worker_id("small");
  info.set_host("h");
  info.set_device_kind(DEVICE_KIND_CPU);
  info.set_incarnation_id("inc-small");
  info.set_memory_bytes(int64_t{1} << 20);  // 1 MiB: less than the default model needs
  bool restarted = false;
  ASSERT_TRUE(registry_.Register(info, &restarted).ok());
  absl::StatusOr<std::string> refused = manager_->Submit(Spec("{}"));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("one rank needs an estimated"), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find(
                "largest live CUDA or CPU worker has 1.0 MiB (1048576 bytes)"),
            std::string::npos)
      << refused.status();
  // A worker with enough memory admits it.
  info.set_worker_id("big");
  info.set_incarnation_id("inc-big");
  info.set_memory_bytes(int64_t{1} << 34);
  ASSERT_TRUE(registry_.Register(info, &restarted).ok());
  EXPECT_TRUE(manager_->Submit(Spec("{}")).ok());
}

TEST_F(JobManagerTest, StoredJobsWhoseSpecNoLongerValidatesFailWithTheReasonOnRecovery) {
  // Written around Submit, as a coordinator before the bounds stored them: one waiting, one
  // that was running (the schedule of 2^31 - 1 microbatches aborted the coordinator).
  JobSpec poisoned = Spec("{}");
  poisoned.mutable_parallel()->set_global_batch_size(2147483647);
  absl::StatusOr<std::string> pending = store_->CreateJob(poisoned, 1);
  ASSERT_TRUE(pending.ok()) << pending.status();
  poisoned.set_device(static_cast<Device>(99));
  absl::StatusOr<std::string> running = store_->CreateJob(poisoned, 2);
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_TRUE(store_->Transition(*running, JOB_STATE_PLACING, "placed", 3).ok());
  ASSERT_TRUE(store_->Transition(*running, JOB_STATE_RUNNING, "running", 4).ok());
  AddWorker("w0", "h");
  Reopen();
  manager_->Tick();
  for (const std::string& job : {*pending, *running}) {
    absl::StatusOr<JobStatus> status = manager_->Get(job);
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_EQ(status->state(), JOB_STATE_FAILED) << job;
    EXPECT_EQ(status->message().rfind("the stored job spec is not valid: ", 0), 0u)
        << status->message();
    EXPECT_NE(status->message().find("parallel.global_batch_size: 2147483647"), std::string::npos)
        << status->message();
  }
  EXPECT_NE(manager_->Get(*running)->message().find("device: 99"), std::string::npos);
  // Nothing was placed; the next job runs.
  absl::StatusOr<std::string> next = manager_->Submit(Spec("{}"));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(State(*next), JOB_STATE_PLACING);
}

TEST_F(JobManagerTest, StoredJobsFromBeforeTheArchitectureFieldsRecoverAsGpt2) {
  // Resolved and stored by a coordinator that knew no model.family (issue 33): the fields
  // added since take their defaults, GPT-2's, and the job is planned again, not failed.
  JobSpec older = Spec("{}");
  ModelSpec& m = *older.mutable_model();
  for (const char* field :
       {"family", "num_kv_heads", "ffn_hidden_size", "normalization", "norm_epsilon", "activation",
        "position_embedding", "linear_bias", "tie_word_embeddings"}) {
    const auto* descriptor = m.GetDescriptor()->FindFieldByName(field);
    ASSERT_NE(descriptor, nullptr) << field;
    m.GetReflection()->ClearField(&m, descriptor);
  }
  ASSERT_FALSE(ValidateJobSpec(older).ok());  // as stored, today's rules would refuse it
  absl::StatusOr<std::string> id = store_->CreateJob(older, 1);
  ASSERT_TRUE(id.ok()) << id.status();
  AddWorker("w0", "h");
  Reopen();
  manager_->Tick();
  EXPECT_EQ(State(*id), JOB_STATE_PLACING) << manager_->Get(*id)->message();
}

TEST_F(JobManagerTest, ShrinkingKeepsMinDataADivisorSoRanksAcceptTheirSpec) {
  // data 4, min_data 2: with three workers left the job runs on two (3 is no multiple of
  // min_data, and the rank would refuse a spec whose min_data does not divide data).
  for (int w = 0; w < 4; ++w) AddWorker(absl::StrCat("w", w), "h");
  absl::StatusOr<std::string> id = manager_->Submit(
      Spec(R"({"data": 4, "min_data": 2, "micro_batch_size": 1, "global_batch_size": 12})", 2));
  ASSERT_TRUE(id.ok()) << id.status();
  Deliver({"w0", "w1", "w2", "w3"});
  // w3 dies; the others abort their ranks and wait, idle, past the shrink grace period.
  std::map<int, Assignment> ranks;
  for (int i = 0; i < 60 && ranks.empty(); ++i) {
    clock_.Advance(absl::Seconds(1));
    for (const char* w : {"w0", "w1", "w2"}) {
      for (const WorkerCommand& c : Beat(w, WORKER_STATE_IDLE)) {
        if (c.has_assign()) ranks[c.assign().rank().global_rank()] = c.assign();
      }
    }
    manager_->Tick();
  }
  for (auto& [r, a] : Deliver({"w0", "w1", "w2"})) ranks[r] = a;
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].spec().parallel().data(), 2);
  EXPECT_EQ(ranks[0].schedule().num_microbatches(), 6);
  // What the rank does with it (train_main resolves the assignment's spec again).
  EXPECT_TRUE(ResolveJobSpec(ranks[0].spec()).ok()) << ResolveJobSpec(ranks[0].spec()).status();
}

TEST_F(JobManagerTest, AWorkerThatRestartedFailsTheGenerationOfItsJob) {
  AddWorker("w0", "h");
  AddWorker("w1", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec(R"({"data": 2})"));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_EQ(Deliver({"w0", "w1"}).size(), 2u);
  // w1 comes back under a new incarnation (what RegisterWorker reports as restarted).
  manager_->OnWorkerRestarted("w1");
  absl::StatusOr<std::vector<JobEvent>> events = manager_->Events(*id);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_TRUE(std::any_of(events->begin(), events->end(), [](const JobEvent& e) {
    return e.kind() == "generation_failed" &&
           e.message() == "generation 1: worker w1 restarted and lost its rank";
  }));
}

}  // namespace
}  // namespace mtrain

namespace mtrain {
namespace {

TEST_F(JobManagerTest, AFailedGenerationWhoseNextStateTheStoreRefusesIsReportedNotRestarted) {
  AddWorker("w0", "h");
  AddWorker("w1", "h");
  absl::StatusOr<std::string> id =
      manager_->Submit(Spec(R"({"data": 2, "global_batch_size": 2})", /*max_restarts=*/1));
  ASSERT_TRUE(id.ok()) << id.status();
  std::map<int, Assignment> ranks = Deliver({"w0", "w1"});
  ASSERT_TRUE(manager_->OnMetrics(Step(ranks[0], 1, 5.0)).ok());
  ASSERT_EQ(State(*id), JOB_STATE_RUNNING);

  faulty_->Fail({"Transition", "GetJob"});
  const absl::Status reported =
      manager_->OnRankResult(Result(ranks[1], absl::StatusCode::kDeadlineExceeded, "timeout"));
  EXPECT_EQ(reported.code(), absl::StatusCode::kUnavailable) << reported;
  EXPECT_EQ(StoreWriteFailures("transition"), 1);
  // The generation ended all the same (its survivor is told to stop), but no new one is
  // placed on top of a state the store did not take.
  std::vector<WorkerCommand> commands = Beat("w0", WORKER_STATE_BUSY, *id, 1);
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_TRUE(commands[0].has_abort());
  EXPECT_TRUE(Deliver({"w0", "w1"}).empty());

  faulty_->Heal();
  // The store's view, which the manager did not pretend to have changed.
  EXPECT_EQ(State(*id), JOB_STATE_RUNNING);
  // A coordinator restart re-queues it, as it does any job the store has running.
  Reopen();
  manager_->Tick();
  std::map<int, Assignment> again = Deliver({"w0", "w1"});
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].generation(), 2);
}

TEST_F(JobManagerTest, AFirstStepTheStoreCannotMarkRunningIsRefusedAndTriedAgain) {
  AddWorker("w0", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec("{}"));
  ASSERT_TRUE(id.ok()) << id.status();
  std::map<int, Assignment> ranks = Deliver({"w0"});
  ASSERT_EQ(State(*id), JOB_STATE_PLACING);

  faulty_->Fail({"Transition", "GetJob"});
  EXPECT_EQ(manager_->OnMetrics(Step(ranks[0], 1, 5.0)).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StoreWriteFailures("transition"), 1);
  faulty_->Heal();
  EXPECT_EQ(State(*id), JOB_STATE_PLACING);
  // Not marked running in memory: the next step makes the transition.
  ASSERT_TRUE(manager_->OnMetrics(Step(ranks[0], 2, 4.9)).ok());
  EXPECT_EQ(State(*id), JOB_STATE_RUNNING);
  EXPECT_EQ(StoreWriteFailures("transition"), 1);
}

TEST_F(JobManagerTest, APlacementTheStoreRefusesHandsOutNoRankAndIsTriedAgain) {
  AddWorker("w0", "h");
  faulty_->Fail({"SetPlacement", "GetJob"});
  absl::StatusOr<std::string> id = manager_->Submit(Spec("{}"));
  ASSERT_TRUE(id.ok()) << id.status();  // stored; only its placement was refused
  EXPECT_EQ(StoreWriteFailures("placement"), 1);
  EXPECT_TRUE(Deliver({"w0"}).empty());

  faulty_->Heal();
  EXPECT_EQ(State(*id), JOB_STATE_PENDING);
  manager_->Tick();
  std::map<int, Assignment> ranks = Deliver({"w0"});
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].generation(), 1);
  EXPECT_EQ(State(*id), JOB_STATE_PLACING);
}

TEST_F(JobManagerTest, AnEventTheStoreRefusesIsCountedAndTrainingGoesOn) {
  AddWorker("w0", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec("{}"));
  ASSERT_TRUE(id.ok()) << id.status();
  std::map<int, Assignment> ranks = Deliver({"w0"});
  ASSERT_TRUE(manager_->OnMetrics(Step(ranks[0], 1, 5.0)).ok());

  faulty_->Fail({"AppendEvent", "GetJob"});
  StepMetrics step = Step(ranks[0], 2, 4.5);
  step.set_engine("engine: CPU (device: DEVICE_AUTO)");
  EXPECT_TRUE(manager_->OnMetrics(step).ok());
  EXPECT_EQ(StoreWriteFailures("event"), 1);
  faulty_->Heal();
  EXPECT_EQ(manager_->Get(*id)->step(), 2);
  EXPECT_EQ(EventLog(*id).find("engine:"), std::string::npos) << EventLog(*id);
}

TEST_F(JobManagerTest, AnExpiredJobTheStoreWillNotDeleteStaysAndIsDeletedLater) {
  options_.job_retention = absl::Hours(1);
  Reopen();
  AddWorker("w0", "h");
  absl::StatusOr<std::string> id = manager_->Submit(Spec("{}"));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(manager_->Cancel(*id).ok());
  clock_.Advance(absl::Hours(2));

  faulty_->Fail({"DeleteJob"});
  manager_->Tick();
  EXPECT_EQ(StoreWriteFailures("delete"), 1);
  EXPECT_TRUE(manager_->Get(*id).ok());
  faulty_->Heal();
  manager_->Tick();
  EXPECT_EQ(manager_->Get(*id).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace mtrain
