// Fully connected layers on the GPU with cuBLASLt (kernels/matmul.h's semantics: weight
// [N, K] as torch.nn.Linear stores it, row-major, backward ACCUMULATES): T = float (fp32
// compute, no TF32, for exact-precision tests and fp32 training), __nv_bfloat16 (bf16
// tensor cores, fp32 accumulation) or __half (fp16 tensor cores, fp32 accumulation, fp16
// outputs: results beyond fp16's range become inf, which dynamic loss scaling detects). The
// forward can fuse the bias, or bias + GeLU (tanh) keeping the pre-activation for the
// backward, into the GEMM's epilogue; bias and pre-activation are T, as the output.
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

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mtrain::cuda {

// A cuBLASLt handle and its workspace, for one device; use from one stream at a time.
class CublasLt {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

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

 private:
  CublasLt() = default;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::unordered_map<std::string, cublasLtMatmulAlgo_t> algorithms_;
};

// out[M, N] = in[M, K] @ weight[N, K]^T (+ bias[N] unless null). With `pre_gelu` non-null
// the epilogue also applies GeLU: pre_gelu[M, N] receives in @ weight^T + bias and out
// its GeLU (bias required).
template <typename T>
absl::Status MatmulForward(CublasLt& blas, const T* in, const T* weight, const T* bias, T* out,
                           int M, int K, int N, cudaStream_t stream, T* pre_gelu = nullptr);

// Given d_out[M, N]: d_in[M, K] += d_out @ weight (skipped if null); d_weight[N, K] +=
// d_out^T @ in; d_bias[N] += column sums of d_out (skipped if null). Gradients of the
// parameters are float (the fp32 main gradients of mixed precision) whatever T is. With
// accumulate_d_in false, d_in is overwritten (beta 0: not read, no need to zero it).
template <typename T>
absl::Status MatmulBackward(CublasLt& blas, const T* d_out, const T* in, const T* weight, T* d_in,
                            float* d_weight, float* d_bias, int M, int K, int N,
                            cudaStream_t stream, bool accumulate_d_in = true);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_MATMUL_H_
