#include "worker/engine/cuda/cuda_layer_blocks.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <type_traits>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/gelu_exact.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/swiglu.h"
#include "worker/engine/model_numerics.h"

namespace mtrain::cuda::layer_blocks {

template <typename T>
absl::Status NormForward(const ModelShape& shape, const T* x, const T* gamma, const T* beta, T* y,
                         float* mean, float* rstd, int rows, cudaStream_t stream) {
  if (shape.normalization == NormKind::kRmsNorm) {
    return RmsNormForward<T>(x, gamma, y, rstd, rows, shape.hidden, NormEpsilon(shape), stream);
  }
  return LayerNormForward<T>(x, gamma, beta, y, mean, rstd, rows, shape.hidden, NormEpsilon(shape),
                             stream);
}

template <typename T>
absl::Status NormBackward(const ModelShape& shape, const T* d_y, const T* x, const T* gamma,
                          const float* mean, const float* rstd, const T* d_residual, T* d_x,
                          float* d_gamma, float* d_beta, int rows, cudaStream_t stream) {
  if (shape.normalization == NormKind::kRmsNorm) {
    if (d_residual != nullptr && d_residual != d_x) {
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(d_x, d_residual, static_cast<size_t>(rows) * shape.hidden * sizeof(T),
                          cudaMemcpyDeviceToDevice, stream),
          "copying the residual gradient"));
    }
    return RmsNormBackward<T>(d_y, x, gamma, rstd, d_x, d_gamma, rows, shape.hidden, stream);
  }
  return LayerNormBackward<T>(d_y, x, gamma, mean, rstd, d_residual, d_x, d_gamma, d_beta, rows,
                              shape.hidden, stream);
}

template <typename T>
absl::Status MlpInForward(CublasLt& blas, const ModelShape& shape, const T* in, const T* weight,
                          const T* bias, T* fc, T* act, int rows, int Fl, cudaStream_t stream) {
  if (shape.activation == ActivationKind::kSwiGlu) {
    RETURN_IF_ERROR(
        MatmulForward<T>(blas, in, weight, bias, fc, rows, shape.hidden, 2 * Fl, stream));
    return SwiGluForward<T>(fc, act, rows, Fl, stream);
  }
  if (shape.activation == ActivationKind::kGelu) {
    // BERT's exact GeLU: cuBLASLt's GeLU epilogue is the tanh form.
    RETURN_IF_ERROR(MatmulForward<T>(blas, in, weight, bias, fc, rows, shape.hidden, Fl, stream));
    return GeluExactForward<T>(fc, act, static_cast<size_t>(rows) * Fl, stream);
  }
  return MatmulForward<T>(blas, in, weight, bias, act, rows, shape.hidden, Fl, stream,
                          /*pre_gelu=*/fc);
}

template <typename T>
absl::Status MlpActivationBackward(const ModelShape& shape, const T* d_act, const T* fc, T* d_fc,
                                   int rows, int Fl, cudaStream_t stream) {
  if (shape.activation == ActivationKind::kSwiGlu) {
    return SwiGluBackward<T>(d_act, fc, d_fc, rows, Fl, stream, /*accumulate=*/false);
  }
  if (shape.activation == ActivationKind::kGelu) {
    return GeluExactBackward<T>(d_act, fc, d_fc, static_cast<size_t>(rows) * Fl, stream,
                                /*accumulate=*/false);
  }
  return GeluBackward<T>(d_act, fc, d_fc, static_cast<size_t>(rows) * Fl, stream,
                         /*accumulate=*/false);
}

template <typename T>
absl::Status MlpOutBackward(CublasLt& blas, const ModelShape& shape, const T* d_out, const T* act,
                            const T* fc, const T* weight, T* d_act_scratch, T* d_fc,
                            float* d_weight, float* d_bias, int rows, int Fl, cudaStream_t stream) {
  const int C = shape.hidden;
  if constexpr (!std::is_same_v<T, float>) {
    if (shape.activation == ActivationKind::kTanhGelu) {  // cuBLASLt's DGELU is the tanh form
      const absl::Status fused =
          MatmulInputGradThroughGelu<T>(blas, d_out, weight, fc, d_fc, rows, Fl, C, stream);
      if (fused.ok()) {
        return MatmulBackward<T>(blas, d_out, act, weight, /*d_in=*/nullptr, d_weight, d_bias, rows,
                                 Fl, C, stream);
      }
      if (!absl::IsUnimplemented(fused)) return fused;
    }
  }
  RETURN_IF_ERROR(MatmulBackward<T>(blas, d_out, act, weight, d_act_scratch, d_weight, d_bias, rows,
                                    Fl, C, stream, /*accumulate_d_in=*/false));
  return MlpActivationBackward<T>(shape, d_act_scratch, fc, d_fc, rows, Fl, stream);
}

template <typename T>
absl::Status RotateQueriesAndKeys(const ModelShape& shape, const ModelPlacement& placement,
                                  const RotaryDeviceTable& table, T* qkv, int rows, int seq_length,
                                  int first_position, bool inverse, cudaStream_t stream) {
  if (shape.positions != Positions::kRotary) return absl::OkStatus();
  const int stride = placement.local_qkv(shape);
  RETURN_IF_ERROR(ApplyRotary<T>(qkv, rows, stride, placement.local_heads(shape), seq_length,
                                 first_position, table, inverse, stream));
  return ApplyRotary<T>(qkv + placement.local_query(shape), rows, stride,
                        placement.local_kv_heads(shape), seq_length, first_position, table, inverse,
                        stream);
}

#define MTRAIN_INSTANTIATE_CUDA_LAYER_BLOCKS(T)                                                    \
  template absl::Status NormForward<T>(const ModelShape&, const T*, const T*, const T*, T*,        \
                                       float*, float*, int, cudaStream_t);                         \
  template absl::Status NormBackward<T>(const ModelShape&, const T*, const T*, const T*,           \
                                        const float*, const float*, const T*, T*, float*, float*,  \
                                        int, cudaStream_t);                                        \
  template absl::Status MlpInForward<T>(CublasLt&, const ModelShape&, const T*, const T*,          \
                                        const T*, T*, T*, int, int, cudaStream_t);                 \
  template absl::Status MlpActivationBackward<T>(const ModelShape&, const T*, const T*, T*, int,   \
                                                 int, cudaStream_t);                               \
  template absl::Status MlpOutBackward<T>(CublasLt&, const ModelShape&, const T*, const T*,        \
                                          const T*, const T*, T*, T*, float*, float*, int, int,    \
                                          cudaStream_t);                                           \
  template absl::Status RotateQueriesAndKeys<T>(const ModelShape&, const ModelPlacement&,          \
                                                const RotaryDeviceTable&, T*, int, int, int, bool, \
                                                cudaStream_t);
MTRAIN_INSTANTIATE_CUDA_LAYER_BLOCKS(float)
MTRAIN_INSTANTIATE_CUDA_LAYER_BLOCKS(__nv_bfloat16)
MTRAIN_INSTANTIATE_CUDA_LAYER_BLOCKS(__half)
#undef MTRAIN_INSTANTIATE_CUDA_LAYER_BLOCKS

}  // namespace mtrain::cuda::layer_blocks
