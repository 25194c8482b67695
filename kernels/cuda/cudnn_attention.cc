// cuDNN's fused attention (kernels/cuda/cudnn_attention.h) through the frontend's graph API:
// one SDPA forward graph and one SDPA backward graph per shape, with strided views into the
// packed qkv rows so that nothing is copied or transposed.
#include "kernels/cuda/cudnn_attention.h"

#include <cudnn.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "cudnn_frontend.h"

namespace mtrain::cuda {
namespace {

namespace fe = cudnn_frontend;

// Tensor ids of the variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct ShapeKey {
  int device, type, batch, seq, heads, kv_heads, head_dim;
  auto Tie() const { return std::tie(device, type, batch, seq, heads, kv_heads, head_dim); }
  bool operator<(const ShapeKey& other) const { return Tie() < other.Tie(); }
};

struct Graphs {
  absl::Status status;  // why cuDNN cannot run this shape, if it cannot
  std::shared_ptr<fe::graph::Graph> forward, backward;
  int64_t forward_workspace = 0, backward_workspace = 0;
};

struct Workspace {
  void* data = nullptr;
  int64_t bytes = 0;
};

// Process-wide state: cuDNN handles are per device, graphs per shape, workspaces per
// stream (two streams never share one). One mutex: the calls under it only enqueue work.
struct State {
  Mutex mu;
  std::map<int, cudnnHandle_t> handles ABSL_GUARDED_BY(mu);
  std::map<ShapeKey, Graphs> graphs ABSL_GUARDED_BY(mu);
  std::map<std::pair<int, cudaStream_t>, Workspace> workspaces ABSL_GUARDED_BY(mu);
};

State& GlobalState() {
  static State* state = new State();  // never destroyed: handles outlive static teardown
  return *state;
}

absl::Status FrontendStatus(fe::error_t error, const char* what) {
  if (!error.is_bad()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("cuDNN attention: ", what, ": ", error.get_message()));
}

absl::Status CudnnStatusOf(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("cuDNN attention: ", what, ": ", cudnnGetErrorString(status)));
}

absl::Status CudaStatusOf(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("cuDNN attention: ", what, ": ", cudaGetErrorString(error)));
}

absl::StatusOr<cudnnHandle_t> HandleFor(State& state, int device)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu) {
  auto it = state.handles.find(device);
  if (it != state.handles.end()) return it->second;
  cudnnHandle_t handle = nullptr;
  if (absl::Status s = CudnnStatusOf(cudnnCreate(&handle), "cudnnCreate"); !s.ok()) return s;
  state.handles[device] = handle;
  return handle;
}

// The strided views of the packed rows: q, k and v of token (b, s) sit in one row of
// (H + 2 Hkv) * D elements; out's row holds H * D.
struct Views {
  int64_t B, S, H, Hkv, D, row;
  std::vector<int64_t> QDim() const { return {B, H, S, D}; }
  std::vector<int64_t> KvDim() const { return {B, Hkv, S, D}; }
  std::vector<int64_t> PackedStride() const { return {S * row, D, row, 1}; }
  std::vector<int64_t> OutStride() const { return {S * H * D, D, H * D, 1}; }
  std::vector<int64_t> StatsDim() const { return {B, H, S, 1}; }
  std::vector<int64_t> StatsStride() const { return {H * S, S, 1, 1}; }
};

Views ViewsOf(const cpu::AttentionShape& shape) {
  Views v{shape.batch, shape.seq, shape.heads, shape.kv_head_count(), shape.head_dim, 0};
  v.row = (v.H + 2 * v.Hkv) * v.D;
  return v;
}

std::shared_ptr<fe::graph::Graph> NewGraph(CudnnAttentionType type) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph
      ->set_io_data_type(type == CudnnAttentionType::kBf16 ? fe::DataType_t::BFLOAT16
                                                           : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

std::shared_ptr<fe::graph::Tensor_attributes> Input(fe::graph::Graph& graph, const char* name,
                                                    int64_t uid, std::vector<int64_t> dim,
                                                    std::vector<int64_t> stride) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim(std::move(dim))
                          .set_stride(std::move(stride)));
}

