#include "worker/parallel/gloo_communicator.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/context.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "worker/parallel/group_watchdog.h"

namespace mtrain {
namespace {

using gloo::transport::UnboundBuffer;

// Gloo addresses unbound-buffer messages by a 64-bit slot per pair of members. Its own
// collectives use slots whose top byte is at most 0x08 (gloo/types.h), so the top byte
// 0x80 (point to point) and 0x81 (our reduce-scatter) can never collide with them.
constexpr uint64_t kPointToPointSlots = uint64_t{0x80} << 56;
constexpr uint64_t kReduceScatterSlot = uint64_t{0x81} << 56;
// A tag takes the slot's low 56 bits minus one, which tells header from payload.
constexpr uint64_t kMaxTag = (uint64_t{1} << 55) - 1;

uint64_t HeaderSlot(uint64_t tag) { return kPointToPointSlots | (tag << 1); }
uint64_t PayloadSlot(uint64_t tag) { return kPointToPointSlots | (tag << 1) | 1; }

// Gloo takes whole milliseconds; round up so a short timeout never becomes zero.
std::chrono::milliseconds ToMillis(absl::Duration duration) {
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(duration, absl::Milliseconds(1)));
  return std::chrono::milliseconds(std::max<int64_t>(ms, 1));
}

// Raised inside this file (never out of it) when Abort() cancelled a wait.
struct WaitAborted {};

void WaitRecv(UnboundBuffer& buffer, std::chrono::milliseconds timeout) {
  if (!buffer.waitRecv(nullptr, timeout)) throw WaitAborted();
}

void WaitSend(UnboundBuffer& buffer, std::chrono::milliseconds timeout) {
  if (!buffer.waitSend(nullptr, timeout)) throw WaitAborted();
}

template <typename T>
void SumInto(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

// NaN wins, so a diverging member is never hidden by the others.
template <typename T>
void MaxInto(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = (std::isnan(x[i]) || x[i] >= y[i]) ? x[i] : y[i];
}

template <typename T>
gloo::AllreduceOptions::Func ReduceFunction(ReduceOp op) {
  return op == ReduceOp::kMax ? &MaxInto<T> : &SumInto<T>;
}

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

// gloo::rendezvous::Store over our KeyValueStore. Gloo reports store failures only as
// exceptions, so the first failing status is kept to be returned unchanged.
class RendezvousStore : public gloo::rendezvous::Store {
 public:
  RendezvousStore(KeyValueStore& store, std::string prefix, absl::Time deadline)
      : store_(store), prefix_(std::move(prefix)), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(store_.Set(prefix_ + key, std::string(data.begin(), data.end())));
  }

  // Gloo's stores block in get until the key exists (Gloo reads some keys without a wait
  // first), so this one does too.
  std::vector<char> get(const std::string& key) override {
    wait({key});
    absl::StatusOr<std::string> value = store_.Get(prefix_ + key);
    Check(value.status());
    return std::vector<char>(value->begin(), value->end());
  }

  void wait(const std::vector<std::string>& keys) override {
    std::vector<std::string> full_keys;
    for (const std::string& key : keys) full_keys.push_back(prefix_ + key);
    // The whole rendezvous shares one deadline, however many waits Gloo makes.
    Check(store_.Wait(full_keys, std::max(deadline_ - absl::Now(), absl::ZeroDuration())));
  }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& /*timeout: ours is the group's*/) override {
    wait(keys);
  }

  const absl::Status& error() const { return error_; }

 private:
  void Check(const absl::Status& status) {
    if (status.ok()) return;
    if (error_.ok()) error_ = status;
    throw gloo::IoException(std::string(status.message()));
  }

  KeyValueStore& store_;
  const std::string prefix_;
  const absl::Time deadline_;
  absl::Status error_;
};

// Everything a group's operations and its pending sends share. Pending sends hold it by
// shared_ptr, so they stay valid if the Communicator goes first.
struct GroupState {
  std::string name;
  std::vector<int> members;
  int rank = 0;
  absl::Duration timeout;
  std::chrono::milliseconds timeout_ms{1};
  std::shared_ptr<gloo::Context> context;  // null for a group of one
  // Numbers the operations and explains failures; reports to the rendezvous store.
  std::unique_ptr<GroupWatchdog> watchdog;

