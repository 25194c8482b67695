#include "worker/parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "worker/parallel/group_watchdog.h"

namespace mtrain {
namespace {

// Polling: spin (yielding) for the first polls, where short collectives finish, then
// sleep briefly so a long wait does not burn a core.
constexpr int kSpinPolls = 2000;
constexpr absl::Duration kPollInterval = absl::Microseconds(50);

std::string CudaText(cudaError_t error) {
  return absl::StrCat(cudaGetErrorName(error), ": ", cudaGetErrorString(error));
}

absl::StatusCode CodeOf(ncclResult_t result) {
  switch (result) {
    case ncclSystemError:
    case ncclRemoteError:
      return absl::StatusCode::kUnavailable;  // a peer or the network failed
    default:
      return absl::StatusCode::kInternal;
  }
}

// A send recorded by StartSend, issued later (see nccl_communicator.h).
struct SendRecord {
  const void* data;
  size_t bytes;
  int peer;
};

// What a group's operations and its pending sends share; pending sends hold it by
// shared_ptr, so the communicator may be destroyed first.
class NcclGroup {
 public:
  // `store` must outlive the group (its watchdog reports there after a failure).
  NcclGroup(KeyValueStore* store, const GroupSpec& spec, int rank, int device)
      : name_(GroupDisplayName(spec)),
        rank_(rank),
        size_(static_cast<int>(spec.members.size())),
        device_(device),
        timeout_(spec.timeout),
        watchdog_(store, spec, rank) {}

  ~NcclGroup() {
    cudaSetDevice(device_);
    {
      MutexLock lock(&mutex_);
      if (comm_ != nullptr) {
        // Flush and release cleanly when the peers are still there; abort otherwise.
        const ncclResult_t finalize = ncclCommFinalize(comm_);
        const bool finalized = finalize == ncclSuccess || finalize == ncclInProgress;
        const absl::Time deadline = absl::Now() + timeout_;
        ncclResult_t state = ncclInProgress;
        while (finalized && ncclCommGetAsyncError(comm_, &state) == ncclSuccess &&
               state == ncclInProgress && absl::Now() < deadline) {
          absl::SleepFor(kPollInterval);
        }
        if (finalized && state == ncclSuccess) {
          ncclCommDestroy(comm_);
        } else {
          ncclCommAbort(comm_);
        }
        comm_ = nullptr;
      }
    }
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  const std::string& name() const { return name_; }
  float* barrier_scratch() const { return scratch_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Numbers the operations (one thread at a time, as the Communicator contract says).
  GroupWatchdog& watchdog() { return watchdog_; }

  // Creates the stream and the communicator from a unique id (`create`); polls the
  // non-blocking initialisation until `deadline`.
  absl::Status Init(const std::function<ncclResult_t(ncclComm_t*, ncclConfig_t*)>& create,
                    const std::string& call, absl::Time deadline) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    if (absl::Status s = Prepare(&config); !s.ok()) return s;
    MutexLock lock(&mutex_);
    const ncclResult_t started = create(&comm_, &config);
    if (started != ncclSuccess && started != ncclInProgress) {
      return FailLocked(
          absl::Status(CodeOf(started), absl::StrCat("group ", name_, ": ", call, ": ",
                                                     ncclGetErrorString(started), LastError())));
    }
    return AwaitInitLocked(deadline);
  }

  // ncclCommSplit of this (world) communicator, collective over its members: `child` is
  // initialised as the group of `color` with rank order `key`, or, when null, this member
  // joins no group (NCCL_SPLIT_NOCOLOR). Polls the non-blocking split until `deadline`.
  //
  // A non-blocking split is an operation of the parent (NVIDIA/nccl#1472): ncclCommSplit
  // returns with *newcomm NULL, the parent stays ncclInProgress, and NCCL's own thread
  // stores the new communicator into *newcomm when it is done. So the parent is polled
  // (polling the child's still-NULL handle fails with ncclInvalidArgument), and the
  // target (child->comm_ or split_target_) stays alive until the split has completed or
  // the parent was aborted (ncclCommAbort joins NCCL's thread).
  absl::Status Split(NcclGroup* child, int color, int key, absl::Time deadline) {
    if (absl::Status s = Begin("ncclCommSplit"); !s.ok()) return s;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    if (child != nullptr) {
      if (absl::Status s = child->Prepare(&config); !s.ok()) return s;
    }
    {
      MutexLock lock(&mutex_);
      if (absl::Status s = SplitLocked(child, color, key, &config, deadline); !s.ok()) return s;
    }
    if (child == nullptr) return absl::OkStatus();
    return child->AwaitSplit(deadline);
  }

  int device() const { return device_; }
  absl::Duration timeout() const { return timeout_; }

  // FAILED_PRECONDITION once aborted or broken; selects the device for this thread.
  absl::Status Begin(const std::string& what) {
    if (aborted_.load()) return Aborted(what);
    {
      MutexLock lock(&mutex_);
      if (!broken_.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            what, " in group ", name_, ": unusable after an earlier error: ", broken_.message()));
      }
    }
    const cudaError_t error = cudaSetDevice(device_);
    if (error != cudaSuccess) {
      cudaGetLastError();
      return absl::InternalError(absl::StrCat(what, " in group ", name_, ": cudaSetDevice(",
                                              device_, "): ", CudaText(error)));
    }
    return absl::OkStatus();
  }

