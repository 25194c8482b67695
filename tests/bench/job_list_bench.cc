// How long listing jobs takes in a job store of many jobs, the old way (every job in one
// message) against pages (coordinator/job_store.h's ListJobs(JobListQuery)), and what
// Tick's read of unfinished jobs costs. Prints numbers; not a test (docs/PERFORMANCE.md):
//
//   bazel run -c opt //tests/bench:job_list_bench -- --jobs=30000
//
// The store is an SQLite file in a fresh temporary directory (synchronous=FULL, as the
// coordinator runs it); every job but the last --unfinished is CANCELLED.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "coordinator/job_listing.h"
#include "coordinator/job_store.h"
#include "proto/coordinator.pb.h"

ABSL_FLAG(int, jobs, 30000, "jobs in the store");
ABSL_FLAG(int, unfinished, 20, "of them, the newest this many stay PENDING");
ABSL_FLAG(int, repeats, 20, "timed repetitions of each listing (the median is printed)");

namespace mtrain {
namespace {

double MedianMs(int repeats, const std::function<void()>& run) {
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int Run() {
  const int jobs = absl::GetFlag(FLAGS_jobs);
  const int unfinished = absl::GetFlag(FLAGS_unfinished);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const std::string dir =
      absl::StrCat(std::filesystem::temp_directory_path().string(), "/job_list_bench.", getpid());
  std::filesystem::create_directories(dir);
  absl::StatusOr<std::unique_ptr<JobStore>> opened = JobStore::Open(dir + "/jobs.sqlite");
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
    return 1;
  }
  JobStore& store = **opened;
  // An ordinary spec as `trainctl submit` stores it: a name and a few sections.
  JobSpec spec;
  spec.mutable_model()->set_num_layers(2);
  spec.mutable_model()->set_hidden_size(64);
  spec.mutable_parallel()->set_data(2);
  spec.mutable_train()->set_steps(100);
  spec.mutable_data()->set_path("data/tiny_shakespeare.txt");
  const auto fill_start = std::chrono::steady_clock::now();
  for (int i = 1; i <= jobs; ++i) {
    spec.set_name(absl::StrCat(i % 100 == 0 ? "sweep-" : "job-", i));
    absl::StatusOr<std::string> id = store.CreateJob(spec, i);
    if (!id.ok()) return 1;
    if (i <= jobs - unfinished && !store.Transition(*id, JOB_STATE_CANCELLED, "bench", i).ok()) {
      return 1;
    }
  }
  const double fill_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - fill_start).count();
  std::printf("store: %d jobs (%d PENDING, the rest CANCELLED), filled in %.1f s\n", jobs,
              unfinished, fill_s);

  std::printf("%-44s %10s %8s %12s\n", "listing", "median ms", "jobs", "message bytes");
  const auto report = [&](const char* what, const std::function<size_t(size_t*)>& list) {
    size_t count = 0, bytes = 0;
    const double ms = MedianMs(repeats, [&] { bytes = list(&count); });
    std::printf("%-44s %10.2f %8zu %12zu\n", what, ms, count, bytes);
  };
  report("every job in one message (before)", [&](size_t* count) {
    ListJobsResponse response;
    absl::StatusOr<std::vector<JobStatus>> all = store.ListJobs();
    if (!all.ok()) return size_t{0};
    for (JobStatus& job : *all) *response.add_jobs() = std::move(job);
    *count = response.jobs_size();
    return response.ByteSizeLong();
  });
  const auto page = [&](ListJobsRequest request) {
    return [&store, request](size_t* count) {
      ListJobsResponse response =
          ListJobsResponseFromPage(*store.ListJobs(*JobListQueryFromRequest(request)));
      *count = response.jobs_size();
      return response.ByteSizeLong();
    };
  };
  ListJobsRequest first;
  first.set_page_size(1000);
  report("first page of 1000", page(first));
  ListJobsRequest middle = first;
  middle.set_page_token(ListJobsResponseFromPage({{}, jobs / 2}).next_page_token());
  report("page of 1000 from the middle", page(middle));
  ListJobsRequest small;
  report("first page, default size (100)", page(small));
  ListJobsRequest pending;
  pending.set_page_size(1000);
  pending.add_states(JOB_STATE_PENDING);
  report("state=PENDING (Tick's read, now)", page(pending));
  ListJobsRequest prefix;
  prefix.set_page_size(1000);
  prefix.set_name_prefix("sweep-");
  report("name prefix sweep- (1 job in 100)", page(prefix));
  ListJobsRequest both = prefix;
  both.add_states(JOB_STATE_PENDING);
  report("state=PENDING and name prefix sweep-", page(both));
  size_t all_pages = 0;
  const double walk_ms = MedianMs(std::max(1, repeats / 4), [&] {
    ListJobsRequest request;
    request.set_page_size(1000);
    all_pages = 0;
    do {
      ListJobsResponse response =
          ListJobsResponseFromPage(*store.ListJobs(*JobListQueryFromRequest(request)));
      ++all_pages;
      request.set_page_token(response.next_page_token());
    } while (!request.page_token().empty());
  });
  std::printf("%-44s %10.2f %8d %12s\n",
              absl::StrCat("every job in pages of 1000 (", all_pages, " pages)").c_str(), walk_ms,
              jobs, "-");
  opened->reset();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return mtrain::Run();
}
