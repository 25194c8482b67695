// Checks the shipped Grafana dashboard: it parses, its data source is the `datasource`
// variable, every panel target and variable query names only series the coordinator
// really exports (from a real CoordinatorMetrics scrape), and it covers what issue 8 asks
// a dashboard to show.
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "dashboard/dashboard_queries.h"
#include "dashboard/exported_metrics.h"
#include "dashboard/promql_names.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kDashboard[] = "dashboard/mtrain_dashboard.json";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// One line per problem: a query naming a series the coordinator does not export, naming
// none, or not parsing.
std::vector<std::string> Problems(const std::string& dashboard_json,
                                  const std::set<std::string>& exported,
                                  std::set<std::string>* used = nullptr) {
  absl::StatusOr<std::vector<DashboardQuery>> queries = DashboardQueries(dashboard_json);
  if (!queries.ok()) return {queries.status().ToString()};
  std::vector<std::string> problems;
  for (const DashboardQuery& query : *queries) {
    if (query.datasource_uid != "${datasource}") {
      problems.push_back(absl::StrCat(query.where, ": data source is '", query.datasource_uid,
                                      "', not the ${datasource} variable"));
    }
    absl::StatusOr<std::set<std::string>> names = MetricNamesIn(query.expr);
    if (!names.ok()) {
      problems.push_back(absl::StrCat(query.where, ": ", names.status().ToString()));
      continue;
    }
    if (names->empty()) problems.push_back(absl::StrCat(query.where, " names no metric"));
    for (const std::string& name : *names) {
      if (used != nullptr) used->insert(name);
      if (exported.count(name) == 0) {
        problems.push_back(absl::StrCat(query.where, " names ", name,
                                        ", which the coordinator does not export: ", query.expr));
      }
    }
  }
  return problems;
}

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    json_ = ReadFile(kDashboard);
    ASSERT_FALSE(json_.empty()) << kDashboard << " is missing or empty";
    absl::StatusOr<std::set<std::string>> exported = CoordinatorSeriesNames();
    ASSERT_TRUE(exported.ok()) << exported.status();
    exported_ = *exported;
  }

  Struct Root() {
    Value root;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json_, &root).ok());
    return root.struct_value();
  }

  std::string json_;
  std::set<std::string> exported_;
};

TEST_F(DashboardTest, EveryQueryNamesOnlyExportedMetrics) {
  std::set<std::string> used;
  const std::vector<std::string> problems = Problems(json_, exported_, &used);
  EXPECT_THAT(problems, IsEmpty())
      << absl::StrJoin(problems, "\n") << "\nexported: " << absl::StrJoin(exported_, " ");
  EXPECT_GE(used.size(), 10u);
}

TEST_F(DashboardTest, ShowsWhatTheIssueAsksFor) {
  std::set<std::string> used;
  ASSERT_THAT(Problems(json_, exported_, &used), IsEmpty());
  // tokens/s, model TFLOP/s, MFU, loss, loss scale and skipped steps, step time per stage
  // and the slowest ranks (straggler view), pipeline bubble per stage and rank, workers alive,
  // restarts and failures, checkpoints.
  for (const std::string name : {"mtrain_job_tokens_per_second",
                                 "mtrain_job_model_tflops",
                                 "mtrain_job_mfu_ratio",
                                 "mtrain_job_loss",
                                 "mtrain_job_validation_loss",
                                 "mtrain_job_loss_scale",
                                 "mtrain_job_skipped_steps_total",
                                 "mtrain_rank_last_step_seconds",
                                 "mtrain_step_duration_seconds_sum",
                                 "mtrain_step_duration_seconds_count",
                                 "mtrain_step_duration_seconds_bucket",
                                 "mtrain_pipeline_bubble_ratio",
                                 "mtrain_stage_pipeline_bubble_ratio",
                                 "mtrain_stage_last_step_seconds",
                                 "mtrain_workers_alive",
                                 "mtrain_workers_registered",
                                 "mtrain_job_restarts_total",
                                 "mtrain_job_generation_failures_total",
                                 "mtrain_job_checkpoint_step",
                                 "mtrain_job_state"}) {
    EXPECT_EQ(used.count(name), 1u) << "no panel shows " << name;
  }
}

