// Keeps the shipped recording and alert rules honest: every series they read is one the
// coordinator exports (from a real CoordinatorMetrics scrape), one the rules record, or
// Prometheus's own `up`; and the alerts issue 8 asks for are there. `promtool check rules`
// checks the syntax but not that a metric exists: a misspelt name is a silent alert.
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "dashboard/exported_metrics.h"
#include "dashboard/promql_names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kRules[] = "deploy/prometheus/rules/mtrain.rules.yml";

struct Rules {
  std::vector<std::pair<std::string, std::string>> exprs;  // (rule name, PromQL)
  std::set<std::string> recorded;
  std::set<std::string> alerts;
  int rules = 0;
};

size_t Indent(absl::string_view line) {
  return line.size() - absl::StripLeadingAsciiWhitespace(line).size();
}

std::string Unquote(absl::string_view value) {
  if (value.size() >= 2 && value.front() == '\'' && value.back() == '\'') {
    return absl::StrReplaceAll(value.substr(1, value.size() - 2), {{"''", "'"}});
  }
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
    return absl::StrReplaceAll(value.substr(1, value.size() - 2), {{"\\\"", "\""}, {"\\\\", "\\"}});
  }
  return std::string(value);
}

// The rules file's `record:`, `alert:` and `expr:` entries. Not a YAML parser: enough
// for the plain and block (`|`, `>`) scalars a rules file uses.
Rules ParseRules(const std::string& text) {
  Rules rules;
  const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  std::string rule;
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::string_view line = absl::StripAsciiWhitespace(lines[i]);
    absl::ConsumePrefix(&line, "- ");
    if (absl::ConsumePrefix(&line, "record:")) {
      rule = Unquote(absl::StripAsciiWhitespace(line));
      rules.recorded.insert(rule);
      ++rules.rules;
    } else if (absl::ConsumePrefix(&line, "alert:")) {
      rule = Unquote(absl::StripAsciiWhitespace(line));
      rules.alerts.insert(rule);
      ++rules.rules;
    } else if (absl::ConsumePrefix(&line, "expr:")) {
      absl::string_view value = absl::StripAsciiWhitespace(line);
      std::string expr;
      if (absl::StartsWith(value, "|") || absl::StartsWith(value, ">")) {
        const size_t indent = Indent(lines[i]);
        while (i + 1 < lines.size() && (absl::StripAsciiWhitespace(lines[i + 1]).empty() ||
                                        Indent(lines[i + 1]) > indent)) {
          absl::StrAppend(&expr, lines[++i], "\n");
        }
      } else {
        expr = Unquote(value);
      }
      rules.exprs.emplace_back(rule, expr);
    }
  }
  return rules;
}

std::vector<std::string> Problems(const Rules& rules, const std::set<std::string>& exported) {
  std::vector<std::string> problems;
  for (const auto& [rule, expr] : rules.exprs) {
    absl::StatusOr<std::set<std::string>> names = MetricNamesIn(expr);
    if (!names.ok()) {
      problems.push_back(absl::StrCat(rule, ": ", names.status().ToString()));
      continue;
    }
    if (names->empty()) problems.push_back(absl::StrCat(rule, " reads no series"));
    for (const std::string& name : *names) {
      if (exported.count(name) == 0 && rules.recorded.count(name) == 0 && name != "up") {
        problems.push_back(
            absl::StrCat(rule, " reads ", name, ", which the coordinator does not export"));
      }
    }
  }
  return problems;
}

class RulesMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ifstream in(kRules);
    std::stringstream text;
    text << in.rdbuf();
    text_ = text.str();
    ASSERT_FALSE(text_.empty()) << kRules << " is missing or empty";
    absl::StatusOr<std::set<std::string>> exported = CoordinatorSeriesNames();
    ASSERT_TRUE(exported.ok()) << exported.status();
    exported_ = *exported;
  }

  std::string text_;
  std::set<std::string> exported_;
};

TEST_F(RulesMetricsTest, EveryRuleReadsExportedOrRecordedSeries) {
  const Rules rules = ParseRules(text_);
  // Every rule's expression was found.
  EXPECT_EQ(static_cast<int>(rules.exprs.size()), rules.rules);
  EXPECT_GE(rules.rules, 8);
  const std::vector<std::string> problems = Problems(rules, exported_);
  EXPECT_THAT(problems, IsEmpty()) << absl::StrJoin(problems, "\n");
}

TEST_F(RulesMetricsTest, HasTheAlertsTheIssueAsksFor) {
  const Rules rules = ParseRules(text_);
  for (const std::string alert :
       {"MtrainJobStalled", "MtrainWorkerLost", "MtrainMfuDropped", "MtrainLossNaN"}) {
    EXPECT_EQ(rules.alerts.count(alert), 1u) << alert;
  }
  // Recording rules follow Prometheus's level:metric:operations naming.
  for (const std::string& name : rules.recorded) {
    EXPECT_EQ(std::count(name.begin(), name.end(), ':'), 2) << name;
  }
}

TEST_F(RulesMetricsTest, TheCheckCatchesAMisnamedMetric) {
  const std::string broken =
      absl::StrReplaceAll(text_, {{"mtrain_workers_alive", "mtrain_workers_up"}});
  ASSERT_NE(broken, text_);
  const std::vector<std::string> problems = Problems(ParseRules(broken), exported_);
  ASSERT_EQ(problems.size(), 1u) << absl::StrJoin(problems, "\n");
  EXPECT_THAT(problems[0], HasSubstr("MtrainWorkerLost reads mtrain_workers_up"));
}

TEST(ParseRulesTest, PlainQuotedAndBlockScalars) {
  const Rules rules = ParseRules(
      "groups:\n"
      "  - name: g\n"
      "    rules:\n"
      "      - record: a:b:c\n"
      "        expr: sum(x)\n"
      "      - alert: A\n"
      "        expr: 'y > 0'\n"
      "      - alert: B\n"
      "        expr: |\n"
      "          z\n"
      "            and w\n"
      "        for: 1m\n");
  ASSERT_EQ(rules.exprs.size(), 3u);
  EXPECT_EQ(rules.exprs[0].second, "sum(x)");
  EXPECT_EQ(rules.exprs[1].second, "y > 0");
  EXPECT_EQ(rules.exprs[2].first, "B");
  EXPECT_THAT(rules.exprs[2].second, HasSubstr("and w"));
  EXPECT_THAT(rules.exprs[2].second, testing::Not(HasSubstr("for:")));
  EXPECT_EQ(rules.recorded, std::set<std::string>{"a:b:c"});
}

}  // namespace
}  // namespace mtrain