absl::Status Build(fe::graph::Graph& graph, cudnnHandle_t handle, int64_t* workspace) {
  if (absl::Status s = FrontendStatus(graph.validate(), "validate"); !s.ok()) return s;
  if (absl::Status s = FrontendStatus(graph.build_operation_graph(handle), "operation graph");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = FrontendStatus(graph.create_execution_plans({fe::HeurMode_t::A}), "plans");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = FrontendStatus(graph.check_support(handle), "support"); !s.ok()) return s;
  if (absl::Status s = FrontendStatus(graph.build_plans(handle), "build"); !s.ok()) return s;
  return FrontendStatus(graph.get_workspace_size(*workspace), "workspace size");
}

absl::Status BuildGraphs(const cpu::AttentionShape& shape, CudnnAttentionType type,
                         cudnnHandle_t handle, Graphs& out) {
  const Views v = ViewsOf(shape);
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));

  out.forward = NewGraph(type);
  {
    fe::graph::Graph& g = *out.forward;
    auto q = Input(g, "Q", kQ, v.QDim(), v.PackedStride());
    auto k = Input(g, "K", kK, v.KvDim(), v.PackedStride());
    auto val = Input(g, "V", kV, v.KvDim(), v.PackedStride());
    auto options = fe::graph::SDPA_attributes()
                       .set_name("attention_forward")
                       .set_generate_stats(true)
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
    auto [o, stats] = g.sdpa(q, k, val, options);
    o->set_output(true).set_uid(kO).set_dim(v.QDim()).set_stride(v.OutStride());
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(v.StatsDim())
        .set_stride(v.StatsStride());
    if (absl::Status s = Build(g, handle, &out.forward_workspace); !s.ok()) return s;
  }

  out.backward = NewGraph(type);
  {
    fe::graph::Graph& g = *out.backward;
    auto q = Input(g, "Q", kQ, v.QDim(), v.PackedStride());
    auto k = Input(g, "K", kK, v.KvDim(), v.PackedStride());
    auto val = Input(g, "V", kV, v.KvDim(), v.PackedStride());
    auto o = Input(g, "O", kO, v.QDim(), v.OutStride());
    auto d_o = Input(g, "dO", kDO, v.QDim(), v.OutStride());
    auto stats = g.tensor(fe::graph::Tensor_attributes()
                              .set_name("Stats")
                              .set_uid(kStats)
                              .set_dim(v.StatsDim())
                              .set_stride(v.StatsStride())
                              .set_data_type(fe::DataType_t::FLOAT));
    // The deterministic algorithm: a step's gradients are the same run to run, as the
    // hand-written kernels promise (no atomics in dQ's sum over key blocks).
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_causal_mask(true)
                       .set_attn_scale(scale)
                       .set_deterministic_algorithm(true);
    auto [d_q, d_k, d_v] = g.sdpa_backward(q, k, val, o, d_o, stats, options);
    d_q->set_output(true).set_uid(kDQ).set_dim(v.QDim()).set_stride(v.PackedStride());
    d_k->set_output(true).set_uid(kDK).set_dim(v.KvDim()).set_stride(v.PackedStride());
    d_v->set_output(true).set_uid(kDV).set_dim(v.KvDim()).set_stride(v.PackedStride());
    if (absl::Status s = Build(g, handle, &out.backward_workspace); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// The graphs of a shape, built on first use. Caller holds state.mu.
absl::StatusOr<Graphs*> GraphsFor(State& state, const cpu::AttentionShape& shape,
                                  CudnnAttentionType type, int device)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu) {
  const ShapeKey key{device,      static_cast<int>(type), shape.batch,   shape.seq,
                     shape.heads, shape.kv_head_count(),  shape.head_dim};
  auto it = state.graphs.find(key);
  if (it == state.graphs.end()) {
    Graphs built;
    absl::StatusOr<cudnnHandle_t> handle = HandleFor(state, device);
    built.status = handle.ok() ? BuildGraphs(shape, type, *handle, built) : handle.status();
    if (!built.status.ok()) built.forward = built.backward = nullptr;
    it = state.graphs.emplace(key, std::move(built)).first;
  }
  if (!it->second.status.ok()) return it->second.status;
  return &it->second;
}

absl::StatusOr<void*> WorkspaceFor(State& state, int device, cudaStream_t stream, int64_t bytes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu) {
  Workspace& w = state.workspaces[{device, stream}];
  if (w.bytes >= bytes) return w.data;
  if (w.data != nullptr) {
    // cudaFree waits for the device: work queued on the old buffer finishes first.
    if (absl::Status s = CudaStatusOf(cudaFree(w.data), "freeing the workspace"); !s.ok()) {
      return s;
    }
    w = Workspace{};
  }
  if (absl::Status s = CudaStatusOf(cudaMalloc(&w.data, bytes), "allocating the workspace");
      !s.ok()) {
    return s;
  }
  w.bytes = bytes;
  return w.data;
}

absl::StatusOr<int> CurrentDevice() {
  int device = 0;
  if (absl::Status s = CudaStatusOf(cudaGetDevice(&device), "cudaGetDevice"); !s.ok()) return s;
  return device;
}

size_t ElementBytes(CudnnAttentionType) { return 2; }  // bf16 and fp16

// Runs one of a shape's graphs on `stream` with the given tensors.
absl::Status Execute(const cpu::AttentionShape& shape, CudnnAttentionType type, bool backward,
                     std::unordered_map<int64_t, void*> pack, cudaStream_t stream) {
  absl::StatusOr<int> device = CurrentDevice();
  if (!device.ok()) return device.status();
  State& state = GlobalState();
  MutexLock lock(&state.mu);
  absl::StatusOr<Graphs*> graphs = GraphsFor(state, shape, type, *device);
  if (!graphs.ok()) return graphs.status();
  const fe::graph::Graph& graph = backward ? *(*graphs)->backward : *(*graphs)->forward;
  const int64_t need = backward ? (*graphs)->backward_workspace : (*graphs)->forward_workspace;
  absl::StatusOr<void*> workspace = WorkspaceFor(state, *device, stream, need);
  if (!workspace.ok()) return workspace.status();
  cudnnHandle_t handle = state.handles.at(*device);
  if (absl::Status s = CudnnStatusOf(cudnnSetStream(handle, stream), "cudnnSetStream"); !s.ok()) {
    return s;
  }
  return FrontendStatus(graph.execute(handle, pack, *workspace), backward ? "backward" : "forward");
}

// Element offsets of k and v within a packed row.
void* At(const void* base, int64_t elements, CudnnAttentionType type) {
  return static_cast<char*>(const_cast<void*>(base)) + elements * ElementBytes(type);
}

}  // namespace

