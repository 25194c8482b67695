// Debian's real Prometheus server against a real coordinator, with the SHIPPED
// configuration (deploy/prometheus/prometheus.yml and its rules), rewritten only to
// scrape this test's coordinator every second: a short job's tokens/s and loss arrive as
// series labelled with the job's id, every recording and alert rule evaluates, and every
// query of the Grafana dashboard runs on Prometheus's own PromQL engine and returns data.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "dashboard/dashboard_queries.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/cluster_fixture.h"
#include "tests/metrics_scrape.h"

namespace mtrain {
namespace {

using ::google::protobuf::ListValue;
using ::google::protobuf::Struct;
using ::google::protobuf::Value;

constexpr char kPrometheus[] = "/usr/bin/prometheus";
constexpr char kShippedConfig[] = "deploy/prometheus/prometheus.yml";
constexpr char kShippedRules[] = "deploy/prometheus/rules/mtrain.rules.yml";
constexpr char kDashboard[] = "dashboard/mtrain_dashboard.json";
// With a 1 s scrape interval a 10 s window holds enough samples for rate().
constexpr char kRateInterval[] = "10s";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A port nobody listens on now. Prometheus cannot report a port it picked itself, so the
// test picks one; StartPrometheus retries if another process takes it first.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

std::string UrlEncode(absl::string_view text) {
  std::string out;
  for (const char c : text) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += c;
    } else {
      absl::StrAppendFormat(&out, "%%%02X", static_cast<unsigned char>(c));
    }
  }
  return out;
}

const Value& At(const Struct& object, const std::string& name) {
  static const Value* const kNull = new Value();
  const auto it = object.fields().find(name);
  return it == object.fields().end() ? *kNull : it->second;
}

// One instant-vector sample: its labels and value.
struct Sample {
  std::map<std::string, std::string> labels;
  double value = NAN;
};

class PrometheusScrapeTest : public ClusterTest {
 protected:
  void TearDown() override {
    prometheus_.reset();
    ClusterTest::TearDown();
  }

  // Writes the shipped configuration with only the target and the intervals changed, and
  // starts Prometheus on a free loopback port.
  void StartPrometheus() {
    ASSERT_EQ(access(kPrometheus, X_OK), 0)
        << kPrometheus << " not found: run `make deps` (installs Debian's prometheus package)";
    const std::string shipped = ReadFile(kShippedConfig);
    ASSERT_FALSE(shipped.empty()) << kShippedConfig;
    const std::map<std::string, std::string> rewrites = {
        {"mtrain-coordinator:9464", absl::StrCat("127.0.0.1:", metrics_port_)},
        {"scrape_interval: 15s", "scrape_interval: 1s"},
        {"scrape_timeout: 10s", "scrape_timeout: 1s"},
        {"evaluation_interval: 15s", "evaluation_interval: 1s"}};
    std::string config = shipped;
    for (const auto& [from, to] : rewrites) {
      // Exactly once: if the shipped file changes shape, this test must be looked at.
      size_t count = 0;
      for (size_t at = config.find(from); at != std::string::npos; at = config.find(from, at + 1)) {
        ++count;
      }
      ASSERT_EQ(count, 1u) << "'" << from << "' in " << kShippedConfig;
      config = absl::StrReplaceAll(config, {{from, to}});
    }
    const std::string dir = Path("prometheus");
    std::filesystem::create_directories(dir + "/rules");
    std::ofstream(dir + "/prometheus.yml") << config;
    std::filesystem::copy_file(kShippedRules, dir + "/rules/mtrain.rules.yml",
                               std::filesystem::copy_options::overwrite_existing);

    for (int attempt = 1; attempt <= 3; ++attempt) {
      prometheus_port_ = FreePort();
      ASSERT_GT(prometheus_port_, 0);
      auto prometheus =
          ChildProcess::Start({kPrometheus, "--config.file=" + dir + "/prometheus.yml",
                               "--storage.tsdb.path=" + dir + "/data",
                               absl::StrCat("--web.listen-address=127.0.0.1:", prometheus_port_)},
                              Path(absl::StrCat("prometheus-", attempt, ".log")));
      ASSERT_TRUE(prometheus.ok()) << prometheus.status();
      prometheus_ = *std::move(prometheus);
      absl::StatusOr<std::string> ready =
          prometheus_->WaitForOutput("Server is ready to receive web requests", absl::Seconds(60));
      if (ready.ok()) return;
      ASSERT_LT(attempt, 3) << ready.status();
      prometheus_.reset();
    }
  }

