#include "coordinator/job_listing.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/page_token.h"

namespace mtrain {

absl::StatusOr<JobListQuery> JobListQueryFromRequest(const ListJobsRequest& request) {
  JobListQuery query;
  if (request.page_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: ", request.page_size(), " is negative [rule: 0 (the default, ",
                     kDefaultJobPageSize, ") or more; above ", kMaxJobPageSize, " reads as ",
                     kMaxJobPageSize, "]"));
  }
  // Above the maximum is read as the maximum rather than refused: a client asking for
  // "everything" still gets pages, and follows next_page_token like any other.
  query.max_jobs = request.page_size() == 0
                       ? kDefaultJobPageSize
                       : std::min<int64_t>(request.page_size(), kMaxJobPageSize);
  query.max_bytes = kMaxJobPageBytes;
  query.list_damaged = true;
  ASSIGN_OR_RETURN(query.after_job, DecodePageToken(request.page_token(), "page_token"));
  for (int state : request.states()) {
    if (!JobState_IsValid(state) || state == JOB_STATE_UNSPECIFIED) {
      return absl::InvalidArgumentError(
          absl::StrCat("states: ", state,
                       " is not a job state [rule: one of PENDING, PLACING, "
                       "RUNNING, SUCCEEDED, FAILED, CANCELLED]"));
    }
    query.states.push_back(static_cast<JobState>(state));
  }
  query.name_prefix = request.name_prefix();
  return query;
}

ListJobsResponse ListJobsResponseFromPage(JobListPage page) {
  ListJobsResponse response;
  for (JobStatus& job : page.jobs) *response.add_jobs() = std::move(job);
  if (page.next_after_job > 0) response.set_next_page_token(EncodePageToken(page.next_after_job));
  return response;
}

absl::StatusOr<JobEventQuery> JobEventQueryFromRequest(const ListJobEventsRequest& request) {
  JobEventQuery query;
  if (request.page_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: ", request.page_size(), " is negative [rule: 0 (the default, ",
                     kDefaultEventPageSize, ") or more; above ", kMaxEventPageSize, " reads as ",
                     kMaxEventPageSize, "]"));
  }
  if (request.page_size() > 0) {
    query.max_events = std::min<int64_t>(request.page_size(), kMaxEventPageSize);
  }
  ASSIGN_OR_RETURN(query.after_event, DecodePageToken(request.page_token(), "page_token"));
  return query;
}

ListJobEventsResponse ListJobEventsResponseFromPage(JobEventPage page) {
  ListJobEventsResponse response;
  for (JobEvent& event : page.events) *response.add_events() = std::move(event);
  if (page.next_after_event > 0) {
    response.set_next_page_token(EncodePageToken(page.next_after_event));
  }
  return response;
}

}  // namespace mtrain
