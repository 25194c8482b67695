#include "dashboard/promql_names.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::set<std::string> Names(const std::string& expression) {
  absl::StatusOr<std::set<std::string>> names = MetricNamesIn(expression);
  EXPECT_TRUE(names.ok()) << names.status();
  return names.ok() ? *names : std::set<std::string>{};
}

TEST(MetricNamesInTest, PlainSelectors) {
  EXPECT_THAT(Names("mtrain_job_loss"), ElementsAre("mtrain_job_loss"));
  EXPECT_THAT(Names("mtrain_job_loss{job=~\"$job\", state!=\"x\"}"),
              ElementsAre("mtrain_job_loss"));
  EXPECT_THAT(Names("mtrain:job_mfu_ratio:avg1h"), ElementsAre("mtrain:job_mfu_ratio:avg1h"));
  EXPECT_THAT(Names("{__name__=\"mtrain_job_step\", job=\"a\"}"), ElementsAre("mtrain_job_step"));
  EXPECT_THAT(Names("{job=\"a\"}"), IsEmpty());
}

TEST(MetricNamesInTest, FunctionsAggregationsAndLabelLists) {
  EXPECT_THAT(
      Names("sum by (job, rank) (rate(mtrain_step_duration_seconds_sum{job=~\"$job\"}"
            "[$__rate_interval])) / sum by (job, rank) "
            "(rate(mtrain_step_duration_seconds_count[5m:30s]))"),
      ElementsAre("mtrain_step_duration_seconds_count", "mtrain_step_duration_seconds_sum"));
  EXPECT_THAT(Names("topk(5, max without (tp_rank) (mtrain_rank_last_step_seconds))"),
              ElementsAre("mtrain_rank_last_step_seconds"));
  EXPECT_THAT(Names("histogram_quantile(0.9, sum(rate(x_bucket[5m])) by (le))"),
              ElementsAre("x_bucket"));
  EXPECT_THAT(Names("a * on (job) group_left (state) b and ignoring(rank) c unless d or e"),
              ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_THAT(Names("SUM(a) BY (job)"), ElementsAre("a"));
  EXPECT_THAT(Names("label_replace(up, \"dst\", \"$1\", \"src\", \"(.*)\")"), ElementsAre("up"));
}

TEST(MetricNamesInTest, NumbersDurationsModifiersAndVariables) {
  EXPECT_THAT(Names("a offset 10m > bool 1.5e3 and b @ 1609746000"), ElementsAre("a", "b"));
  EXPECT_THAT(Names("abs(mtrain_job_loss) == +Inf or mtrain_job_loss != NaN"),
              ElementsAre("mtrain_job_loss"));
  EXPECT_THAT(Names("avg_over_time(mtrain_job_mfu_ratio[${window}]) * 100"),
              ElementsAre("mtrain_job_mfu_ratio"));
  EXPECT_THAT(Names("increase(c_total[1h30m]) - 0x1f + .5"), ElementsAre("c_total"));
}

TEST(MetricNamesInTest, MalformedExpressionsAreErrors) {
  for (const std::string bad :
       {"a{job=\"x}", "rate(a[5m)", "sum(a", "a)", "a{job}", "a # b", "a{job=x}", "$"}) {
    absl::StatusOr<std::set<std::string>> names = MetricNamesIn(bad);
    EXPECT_EQ(names.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(MetricNamesIn("sum(a").status().message(), HasSubstr("sum(a"));
}

TEST(ExposedSeriesNamesTest, FamiliesAndTheirSeries) {
  const std::string text =
      "# HELP g A gauge.\n# TYPE g gauge\ng{job=\"a\"} 1\n"
      "# TYPE h_seconds histogram\nh_seconds_bucket{le=\"1\"} 0\n"
      "# TYPE s summary\n"
      "# TYPE c_total counter\n"
      "untyped_thing 3\n";
  EXPECT_THAT(ExposedSeriesNames(text),
              ElementsAre("c_total", "g", "h_seconds_bucket", "h_seconds_count", "h_seconds_sum",
                          "s", "s_count", "s_sum", "untyped_thing"));
}

}  // namespace
}  // namespace mtrain