  // Issues `enqueue` (NCCL calls on comm/stream), preceded in one NCCL group by the sends
  // StartSend recorded, then waits for the stream. `enqueue` may be empty (just flush).
  // A failure goes through the watchdog (group_watchdog.h), outside the lock so that
  // Abort stays prompt: after a timeout the peers that reached the same operation time
  // out within moments too (each polls its own deadline) and report, and the message
  // names those that never did.
  absl::Status Run(const GroupOperation& op,
                   const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& enqueue) {
    absl::Status status = Issue(op.Text(), enqueue);
    if (status.ok()) status = Complete(op.Text());
    if (status.ok()) return status;
    return watchdog_.Explain(op, status, "", [this] { return aborted_.load(); });
  }

  void RecordSend(const void* data, size_t bytes, int peer) {
    MutexLock lock(&mutex_);
    unissued_sends_.push_back(SendRecord{data, bytes, peer});
  }

  void Abort() {
    aborted_.store(true);
    MutexLock lock(&mutex_);
    if (comm_ != nullptr) {
      // The caller's thread may work on another device: give it back as it was.
      int caller_device = device_;
      cudaGetDevice(&caller_device);
      cudaSetDevice(device_);
      // Also stops this member's kernels in flight; the polling thread then sees the
      // communicator gone at its next poll.
      ncclCommAbort(comm_);
      comm_ = nullptr;
      cudaSetDevice(caller_device);
    }
  }

 private:
  // Creates the stream and the scratch float on device_ (selected for this thread) and
  // fills `config` for a non-blocking communicator named after the group.
  absl::Status Prepare(ncclConfig_t* config) {
    cudaError_t error = cudaSetDevice(device_);
    if (error == cudaSuccess) error = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (error == cudaSuccess) error = cudaMalloc(&scratch_, sizeof(float));
    if (error != cudaSuccess) {
      cudaGetLastError();
      return absl::InternalError(
          absl::StrCat("group ", name_, ": CUDA setup on device ", device_, ": ", CudaText(error)));
    }
    config->blocking = 0;
    config->commName = name_.c_str();
    return absl::OkStatus();
  }

  // Split's work on this (parent) group: starts ncclCommSplit and polls the parent until
  // the split is done, releasing the lock between polls so that Abort stays prompt.
  absl::Status SplitLocked(NcclGroup* child, int color, int key, ncclConfig_t* config,
                           absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (comm_ == nullptr) return Aborted("ncclCommSplit");
    ncclComm_t* const target = child != nullptr ? child->SplitSlot() : &split_target_;
    const ncclResult_t started = ncclCommSplit(comm_, child != nullptr ? color : NCCL_SPLIT_NOCOLOR,
                                               key, target, child != nullptr ? config : nullptr);
    if (started != ncclSuccess && started != ncclInProgress) {
      return FailLocked(
          absl::Status(CodeOf(started), absl::StrCat("group ", name_, ": ncclCommSplit: ",
                                                     ncclGetErrorString(started), LastError())));
    }
    for (int polls = 0;; ++polls) {
      ncclResult_t state = ncclInProgress;
      const ncclResult_t queried = ncclCommGetAsyncError(comm_, &state);
      if (queried != ncclSuccess) state = queried;
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) {
        return FailLocked(
            absl::Status(CodeOf(state), absl::StrCat("group ", name_, ": ncclCommSplit failed: ",
                                                     ncclGetErrorString(state), LastError())));
      }
      if (absl::Now() >= deadline) {
        return FailLocked(absl::DeadlineExceededError(
            absl::StrCat("group ", name_, ": ncclCommSplit did not complete within ",
                         absl::FormatDuration(timeout_), " (a member missing?)")));
      }
      mutex_.Unlock();
      Pause(polls);
      mutex_.Lock();
      if (comm_ == nullptr) return Aborted("ncclCommSplit");
    }
  }

