#include "coordinator/http_routes.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_store.h"
#include "coordinator/rendezvous_store.h"
#include "coordinator/worker_registry.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

google::protobuf::Struct Parse(const std::string& json) {
  google::protobuf::Struct parsed;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &parsed);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  return parsed;
}

std::string HeaderOf(const HttpResponse& response, const std::string& name) {
  for (const auto& [key, value] : response.headers) {
    if (key == name) return value;
  }
  return "";
}

// A real job manager over a fresh SQLite file, one registered worker, and one job with
// a few recorded steps: the routes read exactly what the coordinator would.
class HttpRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    path_ =
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/routes-",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".sqlite");
    std::remove(path_.c_str());
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> metrics = CoordinatorMetrics::Start("");
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = *std::move(metrics);
    absl::StatusOr<std::unique_ptr<JobManager>> jobs =
        JobManager::Create(&clock_, &registry_, store_.get(), &rendezvous_, metrics_.get(), {});
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    jobs_ = *std::move(jobs);

    WorkerInfo info;
    info.set_worker_id("w0");
    info.set_host("node-a");
    info.set_device_kind(DEVICE_KIND_CPU);
    info.set_device_name("cpu");
    info.set_incarnation_id("inc-0");
    bool restarted = false;
    ASSERT_TRUE(registry_.Register(info, &restarted).ok());

    JobSpec spec;
    spec.set_name("tiny");
    spec.mutable_train()->set_steps(50);
    absl::StatusOr<std::string> job = store_->CreateJob(spec, 1000);
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *job;
    for (int step = 1; step <= 5; ++step) {
      StepMetrics m;
      m.set_job_id(job_);
      m.set_generation(1);
      m.set_step(step);
      m.set_loss(6.0 - step);
      m.set_tokens_per_second(100.0 * step);
      ASSERT_TRUE(store_->RecordStep(job_, m, 1000 + step).ok());
    }
    routes_ = std::make_unique<CoordinatorHttpRoutes>(jobs_.get(), &registry_, metrics_.get(),
                                                      std::string("/* chart */"));
  }

  HttpResponse Get(const std::string& path, const std::string& query = "") {
    return routes_->Handle(HttpRequest{"GET", path, query});
  }

  std::string path_;
  FakeClock clock_{absl::FromUnixSeconds(1000)};
  WorkerRegistry registry_{&clock_, WorkerRegistryOptions()};
  RendezvousStore rendezvous_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<CoordinatorMetrics> metrics_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<CoordinatorHttpRoutes> routes_;
  std::string job_;
};

TEST_F(HttpRoutesTest, MetricsAreThePrometheusScrape) {
  metrics_->SetWorkers(3, 2);
  const HttpResponse response = Get("/metrics");
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.content_type, kPrometheusTextContentType);
  EXPECT_EQ(response.body, metrics_->Scrape());
  EXPECT_THAT(response.body, HasSubstr("mtrain_workers_alive 2"));
}

TEST_F(HttpRoutesTest, ServesThePageItsAssetsAndChartJs) {
  for (const std::string path : {"/", "/status", "/index.html"}) {
    const HttpResponse page = Get(path);
    EXPECT_EQ(page.status, 200) << path;
    EXPECT_THAT(page.content_type, HasSubstr("text/html")) << path;
    EXPECT_THAT(page.body, HasSubstr("<canvas id=\"chart\"")) << path;
    EXPECT_THAT(page.body, HasSubstr("src=\"/static/chart.js\"")) << path;
    // Nothing from elsewhere: every script and style comes from this server.
    EXPECT_FALSE(absl::StrContains(page.body, "http://")) << path;
    EXPECT_FALSE(absl::StrContains(page.body, "https://")) << path;
    EXPECT_THAT(HeaderOf(page, "Content-Security-Policy"), HasSubstr("default-src 'self'"));
    EXPECT_EQ(HeaderOf(page, "Cache-Control"), "no-store");
  }
  const HttpResponse script = Get("/static/status.js");
  EXPECT_EQ(script.status, 200);
  EXPECT_THAT(script.content_type, HasSubstr("javascript"));
  EXPECT_THAT(script.body, HasSubstr("/api/jobs"));
  const HttpResponse style = Get("/static/status.css");
  EXPECT_EQ(style.status, 200);
  EXPECT_THAT(style.content_type, HasSubstr("text/css"));
  const HttpResponse chart = Get("/static/chart.js");
  EXPECT_EQ(chart.status, 200);
  EXPECT_EQ(chart.body, "/* chart */");
}

