// A coordinator started on a state dir holding a job it cannot handle comes up, answers,
// and marks that job FAILED with the reason. Before the spec bounds, a stored job with
// global_batch_size 2^31 - 1 aborted the coordinator (SIGABRT) the moment a worker made
// placement possible, and again after every restart: one submission took the service down
// for good. The job is written through JobStore directly, as an older coordinator stored it.
#include <signal.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/job_store.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/child_process.h"

namespace mtrain {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(30);

JobSpec PoisonedSpec() {
  // Every other field as the defaults would leave them, so the bound is the only fault.
  JobSpec spec;
  spec.set_name("poisoned");
  ModelSpec* model = spec.mutable_model();
  model->set_num_layers(2);
  model->set_num_heads(2);
  model->set_hidden_size(64);
  model->set_seq_length(16);
  model->set_vocab_size(256);
  ParallelSpec* parallel = spec.mutable_parallel();
  parallel->set_tensor(1);
  parallel->set_pipeline(1);
  parallel->set_data(1);
  parallel->set_virtual_stages(1);
  parallel->set_micro_batch_size(1);
  parallel->set_global_batch_size(2147483647);
  parallel->set_schedule(SCHEDULE_1F1B);
  parallel->set_zero_stage(0);
  parallel->set_min_data(1);
  OptimizerSpec* optimizer = spec.mutable_optimizer();
  optimizer->set_lr(1e-3f);
  optimizer->set_min_lr(1e-4f);
  optimizer->set_warmup_steps(0);
  optimizer->set_decay_steps(1);
  optimizer->set_weight_decay(0.01f);
  optimizer->set_beta1(0.9f);
  optimizer->set_beta2(0.95f);
  optimizer->set_eps(1e-8f);
  optimizer->set_grad_clip(1.0f);
  spec.set_precision(PRECISION_FP32);
  spec.set_device(DEVICE_CPU);
  spec.mutable_data()->set_format(DATA_FORMAT_TEXT);
  spec.mutable_data()->set_tokenizer(TOKENIZER_BYTE);
  TrainSpec* train = spec.mutable_train();
  train->set_steps(1);
  train->set_seed(1);
  train->set_dropout(0);
  train->set_recompute(false);
  train->set_checkpoint_every(0);
  train->set_max_restarts(0);
  return spec;
}

TEST(PoisonedJobStartupTest, CoordinatorComesUpAndFailsTheJobItCannotPlan) {
  const std::string dir = absl::StrCat(TestTempDir(), "/poisoned");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/state");
  std::string job_id;
  {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(dir + "/state/jobs.sqlite");
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<std::string> id = (*store)->CreateJob(PoisonedSpec(), 1);
    ASSERT_TRUE(id.ok()) << id.status();
    job_id = *id;
    // It was running when the coordinator went down.
    ASSERT_TRUE((*store)->Transition(job_id, JOB_STATE_PLACING, "placed", 2).ok());
    ASSERT_TRUE((*store)->Transition(job_id, JOB_STATE_RUNNING, "running", 3).ok());
  }

  absl::StatusOr<std::unique_ptr<ChildProcess>> coordinator =
      ChildProcess::Start({"coordinator/coordinator", "--listen=127.0.0.1:0",
                           "--http=", "--state_dir=" + dir + "/state"},
                          dir + "/coordinator.log");
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  absl::StatusOr<std::string> line =
      (*coordinator)->WaitForOutput("coordinator listening on ", kTimeout);
  ASSERT_TRUE(line.ok()) << line.status() << (*coordinator)->Log();
  const std::string address = line->substr(line->rfind(' ') + 1);
  std::unique_ptr<Coordinator::Stub> stub =
      Coordinator::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));

  // A free worker: what used to make the coordinator plan, and abort.
  RegisterWorkerRequest registration;
  WorkerInfo* worker = registration.mutable_worker();
  worker->set_worker_id("w0");
  worker->set_host("127.0.0.1");
  worker->set_device_kind(DEVICE_KIND_CPU);
  worker->set_device_count(0);
  worker->set_memory_bytes(int64_t{1} << 30);
  worker->set_incarnation_id("inc-0");
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    RegisterWorkerResponse response;
    const grpc::Status status = stub->RegisterWorker(&context, registration, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    HeartbeatRequest beat;
    beat.set_worker_id("w0");
    beat.set_incarnation_id("inc-0");
    beat.set_state(WORKER_STATE_IDLE);
    HeartbeatResponse response;
    const grpc::Status status = stub->Heartbeat(&context, beat, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.commands_size(), 0);  // nothing to run
  }

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  GetJobRequest request;
  request.set_job_id(job_id);
  JobStatus job;
  const grpc::Status status = stub->GetJob(&context, request, &job);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(job.state(), JOB_STATE_FAILED);
  EXPECT_EQ(job.message(),
            "the stored job spec is not valid: parallel.global_batch_size: 2147483647 exceeds "
            "the limit of 1048576 [rule: parallel.global_batch_size <= 1048576]");
  EXPECT_TRUE((*coordinator)->Running()) << (*coordinator)->Log();

  (*coordinator)->Signal(SIGTERM);
  absl::StatusOr<int> code = (*coordinator)->Wait(kTimeout);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << (*coordinator)->Log();
}

}  // namespace
}  // namespace mtrain
