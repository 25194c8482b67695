// AdamW over a rank's flat parameter buffer, with global gradient-norm clipping and the
// learning-rate schedule. Weight decay is applied per tensor (ParamTensor::weight_decay).
//
// The optimizer owns the moments of a contiguous element range [begin, end) of the flat
// buffer: the whole buffer normally, this rank's shard under ZeRO-1.
#ifndef MTRAIN_WORKER_ENGINE_OPTIMIZER_H_
#define MTRAIN_WORKER_ENGINE_OPTIMIZER_H_

#include <cstddef>
#include <vector>

#include "kernels/lr_schedule.h"
#include "proto/job_spec.pb.h"
#include "worker/engine/parameter_layout.h"

namespace mtrain {

// The learning-rate schedule the spec's optimizer section describes (linear warm-up, then
// cosine decay to min_lr).
cpu::LrSchedule LrScheduleOf(const OptimizerSpec& spec);

class AdamWOptimizer {
 public:
  // `tensors` locate every parameter in the flat buffer (for their weight-decay setting).
  AdamWOptimizer(std::vector<ParamTensor> tensors, const OptimizerSpec& spec, size_t begin,
                 size_t end);

  // Learning rate of update number `step` (1-based).
  double LearningRate(long long step) const;

  // One update of params[begin, end) from grads[begin, end) (indices into the full flat
  // buffers), gradients multiplied by `grad_scale` (the clipping coefficient) first.
  void Update(float* params, const float* grads, long long step, double lr, double grad_scale);

  // Optimizer state (for checkpoints).
  std::vector<float>& first_moment() { return m_; }
  std::vector<float>& second_moment() { return v_; }
  size_t begin() const { return begin_; }
  size_t end() const { return end_; }

 private:
  const std::vector<ParamTensor> tensors_;
  OptimizerSpec spec_;
  cpu::LrSchedule schedule_;
  size_t begin_, end_;
  std::vector<float> m_, v_;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_OPTIMIZER_H_
