#include "coordinator/job_listing.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/page_token.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(JobListingTest, PageSizeDefaultsAndIsCapped) {
  ListJobsRequest request;
  absl::StatusOr<JobListQuery> query = JobListQueryFromRequest(request);
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->max_jobs, kDefaultJobPageSize);
  EXPECT_EQ(query->max_bytes, kMaxJobPageBytes);
  EXPECT_TRUE(query->list_damaged);
  EXPECT_EQ(query->after_job, 0);

  request.set_page_size(7);
  EXPECT_EQ(JobListQueryFromRequest(request)->max_jobs, 7);
  request.set_page_size(1 << 30);
  EXPECT_EQ(JobListQueryFromRequest(request)->max_jobs, kMaxJobPageSize);
}

TEST(JobListingTest, FiltersAndTokenPassThrough) {
  ListJobsRequest request;
  request.set_page_token(EncodePageToken(41));
  request.add_states(JOB_STATE_RUNNING);
  request.add_states(JOB_STATE_FAILED);
  request.set_name_prefix("sweep-");
  absl::StatusOr<JobListQuery> query = JobListQueryFromRequest(request);
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->after_job, 41);
  EXPECT_THAT(query->states, ElementsAre(JOB_STATE_RUNNING, JOB_STATE_FAILED));
  EXPECT_EQ(query->name_prefix, "sweep-");
}

TEST(JobListingTest, RefusalsNameTheField) {
  ListJobsRequest negative;
  negative.set_page_size(-1);
  EXPECT_THAT(JobListQueryFromRequest(negative).status().message(), HasSubstr("page_size: -1"));

  ListJobsRequest token;
  token.set_page_token("garbage");
  EXPECT_THAT(JobListQueryFromRequest(token).status().message(), HasSubstr("page_token: "));

  for (int bad : {0, 7, -3}) {
    ListJobsRequest state;
    state.add_states(static_cast<JobState>(bad));
    absl::Status status = JobListQueryFromRequest(state).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("states: ", bad)));
  }
}

TEST(JobListingTest, EventPagesDefaultCapAndRefuseLikeJobPages) {
  ListJobEventsRequest request;
  absl::StatusOr<JobEventQuery> query = JobEventQueryFromRequest(request);
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->max_events, kDefaultEventPageSize);
  EXPECT_EQ(query->after_event, 0);
  request.set_page_size(1 << 30);
  request.set_page_token(EncodePageToken(12));
  query = JobEventQueryFromRequest(request);
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->max_events, kMaxEventPageSize);
  EXPECT_EQ(query->after_event, 12);
  request.set_page_size(-2);
  EXPECT_THAT(JobEventQueryFromRequest(request).status().message(), HasSubstr("page_size: -2"));
  request.set_page_size(0);
  request.set_page_token("x");
  EXPECT_THAT(JobEventQueryFromRequest(request).status().message(), HasSubstr("page_token: "));

  JobEventPage page;
  page.events.emplace_back().set_kind("state");
  page.next_after_event = 9;
  ListJobEventsResponse response = ListJobEventsResponseFromPage(page);
  EXPECT_EQ(response.events_size(), 1);
  EXPECT_EQ(*DecodePageToken(response.next_page_token(), "t"), 9);
}

TEST(JobListingTest, ResponseCarriesTheNextTokenOnlyWhenMoreMayFollow) {
  JobListPage page;
  page.jobs.emplace_back().set_job_id("job-3");
  page.next_after_job = 3;
  ListJobsResponse response = ListJobsResponseFromPage(page);
  ASSERT_EQ(response.jobs_size(), 1);
  EXPECT_EQ(*DecodePageToken(response.next_page_token(), "t"), 3);

  page.next_after_job = 0;
  EXPECT_EQ(ListJobsResponseFromPage(page).next_page_token(), "");
}

}  // namespace
}  // namespace mtrain