  std::atomic<bool> aborted{false};
  Mutex mutex;
  // Unbound buffers with a wait in progress, for Abort to cancel.
  std::set<UnboundBuffer*> waiting ABSL_GUARDED_BY(mutex);
  // The error after which the group is unusable.
  absl::Status broken ABSL_GUARDED_BY(mutex);

  int size() const { return static_cast<int>(members.size()); }

  absl::Status CheckUsable(const std::string& what) {
    if (aborted.load()) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, " in group ", name, ": the group was aborted"));
    }
    MutexLock lock(&mutex);
    if (!broken.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, " in group ", name, ": unusable after an earlier error: ", broken.message()));
    }
    return absl::OkStatus();
  }

  // Makes the group unusable after `failure` of `op` and returns what the operation
  // returns: `failure` as the watchdog explains it (group_watchdog.h), with `detail`, the
  // transport's words, at the end.
  //
  // The connections are closed first, before the watchdog waits for the peers' reports:
  // no transfer may touch a caller's buffer once the operation has returned, and a peer
  // fails (UNAVAILABLE) at its next transfer to this member instead of after its timeout,
  // and reports to the watchdog too. (Gloo has already closed them itself if a wait timed
  // out. It does not wake a peer already blocked in a wait: that peer times out on its own
  // clock, at about the same moment if it entered the operation at about the same time.)
  absl::Status Fail(const GroupOperation& op, const absl::Status& failure,
                    const std::string& detail) {
    {
      MutexLock lock(&mutex);
      if (broken.ok()) broken = failure;
      CloseConnections();
    }
    absl::Status explained =
        watchdog->Explain(op, failure, detail, [this] { return aborted.load(); });
    // Later calls then say why the group is unusable in the watchdog's words.
    MutexLock lock(&mutex);
    if (broken == failure) broken = explained;
    return explained;
  }

  // Fails every pending and future transfer on this member's connections, the way Gloo
  // itself does when a wait times out: a wait that times out makes the transport context
  // close every pair and wake every operation pending on them with an exception. Gloo
  // offers no public call for that, so we trigger that path with a 1 ms wait on a buffer
  // nobody sends to. Peers see the connections close and fail too (UNAVAILABLE).
  void CloseConnections() {
    if (context == nullptr) return;
    char unused = 0;
    std::unique_ptr<UnboundBuffer> probe = context->createUnboundBuffer(&unused, 1);
    try {
      probe->waitRecv(nullptr, std::chrono::milliseconds(1));
    } catch (const std::exception&) {
      // Expected: the "timeout" we asked for.
    }
  }

  void Abort() {
    aborted.store(true);
    MutexLock lock(&mutex);
    // Closing first guarantees no transfer writes into a caller's buffer after its
    // operation has returned.
    CloseConnections();
    // Also cancel our own waits directly: a message caught half-way through the socket
    // is not among the operations Gloo wakes when it closes a pair.
    for (UnboundBuffer* buffer : waiting) {
      buffer->abortWaitRecv();
      buffer->abortWaitSend();
    }
  }

  // Runs Gloo calls, turning whatever they throw into the status the Communicator
  // contract asks for. Any failure leaves the group unusable.
  template <typename Body>
  absl::Status Run(const GroupOperation& op, Body&& body) {
    const std::string what = absl::StrCat(op.Text(), " in group ", name);
    try {
      body();
      return absl::OkStatus();
    } catch (const WaitAborted&) {
      return Fail(op, absl::FailedPreconditionError(absl::StrCat(what, ": the group was aborted")),
                  "");
    } catch (const gloo::IoException& e) {
      if (aborted.load()) {
        return Fail(
            op, absl::FailedPreconditionError(absl::StrCat(what, ": the group was aborted")), "");
      }
      const std::string detail = absl::StrCat("Gloo: ", e.what());
      if (absl::StrContains(e.what(), "Timed out")) {
        return Fail(op,
                    absl::DeadlineExceededError(absl::StrCat(what, " did not complete within ",
                                                             absl::FormatDuration(timeout))),
                    detail);
      }
      return Fail(op, absl::UnavailableError(absl::StrCat(what, ": transport failed")), detail);
    } catch (const gloo::EnforceNotMet& e) {
      return Fail(op, absl::InternalError(absl::StrCat(what, ": Gloo check failed: ", e.what())),
                  "");
    } catch (const std::exception& e) {
      return Fail(op, absl::InternalError(absl::StrCat(what, ": ", e.what())), "");
    } catch (...) {
      return Fail(op, absl::InternalError(absl::StrCat(what, ": unknown exception")), "");
    }
  }
};

