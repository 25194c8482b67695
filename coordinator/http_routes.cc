#include "coordinator/http_routes.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/json_writer.h"
#include "common/status_macros.h"
#include "coordinator/job_listing.h"
#include "coordinator/page_token.h"
#include "coordinator/status_json.h"
#include "dashboard/status/status_page_assets.h"

namespace mtrain {
namespace {

constexpr char kJson[] = "application/json";
constexpr char kHtml[] = "text/html; charset=utf-8";
constexpr char kCss[] = "text/css; charset=utf-8";
constexpr char kJavaScript[] = "text/javascript; charset=utf-8";
constexpr char kText[] = "text/plain; charset=utf-8";

// Only this origin: the page loads nothing from elsewhere (no CDN), and a job name or
// message that slipped past escaping could not run a script of its own.
constexpr char kContentSecurityPolicy[] =
    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'";

HttpResponse Respond(int status, const char* content_type, std::string body) {
  HttpResponse response{status, content_type, std::move(body), {}};
  response.headers = {{"Cache-Control", "no-store"},
                      {"X-Content-Type-Options", "nosniff"},
                      {"Content-Security-Policy", kContentSecurityPolicy}};
  return response;
}

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

HttpResponse JsonError(const absl::Status& status) {
  return Respond(HttpStatusOf(status), kJson, ErrorJson(status) + "\n");
}

// The value of `name` in a query string ("after=10&limit=50"), if present (the first
// one). The numeric parameters are read as they come: an encoded one fails to parse as a
// number and is reported as malformed; text ones go through PercentDecoded.
std::optional<absl::string_view> QueryValue(absl::string_view query, absl::string_view name) {
  for (absl::string_view pair : absl::StrSplit(query, '&')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (kv.first == name) return kv.second;
  }
  return std::nullopt;
}

// Every value of `name` in the query string, in order.
std::vector<absl::string_view> QueryValues(absl::string_view query, absl::string_view name) {
  std::vector<absl::string_view> values;
  for (absl::string_view pair : absl::StrSplit(query, '&')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (kv.first == name) values.push_back(kv.second);
  }
  return values;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A query value as the browser meant it: %XX decoded, '+' a space (form encoding).
absl::StatusOr<std::string> PercentDecoded(absl::string_view value, absl::string_view name) {
  std::string out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '+') {
      out.push_back(' ');
    } else if (value[i] != '%') {
      out.push_back(value[i]);
    } else if (i + 2 < value.size() && HexDigit(value[i + 1]) >= 0 && HexDigit(value[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexDigit(value[i + 1]) * 16 + HexDigit(value[i + 2])));
      i += 2;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("query parameter ", name, "=", value, ": '%' must start an escape %XX"));
    }
  }
  return out;
}

// Reads a non-negative integer parameter; `fallback` when absent.
absl::StatusOr<int64_t> QueryInt(absl::string_view query, absl::string_view name,
                                 int64_t fallback) {
  const std::optional<absl::string_view> text = QueryValue(query, name);
  if (!text) return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(*text, &value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("query parameter ", name, "=", *text, ": expected an integer >= 0"));
  }
  return value;
}

// The ListJobs request /api/jobs stands for: page_size, page_token, state (repeated or
// comma-separated, "RUNNING" or "running"), name (a prefix of the job's name).
absl::StatusOr<ListJobsRequest> ListJobsRequestFromQuery(absl::string_view query) {
  ListJobsRequest request;
  ASSIGN_OR_RETURN(const int64_t page_size, QueryInt(query, "page_size", 0));
  request.set_page_size(static_cast<int32_t>(std::min<int64_t>(page_size, kMaxJobPageSize)));
  if (std::optional<absl::string_view> token = QueryValue(query, "page_token")) {
    ASSIGN_OR_RETURN(std::string decoded, PercentDecoded(*token, "page_token"));
    request.set_page_token(std::move(decoded));
  }
  for (absl::string_view value : QueryValues(query, "state")) {
    ASSIGN_OR_RETURN(const std::string states, PercentDecoded(value, "state"));
    for (absl::string_view state : absl::StrSplit(states, ',', absl::SkipEmpty())) {
      JobState parsed = JOB_STATE_UNSPECIFIED;
      std::string upper = absl::AsciiStrToUpper(state);
      if (!absl::StartsWith(upper, "JOB_STATE_")) upper = absl::StrCat("JOB_STATE_", upper);
      if (!JobState_Parse(upper, &parsed) || parsed == JOB_STATE_UNSPECIFIED) {
        return absl::InvalidArgumentError(
            absl::StrCat("query parameter state=", state,
                         ": not a job state [rule: PENDING, PLACING, RUNNING, SUCCEEDED, FAILED or "
                         "CANCELLED, repeated or comma-separated]"));
      }
      request.add_states(parsed);
    }
  }
  if (std::optional<absl::string_view> name = QueryValue(query, "name")) {
    ASSIGN_OR_RETURN(std::string decoded, PercentDecoded(*name, "name"));
    request.set_name_prefix(std::move(decoded));
  }
  return request;
}

// The script served when Chart.js could not be read: it defines no Chart, and tells the
// page why (status.js shows the reason instead of the chart).
std::string ChartJsStub(const absl::Status& why) {
  return absl::StrCat("// Chart.js is not available: the status page shows tables only.\n",
                      "window.mtrainChartMissing = ", JsonString(why.ToString()), ";\n");
}

}  // namespace

absl::StatusOr<std::string> ReadChartJs(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read Chart.js at ", path,
                                            " (install libjs-chart.js or set --chart_js)"));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().empty()) {
    return absl::FailedPreconditionError(absl::StrCat("Chart.js at ", path, " is empty"));
  }
  return text.str();
}

