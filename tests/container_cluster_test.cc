// The container images built and run (issue 38): deploy/docker/build_image.sh builds the
// CPU image (Dockerfile.cpu) and the CUDA image (Dockerfile.cuda, on the stand-in base that
// has this machine's CUDA libraries where NVIDIA's image has them) with Debian's podman
// from this test's binaries, on a Debian base made by debootstrap. On a podman network:
// the coordinator in a CPU container, a worker in a CPU container and one in a CUDA
// container (no GPU here: it trains on the CPU). A job submitted with trainctl from the
// host (through the published port, with the bearer token) trains data-parallel across
// the two containers (Gloo between them over the container network); the CPU worker's
// container is killed mid-job, a new one replaces it, and the job resumes from its
// checkpoint and finishes with every loss equal to an uninterrupted single-rank run.
// Skipped, with the reason, where podman is missing or cannot start a container.
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_fixture.h"
#include "tests/container_engine.h"
#include "tests/metrics_scrape.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 1500;

class ContainerClusterTest : public ClusterTest {
 protected:
  void TearDown() override {
    if (podman_ != nullptr) {
      // The daemons' own output, for a failing run's log.
      for (const std::string& name : started_) {
        std::ofstream(Path(name + ".container.log")) << podman_->Logs(name);
      }
    }
    podman_.reset();  // removes the containers, the network and the images
    ClusterTest::TearDown();
  }

  // A worker daemon in a container of `image`, named `id` (its --worker_id too).
  std::string StartWorkerContainer(const std::string& id, const std::string& image,
                                   const std::string& device) {
    absl::StatusOr<std::string> name = podman_->RunDetached(
        id, image, {"--volume", secrets_ + ":/run/mtrain:ro"},
        {"worker", "--device=" + device, "--worker_id=" + id,
         "--coordinator=mtrain-coordinator:7070", "--token_file=/run/mtrain/token", "--threads=1"});
    EXPECT_TRUE(name.ok()) << name.status();
    if (name.ok()) started_.push_back(*name);
    return name.ok() ? *name : "";
  }

  std::unique_ptr<ContainerEngine> podman_;
  std::string secrets_;  // the token's directory, mounted read-only into every container
  std::vector<std::string> started_;
};

