#include "tests/slurm_cluster.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace mtrain {
namespace {

namespace fs = std::filesystem;

constexpr char kNodeName[] = "mtrainnode";
constexpr char kInstall[] =
    "[Debian's munge, slurmctld, slurmd and slurm-client: `make deps` installs them]";

// A TCP port nothing listens on now (the kernel's pick for port 0).
absl::StatusOr<int> FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  if (port <= 0) return absl::InternalError("no free port");
  return port;
}

std::string Tail(const std::string& text, size_t bytes = 2000) {
  return text.size() <= bytes ? text : text.substr(text.size() - bytes);
}

bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return done();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SlurmCluster>> SlurmCluster::Start(const std::string& dir,
                                                                  int cpus) {
  for (const char* binary :
       {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch",
        "/usr/bin/scancel", "/usr/bin/squeue", "/usr/bin/sinfo", "/usr/bin/scontrol"}) {
    if (::access(binary, X_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(binary, " is not installed ", kInstall));
    }
  }
  std::unique_ptr<SlurmCluster> cluster(new SlurmCluster(dir));
  if (absl::Status started = cluster->StartDaemons(cpus); !started.ok()) return started;
  return cluster;
}

absl::Status SlurmCluster::StartDaemons(int cpus) {
  // Unix socket paths are limited to 108 bytes, and a test's directory under Bazel is
  // longer: munged's socket and slurmd's step sockets (in its spool) live in a short
  // directory of their own, removed at the end.
  char runtime[] = "/tmp/mtrain-slurm-XXXXXX";
  if (::mkdtemp(runtime) == nullptr) return absl::InternalError("mkdtemp failed");
  runtime_dir_ = runtime;
  std::error_code error;
  for (const std::string& sub :
       {dir_ + "/log", dir_ + "/state", runtime_dir_ + "/munge", runtime_dir_ + "/spool"}) {
    fs::create_directories(sub, error);
    if (error) return absl::InternalError(absl::StrCat("cannot create ", sub));
  }
  // munged wants its key readable by itself only, and its socket's directories open to
  // all (searchable).
  fs::permissions(runtime_dir_, fs::perms(0755), error);
  fs::permissions(runtime_dir_ + "/munge", fs::perms(0755), error);
  const std::string key = runtime_dir_ + "/munge/munge.key";
  {
    std::ofstream out(key, std::ios::binary);
    std::random_device random;
    for (int i = 0; i < 1024; ++i) out.put(static_cast<char>(random() & 0xff));
  }
  fs::permissions(key, fs::perms(0400), error);
  const std::string socket = runtime_dir_ + "/munge/munge.socket";

  absl::StatusOr<int> controller_port = FreePort();
  absl::StatusOr<int> node_port = FreePort();
  if (!controller_port.ok()) return controller_port.status();
  if (!node_port.ok()) return node_port.status();
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string conf = dir_ + "/slurm.conf";
  {
    std::ofstream out(conf);
    out << "ClusterName=mtraintest\n"
        << "SlurmctldHost=" << host << "(127.0.0.1)\n"
        << "SlurmctldPort=" << *controller_port << "\n"
        << "SlurmdPort=" << *node_port << "\n"
        << "AuthType=auth/munge\nCredType=cred/munge\n"
        << "AuthInfo=socket=" << socket << "\n"
        << "StateSaveLocation=" << dir_ << "/state\n"
        << "SlurmdSpoolDir=" << runtime_dir_ << "/spool\n"
        << "SlurmctldPidFile=" << dir_ << "/slurmctld.pid\n"
        << "SlurmdPidFile=" << dir_ << "/slurmd.pid\n"
        << "SlurmctldLogFile=" << dir_ << "/log/slurmctld.log\n"
        << "SlurmdLogFile=" << dir_
        << "/log/slurmd.log\n"
        // Processes found by their parent chain, no cgroups or CPU binding: what a
        // container without systemd offers.
        << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
        << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
        << "SlurmUser=root\nSlurmdUser=root\nMpiDefault=none\nReturnToService=2\n"
        << "SlurmdParameters=config_overrides\n"
        // A cancelled step's processes get SIGKILL this long after SIGTERM.
        << "KillWait=5\n"
        << "JobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n"
        << "NodeName=" << kNodeName << " NodeHostname=" << host
        << " NodeAddr=127.0.0.1 CPUs=" << cpus << " RealMemory=8000 State=UNKNOWN\n"
        << "PartitionName=debug Nodes=" << kNodeName << " Default=YES MaxTime=INFINITE State=UP\n";
  }
  ::setenv("SLURM_CONF", conf.c_str(), 1);

  const auto start = [&](std::unique_ptr<ChildProcess>* child, std::vector<std::string> argv,
                         const std::string& name) -> absl::Status {
    absl::StatusOr<std::unique_ptr<ChildProcess>> started =
        ChildProcess::Start(argv, dir_ + "/log/" + name + ".out");
    if (!started.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(name, " did not start: ", started.status().message(), " ", kInstall));
    }
    *child = *std::move(started);
    return absl::OkStatus();
  };
  absl::Status status = start(
      &munged_,
      {"/usr/sbin/munged", "--foreground", "--force", "--socket=" + socket, "--key-file=" + key,
       "--log-file=" + dir_ + "/log/munged.log", "--pid-file=" + runtime_dir_ + "/munge/munged.pid",
       "--seed-file=" + runtime_dir_ + "/munge/seed"},
      "munged");
  if (!status.ok()) return status;
  if (!WaitUntil([&] { return fs::exists(socket) || !munged_->Running(); }, absl::Seconds(10)) ||
      !munged_->Running()) {
    return absl::FailedPreconditionError(
        absl::StrCat("munged did not start: ", Tail(munged_->Log())));
  }
  status = start(&slurmctld_, {"/usr/sbin/slurmctld", "-D", "-c"}, "slurmctld");
  if (!status.ok()) return status;
  status = start(&slurmd_, {"/usr/sbin/slurmd", "-D", "-N", kNodeName}, "slurmd");
  if (!status.ok()) return status;
  std::string state;
  const bool idle = WaitUntil(
      [&] {
        state = std::string(absl::StripAsciiWhitespace(
            Run({"/usr/bin/sinfo", "-h", "-o", "%T"}, absl::Seconds(5)).second));
        return state == "idle" || !slurmctld_->Running() || !slurmd_->Running();
      },
      absl::Seconds(30));
  if (!idle || state != "idle") {
    return absl::FailedPreconditionError(absl::StrCat(
        "the Slurm node did not become idle (sinfo: '", state,
        "'); slurmctld: ", Tail(slurmctld_->Log(), 800), "; slurmd: ", Tail(slurmd_->Log(), 800)));
  }
  return absl::OkStatus();
}

