#include "tests/container_engine.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/child_process.h"

namespace mtrain {
namespace {

constexpr char kPodman[] = "/usr/bin/podman";
// build_image.sh's exit status where podman is missing or cannot start a container here.
constexpr int kCannotRunHere = 3;

std::string Tail(const std::string& text, size_t bytes = 3000) {
  return text.size() <= bytes ? text : text.substr(text.size() - bytes);
}

std::string WorkingDirectory() {
  char cwd[4096] = {};
  return ::getcwd(cwd, sizeof(cwd) - 1) != nullptr ? cwd : ".";
}

}  // namespace

absl::StatusOr<std::unique_ptr<ContainerEngine>> ContainerEngine::Create(const std::string& dir) {
  if (::access(kPodman, X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(kPodman, " is not installed [Debian's podman: `make deps` installs it]"));
  }
  return std::unique_ptr<ContainerEngine>(
      new ContainerEngine(dir, absl::StrCat("mtrain-test-", ::getpid())));
}

ContainerEngine::~ContainerEngine() {
  if (!containers_.empty()) {
    std::vector<std::string> args = {"rm", "--force", "--time=0"};
    args.insert(args.end(), containers_.begin(), containers_.end());
    Run(args);
  }
  if (!network_.empty()) Run({"network", "rm", "--force", network_});
  if (!images_.empty()) {
    // --no-prune: the untagged layers stay as the build cache of the next run (the
    // runtime packages' and the libraries' layers take minutes to make again).
    std::vector<std::string> args = {"rmi", "--force", "--no-prune"};
    args.insert(args.end(), images_.begin(), images_.end());
    Run(args);
  }
}

std::pair<int, std::string> ContainerEngine::Run(const std::vector<std::string>& args,
                                                 absl::Duration timeout) {
  std::vector<std::string> argv = {kPodman};
  argv.insert(argv.end(), args.begin(), args.end());
  auto child = ChildProcess::Start(argv, absl::StrCat(dir_, "/podman-", ++runs_, ".log"));
  if (!child.ok()) return {-1, child.status().ToString()};
  absl::StatusOr<int> code = (*child)->Wait(timeout);
  return {code.ok() ? *code : -1, (*child)->Log()};
}

absl::StatusOr<std::string> ContainerEngine::BuildImage(
    const std::string& flavor, const std::vector<std::string>& extra_flags) {
  const std::string runfiles = WorkingDirectory();
  const std::string image = absl::StrCat("localhost/", prefix_, "-", flavor, ":test");
  const std::string env_file = absl::StrCat(dir_, "/podman-", flavor, ".env");
  std::vector<std::string> argv = {"/bin/bash",
                                   runfiles + "/deploy/docker/build_image.sh",
                                   "--flavor=" + flavor,
                                   "--tag=" + image,
                                   "--bin_dir=" + runfiles,
                                   "--corpus=" + runfiles + "/tests/data/shakespeare.txt",
                                   absl::StrCat("--context=", dir_, "/context-", flavor),
                                   "--podman_env=" + env_file};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  auto build = ChildProcess::Start(argv, absl::StrCat(dir_, "/build-", flavor, ".log"));
  if (!build.ok()) return build.status();
  absl::StatusOr<int> code = (*build)->Wait(absl::Minutes(10));
  if (!code.ok()) return absl::DeadlineExceededError(Tail((*build)->Log()));
  if (*code == kCannotRunHere) return absl::FailedPreconditionError(Tail((*build)->Log(), 800));
  if (*code != 0) {
    return absl::InternalError(absl::StrCat("build_image.sh --flavor=", flavor, " exited ", *code,
                                            ":\n", Tail((*build)->Log())));
  }
  images_.push_back(image);
  // CONTAINERS_CONF=... when podman's defaults cannot run containers here; later podman
  // commands of this process need the same.
  std::ifstream env(env_file);
  std::string line;
  while (std::getline(env, line)) {
    const size_t equals = line.find('=');
    if (equals != std::string::npos) {
      ::setenv(line.substr(0, equals).c_str(), line.substr(equals + 1).c_str(), 1);
    }
  }
  return image;
}

absl::StatusOr<std::string> ContainerEngine::CreateNetwork() {
  const std::string name = prefix_;
  auto [code, output] = Run({"network", "create", name});
  if (code != 0) return absl::InternalError(absl::StrCat("podman network create: ", output));
  network_ = name;
  return name;
}

absl::StatusOr<std::string> ContainerEngine::RunDetached(
    const std::string& name, const std::string& image, const std::vector<std::string>& podman_flags,
    const std::vector<std::string>& command) {
  const std::string full_name = absl::StrCat(prefix_, "-", name);
  std::vector<std::string> args = {"run", "--detach", "--name", full_name};
  if (!network_.empty()) {
    args.push_back("--network");
    args.push_back(network_);
  }
  args.insert(args.end(), podman_flags.begin(), podman_flags.end());
  args.push_back(image);
  args.insert(args.end(), command.begin(), command.end());
  // Recorded before it runs: a container created but failed to start is removed too.
  containers_.push_back(full_name);
  auto [code, output] = Run(args);
  if (code != 0) {
    return absl::InternalError(absl::StrCat("podman run ", full_name, ": ", Tail(output)));
  }
  return full_name;
}

absl::StatusOr<int> ContainerEngine::PublishedPort(const std::string& container,
                                                   int container_port) {
  auto [code, output] = Run({"port", container, absl::StrCat(container_port, "/tcp")});
  const std::string line(absl::StripAsciiWhitespace(output));
  int port = 0;
  if (code != 0 || line.rfind(':') == std::string::npos ||
      !absl::SimpleAtoi(line.substr(line.rfind(':') + 1), &port)) {
    return absl::InternalError(absl::StrCat("podman port ", container, ": ", output));
  }
  return port;
}

std::string ContainerEngine::Logs(const std::string& container) {
  return Run({"logs", container}).second;
}

}  // namespace mtrain
