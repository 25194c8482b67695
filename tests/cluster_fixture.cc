#include "tests/cluster_fixture.h"

#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"

namespace mtrain {

void ClusterTest::TearDown() {
  workers_.clear();  // SIGKILL + reap (ChildProcess's destructor)
  coordinator_.reset();
}

std::string ClusterTest::Path(const std::string& name) {
  const std::string dir = absl::StrCat(
      TestTempDir(), "/", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  ::mkdir(dir.c_str(), 0755);
  return absl::StrCat(dir, "/", name);
}

void ClusterTest::StartCoordinator(const std::string& listen,
                                   const std::vector<std::string>& extra_flags) {
  std::vector<std::string> argv = {"coordinator/coordinator",    "--listen=" + listen,
                                   "--http=127.0.0.1:0",         "--state_dir=" + Path("state"),
                                   "--heartbeat_interval=200ms", "--heartbeat_timeout=3s",
                                   "--lost_rank_grace=5s"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  if (!token_file_.empty()) argv.push_back("--auth_token_file=" + token_file_);
  auto coordinator =
      ChildProcess::Start(argv, Path(absl::StrCat("coordinator-", ++coordinator_runs_, ".log")));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  coordinator_ = *std::move(coordinator);
  absl::StatusOr<std::string> line =
      coordinator_->WaitForOutput("coordinator listening on ", kStartTimeout);
  ASSERT_TRUE(line.ok()) << line.status();
  address_ = line->substr(line->rfind(' ') + 1);
  absl::StatusOr<std::string> metrics =
      coordinator_->WaitForOutput("coordinator metrics on ", kStartTimeout);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const std::string url = metrics->substr(metrics->rfind(' ') + 1);
  const std::string port =
      url.substr(url.rfind(':') + 1, url.find("/metrics") - url.rfind(':') - 1);
  ASSERT_TRUE(absl::SimpleAtoi(port, &metrics_port_)) << url;
}

void ClusterTest::StartWorkers(int n) {
  const int before = static_cast<int>(workers_.size());
  for (int i = before; i < before + n; ++i) {
    const std::string id = absl::StrCat("w", i);
    std::vector<std::string> argv = {"worker/worker", "--coordinator=" + address_,
                                     "--device=cpu",  "--worker_id=" + id,
                                     "--threads=1",   "--log_dir=" + Path("ranks")};
    if (!token_file_.empty()) argv.push_back("--token_file=" + token_file_);
    argv.insert(argv.end(), worker_flags_.begin(), worker_flags_.end());
    auto worker = ChildProcess::Start(argv, Path(absl::StrCat(id, "-", ++worker_runs_, ".log")));
    ASSERT_TRUE(worker.ok()) << worker.status();
    workers_.push_back(*std::move(worker));
  }
  ASSERT_TRUE(WaitFor([&] { return AliveWorkers() >= before + n; }, absl::Seconds(20)))
      << "workers did not register: " << Trainctl({"workers"}).second;
}

std::pair<int, std::string> ClusterTest::Trainctl(std::vector<std::string> args,
                                                  absl::Duration timeout) {
  std::vector<std::string> argv = {"coordinator/cli/trainctl", "--coordinator=" + address_};
  argv.insert(argv.end(), trainctl_flags_.begin(), trainctl_flags_.end());
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string log = Path(absl::StrCat("trainctl-", ++trainctl_runs_, ".log"));
  auto child = ChildProcess::Start(argv, log);
  if (!child.ok()) return {-1, child.status().ToString()};
  absl::StatusOr<int> code = (*child)->Wait(timeout);
  return {code.ok() ? *code : -1, (*child)->Log()};
}

std::string ClusterTest::WriteSpec(const std::string& name, const std::string& json) {
  const std::string path = Path(name);
  std::ofstream(path) << json;
  return path;
}

std::unique_ptr<Coordinator::Stub> ClusterTest::Stub() {
  return Coordinator::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
}

void ClusterTest::Authorize(grpc::ClientContext* context) const {
  if (token_file_.empty()) return;
  std::ifstream in(token_file_);
  std::string token;
  std::getline(in, token);
  context->AddMetadata("authorization", "Bearer " + token);
}

absl::StatusOr<JobStatus> ClusterTest::Status(const std::string& job) {
  grpc::ClientContext context;
  Authorize(&context);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  GetJobRequest request;
  request.set_job_id(job);
  JobStatus status;
  grpc::Status s = Stub()->GetJob(&context, request, &status);
  if (!s.ok())
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  return status;
}

JobState ClusterTest::StateOf(const std::string& job) {
  absl::StatusOr<JobStatus> status = Status(job);
  return status.ok() ? status->state() : JOB_STATE_UNSPECIFIED;
}

int ClusterTest::AliveWorkers() {
  grpc::ClientContext context;
  Authorize(&context);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ListWorkersResponse response;
  if (!Stub()->ListWorkers(&context, ListWorkersRequest(), &response).ok()) return -1;
  int alive = 0;
  for (const WorkerStatus& w : response.workers()) alive += w.alive() ? 1 : 0;
  return alive;
}

bool ClusterTest::WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return done();
}

std::string ClusterTest::Submit(const std::string& spec_path, std::vector<std::string> extra) {
  std::vector<std::string> args = {"submit", "--json", spec_path};
  args.insert(args.end(), extra.begin(), extra.end());
  auto [code, output] = Trainctl(args);
  EXPECT_EQ(code, 0) << output;
  const size_t at = output.find("\"job_id\":\"");
  if (at == std::string::npos) return "";
  const size_t begin = at + 10;
  return output.substr(begin, output.find('"', begin) - begin);
}

ChildProcess* ClusterTest::Worker(const std::string& id) {
  size_t index = 0;
  if (id.size() < 2 || id[0] != 'w' || !absl::SimpleAtoi(id.substr(1), &index) ||
      index >= workers_.size()) {
    return nullptr;
  }
  return workers_[index].get();
}

int ClusterTest::RankProcessOf(int worker_pid) {
  std::ifstream in(absl::StrCat("/proc/", worker_pid, "/task/", worker_pid, "/children"));
  std::stringstream text;
  text << in.rdbuf();
  for (absl::string_view pid : absl::StrSplit(text.str(), ' ', absl::SkipWhitespace())) {
    int child = 0;
    if (absl::SimpleAtoi(pid, &child)) return child;
  }
  return -1;
}

}  // namespace mtrain