TEST_F(DashboardTest, TheCheckCatchesAMisnamedMetric) {
  const std::string broken = absl::StrReplaceAll(json_, {{"mtrain_job_loss{", "mtrain_job_los{"}});
  ASSERT_NE(broken, json_);
  const std::vector<std::string> problems = Problems(broken, exported_);
  ASSERT_EQ(problems.size(), 1u) << absl::StrJoin(problems, "\n");
  EXPECT_THAT(problems[0], HasSubstr("panel 'Loss'"));
  EXPECT_THAT(problems[0], HasSubstr("mtrain_job_los,"));
  // A histogram's bare family name is not a series either.
  const std::string bare = absl::StrReplaceAll(
      json_, {{"mtrain_step_duration_seconds_bucket", "mtrain_step_duration_seconds"}});
  EXPECT_THAT(absl::StrJoin(Problems(bare, exported_), "\n"),
              HasSubstr("names mtrain_step_duration_seconds,"));
  // A hard-coded data source instead of the variable.
  const std::string fixed = absl::StrReplaceAll(json_, {{"\"${datasource}\"", "\"prom-1\""}});
  EXPECT_THAT(absl::StrJoin(Problems(fixed, exported_), "\n"), HasSubstr("'prom-1'"));
  EXPECT_THAT(Problems("{\"panels\": [", exported_), testing::SizeIs(1));
}

TEST_F(DashboardTest, DataSourceAndJobAreVariables) {
  const Struct root = Root();
  std::map<std::string, Struct> variables;
  for (const Value& v :
       root.fields().at("templating").struct_value().fields().at("list").list_value().values()) {
    variables[v.struct_value().fields().at("name").string_value()] = v.struct_value();
  }
  ASSERT_EQ(variables.count("datasource"), 1u);
  EXPECT_EQ(variables["datasource"].fields().at("type").string_value(), "datasource");
  EXPECT_EQ(variables["datasource"].fields().at("query").string_value(), "prometheus");
  ASSERT_EQ(variables.count("job"), 1u);
  EXPECT_EQ(variables["job"].fields().at("type").string_value(), "query");
  EXPECT_EQ(variables["job"].fields().at("definition").string_value(),
            "label_values(mtrain_job_state, job)");
  EXPECT_TRUE(variables["job"].fields().at("multi").bool_value());
  // Importable as is: no __inputs to fill in, a stable uid for links and provisioning.
  EXPECT_EQ(root.fields().count("__inputs"), 0u);
  EXPECT_EQ(root.fields().at("uid").string_value(), "mtrain-training");
}

TEST_F(DashboardTest, PanelsHaveUniqueIdsAndFitTheGrid) {
  const Struct root = Root();
  std::set<double> ids;
  for (const Value& v : root.fields().at("panels").list_value().values()) {
    const Struct& panel = v.struct_value();
    const std::string title = panel.fields().at("title").string_value();
    const double id = panel.fields().at("id").number_value();
    EXPECT_TRUE(ids.insert(id).second) << "duplicate id " << id << " (" << title << ")";
    const Struct& grid = panel.fields().at("gridPos").struct_value();
    const double x = grid.fields().at("x").number_value();
    const double w = grid.fields().at("w").number_value();
    EXPECT_GE(x, 0) << title;
    EXPECT_LE(x + w, 24) << title;
    EXPECT_GT(grid.fields().at("h").number_value(), 0) << title;
  }
}

TEST(ExpandGrafanaVariablesTest, GivesPlainPromQL) {
  EXPECT_EQ(ExpandGrafanaVariables(
                "rate(a{job=~\"$job\"}[$__rate_interval]) + b{job=~\"${job}\"}[$__interval]", "1m"),
            "rate(a{job=~\".*\"}[1m]) + b{job=~\".*\"}[1m]");
}

}  // namespace
}  // namespace mtrain
