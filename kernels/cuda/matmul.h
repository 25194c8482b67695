// Fully connected layers on the GPU with cuBLASLt (kernels/matmul.h's semantics: weight
// [N, K] as torch.nn.Linear stores it, row-major, backward ACCUMULATES): T = float (fp32
// compute, no TF32, for exact-precision tests and fp32 training), __nv_bfloat16 (bf16
// tensor cores, fp32 accumulation) or __half (fp16 tensor cores, fp32 accumulation, fp16
// outputs: results beyond fp16's range become inf, which dynamic loss scaling detects). The
// forward can fuse the bias, or bias + GeLU (tanh) keeping the pre-activation for the
// backward, or bias + a residual, into the GEMM's epilogue; bias and pre-activation are T,
// as the output. With 16-bit T the backward takes the bias gradient from the weight
// gradient's GEMM (cuBLASLt's BGRADB epilogue) and can apply GeLU's derivative in the input
// gradient's (DGELU), wherever cuBLASLt offers them; fp32 keeps separate passes.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<CublasLt> blas, CublasLt::Create());
//   RETURN_IF_ERROR(MatmulForward<T>(*blas, in, w, bias, out, M, K, N, stream));
#ifndef MTRAIN_KERNELS_CUDA_MATMUL_H_
#define MTRAIN_KERNELS_CUDA_MATMUL_H_

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mtrain::cuda {

// A cuBLASLt handle and its workspace, for one device; use from one stream at a time.
class CublasLt {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  // The longest bias whose gradient an epilogue may write (into bias_gradient()).
  static constexpr int kMaxFusedBiasGradient = 1 << 18;

  // Which epilogue fusions the 16-bit paths may use (when cuBLASLt offers them). From
  // MTRAIN_GEMM_FUSIONS at Create: unset or "all" for every one, "none" for none, or a
  // comma-separated list of bias_grad, dgelu, residual: for measuring each, and a way
  // around a library that computes one wrongly.
  struct Fusions {
    bool bias_gradient = true;  // MatmulBackward's bias gradient in the dW GEMM (BGRADB)
    bool gelu_gradient = true;  // MatmulInputGradThroughGelu (DGELU)
    bool residual = true;       // models: the residual add in a projection's epilogue
  };

  // How the bias gradients of MatmulBackward were made, for tests and the profile's notes.
  struct Counters {
    long long fused_bias_gradients = 0;   // in the weight gradient's epilogue
    long long kernel_bias_gradients = 0;  // by the two-pass kernels
  };

  // INTERNAL (or RESOURCE_EXHAUSTED for the workspace) naming what failed.
  static absl::StatusOr<std::unique_ptr<CublasLt>> Create();
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  cublasLtHandle_t handle() const { return handle_; }
  void* workspace() const { return workspace_; }
  // The algorithm cuBLASLt's heuristic chose for each GEMM seen (keyed by shapes, types,
  // epilogue and pointer alignments): the heuristic query costs tens of microseconds of
  // host time, and a training step repeats the same few dozen GEMMs.
  std::unordered_map<std::string, cublasLtMatmulAlgo_t>& algorithms() { return algorithms_; }
  // The GEMMs (same keys) for which cuBLASLt has no algorithm: asked once.
  std::unordered_set<std::string>& unsupported() { return unsupported_; }
  // kMaxFusedBiasGradient floats an epilogue writes a bias gradient into before it is added
  // to the accumulated one (the epilogue overwrites).
  float* bias_gradient() const { return bias_gradient_; }
  Counters& counters() { return counters_; }
  Fusions& fusions() { return fusions_; }

 private:
  CublasLt() = default;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  float* bias_gradient_ = nullptr;
  std::unordered_map<std::string, cublasLtMatmulAlgo_t> algorithms_;
  std::unordered_set<std::string> unsupported_;
  Counters counters_;
  Fusions fusions_;
};

// out[M, N] = in[M, K] @ weight[N, K]^T (+ bias[N] unless null) (+ residual[M, N] unless
// null; it may be `out` itself). With `pre_gelu` non-null the epilogue also applies GeLU:
// pre_gelu[M, N] receives in @ weight^T + bias and out its GeLU (bias required, no
// residual). The bias and residual are added to the fp32 product before the one rounding.
template <typename T>
absl::Status MatmulForward(CublasLt& blas, const T* in, const T* weight, const T* bias, T* out,
                           int M, int K, int N, cudaStream_t stream, T* pre_gelu = nullptr,
                           const T* residual = nullptr);

// For out = GeLU(pre) @ weight^T + bias, given d_out[M, N]: d_pre[M, K] = GeLU'(pre) *
// (d_out @ weight), overwritten, GeLU' (tanh form) applied to the fp32 product in the
// GEMM's epilogue; `pre_gelu` is MatmulForward's pre_gelu output. UNIMPLEMENTED (nothing
// run) where cuBLASLt has no such kernel for T and the shape: the caller then runs
// MatmulBackward's input gradient and GeluBackward (kernels/cuda/gelu.h).
template <typename T>
absl::Status MatmulInputGradThroughGelu(CublasLt& blas, const T* d_out, const T* weight,
                                        const T* pre_gelu, T* d_pre, int M, int K, int N,
                                        cudaStream_t stream);

// Given d_out[M, N]: d_in[M, K] += d_out @ weight (skipped if null); d_weight[N, K] +=
// d_out^T @ in and d_bias[N] += column sums of d_out (each skipped if null; a bias
// gradient needs the weight's: they may share one GEMM). The two halves may run apart (a
// zero-bubble schedule's input gradient first, its weight gradient later): the same calls
// either way. Gradients of the parameters are float (the fp32 main gradients of mixed
// precision) whatever T is. With accumulate_d_in false, d_in is overwritten (beta 0: not
// read, no need to zero it).
template <typename T>
absl::Status MatmulBackward(CublasLt& blas, const T* d_out, const T* in, const T* weight, T* d_in,
                            float* d_weight, float* d_bias, int M, int K, int N,
                            cudaStream_t stream, bool accumulate_d_in = true);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_MATMUL_H_
