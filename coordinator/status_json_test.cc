#include "coordinator/status_json.h"

#include <cmath>
#include <limits>
#include <string>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

// Parses with protobuf's JSON parser (a strict RFC 8259 reader): a document it rejects
// would break the page's response.json() too.
google::protobuf::Struct Parse(const std::string& json) {
  google::protobuf::Struct parsed;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &parsed);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  return parsed;
}

const google::protobuf::Value& Field(const google::protobuf::Struct& object,
                                     const std::string& name) {
  static const google::protobuf::Value* missing = new google::protobuf::Value;
  const auto it = object.fields().find(name);
  EXPECT_NE(it, object.fields().end()) << name;
  return it == object.fields().end() ? *missing : it->second;
}

TEST(StatusJson, NumbersHaveTenSignificantDigitsAndNonFiniteOnesAreNull) {
  StepMetrics m;
  m.set_step(1);
  m.set_loss(3.14159265358979);
  m.set_tokens_per_second(std::numeric_limits<double>::infinity());
  m.set_mfu(1e-300);
  const std::string json = StepsJson("job-1", {m}, false);
  EXPECT_NE(json.find("\"loss\":3.141592654,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"tokens_per_second\":null,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"mfu\":1e-300}"), std::string::npos) << json;
  Parse(json);
}

JobStatus RunningJob() {
  JobStatus job;
  job.set_job_id("job-7");
  job.mutable_spec()->set_name("demo \"quoted\"");
  job.mutable_spec()->mutable_parallel()->set_tensor(2);
  job.mutable_spec()->mutable_parallel()->set_pipeline(2);
  job.mutable_spec()->mutable_train()->set_steps(300);
  job.set_state(JOB_STATE_RUNNING);
  job.set_step(42);
  job.set_loss(3.25);
  job.set_tokens_per_second(2048.5);
  job.set_generation(2);
  job.set_restarts(1);
  job.set_message("restarted after: rank 3 died\n");
  job.set_submitted_unix_ms(1700000000000);
  job.set_updated_unix_ms(1700000060000);
  job.mutable_latest()->set_step(42);
  job.mutable_latest()->set_loss(3.25);
  job.mutable_latest()->set_mfu(0.125);
  job.mutable_latest()->set_step_seconds(0.5);
  job.add_workers("w0");
  job.add_workers("w1");
  return job;
}

TEST(JobJson, CarriesStateProgressAndLayout) {
  const google::protobuf::Struct job = Parse(JobJson(RunningJob()));
  EXPECT_EQ(Field(job, "job_id").string_value(), "job-7");
  EXPECT_EQ(Field(job, "name").string_value(), "demo \"quoted\"");
  EXPECT_EQ(Field(job, "state").string_value(), "RUNNING");
  EXPECT_EQ(Field(job, "step").number_value(), 42);
  EXPECT_EQ(Field(job, "steps").number_value(), 300);
  EXPECT_EQ(Field(job, "loss").number_value(), 3.25);
  EXPECT_EQ(Field(job, "tokens_per_second").number_value(), 2048.5);
  EXPECT_EQ(Field(job, "mfu").number_value(), 0.125);
  EXPECT_EQ(Field(job, "step_seconds").number_value(), 0.5);
  EXPECT_EQ(Field(job, "generation").number_value(), 2);
  EXPECT_EQ(Field(job, "restarts").number_value(), 1);
  EXPECT_EQ(Field(job, "message").string_value(), "restarted after: rank 3 died\n");
  EXPECT_EQ(Field(job, "submitted_unix_ms").number_value(), 1700000000000.0);
  EXPECT_EQ(Field(job, "device").string_value(), "AUTO");  // the default, applied
  const google::protobuf::Struct& parallel = Field(job, "parallel").struct_value();
  EXPECT_EQ(Field(parallel, "tensor").number_value(), 2);
  EXPECT_EQ(Field(parallel, "pipeline").number_value(), 2);
  EXPECT_EQ(Field(parallel, "data").number_value(), 1);
  const google::protobuf::ListValue& workers = Field(job, "workers").list_value();
  ASSERT_EQ(workers.values_size(), 2);
  EXPECT_EQ(workers.values(1).string_value(), "w1");
}

TEST(JobJson, HasNullMetricsAndDefaultStepsBeforeTheFirstStep) {
  JobStatus pending;
  pending.set_job_id("job-1");
  pending.set_state(JOB_STATE_PENDING);
  const google::protobuf::Struct job = Parse(JobJson(pending));
  EXPECT_EQ(Field(job, "state").string_value(), "PENDING");
  EXPECT_EQ(Field(job, "name").string_value(), "job");
  EXPECT_EQ(Field(job, "steps").number_value(), 100);
  for (const char* name : {"loss", "tokens_per_second", "mfu", "step_seconds"}) {
    EXPECT_TRUE(Field(job, name).has_null_value()) << name;
  }
  EXPECT_EQ(Field(job, "workers").list_value().values_size(), 0);
}

TEST(JobsJson, ListsEveryJobInOrder) {
  JobStatus other = RunningJob();
  other.set_job_id("job-8");
  other.set_state(JOB_STATE_SUCCEEDED);
  const google::protobuf::Struct doc = Parse(JobsJson({RunningJob(), other}));
  const google::protobuf::ListValue& jobs = Field(doc, "jobs").list_value();
  ASSERT_EQ(jobs.values_size(), 2);
  EXPECT_EQ(Field(jobs.values(1).struct_value(), "state").string_value(), "SUCCEEDED");
  EXPECT_EQ(Field(doc, "next_page_token").string_value(), "");
  EXPECT_EQ(JobsJson({}), "{\"jobs\":[],\"next_page_token\":\"\"}");
  EXPECT_EQ(Field(Parse(JobsJson({}, "djE6NQ")), "next_page_token").string_value(), "djE6NQ");
}

