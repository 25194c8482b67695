// Page tokens of the coordinator's listings (ListJobs, /api/jobs, /api/jobs/JOB/steps): an
// opaque string that stands for "continue after position N" in the listing's key order
// (the job number, the step). A keyset rather than an offset, so rows inserted or deleted
// meanwhile neither repeat nor skip rows of the next page.
//
//   std::string token = EncodePageToken(last_job_number);
//   ASSIGN_OR_RETURN(int64_t after, DecodePageToken(request.page_token(), "page_token"));
//
// Clients must treat the token as opaque; its spelling may change between versions.
// Pure functions; thread-safe.
#ifndef MTRAIN_COORDINATOR_PAGE_TOKEN_H_
#define MTRAIN_COORDINATOR_PAGE_TOKEN_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mtrain {

// The token for "after position `after`" (after >= 0).
std::string EncodePageToken(int64_t after);

// The position a token stands for; 0 (the start) for an empty token. INVALID_ARGUMENT
// naming `field` and the value for anything EncodePageToken did not produce.
absl::StatusOr<int64_t> DecodePageToken(absl::string_view token, absl::string_view field);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_PAGE_TOKEN_H_