// Registers a buffer's wait for Abort to cancel, for the registration's lifetime. If the
// group is already aborted, the buffer's waits are cancelled at once, so no Abort can slip
// between a check and a wait.
class WaitRegistration {
 public:
  WaitRegistration(GroupState& state, UnboundBuffer* buffer) : state_(state), buffer_(buffer) {
    MutexLock lock(&state_.mutex);
    state_.waiting.insert(buffer_);
    if (state_.aborted.load()) {
      buffer_->abortWaitRecv();
      buffer_->abortWaitSend();
    }
  }
  ~WaitRegistration() {
    MutexLock lock(&state_.mutex);
    state_.waiting.erase(buffer_);
  }
  WaitRegistration(const WaitRegistration&) = delete;
  WaitRegistration& operator=(const WaitRegistration&) = delete;

 private:
  GroupState& state_;
  UnboundBuffer* const buffer_;
};

class GlooPendingSend : public PendingSend {
 public:
  GlooPendingSend(std::shared_ptr<GroupState> state, GroupOperation op, const void* data,
                  size_t bytes, uint64_t tag)
      : state_(std::move(state)),
        op_(std::move(op)),
        header_(std::make_unique<uint64_t>(bytes)),
        header_buffer_(state_->context->createUnboundBuffer(header_.get(), sizeof(uint64_t))),
        header_registration_(*state_, header_buffer_.get()) {
    // Gloo never writes through a send buffer; its API just takes void*.
    if (bytes > 0) {
      payload_buffer_ = state_->context->createUnboundBuffer(const_cast<void*>(data), bytes);
      payload_registration_ = std::make_unique<WaitRegistration>(*state_, payload_buffer_.get());
    }
    start_status_ = state_->Run(op_, [&] {
      header_buffer_->send(op_.peer, HeaderSlot(tag));
      if (payload_buffer_ != nullptr) payload_buffer_->send(op_.peer, PayloadSlot(tag));
    });
  }

  ~GlooPendingSend() override { Wait().IgnoreError(); }

  const absl::Status& start_status() const { return start_status_; }

  absl::Status Wait() override {
    if (waited_) return result_;
    waited_ = true;
    result_ = start_status_;
    if (result_.ok()) result_ = state_->CheckUsable(op_.Text());
    if (result_.ok()) {
      result_ = state_->Run(op_, [&] {
        WaitSend(*header_buffer_, state_->timeout_ms);
        if (payload_buffer_ != nullptr) WaitSend(*payload_buffer_, state_->timeout_ms);
      });
    }
    payload_registration_.reset();
    return result_;
  }

 private:
  std::shared_ptr<GroupState> state_;
  const GroupOperation op_;
  std::unique_ptr<uint64_t> header_;  // the payload's length, what the receiver checks
  std::unique_ptr<UnboundBuffer> header_buffer_;
  WaitRegistration header_registration_;
  std::unique_ptr<UnboundBuffer> payload_buffer_;
  std::unique_ptr<WaitRegistration> payload_registration_;
  absl::Status start_status_;
  bool waited_ = false;
  absl::Status result_;
};

class GlooCommunicator : public Communicator {
 public:
  explicit GlooCommunicator(std::shared_ptr<GroupState> state) : state_(std::move(state)) {}

  int rank() const override { return state_->rank; }
  int size() const override { return state_->size(); }
  const std::string& name() const override { return state_->name; }

  absl::Status AllReduce(float* data, size_t count, ReduceOp op) override {
    return AllReduceImpl(data, count, op);
  }
  absl::Status AllReduce(double* data, size_t count, ReduceOp op) override {
    return AllReduceImpl(data, count, op);
  }

