// What the coordinator's HTTP port (coordinator/http_server.h) serves, as a pure function
// from request to response, so every route is tested without sockets:
//
//   GET /metrics                  Prometheus text exposition (CoordinatorMetrics::Scrape)
//   GET / , /status               the status page (dashboard/status/, compiled in)
//   GET /static/status.js, /static/status.css
//   GET /static/chart.js          Chart.js as read from --chart_js at start; when that
//                                 failed, a stub script that tells the page why, so the
//                                 page still shows its tables and says the chart is missing
//   GET /api/jobs?page_size=N&page_token=T&state=S&name=P
//                                 a page of jobs with state and progress (status_json.h),
//                                 oldest first, as the ListJobs RPC pages and filters them
//                                 (job_listing.h): N default 100, at most 1000; T the
//                                 previous page's next_page_token; S a state (RUNNING or
//                                 running), repeated or comma-separated; P a name prefix
//   GET /api/jobs/JOB             one job
//   GET /api/jobs/JOB/steps?after=N&limit=M   (or page_token=T&page_size=M)
//                                 the job's per-step loss and throughput after step N
//                                 (default 0; or where T says), at most M (default and cap
//                                 kMaxStepsPerRequest), with next_page_token when more follow
//   GET /api/jobs/JOB/ranks       every rank of the job's newest generation that has
//                                 reported: coordinates, last step and its time, pipeline
//                                 bubble, activation peak (the per-rank detail Prometheus
//                                 gets only for the 16 slowest ranks)
//   GET /api/workers              every worker and its health
//
// Errors: unknown paths 404 (JSON under /api/); an unknown job 404 with
// {"code":"NOT_FOUND","error":...}; a malformed parameter (`after`, `limit`, a page
// token, a state) 400 naming it. Everything but /metrics is sent with Cache-Control:
// no-store (a page and its data from the same moment) and a Content-Security-Policy that
// allows nothing but this origin.
//
//   CoordinatorHttpRoutes routes(jobs, &workers, metrics, ReadChartJs(path));
//   ASSIGN_OR_RETURN(auto server, HttpServer::Start(address, [&](const HttpRequest& r) {
//     return routes.Handle(r);
//   }));
//
// Thread-safe (const; JobManager, WorkerRegistry and CoordinatorMetrics are).
#ifndef MTRAIN_COORDINATOR_HTTP_ROUTES_H_
#define MTRAIN_COORDINATOR_HTTP_ROUTES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/http_server.h"
#include "coordinator/job_manager.h"
#include "coordinator/worker_registry.h"

namespace mtrain {

// Where Debian's libjs-chart.js puts its UMD build (the default of --chart_js).
inline constexpr char kDefaultChartJsPath[] = "/usr/share/javascript/chart.js/chart.min.js";
// Steps per /api/jobs/JOB/steps response: a long job's history arrives in pieces rather
// than in one response that holds the job manager's lock for long.
inline constexpr int64_t kMaxStepsPerRequest = 5000;
// The content type Prometheus' text exposition format asks for.
inline constexpr char kPrometheusTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// Reads Chart.js from `path`. NOT_FOUND or FAILED_PRECONDITION (empty file) naming it.
absl::StatusOr<std::string> ReadChartJs(const std::string& path);

class CoordinatorHttpRoutes {
 public:
  // The pointers must outlive this object. `chart_js` is the library's text, or why it
  // is not available.
  CoordinatorHttpRoutes(const JobManager* jobs, const WorkerRegistry* workers,
                        const CoordinatorMetrics* metrics, absl::StatusOr<std::string> chart_js);

  // Answers a GET (HttpServer answers HEAD from the same response).
  HttpResponse Handle(const HttpRequest& request) const;

 private:
  HttpResponse Jobs(const std::string& query) const;
  HttpResponse Job(const std::string& job_id) const;
  HttpResponse Steps(const std::string& job_id, const std::string& query) const;
  HttpResponse Ranks(const std::string& job_id) const;
  HttpResponse Workers() const;

  const JobManager* const jobs_;
  const WorkerRegistry* const workers_;
  const CoordinatorMetrics* const metrics_;
  // The script served at /static/chart.js: the library, or the stub.
  std::string chart_js_;
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_HTTP_ROUTES_H_
