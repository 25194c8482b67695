// The JSON documents of the status page's API (coordinator/http_routes.h), built from the
// coordinator's protos. Flat objects with plain numbers rather than protobuf JSON, which
// would print every int64 as a string and nest each job's whole spec: the page polls these
// every couple of seconds and reads them without conversions.
//
//   std::string body = JobsJson(*jobs->List());
//   // {"jobs":[{"job_id":"job-1","name":"demo","state":"RUNNING","step":12,...}]}
//
// Every function returns one complete JSON value (RFC 8259), written by
// common/json_writer.h: strings escaped (invalid UTF-8 replaced by U+FFFD), numbers with 10
// significant digits, non-finite ones (a diverged loss) as null. Pure functions;
// thread-safe.
#ifndef MTRAIN_COORDINATOR_STATUS_JSON_H_
#define MTRAIN_COORDINATOR_STATUS_JSON_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "coordinator/coordinator_metrics.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

// One job:
//   {"job_id", "name", "state" (JobState without its prefix: "RUNNING"), "step",
//    "steps" (train.steps, defaults applied), "loss", "tokens_per_second", "mfu",
//    "step_seconds" (null before the first step), "generation", "restarts", "message",
//    "submitted_unix_ms", "updated_unix_ms", "device", "parallel": {"tensor",
//    "pipeline", "data"}, "workers": [worker id by global rank], "listing_shortened" (the
//    job was too large to list whole: only its name is from the spec; /api/jobs/JOB has
//    all of it)}
std::string JobJson(const JobStatus& job);
// {"jobs": [JobJson, ...], "next_page_token"} in the given order; the token is "" on the
// last page.
std::string JobsJson(const std::vector<JobStatus>& jobs, absl::string_view next_page_token = "");

// A slice of a job's per-step metrics (the loss-reporting rank's), for the chart:
//   {"job_id", "steps": [{"step", "generation", "loss" (null when the step carried none),
//    "tokens_per_second", "step_seconds", "mfu"}], "more" (whether steps after the last
//    one were left out), "next_page_token" (continues after the last step; "" when none
//    were left out)}
std::string StepsJson(absl::string_view job_id, const std::vector<StepMetrics>& steps, bool more,
                      absl::string_view next_page_token = "");

// Every worker and its health:
//   {"heartbeat_timeout_ms", "workers": [{"worker_id", "host", "device_kind" ("CPU",
//    "CUDA"), "device_name", "device_count", "memory_bytes", "alive", "state" ("IDLE",
//    "BUSY"), "last_seen_ms_ago", "job_id"}]}
std::string WorkersJson(const std::vector<WorkerStatus>& workers, int64_t heartbeat_timeout_ms);

// {"code": "NOT_FOUND", "error": MESSAGE}
std::string ErrorJson(const absl::Status& status);

// {"job_id":..,"ranks":[{"rank","tp_rank","pp_stage","dp_rank","step","last_step_seconds",
// "pipeline_bubble","activation_memory_peak_bytes" (null when not reported)}, ...]}: every
// rank of the job's newest generation that has reported, by global rank
// (/api/jobs/JOB/ranks).
std::string RanksJson(absl::string_view job_id, const std::vector<RankReport>& ranks);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_STATUS_JSON_H_