  absl::Status AllGather(const float* in, float* out, size_t count) override {
    const std::string what = "AllGather";
    if (absl::Status s = CheckCount(what, count, size()); !s.ok()) return s;
    const size_t bytes = count * sizeof(float);
    if (count > 0 && (in == nullptr || out == nullptr || Overlap(in, bytes, out, bytes * size()))) {
      return InvalidArgument(what, "null or overlapping buffers");
    }
    if (absl::Status s = state_->CheckUsable(what); !s.ok()) return s;
    const GroupOperation operation = state_->watchdog->NextCollective(what);
    if (count == 0) return absl::OkStatus();
    if (size() == 1) {
      std::memcpy(out, in, bytes);
      return absl::OkStatus();
    }
    return state_->Run(operation, [&] {
      gloo::AllgatherOptions options(state_->context);
      // Gloo only reads the input; its API takes T*.
      options.setInput(const_cast<float*>(in), count);
      options.setOutput(out, count * size());
      options.setTimeout(state_->timeout_ms);
      gloo::allgather(options);
    });
  }

  // A ring, as in the all-reduce's first half: in n-1 steps each member passes a partial
  // block to its right neighbour and adds its own contribution to the block arriving from
  // the left. Block b starts at member b+1 and ends, fully reduced, at member b, so each
  // member moves only (n-1)/n of the data and the order of the sum is fixed.
  absl::Status ReduceScatter(const float* in, float* out, size_t count, ReduceOp op) override {
    const std::string what = "ReduceScatter";
    if (absl::Status s = CheckCount(what, count, size()); !s.ok()) return s;
    const size_t bytes = count * sizeof(float);
    if (count > 0 && (in == nullptr || out == nullptr || Overlap(in, bytes * size(), out, bytes))) {
      return InvalidArgument(what, "null or overlapping buffers");
    }
    if (absl::Status s = state_->CheckUsable(what); !s.ok()) return s;
    const GroupOperation operation = state_->watchdog->NextCollective(what);
    if (count == 0) return absl::OkStatus();
    if (size() == 1) {
      std::memcpy(out, in, bytes);
      return absl::OkStatus();
    }
    const int n = size();
    const int r = rank();
    const int right = (r + 1) % n;
    const int left = (r + n - 1) % n;
    const auto reduce = ReduceFunction<float>(op);
    std::vector<float> scratch_a(count), scratch_b(count);
    float* sending = scratch_a.data();
    float* receiving = scratch_b.data();
    std::unique_ptr<UnboundBuffer> send_buffer =
        state_->context->createUnboundBuffer(sending, bytes);
    std::unique_ptr<UnboundBuffer> recv_buffer =
        state_->context->createUnboundBuffer(receiving, bytes);
    WaitRegistration send_registration(*state_, send_buffer.get());
    WaitRegistration recv_registration(*state_, recv_buffer.get());
    std::memcpy(sending, in + static_cast<size_t>((r + n - 1) % n) * count, bytes);
    return state_->Run(operation, [&] {
      for (int step = 0; step < n - 1; ++step) {
        const int block = (r - step - 2 + 2 * n) % n;
        recv_buffer->recv(left, kReduceScatterSlot);
        send_buffer->send(right, kReduceScatterSlot);
        WaitRecv(*recv_buffer, state_->timeout_ms);
        WaitSend(*send_buffer, state_->timeout_ms);
        const bool last = step == n - 2;  // then block == r
        reduce(last ? out : receiving, receiving, in + static_cast<size_t>(block) * count, count);
        // The block just reduced is the next one to send.
        std::swap(sending, receiving);
        std::swap(send_buffer, recv_buffer);
      }
    });
  }

  absl::Status Broadcast(float* data, size_t count, int root) override {
    const std::string what = absl::StrCat("Broadcast from group rank ", root);
    if (root < 0 || root >= size()) return InvalidArgument(what, "root out of range");
    if (count > 0 && data == nullptr) return InvalidArgument(what, "null buffer");
    if (absl::Status s = state_->CheckUsable(what); !s.ok()) return s;
    const GroupOperation operation =
        state_->watchdog->NextCollective("Broadcast", absl::StrCat(" from group rank ", root));
    if (count == 0 || size() == 1) return absl::OkStatus();
    return state_->Run(operation, [&] {
      gloo::BroadcastOptions options(state_->context);
      options.setOutput(data, count);
      options.setRoot(root);
      options.setTimeout(state_->timeout_ms);
      gloo::broadcast(options);
    });
  }

  absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(const void* data, size_t bytes, int peer,
                                                         uint64_t tag) override {
    const std::string what = absl::StrCat("Send to group rank ", peer, " with tag ", tag);
    if (absl::Status s = CheckPointToPoint(what, data, bytes, peer, tag); !s.ok()) return s;
    if (absl::Status s = state_->CheckUsable(what); !s.ok()) return s;
    auto pending = std::make_unique<GlooPendingSend>(state_, state_->watchdog->NextSend(peer, tag),
                                                     data, bytes, tag);
    if (!pending->start_status().ok()) return pending->start_status();
    return std::unique_ptr<PendingSend>(std::move(pending));
  }

  absl::Status Recv(void* data, size_t bytes, int peer, uint64_t tag) override {
    const std::string what = absl::StrCat("Recv from group rank ", peer, " with tag ", tag);
    if (absl::Status s = CheckPointToPoint(what, data, bytes, peer, tag); !s.ok()) return s;
    if (absl::Status s = state_->CheckUsable(what); !s.ok()) return s;
    const GroupOperation operation = state_->watchdog->NextRecv(peer, tag);
    uint64_t sent_bytes = 0;
    std::unique_ptr<UnboundBuffer> header =
        state_->context->createUnboundBuffer(&sent_bytes, sizeof(sent_bytes));
    absl::Status status;
    {
      WaitRegistration registration(*state_, header.get());
      status = state_->Run(operation, [&] {
        header->recv(peer, HeaderSlot(tag));
        WaitRecv(*header, state_->timeout_ms);
      });
    }
    if (status.ok() && sent_bytes != bytes) {
      // The group is out of step with its peer; Fail closes the connections, so the sender
      // fails now rather than after its timeout (and learns why from the watchdog report).
      return state_->Fail(operation,
                          absl::InvalidArgumentError(absl::StrCat(
                              operation.Text(), " in group ", state_->name, ": expected ", bytes,
                              " bytes, the peer sent ", sent_bytes)),
                          "");
    }
    if (status.ok() && bytes > 0) {
      std::unique_ptr<UnboundBuffer> payload = state_->context->createUnboundBuffer(data, bytes);
      WaitRegistration registration(*state_, payload.get());
      status = state_->Run(operation, [&] {
        payload->recv(peer, PayloadSlot(tag));
        WaitRecv(*payload, state_->timeout_ms);
      });
    }
    return status;
  }

  absl::Status Barrier() override {
    const std::string what = "Barrier";
    if (absl::Status s = state_->CheckUsable(what); !s.ok()) return s;
    const GroupOperation operation = state_->watchdog->NextCollective(what);
    if (size() == 1) return absl::OkStatus();
    return state_->Run(operation, [&] {
      gloo::BarrierOptions options(state_->context);
      options.setTimeout(state_->timeout_ms);
      gloo::barrier(options);
    });
  }

  void Abort() override { state_->Abort(); }

 private:
  template <typename T>
  absl::Status AllReduceImpl(T* data, size_t count, ReduceOp op) {
    const std::string what = "AllReduce";
    if (absl::Status s = CheckCount(what, count, 1); !s.ok()) return s;
    if (count > 0 && data == nullptr) return InvalidArgument(what, "null buffer");
    if (absl::Status s = state_->CheckUsable(what); !s.ok()) return s;
    const GroupOperation operation = state_->watchdog->NextCollective(what);
    if (count == 0 || size() == 1) return absl::OkStatus();
    return state_->Run(operation, [&] {
      gloo::AllreduceOptions options(state_->context);
      options.setOutput(data, count);
      // Ring, never bcube: see the file comment in gloo_communicator.h on why every
      // member's result is bit-identical.
      options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      options.setReduceFunction(ReduceFunction<T>(op));
      options.setTimeout(state_->timeout_ms);
      gloo::allreduce(options);
    });
  }