TEST_F(HttpRoutesTest, AMissingChartLibraryIsAStubThatSaysWhy) {
  const absl::StatusOr<std::string> missing = ReadChartJs("/nonexistent/chart.min.js");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  CoordinatorHttpRoutes routes(jobs_.get(), &registry_, metrics_.get(), missing);
  const HttpResponse chart = routes.Handle(HttpRequest{"GET", "/static/chart.js", ""});
  EXPECT_EQ(chart.status, 200);
  EXPECT_THAT(chart.body, HasSubstr("window.mtrainChartMissing = "));
  EXPECT_THAT(chart.body, HasSubstr("/nonexistent/chart.min.js"));
  // The page itself is served all the same.
  EXPECT_EQ(routes.Handle(HttpRequest{"GET", "/", ""}).status, 200);
}

TEST_F(HttpRoutesTest, ListsJobsAndOneJob) {
  const HttpResponse list = Get("/api/jobs");
  EXPECT_EQ(list.status, 200);
  EXPECT_EQ(list.content_type, "application/json");
  const google::protobuf::Struct doc = Parse(list.body);
  const google::protobuf::ListValue& jobs = doc.fields().at("jobs").list_value();
  ASSERT_EQ(jobs.values_size(), 1);
  const google::protobuf::Struct& job = jobs.values(0).struct_value();
  EXPECT_EQ(job.fields().at("job_id").string_value(), job_);
  EXPECT_EQ(job.fields().at("name").string_value(), "tiny");
  EXPECT_EQ(job.fields().at("state").string_value(), "PENDING");
  EXPECT_EQ(job.fields().at("step").number_value(), 5);
  EXPECT_EQ(job.fields().at("steps").number_value(), 50);
  EXPECT_EQ(job.fields().at("loss").number_value(), 1.0);

  const HttpResponse one = Get("/api/jobs/" + job_);
  EXPECT_EQ(one.status, 200);
  EXPECT_EQ(Parse(one.body).fields().at("job_id").string_value(), job_);
}

TEST_F(HttpRoutesTest, RanksListEveryReportedRankOfTheNewestGeneration) {
  // Two ranks of a (1,2,1) job report; the route lists both with their coordinates and
  // last steps, even though Prometheus would show only the slowest 16 of a large job.
  for (int rank = 0; rank < 2; ++rank) {
    RankCoordinates c;
    c.set_global_rank(rank);
    c.set_world_size(2);
    c.set_pp_rank(rank);
    StepMetrics m;
    m.set_job_id(job_);
    m.set_generation(1);
    m.set_step(7);
    m.set_step_seconds(0.5 + rank);
    m.set_pipeline_wait_seconds(0.25);
    if (rank == 1) m.set_activation_memory_peak_bytes(4096);
    metrics_->ObserveStep(job_, m, c);
  }
  const HttpResponse response = Get("/api/jobs/" + job_ + "/ranks");
  EXPECT_EQ(response.status, 200) << response.body;
  const google::protobuf::Struct body = Parse(response.body);
  EXPECT_EQ(body.fields().at("job_id").string_value(), job_);
  const auto& ranks = body.fields().at("ranks").list_value().values();
  ASSERT_EQ(ranks.size(), 2);
  const auto& second = ranks[1].struct_value().fields();
  EXPECT_EQ(second.at("rank").number_value(), 1);
  EXPECT_EQ(second.at("pp_stage").number_value(), 1);
  EXPECT_EQ(second.at("step").number_value(), 7);
  EXPECT_EQ(second.at("last_step_seconds").number_value(), 1.5);
  EXPECT_NEAR(second.at("pipeline_bubble").number_value(), 0.25 / 1.5, 1e-9);
  EXPECT_EQ(second.at("activation_memory_peak_bytes").number_value(), 4096);
  EXPECT_TRUE(ranks[0].struct_value().fields().at("activation_memory_peak_bytes").has_null_value());
  // A job not seen yet has none; an unknown one is 404.
  absl::StatusOr<std::string> other = store_->CreateJob(JobSpec(), 1000);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(Parse(Get("/api/jobs/" + *other + "/ranks").body)
                  .fields()
                  .at("ranks")
                  .list_value()
                  .values()
                  .empty());
  EXPECT_EQ(Get("/api/jobs/job-999/ranks").status, 404);
}

