// The tiny GPT-2 compared with PyTorch (tests/parity/gpt2_reference.py). Changing it
// means regenerating gpt2_reference.safetensors.
#ifndef MTRAIN_TESTS_PARITY_PARITY_CONFIG_H_
#define MTRAIN_TESTS_PARITY_PARITY_CONFIG_H_

#include "proto/job_spec.pb.h"
#include "worker/engine/model_shape.h"

namespace mtrain {

inline ModelShape ParityShape() {
  const ModelShape shape =
      Gpt2Config(/*num_layers=*/2, /*num_heads=*/4, /*hidden=*/32,
                 /*seq_length=*/32, /*vocab=*/250,
                 /*padded_vocab=*/256);  // padded to 256: the padding must stay out of the loss
  return shape;
}

// The GPU parity model (tests/parity/cuda_parity_test.cc): the CUDA attention kernels take
// head dimensions 32, 64 and 128, so this one has two heads of 32. Changing it means
// regenerating gpu_parity_reference.safetensors.
inline ModelShape GpuParityShape() {
  const ModelShape shape = Gpt2Config(/*num_layers=*/2, /*num_heads=*/2, /*hidden=*/64,
                                      /*seq_length=*/64, /*vocab=*/250, /*padded_vocab=*/256);
  return shape;
}

inline constexpr int kParityBatch = 2;
inline constexpr int kParitySteps = 5;
inline constexpr unsigned long long kParityInitSeed = 1234;

inline OptimizerSpec ParityOptimizer() {
  OptimizerSpec spec;
  spec.set_lr(1e-3f);
  spec.set_min_lr(1e-4f);
  spec.set_warmup_steps(2);
  spec.set_decay_steps(5);
  spec.set_weight_decay(0.01f);
  spec.set_beta1(0.9f);
  spec.set_beta2(0.95f);
  spec.set_eps(1e-8f);
  // Low enough that clipping really happens in some steps.
  spec.set_grad_clip(0.5f);
  return spec;
}

}  // namespace mtrain

#endif  // MTRAIN_TESTS_PARITY_PARITY_CONFIG_H_
