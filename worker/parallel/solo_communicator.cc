#include "worker/parallel/solo_communicator.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"

namespace mtrain {
namespace {

class SoloCommunicator : public Communicator {
 public:
  explicit SoloCommunicator(std::string name) : name_(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }

  absl::Status AllReduce(float*, size_t, ReduceOp) override { return Check(); }
  absl::Status AllReduce(double*, size_t, ReduceOp) override { return Check(); }
  absl::Status AllGather(const float* in, float* out, size_t count) override {
    std::copy(in, in + count, out);
    return Check();
  }
  absl::Status ReduceScatter(const float* in, float* out, size_t count, ReduceOp) override {
    std::copy(in, in + count, out);
    return Check();
  }
  absl::Status Broadcast(float*, size_t, int root) override {
    if (root != 0) return absl::InvalidArgumentError(absl::StrCat(name_, ": root ", root));
    return Check();
  }
  absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(const void*, size_t, int peer,
                                                         uint64_t) override {
    return NoPeer(peer);
  }
  absl::Status Recv(void*, size_t, int peer, uint64_t) override { return NoPeer(peer); }
  absl::Status Barrier() override { return Check(); }
  void Abort() override { aborted_ = true; }

 private:
  absl::Status Check() const {
    if (aborted_) return absl::FailedPreconditionError(absl::StrCat(name_, " was aborted"));
    return absl::OkStatus();
  }
  absl::Status NoPeer(int peer) const {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, " has one member: no peer ", peer, " to message"));
  }

  const std::string name_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

std::unique_ptr<Communicator> MakeSoloCommunicator(std::string name) {
  return std::make_unique<SoloCommunicator>(std::move(name));
}

}  // namespace mtrain