TEST_F(HttpRoutesTest, StepsComeAfterAStepAPageAtATime) {
  google::protobuf::Struct all = Parse(Get("/api/jobs/" + job_ + "/steps").body);
  EXPECT_EQ(all.fields().at("steps").list_value().values_size(), 5);
  EXPECT_FALSE(all.fields().at("more").bool_value());

  const HttpResponse page = Get("/api/jobs/" + job_ + "/steps", "after=1&limit=2");
  EXPECT_EQ(page.status, 200);
  const google::protobuf::Struct doc = Parse(page.body);
  const google::protobuf::ListValue& steps = doc.fields().at("steps").list_value();
  ASSERT_EQ(steps.values_size(), 2);
  EXPECT_EQ(steps.values(0).struct_value().fields().at("step").number_value(), 2);
  EXPECT_EQ(steps.values(1).struct_value().fields().at("step").number_value(), 3);
  EXPECT_EQ(steps.values(1).struct_value().fields().at("loss").number_value(), 3.0);
  EXPECT_EQ(steps.values(1).struct_value().fields().at("tokens_per_second").number_value(), 300);
  EXPECT_TRUE(doc.fields().at("more").bool_value());

  const google::protobuf::Struct rest = Parse(Get("/api/jobs/" + job_ + "/steps", "after=3").body);
  EXPECT_EQ(rest.fields().at("steps").list_value().values_size(), 2);
  EXPECT_FALSE(rest.fields().at("more").bool_value());
  const google::protobuf::Struct none = Parse(Get("/api/jobs/" + job_ + "/steps", "after=5").body);
  EXPECT_EQ(none.fields().at("steps").list_value().values_size(), 0);
}

// The job ids of one /api/jobs page and its next_page_token.
std::pair<std::vector<std::string>, std::string> JobPage(const HttpResponse& response) {
  EXPECT_EQ(response.status, 200) << response.body;
  const google::protobuf::Struct doc = Parse(response.body);
  std::vector<std::string> ids;
  for (const google::protobuf::Value& job : doc.fields().at("jobs").list_value().values()) {
    ids.push_back(job.struct_value().fields().at("job_id").string_value());
  }
  return {ids, doc.fields().at("next_page_token").string_value()};
}

TEST_F(HttpRoutesTest, JobsPageWithTokensAndFilterByStateAndName) {
  // job-1 (tiny, PENDING) from SetUp; then sweep-0..sweep-4, sweep-3 cancelled, and "other".
  for (int i = 0; i < 5; ++i) {
    JobSpec spec;
    spec.set_name(absl::StrCat("sweep ", i));  // A space: the name filter is percent-decoded.
    ASSERT_TRUE(store_->CreateJob(spec, 2000).ok());
  }
  JobSpec other;
  other.set_name("other");
  ASSERT_TRUE(store_->CreateJob(other, 2000).ok());
  ASSERT_TRUE(jobs_->Cancel("job-5").ok());

  // Page through everything two at a time: every job once, in order.
  std::vector<std::string> all;
  std::string token;
  int pages = 0;
  do {
    auto [ids, next] = JobPage(
        Get("/api/jobs", "page_size=2" + (token.empty() ? std::string() : "&page_token=" + token)));
    all.insert(all.end(), ids.begin(), ids.end());
    token = next;
    ++pages;
  } while (!token.empty());
  EXPECT_EQ(all, (std::vector<std::string>{"job-1", "job-2", "job-3", "job-4", "job-5", "job-6",
                                           "job-7"}));
  EXPECT_EQ(pages, 4);

  EXPECT_EQ(JobPage(Get("/api/jobs", "name=sweep%20")).first,
            (std::vector<std::string>{"job-2", "job-3", "job-4", "job-5", "job-6"}));
  EXPECT_EQ(JobPage(Get("/api/jobs", "name=sweep+&state=cancelled")).first,
            (std::vector<std::string>{"job-5"}));
  EXPECT_EQ(JobPage(Get("/api/jobs", "state=CANCELLED,pending&name=t")).first,
            (std::vector<std::string>{"job-1"}));
  EXPECT_EQ(JobPage(Get("/api/jobs", "state=cancelled&state=JOB_STATE_PENDING")).first.size(), 7u);
  // Without parameters: the first page of the default size, with no token when all fit.
  EXPECT_EQ(JobPage(Get("/api/jobs")).second, "");
}

TEST_F(HttpRoutesTest, BadJobListParametersAre400NamingThem) {
  for (const auto& [query, named] :
       std::vector<std::pair<std::string, std::string>>{{"page_size=-1", "page_size"},
                                                        {"page_size=x", "page_size"},
                                                        {"page_token=nonsense", "page_token"},
                                                        {"state=runing", "state"},
                                                        {"state=unspecified", "state"},
                                                        {"name=%zz", "name"}}) {
    const HttpResponse response = Get("/api/jobs", query);
    EXPECT_EQ(response.status, 400) << query;
    const google::protobuf::Struct doc = Parse(response.body);
    EXPECT_EQ(doc.fields().at("code").string_value(), "INVALID_ARGUMENT") << query;
    EXPECT_THAT(doc.fields().at("error").string_value(), HasSubstr(named)) << query;
  }
  // Above the maximum reads as the maximum.
  EXPECT_EQ(Get("/api/jobs", "page_size=99999999").status, 200);
}