  // GET /api/v1/...; the response's `data` when its status is "success".
  absl::StatusOr<Value> Api(const std::string& path) {
    absl::StatusOr<HttpResponse> response = HttpGet(prometheus_port_, path);
    if (!response.ok()) return response.status();
    Value body;
    if (!google::protobuf::util::JsonStringToMessage(response->body, &body).ok()) {
      return absl::InternalError(absl::StrCat(path, ": not JSON: ", response->body));
    }
    const Struct& root = body.struct_value();
    if (At(root, "status").string_value() != "success") {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", response->body));
    }
    return At(root, "data");
  }

  // An instant query's samples.
  absl::StatusOr<std::vector<Sample>> Query(const std::string& promql) {
    absl::StatusOr<Value> data = Api("/api/v1/query?query=" + UrlEncode(promql));
    if (!data.ok()) return data.status();
    std::vector<Sample> samples;
    const Value& result = At(data->struct_value(), "result");
    if (At(data->struct_value(), "resultType").string_value() == "scalar") {
      samples.emplace_back();
      return samples;
    }
    for (const Value& series : result.list_value().values()) {
      Sample sample;
      for (const auto& [name, value] :
           At(series.struct_value(), "metric").struct_value().fields()) {
        sample.labels[name] = value.string_value();
      }
      // [timestamp, "value"]; Prometheus writes NaN and +Inf as strings too.
      const ListValue& pair = At(series.struct_value(), "value").list_value();
      if (pair.values_size() == 2) {
        const std::string text = pair.values(1).string_value();
        if (!absl::SimpleAtod(text, &sample.value)) sample.value = NAN;
      }
      samples.push_back(std::move(sample));
    }
    return samples;
  }

  // Polls until `promql` returns a sample; a query Prometheus rejects fails the test at
  // once (no use waiting).
  std::vector<Sample> WaitForSeries(const std::string& promql,
                                    absl::Duration timeout = absl::Seconds(60)) {
    std::vector<Sample> samples;
    absl::Status error;
    WaitFor(
        [&] {
          absl::StatusOr<std::vector<Sample>> result = Query(promql);
          error = result.status();
          if (!result.ok()) return absl::IsInvalidArgument(error);
          samples = *std::move(result);
          return !samples.empty();
        },
        timeout);
    if (!error.ok()) ADD_FAILURE() << promql << ": " << error;
    return samples;
  }

  std::unique_ptr<ChildProcess> prometheus_;
  int prometheus_port_ = 0;
};