  // Where ncclCommSplit stores this (child) group's communicator. NCCL writes it from its
  // own thread when the split completes, outside any lock of ours, so no lock could guard
  // that write and taking mutex_ here would prove nothing. What makes it safe: the child is
  // not shared until Split has returned (only the splitting thread knows it), and
  // AwaitSplit reads comm_ atomically under mutex_ once the parent reports the split done.
  ncclComm_t* SplitSlot() ABSL_NO_THREAD_SAFETY_ANALYSIS { return &comm_; }

  // The child's side of Split, once the parent reported the split complete: comm_ was
  // filled by NCCL (null only if NCCL failed to); polls its own state until `deadline`.
  absl::Status AwaitSplit(absl::Time deadline) {
    MutexLock lock(&mutex_);
    for (int polls = 0; __atomic_load_n(&comm_, __ATOMIC_ACQUIRE) == nullptr; ++polls) {
      if (absl::Now() >= deadline) {
        return FailLocked(absl::InternalError(absl::StrCat(
            "group ", name_, ": ncclCommSplit completed without a communicator", LastError())));
      }
      Pause(polls);
    }
    return AwaitInitLocked(deadline);
  }

  // Polls the non-blocking initialisation (or split) of comm_ until `deadline`.
  absl::Status AwaitInitLocked(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    for (int polls = 0;; ++polls) {
      ncclResult_t state = ncclInProgress;
      const ncclResult_t queried = ncclCommGetAsyncError(comm_, &state);
      if (queried != ncclSuccess) state = queried;
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) {
        // Two members on one GPU: NCCL 2.28 refuses them ("Duplicate GPU detected").
        const std::string hint =
            state == ncclInvalidUsage
                ? " [several ranks on one GPU? NCCL up to 2.29 refuses that; use Gloo for "
                  "their collectives (train --gpu_collectives=gloo)]"
                : "";
        return FailLocked(absl::Status(
            CodeOf(state), absl::StrCat("group ", name_, ": NCCL initialisation failed: ",
                                        ncclGetErrorString(state), LastError(), hint)));
      }
      if (absl::Now() >= deadline) {
        return FailLocked(absl::DeadlineExceededError(
            absl::StrCat("group ", name_, ": NCCL initialisation did not complete within ",
                         absl::FormatDuration(timeout_), " (a member missing?)")));
      }
      Pause(polls);
    }
  }

  // Issues the recorded sends and `enqueue` as one NCCL group.
  absl::Status Issue(const std::string& what,
                     const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& enqueue) {
    MutexLock lock(&mutex_);
    if (comm_ == nullptr) return Aborted(what);
    ncclResult_t result = ncclGroupStart();
    for (const SendRecord& send : unissued_sends_) {
      if (result == ncclSuccess) {
        result = ncclSend(send.data, send.bytes, ncclUint8, send.peer, comm_, stream_);
      }
    }
    unissued_sends_.clear();
    if (result == ncclSuccess && enqueue) result = enqueue(comm_, stream_);
    const ncclResult_t ended = ncclGroupEnd();
    if (result == ncclSuccess) result = ended;
    if (result != ncclSuccess && result != ncclInProgress) {
      return FailLocked(absl::Status(
          CodeOf(result),
          absl::StrCat(what, " in group ", name_, ": ", ncclGetErrorString(result), LastError())));
    }
    return absl::OkStatus();
  }

  absl::Status Aborted(const std::string& what) const {
    if (!aborted_.load()) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, " in group ", name_, ": unusable after an earlier error"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat(what, " in group ", name_, ": the group was aborted"));
  }

  // Polls until the stream has drained, NCCL reports an error, Abort() is called or the
  // timeout passes (then the communicator is aborted).
  absl::Status Complete(const std::string& what) {
    const absl::Time deadline = absl::Now() + timeout_;
    for (int polls = 0;; ++polls) {
      {
        MutexLock lock(&mutex_);
        if (comm_ == nullptr) return Aborted(what);
        ncclResult_t state = ncclInProgress;
        const ncclResult_t queried = ncclCommGetAsyncError(comm_, &state);
        if (queried != ncclSuccess) state = queried;
        if (state != ncclSuccess && state != ncclInProgress) {
          return FailLocked(absl::Status(
              CodeOf(state), absl::StrCat(what, " in group ", name_,
                                          " failed: ", ncclGetErrorString(state), LastError())));
        }
        // ncclInProgress: the non-blocking enqueue itself has not finished yet.
        if (state == ncclSuccess) {
          const cudaError_t error = cudaStreamQuery(stream_);
          if (error == cudaSuccess) return absl::OkStatus();
          if (error != cudaErrorNotReady) {
            cudaGetLastError();
            return FailLocked(absl::InternalError(
                absl::StrCat(what, " in group ", name_, ": CUDA error: ", CudaText(error))));
          }
        }
        if (absl::Now() >= deadline) {
          return FailLocked(absl::DeadlineExceededError(
              absl::StrCat(what, " in group ", name_, " did not complete within ",
                           absl::FormatDuration(timeout_))));
        }
      }
      Pause(polls);
    }
  }

  static void Pause(int polls) {
    if (polls < kSpinPolls) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(kPollInterval);
    }
  }

  std::string LastError() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (comm_ == nullptr) return "";
    const char* text = ncclGetLastError(comm_);
    return text != nullptr && text[0] != '\0' ? absl::StrCat(" (", text, ")") : "";
  }

  // Records the error and aborts the communicator: after a failure the members may
  // disagree about what completed, so nothing else may run on it.
  absl::Status FailLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (broken_.ok()) broken_ = status;
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    return status;
  }

  const std::string name_;
  const int rank_;
  const int size_;
  const int device_;
  const absl::Duration timeout_;
  GroupWatchdog watchdog_;
  cudaStream_t stream_ = nullptr;
  float* scratch_ = nullptr;  // one float on the device, for Barrier's all-reduce
  std::atomic<bool> aborted_{false};
  Mutex mutex_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mutex_) = nullptr;  // null once aborted
  // Split's *newcomm when this member joins no group: NCCL writes it (NULL) from its own
  // thread, so it must outlive the call, not live on Split's stack.
  ncclComm_t split_target_ = nullptr;
  absl::Status broken_ ABSL_GUARDED_BY(mutex_);
  std::vector<SendRecord> unissued_sends_ ABSL_GUARDED_BY(mutex_);
};