TEST_F(HttpRoutesTest, StepsAlsoPageWithTokens) {
  std::vector<double> steps;
  std::string token;
  do {
    const HttpResponse response =
        Get("/api/jobs/" + job_ + "/steps",
            "page_size=2" + (token.empty() ? std::string() : "&page_token=" + token));
    ASSERT_EQ(response.status, 200) << response.body;
    const google::protobuf::Struct doc = Parse(response.body);
    for (const google::protobuf::Value& step : doc.fields().at("steps").list_value().values()) {
      steps.push_back(step.struct_value().fields().at("step").number_value());
    }
    token = doc.fields().at("next_page_token").string_value();
    EXPECT_EQ(doc.fields().at("more").bool_value(), !token.empty());
  } while (!token.empty());
  EXPECT_EQ(steps, (std::vector<double>{1, 2, 3, 4, 5}));
  EXPECT_EQ(Get("/api/jobs/" + job_ + "/steps", "page_token=bad").status, 400);
}

TEST_F(HttpRoutesTest, ListsWorkersWithTheirHealth) {
  const HttpResponse response = Get("/api/workers");
  EXPECT_EQ(response.status, 200);
  const google::protobuf::Struct doc = Parse(response.body);
  EXPECT_EQ(doc.fields().at("heartbeat_timeout_ms").number_value(), 10000);
  const google::protobuf::ListValue& workers = doc.fields().at("workers").list_value();
  ASSERT_EQ(workers.values_size(), 1);
  const google::protobuf::Struct& w0 = workers.values(0).struct_value();
  EXPECT_EQ(w0.fields().at("worker_id").string_value(), "w0");
  EXPECT_EQ(w0.fields().at("host").string_value(), "node-a");
  EXPECT_TRUE(w0.fields().at("alive").bool_value());

  // Past the heartbeat timeout, with the coordinator looking all along (one jump of the
  // clock would look like a pause of the coordinator, which renews every worker).
  for (int i = 0; i < 11; ++i) {
    clock_.Advance(absl::Seconds(1));
    registry_.List();
  }
  const google::protobuf::Struct later = Parse(Get("/api/workers").body);
  const google::protobuf::Struct& dead =
      later.fields().at("workers").list_value().values(0).struct_value();
  EXPECT_FALSE(dead.fields().at("alive").bool_value());
  EXPECT_EQ(dead.fields().at("last_seen_ms_ago").number_value(), 11000);
}

TEST_F(HttpRoutesTest, UnknownJobsAre404WithAJsonError) {
  for (const std::string job : {"job-99", "nonsense", "job-1x", "%00", ""}) {
    for (const std::string suffix : {"", "/steps"}) {
      const std::string path = "/api/jobs/" + job + suffix;
      if (path == "/api/jobs/") continue;  // the list
      const HttpResponse response = Get(path);
      EXPECT_EQ(response.status, 404) << path;
      EXPECT_EQ(response.content_type, "application/json") << path;
      const google::protobuf::Struct doc = Parse(response.body);
      EXPECT_EQ(doc.fields().at("code").string_value(), "NOT_FOUND") << path;
      EXPECT_FALSE(doc.fields().at("error").string_value().empty()) << path;
    }
  }
}

TEST_F(HttpRoutesTest, MalformedQueriesAre400) {
  for (const std::string query : {"after=x", "after=-1", "limit=1.5", "after=%31", "after="}) {
    const HttpResponse response = Get("/api/jobs/" + job_ + "/steps", query);
    EXPECT_EQ(response.status, 400) << query;
    EXPECT_EQ(Parse(response.body).fields().at("code").string_value(), "INVALID_ARGUMENT") << query;
  }
  // Unknown parameters are ignored; limit is capped.
  EXPECT_EQ(Get("/api/jobs/" + job_ + "/steps", "x=1&limit=99999999").status, 200);
}

TEST_F(HttpRoutesTest, UnknownPathsAre404) {
  for (const std::string path :
       {"/nope", "/static/", "/static/other.js", "/api", "/api/nope", "/api/jobs/job-1/steps/extra",
        "/api/jobs/job-1/events", "/metrics/", "/status/x"}) {
    const HttpResponse response = Get(path);
    EXPECT_EQ(response.status, 404) << path;
  }
  EXPECT_EQ(Get("/api/nope").content_type, "application/json");
}

}  // namespace
}  // namespace mtrain
