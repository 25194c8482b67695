#include "dashboard/dashboard_queries.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace mtrain {
namespace {

using ::google::protobuf::Struct;
using ::google::protobuf::Value;

const Value* Field(const Struct& object, const std::string& name) {
  const auto it = object.fields().find(name);
  return it == object.fields().end() ? nullptr : &it->second;
}

std::string StringField(const Struct& object, const std::string& name) {
  const Value* value = Field(object, name);
  return value != nullptr && value->has_string_value() ? value->string_value() : "";
}

std::string DatasourceUid(const Struct& object) {
  const Value* datasource = Field(object, "datasource");
  if (datasource == nullptr) return "";
  if (datasource->has_string_value()) return datasource->string_value();  // legacy form
  return datasource->has_struct_value() ? StringField(datasource->struct_value(), "uid") : "";
}

absl::Status AddPanels(const Value& panels, std::vector<DashboardQuery>* out) {
  if (!panels.has_list_value()) return absl::InvalidArgumentError("`panels` is not a list");
  for (const Value& panel_value : panels.list_value().values()) {
    if (!panel_value.has_struct_value()) {
      return absl::InvalidArgumentError("a panel is not an object");
    }
    const Struct& panel = panel_value.struct_value();
    const std::string title = StringField(panel, "title");
    const std::string type = StringField(panel, "type");
    if (type == "row") {
      // A collapsed row holds its panels.
      if (const Value* nested = Field(panel, "panels"); nested != nullptr) {
        if (absl::Status s = AddPanels(*nested, out); !s.ok()) return s;
      }
      continue;
    }
    if (type == "text") continue;
    const Value* targets = Field(panel, "targets");
    if (targets == nullptr || !targets->has_list_value() ||
        targets->list_value().values_size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat("panel '", title, "' has no targets"));
    }
    const std::string panel_uid = DatasourceUid(panel);
    for (const Value& target_value : targets->list_value().values()) {
      const Struct& target = target_value.struct_value();
      DashboardQuery query;
      query.where = absl::StrCat("panel '", title, "' target ", StringField(target, "refId"));
      query.expr = StringField(target, "expr");
      if (query.expr.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(query.where, " has no `expr`"));
      }
      query.datasource_uid = DatasourceUid(target);
      if (query.datasource_uid.empty()) query.datasource_uid = panel_uid;
      const Value* instant = Field(target, "instant");
      query.instant = instant != nullptr && instant->bool_value();
      out->push_back(std::move(query));
    }
  }
  return absl::OkStatus();
}

// `label_values(SELECTOR, label)` runs SELECTOR; `label_values(label)` reads every series.
absl::Status AddVariable(const Struct& variable, std::vector<DashboardQuery>* out) {
  if (StringField(variable, "type") != "query") return absl::OkStatus();
  const std::string name = StringField(variable, "name");
  std::string text = StringField(variable, "query");
  if (const Value* query = Field(variable, "query");
      query != nullptr && query->has_struct_value()) {
    text = StringField(query->struct_value(), "query");
  }
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  if (!absl::ConsumePrefix(&rest, "label_values(") || !absl::ConsumeSuffix(&rest, ")")) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", name, "': only label_values(...) queries are checked: ", text));
  }
  const size_t comma = rest.rfind(',');
  if (comma == absl::string_view::npos) return absl::OkStatus();
  DashboardQuery query;
  query.where = absl::StrCat("variable '", name, "'");
  query.expr = std::string(absl::StripAsciiWhitespace(rest.substr(0, comma)));
  query.datasource_uid = DatasourceUid(variable);
  query.instant = true;
  out->push_back(std::move(query));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<DashboardQuery>> DashboardQueries(absl::string_view dashboard_json) {
  Value dashboard;
  const auto parsed =
      google::protobuf::util::JsonStringToMessage(std::string(dashboard_json), &dashboard);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dashboard is not valid JSON: ", parsed.ToString()));
  }
  if (!dashboard.has_struct_value()) {
    return absl::InvalidArgumentError("dashboard is not a JSON object");
  }
  const Struct& root = dashboard.struct_value();
  const Value* panels = Field(root, "panels");
  if (panels == nullptr) return absl::InvalidArgumentError("dashboard has no `panels`");
  std::vector<DashboardQuery> queries;
  if (absl::Status s = AddPanels(*panels, &queries); !s.ok()) return s;
  if (const Value* templating = Field(root, "templating");
      templating != nullptr && templating->has_struct_value()) {
    if (const Value* list = Field(templating->struct_value(), "list");
        list != nullptr && list->has_list_value()) {
      for (const Value& variable : list->list_value().values()) {
        if (absl::Status s = AddVariable(variable.struct_value(), &queries); !s.ok()) return s;
      }
    }
  }
  return queries;
}

std::string ExpandGrafanaVariables(absl::string_view expr, absl::string_view rate_interval) {
  return absl::StrReplaceAll(expr, {{"$__rate_interval", rate_interval},
                                    {"$__interval", rate_interval},
                                    {"$__range", rate_interval},
                                    {"${job}", ".*"},
                                    {"$job", ".*"}});
}

}  // namespace mtrain