CoordinatorHttpRoutes::CoordinatorHttpRoutes(const JobManager* jobs, const WorkerRegistry* workers,
                                             const CoordinatorMetrics* metrics,
                                             absl::StatusOr<std::string> chart_js)
    : jobs_(jobs),
      workers_(workers),
      metrics_(metrics),
      chart_js_(chart_js.ok() ? *std::move(chart_js) : ChartJsStub(chart_js.status())) {}

HttpResponse CoordinatorHttpRoutes::Handle(const HttpRequest& request) const {
  const std::string& path = request.path;
  if (path == "/metrics") {
    // As prometheus-cpp's Exposer answered it before: the text and its content type.
    return HttpResponse{200, kPrometheusTextContentType, metrics_->Scrape(), {}};
  }
  if (path == "/" || path == "/status" || path == "/status/" || path == "/index.html") {
    return Respond(200, kHtml, kStatusPageHtml);
  }
  if (path == "/static/status.js") return Respond(200, kJavaScript, kStatusPageJs);
  if (path == "/static/status.css") return Respond(200, kCss, kStatusPageCss);
  if (path == "/static/chart.js") return Respond(200, kJavaScript, chart_js_);
  if (path == "/api/jobs" || path == "/api/jobs/") return Jobs(request.query);
  if (path == "/api/workers") return Workers();

  constexpr absl::string_view kJobPrefix = "/api/jobs/";
  if (absl::StartsWith(path, kJobPrefix)) {
    // JOB or JOB/steps; a job id has no '/' (JobStore parses and rejects anything else).
    const std::vector<std::string> parts =
        absl::StrSplit(absl::string_view(path).substr(kJobPrefix.size()), '/');
    if (parts.size() == 1) return Job(parts[0]);
    if (parts.size() == 2 && parts[1] == "steps") return Steps(parts[0], request.query);
    if (parts.size() == 2 && parts[1] == "ranks") return Ranks(parts[0]);
  }
  if (absl::StartsWith(path, "/api/")) {
    return JsonError(absl::NotFoundError(absl::StrCat("no API endpoint ", path)));
  }
  return Respond(404, kText, absl::StrCat("not found: ", path, "\n"));
}

HttpResponse CoordinatorHttpRoutes::Jobs(const std::string& query) const {
  absl::StatusOr<ListJobsRequest> request = ListJobsRequestFromQuery(query);
  if (!request.ok()) return JsonError(request.status());
  // The same contract as the ListJobs RPC: defaults, caps and token checks in one place.
  absl::StatusOr<JobListQuery> list = JobListQueryFromRequest(*request);
  if (!list.ok()) return JsonError(list.status());
  absl::StatusOr<JobListPage> page = jobs_->List(*list);
  if (!page.ok()) return JsonError(page.status());
  const ListJobsResponse response = ListJobsResponseFromPage(*std::move(page));
  const std::vector<JobStatus> jobs(response.jobs().begin(), response.jobs().end());
  return Respond(200, kJson, JobsJson(jobs, response.next_page_token()) + "\n");
}

HttpResponse CoordinatorHttpRoutes::Job(const std::string& job_id) const {
  absl::StatusOr<JobStatus> job = jobs_->Get(job_id);
  if (!job.ok()) return JsonError(job.status());
  return Respond(200, kJson, JobJson(*job) + "\n");
}

HttpResponse CoordinatorHttpRoutes::Steps(const std::string& job_id,
                                          const std::string& query) const {
  // page_token/page_size as /api/jobs has them; after/limit as the status page asks.
  absl::StatusOr<int64_t> after = QueryInt(query, "after", 0);
  if (!after.ok()) return JsonError(after.status());
  if (std::optional<absl::string_view> token = QueryValue(query, "page_token")) {
    absl::StatusOr<std::string> decoded = PercentDecoded(*token, "page_token");
    if (!decoded.ok()) return JsonError(decoded.status());
    after = DecodePageToken(*decoded, "page_token");
    if (!after.ok()) return JsonError(after.status());
  }
  absl::StatusOr<int64_t> limit = QueryInt(query, "limit", kMaxStepsPerRequest);
  if (!limit.ok()) return JsonError(limit.status());
  if (QueryValue(query, "page_size")) {
    limit = QueryInt(query, "page_size", kMaxStepsPerRequest);
    if (!limit.ok()) return JsonError(limit.status());
    if (*limit == 0) *limit = kMaxStepsPerRequest;
  }
  const int64_t page = std::min(std::max<int64_t>(*limit, 1), kMaxStepsPerRequest);
  // One step beyond the page tells whether there is more, without a count query.
  absl::StatusOr<std::vector<StepMetrics>> steps = jobs_->Steps(job_id, *after, page + 1);
  if (!steps.ok()) return JsonError(steps.status());
  const bool more = static_cast<int64_t>(steps->size()) > page;
  if (more) steps->resize(page);
  const std::string next = more ? EncodePageToken(steps->back().step()) : "";
  return Respond(200, kJson, StepsJson(job_id, *steps, more, next) + "\n");
}

HttpResponse CoordinatorHttpRoutes::Ranks(const std::string& job_id) const {
  absl::StatusOr<JobStatus> job = jobs_->Get(job_id);
  if (!job.ok()) return JsonError(job.status());
  const std::vector<RankReport> ranks =
      metrics_ != nullptr ? metrics_->RankDetails(job_id) : std::vector<RankReport>{};
  return Respond(200, kJson, RanksJson(job_id, ranks) + "\n");
}

HttpResponse CoordinatorHttpRoutes::Workers() const {
  const int64_t timeout_ms = absl::ToInt64Milliseconds(workers_->options().heartbeat_timeout);
  return Respond(200, kJson, WorkersJson(workers_->List(), timeout_ms) + "\n");
}

}  // namespace mtrain