class NcclPendingSend : public PendingSend {
 public:
  NcclPendingSend(std::shared_ptr<NcclGroup> group, GroupOperation op)
      : group_(std::move(group)), op_(std::move(op)) {}
  ~NcclPendingSend() override { Wait().IgnoreError(); }

  // Issues the send if no Recv has yet, then waits for the stream: the send is done when
  // everything issued before and with it is.
  absl::Status Wait() override {
    if (waited_) return result_;
    waited_ = true;
    result_ = group_->Begin(op_.Text());
    if (result_.ok()) result_ = group_->Run(op_, nullptr);
    return result_;
  }

 private:
  std::shared_ptr<NcclGroup> group_;
  const GroupOperation op_;
  bool waited_ = false;
  absl::Status result_;
};

class NcclCommunicator : public Communicator {
 public:
  explicit NcclCommunicator(std::shared_ptr<NcclGroup> group) : group_(std::move(group)) {}

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  const std::string& name() const override { return group_->name(); }

  absl::Status AllReduce(float* data, size_t count, ReduceOp op) override {
    return AllReduceImpl(data, count, ncclFloat32, op);
  }
  absl::Status AllReduce(double* data, size_t count, ReduceOp op) override {
    return AllReduceImpl(data, count, ncclFloat64, op);
  }

