// The ListJobs and ListJobEvents contracts (proto/coordinator.proto) between a request and
// the job store, shared by the gRPC adapter and the HTTP routes (/api/jobs) so both page
// and filter the same way: page size defaulted and capped, the page token decoded, the
// states checked, the page bounded in bytes; and the page back into a response with its
// next token.
//
//   ASSIGN_OR_RETURN(JobListQuery query, JobListQueryFromRequest(request));
//   ASSIGN_OR_RETURN(JobListPage page, jobs->List(query));
//   ListJobsResponse response = ListJobsResponseFromPage(std::move(page));
//
// Pure functions; thread-safe.
#ifndef MTRAIN_COORDINATOR_JOB_LISTING_H_
#define MTRAIN_COORDINATOR_JOB_LISTING_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "coordinator/job_store.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

// INVALID_ARGUMENT naming the field for a negative page_size, a page_token this
// coordinator did not hand out, or a state outside the enum (or UNSPECIFIED).
absl::StatusOr<JobListQuery> JobListQueryFromRequest(const ListJobsRequest& request);

// The page's jobs and, when more may follow, its next_page_token.
ListJobsResponse ListJobsResponseFromPage(JobListPage page);

// Which events of a job one ListJobEvents page holds (JobStore::Events' arguments).
struct JobEventQuery {
  int64_t after_event = 0;
  int64_t max_events = kDefaultEventPageSize;
  int64_t max_bytes = kMaxJobPageBytes;
};
// INVALID_ARGUMENT naming the field for a negative page_size or a foreign page_token.
absl::StatusOr<JobEventQuery> JobEventQueryFromRequest(const ListJobEventsRequest& request);
ListJobEventsResponse ListJobEventsResponseFromPage(JobEventPage page);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_JOB_LISTING_H_