TEST_F(PrometheusScrapeTest, ShippedConfigScrapesJobSeriesAndEveryDashboardQueryRuns) {
  StartCoordinator();
  StartWorkers(2);
  ASSERT_NO_FATAL_FAILURE(StartPrometheus());

  // The shipped scrape job reaches the coordinator.
  std::vector<Sample> up = WaitForSeries("up{job=\"mtrain-coordinator\"} == 1");
  ASSERT_EQ(up.size(), 1u) << prometheus_->Log();

  // A short job on two pipeline stages (bubble series on both), checkpointing and
  // validating often so the checkpoint panel and the validation loss have data. Long
  // enough to be scraped many times; cancelled below.
  const std::string job = Submit(
      WriteSpec("job.json",
                R"({"name": "prom", "model": {"num_layers": 2, "num_heads": 2, "hidden_size": 32,
          "seq_length": 16}, "parallel": {"pipeline": 2, "micro_batch_size": 2,
          "global_batch_size": 8}, "train": {"steps": 100000, "dropout": 0.0,
          "checkpoint_every": 10, "eval_interval": 5, "eval_iters": 1},
          "data": {"split": "95,5,0"}, "device": "DEVICE_CPU"})"));
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitFor([&] { return StateOf(job) == JOB_STATE_RUNNING; }, absl::Seconds(60)))
      << Trainctl({"status", job}).second;

  // The job's series, labelled with the job's id (honor_labels keeps it from being
  // renamed to exported_job).
  const std::string selector = absl::StrCat("{job=\"", job, "\"}");
  const std::vector<Sample> tokens = WaitForSeries("mtrain_job_tokens_per_second" + selector);
  ASSERT_EQ(tokens.size(), 1u);
  EXPECT_GT(tokens[0].value, 0);
  EXPECT_EQ(tokens[0].labels.at("job"), job);
  EXPECT_EQ(tokens[0].labels.count("exported_job"), 0u);
  const std::vector<Sample> loss = WaitForSeries("mtrain_job_loss" + selector);
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_TRUE(std::isfinite(loss[0].value));
  EXPECT_GT(loss[0].value, 0);
  EXPECT_LT(loss[0].value, 10);  // ln(256) = 5.55 at the start
  // The ranks report how long they waited on their pipeline peers (StepMetrics'
  // pipeline_wait_seconds): with two stages some rank waits.
  EXPECT_EQ(WaitForSeries("max(mtrain_pipeline_bubble_ratio" + selector + ") > 0").size(), 1u);
  // Two scrapes later the loss series has more than one point.
  EXPECT_EQ(WaitForSeries("count_over_time(mtrain_job_loss" + selector + "[1m]) > 1").size(), 1u);

  // Every recording and alert rule of the shipped file is loaded and evaluates cleanly.
  std::vector<std::string> rule_problems;
  int rules = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<Value> data = Api("/api/v1/rules");
        if (!data.ok()) return false;
        rule_problems.clear();
        rules = 0;
        for (const Value& group : At(data->struct_value(), "groups").list_value().values()) {
          for (const Value& rule : At(group.struct_value(), "rules").list_value().values()) {
            ++rules;
            const std::string health = At(rule.struct_value(), "health").string_value();
            if (health != "ok") {
              rule_problems.push_back(
                  absl::StrCat(At(rule.struct_value(), "name").string_value(), ": ", health, " ",
                               At(rule.struct_value(), "lastError").string_value()));
            }
          }
        }
        return rules > 0 && rule_problems.empty();
      },
      absl::Seconds(30)))
      << rules << " rules; " << absl::StrJoin(rule_problems, "\n");
  EXPECT_GE(rules, 8);
  // The recording rules produce the job's series.
  WaitForSeries("mtrain:job_pipeline_bubble_ratio:avg" + selector);
  WaitForSeries("mtrain:job_straggler:ratio" + selector);

  // Every dashboard query runs on Prometheus and, but for RPC errors (there may be none)
  // and the BERT panel (this job is a GPT; //tests:bert_cluster_test scrapes a BERT job's
  // accuracy series from the coordinator), returns data.
  absl::StatusOr<std::vector<DashboardQuery>> queries = DashboardQueries(ReadFile(kDashboard));
  ASSERT_TRUE(queries.ok()) << queries.status();
  ASSERT_GE(queries->size(), 20u);
  for (const DashboardQuery& query : *queries) {
    const std::string promql = ExpandGrafanaVariables(query.expr, kRateInterval);
    if (absl::StrContains(query.where, "'RPC errors'") ||
        absl::StrContains(query.where, "'BERT validation accuracy'")) {
      absl::StatusOr<std::vector<Sample>> result = Query(promql);
      EXPECT_TRUE(result.ok()) << query.where << ": " << result.status();
      continue;
    }
    EXPECT_FALSE(WaitForSeries(promql, absl::Seconds(60)).empty())
        << query.where << " returned no data: " << promql;
  }

  std::cout << "Prometheus on port " << prometheus_port_ << ": " << job << " tokens/s "
            << tokens[0].value << ", loss " << loss[0].value << "; " << rules << " rules ok; "
            << queries->size() << " dashboard queries ran" << std::endl;

  // Nothing is wrong with this run, so no alert fires.
  absl::StatusOr<std::vector<Sample>> firing = Query("ALERTS{alertstate=\"firing\"}");
  ASSERT_TRUE(firing.ok()) << firing.status();
  for (const Sample& alert : *firing) ADD_FAILURE() << "firing: " << alert.labels.at("alertname");

  auto [code, output] = Trainctl({"cancel", job});
  EXPECT_EQ(code, 0) << output;
}

}  // namespace
}  // namespace mtrain