  absl::Status AllGather(const float* in, float* out, size_t count) override {
    const std::string what = "AllGather";
    if (count > 0 && (in == nullptr || out == nullptr)) return Invalid(what, "null buffer");
    if (absl::Status s = group_->Begin(what); !s.ok()) return s;
    const GroupOperation operation = group_->watchdog().NextCollective(what);
    if (count == 0) return absl::OkStatus();
    return group_->Run(operation, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllGather(in, out, count, ncclFloat32, comm, stream);
    });
  }

  absl::Status ReduceScatter(const float* in, float* out, size_t count, ReduceOp op) override {
    const std::string what = "ReduceScatter";
    if (count > 0 && (in == nullptr || out == nullptr)) return Invalid(what, "null buffer");
    if (absl::Status s = group_->Begin(what); !s.ok()) return s;
    const GroupOperation operation = group_->watchdog().NextCollective(what);
    if (count == 0) return absl::OkStatus();
    return group_->Run(operation, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclReduceScatter(in, out, count, ncclFloat32, NcclOp(op), comm, stream);
    });
  }

  absl::Status Reduce(float* data, size_t count, ReduceOp op, int root) override {
    const std::string what = absl::StrCat("Reduce to group rank ", root);
    if (root < 0 || root >= size()) return Invalid(what, "root out of range");
    if (count > 0 && data == nullptr) return Invalid(what, "null buffer");
    if (absl::Status s = group_->Begin(what); !s.ok()) return s;
    const GroupOperation operation =
        group_->watchdog().NextCollective("Reduce", absl::StrCat(" to group rank ", root));
    if (count == 0) return absl::OkStatus();
    return group_->Run(operation, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclReduce(data, data, count, ncclFloat32, NcclOp(op), root, comm, stream);
    });
  }
  bool reduce_is_all_reduce() const override { return false; }

  absl::Status Broadcast(float* data, size_t count, int root) override {
    const std::string what = absl::StrCat("Broadcast from group rank ", root);
    if (root < 0 || root >= size()) return Invalid(what, "root out of range");
    if (count > 0 && data == nullptr) return Invalid(what, "null buffer");
    if (absl::Status s = group_->Begin(what); !s.ok()) return s;
    const GroupOperation operation =
        group_->watchdog().NextCollective("Broadcast", absl::StrCat(" from group rank ", root));
    if (count == 0) return absl::OkStatus();
    return group_->Run(operation, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclBroadcast(data, data, count, ncclFloat32, root, comm, stream);
    });
  }

  absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(const void* data, size_t bytes, int peer,
                                                         uint64_t tag) override {
    const std::string what = absl::StrCat("Send to group rank ", peer, " with tag ", tag);
    if (absl::Status s = CheckPeer(what, data, bytes, peer); !s.ok()) return s;
    if (absl::Status s = group_->Begin(what); !s.ok()) return s;
    GroupOperation operation = group_->watchdog().NextSend(peer, tag);
    if (bytes > 0) group_->RecordSend(data, bytes, peer);
    return std::unique_ptr<PendingSend>(new NcclPendingSend(group_, std::move(operation)));
  }

  absl::Status Recv(void* data, size_t bytes, int peer, uint64_t tag) override {
    const std::string what = absl::StrCat("Recv from group rank ", peer, " with tag ", tag);
    if (absl::Status s = CheckPeer(what, data, bytes, peer); !s.ok()) return s;
    if (absl::Status s = group_->Begin(what); !s.ok()) return s;
    const GroupOperation operation = group_->watchdog().NextRecv(peer, tag);
    // An empty message moves nothing in NCCL; the sender skips it too.
    if (bytes == 0) return absl::OkStatus();
    return group_->Run(operation, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclRecv(data, bytes, ncclUint8, peer, comm, stream);
    });
  }

  // NCCL has no barrier: an all-reduce of one float does the same synchronisation.
  absl::Status Barrier() override {
    const std::string what = "Barrier";
    if (absl::Status s = group_->Begin(what); !s.ok()) return s;
    const GroupOperation operation = group_->watchdog().NextCollective(what);
    float* scratch = group_->barrier_scratch();
    return group_->Run(operation, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, comm, stream);
    });
  }

  void Abort() override { group_->Abort(); }

  const std::shared_ptr<NcclGroup>& group() const { return group_; }

 private:
  static ncclRedOp_t NcclOp(ReduceOp op) { return op == ReduceOp::kMax ? ncclMax : ncclSum; }

  absl::Status AllReduceImpl(void* data, size_t count, ncclDataType_t type, ReduceOp op) {
    const std::string what = "AllReduce";
    if (count > 0 && data == nullptr) return Invalid(what, "null buffer");
    if (absl::Status s = group_->Begin(what); !s.ok()) return s;
    const GroupOperation operation = group_->watchdog().NextCollective(what);
    if (count == 0) return absl::OkStatus();
    return group_->Run(operation, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(data, data, count, type, NcclOp(op), comm, stream);
    });
  }

  absl::Status Invalid(const std::string& what, const std::string& problem) const {
    return absl::InvalidArgumentError(absl::StrCat(what, " in group ", name(), ": ", problem));
  }

  absl::Status CheckPeer(const std::string& what, const void* data, size_t bytes, int peer) const {
    if (peer < 0 || peer >= size()) {
      return Invalid(what, absl::StrCat("peer out of range [0, ", size(), ")"));
    }
    if (peer == rank()) return Invalid(what, "a member cannot message itself");
    if (bytes > 0 && data == nullptr) return Invalid(what, "null buffer");
    return absl::OkStatus();
  }

  std::shared_ptr<NcclGroup> group_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> ConnectNcclGroup(KeyValueStore& store,
                                                               const GroupSpec& spec,
                                                               int cuda_device) {
  const absl::Time deadline = absl::Now() + spec.timeout;
  absl::StatusOr<int> rank = GroupRankOf(spec);
  if (!rank.ok()) return rank.status();
  const std::string name = GroupDisplayName(spec);

  int devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear it, so later CUDA calls in this process are not poisoned
    return absl::UnavailableError(
        absl::StrCat("group ", name, ": no CUDA device: ", CudaText(error)));
  }
  if (devices == 0) {
    return absl::UnavailableError(
        absl::StrCat("group ", name, ": no CUDA device: the driver reports 0"));
  }
  if (cuda_device < 0 || cuda_device >= devices) {
    return absl::InvalidArgumentError(absl::StrCat("group ", name, ": CUDA device ", cuda_device,
                                                   " out of range [0, ", devices, ")"));
  }
  if (cudaSetDevice(cuda_device) != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("group ", name, ": cannot use CUDA device ", cuda_device));
  }

  const std::string id_key = spec.name + "/nccl-id";
  ncclUniqueId id;
  if (*rank == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) {
      return absl::Status(
          CodeOf(result),
          absl::StrCat("group ", name, ": ncclGetUniqueId: ", ncclGetErrorString(result)));
    }
    const absl::Status status = store.Set(id_key, std::string(id.internal, sizeof(id.internal)));
    if (!status.ok()) {
      return absl::Status(
          status.code(),
          absl::StrCat("group ", name, ": publishing the NCCL id: ", status.message()));
    }
  } else {
    absl::Status status =
        store.Wait({id_key}, std::max(deadline - absl::Now(), absl::ZeroDuration()));
    absl::StatusOr<std::string> value;
    if (status.ok()) {
      value = store.Get(id_key);
      status = value.status();
    }
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("group ", name, ": rendezvous failed: ", status.message()));
    }
    if (value->size() != sizeof(id.internal)) {
      return absl::FailedPreconditionError(
          absl::StrCat("group ", name, ": the NCCL id under ", id_key, " has ", value->size(),
                       " bytes, not ", sizeof(id.internal), " (a stale store?)"));
    }
    std::memcpy(id.internal, value->data(), sizeof(id.internal));
  }

  auto group = std::make_shared<NcclGroup>(&store, spec, *rank, cuda_device);
  const int size = static_cast<int>(spec.members.size());
  const absl::Status status = group->Init(
      [&](ncclComm_t* comm, ncclConfig_t* config) {
        return ncclCommInitRankConfig(comm, size, id, *rank, config);
      },
      "ncclCommInitRankConfig", deadline);
  if (!status.ok()) return status;
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(group)));
}

absl::StatusOr<std::unique_ptr<Communicator>> SplitNcclGroup(KeyValueStore& store,
                                                             Communicator& world,
                                                             const GroupSpec* spec, int color) {
  auto* parent = dynamic_cast<NcclCommunicator*>(&world);
  if (parent == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("SplitNcclGroup: group ", world.name(), " is not an NCCL communicator"));
  }
  if (spec == nullptr) {
    const absl::Time deadline = absl::Now() + parent->group()->timeout();
    RETURN_IF_ERROR(parent->group()->Split(nullptr, 0, 0, deadline));
    return std::unique_ptr<Communicator>();
  }
  if (color < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SplitNcclGroup: color ", color, " must be >= 0"));
  }
  ASSIGN_OR_RETURN(const int rank, GroupRankOf(*spec));
  auto group = std::make_shared<NcclGroup>(&store, *spec, rank, parent->group()->device());
  // Ranks of the new communicator follow the order of spec.members.
  RETURN_IF_ERROR(parent->group()->Split(group.get(), color, rank, absl::Now() + spec->timeout));
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(group)));
}

}  // namespace mtrain
