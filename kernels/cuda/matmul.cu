#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/matmul.h"

namespace mtrain::cuda {
namespace {

absl::Status BlasStatus(cublasStatus_t status, const std::string& what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(what + ": cuBLASLt status " + std::to_string(int(status)));
}

template <typename T>
cudaDataType_t DataType();
template <>
cudaDataType_t DataType<float>() {
  return CUDA_R_32F;
}
template <>
cudaDataType_t DataType<__nv_bfloat16>() {
  return CUDA_R_16BF;
}
template <>
cudaDataType_t DataType<__half>() {
  return CUDA_R_16F;
}

// Owns the descriptors of one cublasLtMatmul call.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~Descriptors() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (d && d != c) cublasLtMatrixLayoutDestroy(d);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

#define MTRAIN_BLAS(call) \
  if (absl::Status s = BlasStatus((call), #call); !s.ok()) return s

// The largest power of two up to 256 dividing the address: what the heuristic may assume.
uint32_t Alignment(const void* pointer) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// Column-major D[m, n] = alpha op(A) op(B) + beta C, all leading dimensions dense. A and B
// are AB_T, C and D are CD_T. fp32 inputs compute in strict fp32 (no TF32); 16-bit inputs
// (bf16, fp16) use tensor cores accumulating in fp32 (CUBLAS_COMPUTE_32F, not the
// _FAST_16F variants), with C/D either the inputs' type or fp32.
// C (read when beta != 0) and D share one layout and may be one buffer. UNIMPLEMENTED,
// before anything runs, where cuBLASLt has no algorithm for the combination (an epilogue
// the library does not offer for these types, say): callers with another way fall back.
template <typename AB_T, typename CD_T>
absl::Status Gemm(CublasLt& blas, bool transpose_a, bool transpose_b, int m, int n, int k,
                  const AB_T* a, int lda, const AB_T* b, int ldb, float beta, const CD_T* c,
                  CD_T* d, int ldc, cublasLtEpilogue_t epilogue, const void* bias, void* aux,
                  int ld_aux, cudaStream_t stream) {
  Descriptors desc;
  MTRAIN_BLAS(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  MTRAIN_BLAS(
      cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  MTRAIN_BLAS(
      cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  MTRAIN_BLAS(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                             sizeof(epilogue)));
  if (bias != nullptr) {
    // The bias is D's type, cuBLASLt's rule for fp32, bf16 and fp16 outputs (cublasLt.h,
    // CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: only int8 and fp8 kernels take other types).
    const cudaDataType_t bias_type = DataType<CD_T>();
    MTRAIN_BLAS(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                               sizeof(bias)));
    MTRAIN_BLAS(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                               &bias_type, sizeof(bias_type)));
  }
  if (aux != nullptr) {
    const int64_t ld = ld_aux;
    const cudaDataType_t aux_type = DataType<CD_T>();
    MTRAIN_BLAS(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                               &aux, sizeof(aux)));
    MTRAIN_BLAS(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                               sizeof(ld)));
    MTRAIN_BLAS(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                               &aux_type, sizeof(aux_type)));
  }
  const int a_rows = transpose_a ? k : m, a_cols = transpose_a ? m : k;
  const int b_rows = transpose_b ? n : k, b_cols = transpose_b ? k : n;
  MTRAIN_BLAS(cublasLtMatrixLayoutCreate(&desc.a, DataType<AB_T>(), a_rows, a_cols, lda));
  MTRAIN_BLAS(cublasLtMatrixLayoutCreate(&desc.b, DataType<AB_T>(), b_rows, b_cols, ldb));
  MTRAIN_BLAS(cublasLtMatrixLayoutCreate(&desc.c, DataType<CD_T>(), m, n, ldc));
  desc.d = desc.c;
  MTRAIN_BLAS(cublasLtMatmulPreferenceCreate(&desc.preference));
  const size_t workspace = CublasLt::kWorkspaceBytes;
  MTRAIN_BLAS(cublasLtMatmulPreferenceSetAttribute(
      desc.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  // The heuristic assumes 256-byte aligned A/B/C/D unless told otherwise (cublasLt.h,
  // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES), but weights and weight gradients are views
  // at arbitrary offsets into the flat parameter/gradient buffers; an algorithm needing more
  // alignment than they have fails (NOT_SUPPORTED) or faults. Bias and aux pointers are on
  // the matmul descriptor, which the heuristic already inspects.
  const uint32_t align_a = Alignment(a), align_b = Alignment(b), align_c = Alignment(c),
                 align_d = Alignment(d);
  MTRAIN_BLAS(cublasLtMatmulPreferenceSetAttribute(
      desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  MTRAIN_BLAS(cublasLtMatmulPreferenceSetAttribute(
      desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  MTRAIN_BLAS(cublasLtMatmulPreferenceSetAttribute(
      desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
  MTRAIN_BLAS(cublasLtMatmulPreferenceSetAttribute(
      desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));
  // Everything the heuristic's choice depends on.
  char key[256];
  std::snprintf(key, sizeof(key), "%d%d %d %d %d %d %d %d %d %d %d %u %u %u %u %u %u %d %d",
                int(transpose_a), int(transpose_b), m, n, k, lda, ldb, ldc, int(DataType<AB_T>()),
                int(DataType<CD_T>()), int(epilogue), align_a, align_b, align_c, align_d,
                bias != nullptr ? Alignment(bias) : 0u, aux != nullptr ? Alignment(aux) : 0u,
                ld_aux, int(beta != 0.0f));
  const auto unimplemented = [&] {
    return absl::UnimplementedError("cuBLASLt has no algorithm for this GEMM (m " +
                                    std::to_string(m) + ", n " + std::to_string(n) + ", k " +
                                    std::to_string(k) + ", epilogue " +
                                    std::to_string(int(epilogue)) + ")");
  };
  if (blas.unsupported().count(key) != 0) return unimplemented();
  auto cached = blas.algorithms().find(key);
  if (cached == blas.algorithms().end()) {
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(blas.handle(), desc.op, desc.a, desc.b, desc.c, desc.d,
                                       desc.preference, 1, &heuristic, &found);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
      blas.unsupported().insert(key);  // asked once, not on every step
      return unimplemented();
    }
    MTRAIN_BLAS(status);
    cached = blas.algorithms().emplace(key, heuristic.algo).first;
  }
  const float alpha = 1.0f;
  MTRAIN_BLAS(cublasLtMatmul(blas.handle(), desc.op, &alpha, a, desc.a, b, desc.b, &beta, c, desc.c,
                             d, desc.d, &cached->second, blas.workspace(), workspace, stream));
  return absl::OkStatus();
}

// d_bias[i] += partial[i]: a bias gradient the GEMM's epilogue wrote (it overwrites),
// added to the accumulated fp32 gradient.
__global__ void AccumulateKernel(const float* partial, int n, float* d_bias) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) d_bias[i] += partial[i];
}

// d_bias[n] += sum over rows of d_out[M, N], in two passes so that the whole GPU works
// (one thread per column would leave most SMs idle and walk M rows serially), with a fixed
// partition and fixed summation orders: deterministic for a given shape.
//   Pass 1: block (column tile of 32, row chunk) -> partial[chunk, column]: 8 row lanes
//           stride through the chunk, then are summed lane 0..7.
//   Pass 2: per column, d_bias += partials over the chunks in order.
constexpr int kBiasColumns = 32;
constexpr int kBiasRowLanes = 8;
constexpr int kBiasRowsPerChunk = 512;

template <typename T>
__global__ void BiasGradPartialKernel(const T* d_out, int M, int N, int rows_per_chunk,
                                      float* partial) {
  __shared__ float lanes[kBiasRowLanes][kBiasColumns];
  const int col = blockIdx.x * kBiasColumns + threadIdx.x;
  const int begin = blockIdx.y * rows_per_chunk;
  const int end = min(M, begin + rows_per_chunk);
  float sum = 0;
  if (col < N) {
    for (int row = begin + threadIdx.y; row < end; row += kBiasRowLanes) {
      sum += ToFloat(d_out[size_t(row) * N + col]);
    }
  }
  lanes[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < N) {
    float total = 0;
    for (int lane = 0; lane < kBiasRowLanes; ++lane) total += lanes[lane][threadIdx.x];
    partial[size_t(blockIdx.y) * N + col] = total;
  }
}

__global__ void BiasGradFinishKernel(const float* partial, int chunks, int N, float* d_bias) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= N) return;
  float sum = 0;
  for (int c = 0; c < chunks; ++c) sum += partial[size_t(c) * N + col];
  d_bias[col] += sum;
}

CublasLt::Fusions FusionsFromEnvironment() {
  const char* value = std::getenv("MTRAIN_GEMM_FUSIONS");
  if (value == nullptr || std::strcmp(value, "all") == 0) return CublasLt::Fusions{};
  const std::string list = std::string(",") + value + ",";
  const auto named = [&](const char* name) {
    return list.find(std::string(",") + name + ",") != std::string::npos;
  };
  return CublasLt::Fusions{named("bias_grad"), named("dgelu"), named("residual")};
}

}  // namespace

absl::StatusOr<std::unique_ptr<CublasLt>> CublasLt::Create() {
  std::unique_ptr<CublasLt> blas(new CublasLt());
  blas->fusions_ = FusionsFromEnvironment();
  MTRAIN_BLAS(cublasLtCreate(&blas->handle_));
  if (absl::Status s =
          CudaStatus(cudaMalloc(&blas->workspace_, kWorkspaceBytes), "cuBLASLt workspace");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CudaStatus(cudaMalloc(reinterpret_cast<void**>(&blas->bias_gradient_),
                                             kMaxFusedBiasGradient * sizeof(float)),
                                  "cuBLASLt bias-gradient scratch");
      !s.ok()) {
    return s;
  }
  return blas;
}

CublasLt::~CublasLt() {
  if (bias_gradient_ != nullptr) cudaFree(bias_gradient_);
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

template <typename T>
absl::Status MatmulForward(CublasLt& blas, const T* in, const T* weight, const T* bias, T* out,
                           int M, int K, int N, cudaStream_t stream, T* pre_gelu,
                           const T* residual) {
  if (M <= 0 || K <= 0 || N <= 0) return absl::InvalidArgumentError("MatmulForward: empty shape");
  if (pre_gelu != nullptr && bias == nullptr) {
    return absl::InvalidArgumentError("MatmulForward: the GeLU epilogue needs a bias");
  }
  if (pre_gelu != nullptr && residual != nullptr) {
    return absl::InvalidArgumentError("MatmulForward: a residual cannot pass through the GeLU");
  }
  // Row-major out[M, N] is column-major out'[N, M] = weight'^T in', where weight' [K, N] and
  // in' [K, M] are the column-major views of the row-major weight and input.
  const cublasLtEpilogue_t epilogue = pre_gelu != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                      : bias != nullptr   ? CUBLASLT_EPILOGUE_BIAS
                                                          : CUBLASLT_EPILOGUE_DEFAULT;
  // The residual is C (beta 1): added in the epilogue in fp32 with the bias, one rounding.
  return Gemm<T, T>(blas, /*transpose_a=*/true, /*transpose_b=*/false, N, M, K, weight, K, in, K,
                    /*beta=*/residual != nullptr ? 1.0f : 0.0f,
                    residual != nullptr ? residual : out, out, N, epilogue, bias, pre_gelu, N,
                    stream);
}

template <typename T>
absl::Status MatmulInputGradThroughGelu(CublasLt& blas, const T* d_out, const T* weight,
                                        const T* pre_gelu, T* d_pre, int M, int K, int N,
                                        cudaStream_t stream) {
  if (M <= 0 || K <= 0 || N <= 0) {
    return absl::InvalidArgumentError("MatmulInputGradThroughGelu: empty shape");
  }
  if (!blas.fusions().gelu_gradient) {
    return absl::UnimplementedError("MTRAIN_GEMM_FUSIONS leaves out dgelu");
  }
  // d_pre'[K, M] = GeLU'(pre') * (weight'[K, N] d_out'[N, M]); the forward's pre-activation
  // (its epilogue's aux output) has d_pre's layout.
  return Gemm<T, T>(blas, false, false, K, M, N, weight, K, d_out, N, /*beta=*/0.0f, d_pre, d_pre,
                    K, CUBLASLT_EPILOGUE_DGELU, nullptr, const_cast<T*>(pre_gelu), K, stream);
}

template <typename T>
absl::Status MatmulBackward(CublasLt& blas, const T* d_out, const T* in, const T* weight, T* d_in,
                            float* d_weight, float* d_bias, int M, int K, int N,
                            cudaStream_t stream, bool accumulate_d_in) {
  if (M <= 0 || K <= 0 || N <= 0) {
    return absl::InvalidArgumentError("MatmulBackward: empty shape");
  }
  if (d_weight == nullptr && d_bias != nullptr) {
    return absl::InvalidArgumentError("MatmulBackward: a bias gradient without the weight's");
  }
  if (d_in != nullptr) {
    // d_in'[K, M] (+)= weight'[K, N] d_out'[N, M]
    const float beta = accumulate_d_in ? 1.0f : 0.0f;
    if (absl::Status s =
            Gemm<T, T>(blas, false, false, K, M, N, weight, K, d_out, N, beta, d_in, d_in, K,
                       CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0, stream);
        !s.ok()) {
      return s;
    }
  }
  if (d_weight == nullptr) return absl::OkStatus();  // the input gradient only
  // d_weight'[K, N] += in'[K, M] d_out'^T[M, N], accumulated into fp32. With 16-bit inputs
  // the bias gradient (d_out's column sums: a reduction over this GEMM's k) comes from the
  // same GEMM's epilogue (BGRADB, fp32 as the output) where cuBLASLt offers it, saving a
  // pass over d_out; fp32 (the reference precision) keeps the two-pass kernels below.
  if constexpr (!std::is_same_v<T, float>) {
    if (d_bias != nullptr && N <= CublasLt::kMaxFusedBiasGradient && blas.fusions().bias_gradient) {
      const absl::Status fused =
          Gemm<T, float>(blas, false, true, K, N, M, in, K, d_out, N, 1.0f, d_weight, d_weight, K,
                         CUBLASLT_EPILOGUE_BGRADB, blas.bias_gradient(), nullptr, 0, stream);
      if (fused.ok()) {
        ++blas.counters().fused_bias_gradients;
        AccumulateKernel<<<(N + 255) / 256, 256, 0, stream>>>(blas.bias_gradient(), N, d_bias);
        return LastLaunchStatus("MatmulBackward (bias)");
      }
      if (!absl::IsUnimplemented(fused)) return fused;
    }
  }
  if (absl::Status s =
          Gemm<T, float>(blas, false, true, K, N, M, in, K, d_out, N, 1.0f, d_weight, d_weight, K,
                         CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0, stream);
      !s.ok()) {
    return s;
  }
  if (d_bias != nullptr) {
    ++blas.counters().kernel_bias_gradients;
    // The partials live in the cuBLASLt workspace: this stream's GEMMs above are done with
    // it by then, and the next ones start after the finishing pass.
    int rows_per_chunk = kBiasRowsPerChunk;
    while (static_cast<size_t>((M + rows_per_chunk - 1) / rows_per_chunk) * N * sizeof(float) >
           CublasLt::kWorkspaceBytes) {
      rows_per_chunk *= 2;
    }
    const int chunks = (M + rows_per_chunk - 1) / rows_per_chunk;
    float* partial = static_cast<float*>(blas.workspace());
    const dim3 grid((N + kBiasColumns - 1) / kBiasColumns, chunks);
    BiasGradPartialKernel<T><<<grid, dim3(kBiasColumns, kBiasRowLanes), 0, stream>>>(
        d_out, M, N, rows_per_chunk, partial);
    if (absl::Status s = LastLaunchStatus("MatmulBackward (bias partial sums)"); !s.ok()) {
      return s;
    }
    BiasGradFinishKernel<<<(N + 255) / 256, 256, 0, stream>>>(partial, chunks, N, d_bias);
    return LastLaunchStatus("MatmulBackward (bias)");
  }
  return absl::OkStatus();
}

#define MTRAIN_INSTANTIATE_MATMUL(T)                                                               \
  template absl::Status MatmulForward<T>(CublasLt&, const T*, const T*, const T*, T*, int, int,    \
                                         int, cudaStream_t, T*, const T*);                         \
  template absl::Status MatmulInputGradThroughGelu<T>(CublasLt&, const T*, const T*, const T*, T*, \
                                                      int, int, int, cudaStream_t);
MTRAIN_INSTANTIATE_MATMUL(float)
MTRAIN_INSTANTIATE_MATMUL(__nv_bfloat16)
MTRAIN_INSTANTIATE_MATMUL(__half)
#undef MTRAIN_INSTANTIATE_MATMUL
template absl::Status MatmulBackward<float>(CublasLt&, const float*, const float*, const float*,
                                            float*, float*, float*, int, int, int, cudaStream_t,
                                            bool);
template absl::Status MatmulBackward<__nv_bfloat16>(CublasLt&, const __nv_bfloat16*,
                                                    const __nv_bfloat16*, const __nv_bfloat16*,
                                                    __nv_bfloat16*, float*, float*, int, int, int,
                                                    cudaStream_t, bool);
template absl::Status MatmulBackward<__half>(CublasLt&, const __half*, const __half*, const __half*,
                                             __half*, float*, float*, int, int, int, cudaStream_t,
                                             bool);

}  // namespace mtrain::cuda