TEST_F(ContainerClusterTest, ImagesBuiltHereRunTheServiceAndAJobSurvivesALostContainer) {
  const std::string podman_dir = Path("podman");
  ::mkdir(podman_dir.c_str(), 0755);
  absl::StatusOr<std::unique_ptr<ContainerEngine>> podman = ContainerEngine::Create(podman_dir);
  if (!podman.ok() && absl::IsFailedPrecondition(podman.status())) {
    GTEST_SKIP() << "podman cannot run here: " << podman.status().message();
  }
  ASSERT_TRUE(podman.ok()) << podman.status();
  podman_ = *std::move(podman);

  absl::StatusOr<std::string> cpu_image = podman_->BuildImage("cpu", {});
  if (!cpu_image.ok() && absl::IsFailedPrecondition(cpu_image.status())) {
    GTEST_SKIP() << "podman cannot run a container here: " << cpu_image.status().message();
  }
  ASSERT_TRUE(cpu_image.ok()) << cpu_image.status();
  absl::StatusOr<std::string> cuda_image =
      podman_->BuildImage("cuda", {"--runtime_base=cuda-standin"});
  ASSERT_TRUE(cuda_image.ok()) << cuda_image.status();
  ASSERT_TRUE(podman_->CreateNetwork().ok());

  // The coordinator reads the token from a mounted file; the containers run as user 10001.
  secrets_ = Path("secrets");
  ::mkdir(secrets_.c_str(), 0755);
  token_file_ = secrets_ + "/token";
  std::ofstream(token_file_) << "container-test-token\n";
  ::chmod(token_file_.c_str(), 0644);
  trainctl_flags_ = {"--token_file=" + token_file_};

  absl::StatusOr<std::string> coordinator = podman_->RunDetached(
      "coordinator", *cpu_image,
      {"--network-alias", "mtrain-coordinator", "--publish", "127.0.0.1::7070", "--publish",
       "127.0.0.1::9464", "--volume", secrets_ + ":/run/mtrain:ro"},
      {"coordinator", "--listen=0.0.0.0:7070", "--http=0.0.0.0:9464", "--state_dir=/var/lib/mtrain",
       "--auth_token_file=/run/mtrain/token", "--heartbeat_interval=200ms",
       "--heartbeat_timeout=3s", "--lost_rank_grace=5s"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  started_.push_back(*coordinator);
  absl::StatusOr<int> grpc_port = podman_->PublishedPort(*coordinator, 7070);
  ASSERT_TRUE(grpc_port.ok()) << grpc_port.status();
  address_ = absl::StrCat("127.0.0.1:", *grpc_port);
  ASSERT_TRUE(WaitFor([&] { return AliveWorkers() == 0; }, absl::Seconds(30)))
      << "the coordinator's container does not answer: " << podman_->Logs(*coordinator);

  // One worker in each image; the CUDA image's finds no GPU and trains on the CPU.
  StartWorkerContainer("cpu-w1", *cpu_image, "cpu");
  StartWorkerContainer("cuda-w2", *cuda_image, "auto");
  ASSERT_TRUE(WaitFor([&] { return AliveWorkers() == 2; }, absl::Seconds(60)))
      << Trainctl({"workers"}).second << "\n"
      << podman_->Logs(started_.back());
  const std::string workers = Trainctl({"workers"}).second;
  EXPECT_THAT(workers, HasSubstr("cpu-w1"));
  EXPECT_THAT(workers, HasSubstr("cuda-w2"));

  // The status page's chart library (libjs-chart.js in the CPU image) and /metrics, through
  // the published HTTP port.
  absl::StatusOr<int> http_port = podman_->PublishedPort(*coordinator, 9464);
  ASSERT_TRUE(http_port.ok()) << http_port.status();
  absl::StatusOr<HttpResponse> chart = HttpGet(*http_port, "/static/chart.js");
  ASSERT_TRUE(chart.ok()) << chart.status();
  EXPECT_EQ(chart->status, 200) << chart->body.substr(0, 200);
  // The gauges follow the worker table on the coordinator's next tick.
  std::string scraped;
  EXPECT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<HttpResponse> metrics = HttpGet(*http_port, "/metrics");
        scraped = metrics.ok() ? metrics->body : metrics.status().ToString();
        return scraped.find("mtrain_workers_alive 2") != std::string::npos;
      },
      absl::Seconds(20)))
      << scraped;

  const std::string spec = WriteSpec(
      "job.json", absl::StrCat(R"({"name": "containers", "model": {"num_layers": 2, "num_heads": 4,
          "hidden_size": 32, "seq_length": 16}, "parallel": {"micro_batch_size": 2,
          "data": 2, "global_batch_size": 4}, "train": {"dropout": 0.1, "seed": 3,
          "steps": )",
                               kSteps, R"(, "checkpoint_every": 10}, "device": "DEVICE_CPU"})"));
  const std::string reference = RunStatic("static", spec);

  // 1,500 steps: still running when the container is killed after step 12 on a fast
  // machine. SIGKILL of the container: the worker and its rank die at once.
  const std::string job = Submit(spec);
  ASSERT_FALSE(job.empty());
  WaitForStep(job, 12, absl::Minutes(3));
  auto [killed, kill_output] = podman_->Run({"kill", "--signal=KILL", started_[1]});
  ASSERT_EQ(killed, 0) << kill_output;
  ASSERT_TRUE(WaitFor([&] { return AliveWorkers() == 1; }, absl::Seconds(30)))
      << Trainctl({"workers"}).second;
  StartWorkerContainer("cpu-w3", *cpu_image, "cpu");

  WaitForSuccess(job, absl::Minutes(5));
  const std::string events = Events(job);
  EXPECT_THAT(events, HasSubstr("resumes from checkpoint step")) << events;
  ExpectJobLossesEqualTheReference(job, reference, kSteps);
}

}  // namespace
}  // namespace mtrain