TEST(StepsJson, WritesEachStepAndWhetherMoreFollow) {
  StepMetrics first;
  first.set_step(1);
  first.set_generation(1);
  first.set_loss(5.5);
  first.set_tokens_per_second(1000);
  first.set_step_seconds(0.25);
  first.set_mfu(0.01);
  StepMetrics diverged = first;
  diverged.set_step(2);
  diverged.set_loss(std::nan(""));
  StepMetrics no_loss = first;
  no_loss.set_step(3);
  no_loss.clear_loss();
  no_loss.set_validation_loss(4.25);
  EvalTaskResult* eval = no_loss.add_evals();
  eval->set_task("cloze");
  eval->set_data("/d/lambada.jsonl");
  eval->set_accuracy(0.5);
  const google::protobuf::Struct doc = Parse(StepsJson("job-2", {first, diverged, no_loss}, true));
  EXPECT_EQ(Field(doc, "job_id").string_value(), "job-2");
  EXPECT_TRUE(Field(doc, "more").bool_value());
  const google::protobuf::ListValue& steps = Field(doc, "steps").list_value();
  ASSERT_EQ(steps.values_size(), 3);
  const google::protobuf::Struct& one = steps.values(0).struct_value();
  EXPECT_EQ(Field(one, "step").number_value(), 1);
  EXPECT_EQ(Field(one, "generation").number_value(), 1);
  EXPECT_EQ(Field(one, "loss").number_value(), 5.5);
  EXPECT_EQ(Field(one, "tokens_per_second").number_value(), 1000);
  EXPECT_EQ(Field(one, "step_seconds").number_value(), 0.25);
  EXPECT_EQ(Field(one, "mfu").number_value(), 0.01);
  EXPECT_TRUE(Field(steps.values(1).struct_value(), "loss").has_null_value());
  EXPECT_TRUE(Field(steps.values(2).struct_value(), "loss").has_null_value());
  // Only evaluation steps carry a validation loss.
  EXPECT_EQ(one.fields().count("validation_loss"), 0u);
  EXPECT_EQ(Field(steps.values(2).struct_value(), "validation_loss").number_value(), 4.25);
  const google::protobuf::Struct& cloze =
      Field(steps.values(2).struct_value(), "evals").list_value().values(0).struct_value();
  EXPECT_EQ(Field(cloze, "task").string_value(), "cloze");
  EXPECT_EQ(Field(cloze, "accuracy").number_value(), 0.5);
}

TEST(WorkersJson, CarriesHealth) {
  WorkerStatus alive;
  alive.mutable_worker()->set_worker_id("w0");
  alive.mutable_worker()->set_host("node-1");
  alive.mutable_worker()->set_device_kind(DEVICE_KIND_CUDA);
  alive.mutable_worker()->set_device_count(8);
  alive.mutable_worker()->set_device_name("NVIDIA H100 80GB HBM3");
  alive.mutable_worker()->set_memory_bytes(int64_t{80} << 30);
  alive.set_alive(true);
  alive.set_state(WORKER_STATE_BUSY);
  alive.set_last_seen_ms_ago(150);
  alive.set_job_id("job-3");
  WorkerStatus dead;
  dead.mutable_worker()->set_worker_id("w1");
  dead.set_state(WORKER_STATE_IDLE);
  dead.set_last_seen_ms_ago(12000);
  const google::protobuf::Struct doc = Parse(WorkersJson({alive, dead}, 10000));
  EXPECT_EQ(Field(doc, "heartbeat_timeout_ms").number_value(), 10000);
  const google::protobuf::ListValue& workers = Field(doc, "workers").list_value();
  ASSERT_EQ(workers.values_size(), 2);
  const google::protobuf::Struct& w0 = workers.values(0).struct_value();
  EXPECT_EQ(Field(w0, "worker_id").string_value(), "w0");
  EXPECT_EQ(Field(w0, "host").string_value(), "node-1");
  EXPECT_EQ(Field(w0, "device_kind").string_value(), "CUDA");
  EXPECT_EQ(Field(w0, "device_count").number_value(), 8);
  EXPECT_EQ(Field(w0, "device_name").string_value(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(Field(w0, "memory_bytes").number_value(), 85899345920.0);
  EXPECT_TRUE(Field(w0, "alive").bool_value());
  EXPECT_EQ(Field(w0, "state").string_value(), "BUSY");
  EXPECT_EQ(Field(w0, "last_seen_ms_ago").number_value(), 150);
  EXPECT_EQ(Field(w0, "job_id").string_value(), "job-3");
  const google::protobuf::Struct& w1 = workers.values(1).struct_value();
  EXPECT_FALSE(Field(w1, "alive").bool_value());
  EXPECT_EQ(Field(w1, "state").string_value(), "IDLE");
  EXPECT_EQ(Field(w1, "device_kind").string_value(), "UNSPECIFIED");
}

TEST(ErrorJson, NamesTheCodeAndTheMessage) {
  const google::protobuf::Struct doc = Parse(ErrorJson(absl::NotFoundError("job \"x\" not found")));
  EXPECT_EQ(Field(doc, "code").string_value(), "NOT_FOUND");
  EXPECT_EQ(Field(doc, "error").string_value(), "job \"x\" not found");
}

}  // namespace
}  // namespace mtrain