absl::Status CudnnAttentionSupports(const cpu::AttentionShape& shape, CudnnAttentionType type) {
  absl::StatusOr<int> device = CurrentDevice();
  if (!device.ok()) return device.status();
  State& state = GlobalState();
  MutexLock lock(&state.mu);
  absl::StatusOr<Graphs*> graphs = GraphsFor(state, shape, type, *device);
  return graphs.status();
}

std::string CudnnVersionText() {
  const size_t version = cudnnGetVersion();  // major * 10000 + minor * 100 + patch (cuDNN 9)
  return absl::StrCat(version / 10000, ".", (version / 100) % 100, ".", version % 100);
}

absl::Status CudnnAttentionForward(const void* qkv, void* out, float* lse,
                                   const cpu::AttentionShape& shape, CudnnAttentionType type,
                                   cudaStream_t stream) {
  const Views v = ViewsOf(shape);
  return Execute(shape, type, /*backward=*/false,
                 {{kQ, At(qkv, 0, type)},
                  {kK, At(qkv, v.H * v.D, type)},
                  {kV, At(qkv, (v.H + v.Hkv) * v.D, type)},
                  {kO, out},
                  {kStats, lse}},
                 stream);
}

absl::Status CudnnAttentionBackward(const void* d_out, const void* qkv, const void* out,
                                    const float* lse, void* d_qkv, const cpu::AttentionShape& shape,
                                    CudnnAttentionType type, cudaStream_t stream) {
  const Views v = ViewsOf(shape);
  return Execute(shape, type, /*backward=*/true,
                 {{kQ, At(qkv, 0, type)},
                  {kK, At(qkv, v.H * v.D, type)},
                  {kV, At(qkv, (v.H + v.Hkv) * v.D, type)},
                  {kO, const_cast<void*>(out)},
                  {kDO, const_cast<void*>(d_out)},
                  {kStats, const_cast<float*>(lse)},
                  {kDQ, At(d_qkv, 0, type)},
                  {kDK, At(d_qkv, v.H * v.D, type)},
                  {kDV, At(d_qkv, (v.H + v.Hkv) * v.D, type)}},
                 stream);
}

}  // namespace mtrain::cuda