  absl::Status InvalidArgument(const std::string& what, const std::string& problem) const {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " in group ", state_->name, ": ", problem));
  }

  // count * blocks floats must be addressable in bytes.
  absl::Status CheckCount(const std::string& what, size_t count, int blocks) const {
    if (count > std::numeric_limits<size_t>::max() / sizeof(double) / blocks) {
      return InvalidArgument(what, absl::StrCat("count ", count, " too large"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckPointToPoint(const std::string& what, const void* data, size_t bytes, int peer,
                                 uint64_t tag) const {
    if (peer < 0 || peer >= size()) {
      return InvalidArgument(what, absl::StrCat("peer out of range [0, ", size(), ")"));
    }
    if (peer == rank()) return InvalidArgument(what, "a member cannot message itself");
    if (tag > kMaxTag) return InvalidArgument(what, "tag must be below 2^55");
    if (bytes > 0 && data == nullptr) return InvalidArgument(what, "null buffer");
    return absl::OkStatus();
  }

  std::shared_ptr<GroupState> state_;
};

}  // namespace

absl::StatusOr<GlooDevice> CreateGlooDevice(const std::string& host) {
  // Gloo crashes on a name that does not resolve and leaks its lookup when no address can
  // be bound, so check both here first: resolve, then bind a socket to some address.
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  const int lookup = ::getaddrinfo(host.c_str(), nullptr, &hints, &addresses);
  if (lookup != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot create a Gloo TCP device for host '",
                                                   host, "': ", ::gai_strerror(lookup)));
  }
  bool bindable = false;
  for (const addrinfo* address = addresses; address != nullptr && !bindable;
       address = address->ai_next) {
    const int fd =
        ::socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC, address->ai_protocol);
    if (fd < 0) continue;
    bindable = ::bind(fd, address->ai_addr, address->ai_addrlen) == 0;
    ::close(fd);
  }
  ::freeaddrinfo(addresses);
  if (!bindable) {
    return absl::InvalidArgumentError(absl::StrCat("cannot create a Gloo TCP device for host '",
                                                   host, "': not an address of this machine"));
  }
  gloo::transport::tcp::attr attr;
  attr.hostname = host;
  try {
    return GlooDevice(gloo::transport::tcp::CreateDevice(attr));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create a Gloo TCP device for host '", host, "': ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectGlooGroup(KeyValueStore& store,
                                                               const GlooDevice& device,
                                                               const GroupSpec& spec) {
  absl::StatusOr<int> rank = GroupRankOf(spec);
  if (!rank.ok()) return rank.status();
  if (device.device() == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("group ", spec.name, ": no Gloo device"));
  }
  auto state = std::make_shared<GroupState>();
  state->name = GroupDisplayName(spec);
  state->members = spec.members;
  state->rank = *rank;
  state->timeout = spec.timeout;
  state->timeout_ms = ToMillis(spec.timeout);
  state->watchdog = std::make_unique<GroupWatchdog>(&store, spec, state->rank);
  if (state->size() > 1) {
    auto context = std::make_shared<gloo::rendezvous::Context>(state->rank, state->size());
    // Also bounds connecting the pairs and is the default for every later operation.
    context->setTimeout(state->timeout_ms);
    RendezvousStore rendezvous(store, absl::StrCat(spec.name, "/gloo/"),
                               absl::Now() + spec.timeout);
    std::shared_ptr<gloo::transport::Device> gloo_device = device.device();
    try {
      context->connectFullMesh(rendezvous, gloo_device);
    } catch (const std::exception& e) {
      if (!rendezvous.error().ok()) {
        const absl::Status& error = rendezvous.error();
        return absl::Status(error.code(), absl::StrCat("group ", state->name,
                                                       ": rendezvous failed: ", error.message()));
      }
      const bool timed_out = absl::StrContains(e.what(), "imeout");
      return absl::Status(
          timed_out ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kUnavailable,
          absl::StrCat("group ", state->name, ": connecting to the members failed: ", e.what()));
    }
    state->context = std::move(context);
  }
  return std::unique_ptr<Communicator>(new GlooCommunicator(std::move(state)));
}

}  // namespace mtrain
