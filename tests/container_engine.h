// Debian's podman for integration tests: builds the project's images from this test's
// binaries (deploy/docker/build_image.sh), creates a container network, runs detached
// containers on it, and at the end removes every container, network and image it made,
// on failure too. Podman's commands run as this test's children; the environment podman
// needs on this machine (CONTAINERS_CONF, when its defaults cannot start a container
// here) is set for this process by Create.
//
//   ASSIGN_OR_RETURN(auto podman, ContainerEngine::Create(dir));
//   absl::StatusOr<std::string> image = podman->BuildImage("cpu", {});
//   podman->CreateNetwork();
//   podman->RunDetached("coordinator", *image, {"--network-alias=c"}, {"coordinator", ...});
#ifndef MTRAIN_TESTS_CONTAINER_ENGINE_H_
#define MTRAIN_TESTS_CONTAINER_ENGINE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mtrain {

class ContainerEngine {
 public:
  // FAILED_PRECONDITION with the reason where podman is missing or cannot start a
  // container here (tests skip with it). Names made here carry a prefix unique to this
  // process, so concurrent tests and a user's own containers are never touched.
  static absl::StatusOr<std::unique_ptr<ContainerEngine>> Create(const std::string& dir);
  ~ContainerEngine();
  ContainerEngine(const ContainerEngine&) = delete;
  ContainerEngine& operator=(const ContainerEngine&) = delete;

  // Runs `podman ARGS...` to completion: {exit code (-1 if it could not run), output}.
  std::pair<int, std::string> Run(const std::vector<std::string>& args,
                                  absl::Duration timeout = absl::Seconds(60));

  // deploy/docker/build_image.sh --flavor=FLAVOR with this test's binaries (runfiles) and
  // `extra_flags`; returns the image's name. Removed at the end.
  absl::StatusOr<std::string> BuildImage(const std::string& flavor,
                                         const std::vector<std::string>& extra_flags);

  // A bridge network with DNS (containers find each other by name); its name.
  absl::StatusOr<std::string> CreateNetwork();

  // `podman run -d --name PREFIX-NAME --network NETWORK PODMAN_FLAGS IMAGE COMMAND...`;
  // returns the container's full name.
  absl::StatusOr<std::string> RunDetached(const std::string& name, const std::string& image,
                                          const std::vector<std::string>& podman_flags,
                                          const std::vector<std::string>& command);
  // The host port podman published for the container's `container_port`/tcp.
  absl::StatusOr<int> PublishedPort(const std::string& container, int container_port);
  // The container's own output (podman logs).
  std::string Logs(const std::string& container);

  const std::string& network() const { return network_; }

 private:
  ContainerEngine(std::string dir, std::string prefix)
      : dir_(std::move(dir)), prefix_(std::move(prefix)) {}

  std::string dir_;     // logs of podman's commands, image build contexts
  std::string prefix_;  // of every name this engine makes
  std::string network_;
  int runs_ = 0;
  std::vector<std::string> containers_, images_;
};

}  // namespace mtrain

#endif  // MTRAIN_TESTS_CONTAINER_ENGINE_H_