SlurmCluster::~SlurmCluster() {
  if (slurmctld_ != nullptr && slurmd_ != nullptr && slurmctld_->Running()) {
    // Every job, then whatever its steps still run (a task that ignored SIGTERM).
    const std::string jobs = Run({"/usr/bin/squeue", "-h", "-o", "%i"}, absl::Seconds(10)).second;
    for (absl::string_view id : absl::StrSplit(jobs, '\n', absl::SkipWhitespace())) {
      Run({"/usr/bin/scancel", std::string(absl::StripAsciiWhitespace(id))}, absl::Seconds(10));
    }
    const std::string pids = Run({"/usr/bin/scontrol", "listpids"}, absl::Seconds(10)).second;
    for (absl::string_view line : absl::StrSplit(pids, '\n', absl::SkipWhitespace())) {
      int pid = 0;
      const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (!fields.empty() && absl::SimpleAtoi(fields[0], &pid) && pid > 1) ::kill(pid, SIGKILL);
    }
  }
  for (std::unique_ptr<ChildProcess>* daemon : {&slurmd_, &slurmctld_, &munged_}) {
    if (*daemon == nullptr) continue;
    (*daemon)->Signal(SIGTERM);
    if (!(*daemon)->Wait(absl::Seconds(10)).ok()) (*daemon)->Signal(SIGKILL);
    daemon->reset();
  }
  ::unsetenv("SLURM_CONF");
  if (!runtime_dir_.empty()) {
    std::error_code ignored;
    fs::remove_all(runtime_dir_, ignored);
  }
}

std::pair<int, std::string> SlurmCluster::Run(const std::vector<std::string>& argv,
                                              absl::Duration timeout) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start(argv, absl::StrCat(dir_, "/log/command-", ++runs_, ".out"));
  if (!child.ok()) return {-1, std::string(child.status().message())};
  absl::StatusOr<int> code = (*child)->Wait(timeout);
  return {code.ok() ? *code : -1, (*child)->Log()};
}

absl::StatusOr<std::string> SlurmCluster::Sbatch(const std::vector<std::string>& args,
                                                 const std::vector<std::string>& env) {
  std::vector<std::string> argv = {"/usr/bin/sbatch", "--parsable",
                                   "--export=" + absl::StrJoin({std::string("ALL")}, ",") +
                                       (env.empty() ? "" : "," + absl::StrJoin(env, ","))};
  argv.insert(argv.end(), args.begin(), args.end());
  auto [code, output] = Run(argv);
  if (code != 0) return absl::InternalError(absl::StrCat("sbatch failed: ", output));
  // --parsable prints "JOBID" or "JOBID;CLUSTER".
  const std::string first = std::string(absl::StripAsciiWhitespace(
      std::vector<absl::string_view>(absl::StrSplit(output, absl::ByAnyChar(";\n"))).front()));
  int id = 0;
  if (!absl::SimpleAtoi(first, &id)) {
    return absl::InternalError(absl::StrCat("sbatch printed no job id: ", output));
  }
  return first;
}

std::string SlurmCluster::JobState(const std::string& job_id) {
  auto [code, output] = Run({"/usr/bin/squeue", "-h", "-j", job_id, "-o", "%T"}, absl::Seconds(10));
  if (code != 0) return "";  // purged: squeue calls the id invalid
  return std::string(absl::StripAsciiWhitespace(output));
}

absl::Status SlurmCluster::Cancel(const std::string& job_id, absl::Duration timeout) {
  auto [code, output] = Run({"/usr/bin/scancel", job_id});
  if (code != 0) return absl::InternalError(absl::StrCat("scancel failed: ", output));
  if (!WaitUntil([&] { return JobState(job_id).empty(); }, timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("Slurm job ", job_id, " still listed: ", JobState(job_id)));
  }
  return absl::OkStatus();
}

}  // namespace mtrain
