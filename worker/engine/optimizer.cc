#include "worker/engine/optimizer.h"

#include <algorithm>

#include "kernels/adamw.h"

namespace mtrain {

cpu::LrSchedule LrScheduleOf(const OptimizerSpec& spec) {
  cpu::LrSchedule schedule;
  schedule.max_lr = spec.lr();
  schedule.min_lr = spec.min_lr();
  schedule.warmup_steps = spec.warmup_steps();
  schedule.decay_steps = spec.decay_steps();
  return schedule;
}

AdamWOptimizer::AdamWOptimizer(std::vector<ParamTensor> tensors, const OptimizerSpec& spec,
                               size_t begin, size_t end)
    : tensors_(std::move(tensors)),
      spec_(spec),
      schedule_(LrScheduleOf(spec)),
      begin_(begin),
      end_(end),
      m_(end - begin, 0.0f),
      v_(end - begin, 0.0f) {}

double AdamWOptimizer::LearningRate(long long step) const {
  return cpu::LearningRate(schedule_, step);
}

void AdamWOptimizer::Update(float* params, const float* grads, long long step, double lr,
                            double grad_scale) {
  cpu::AdamWHyperparameters h;
  h.lr = static_cast<float>(lr);
  h.beta1 = spec_.beta1();
  h.beta2 = spec_.beta2();
  h.eps = spec_.eps();
  h.step = step;
  h.grad_scale = static_cast<float>(grad_scale);
  // Walk the tensors overlapping [begin, end): each gets its own decay setting.
  for (const ParamTensor& tensor : tensors_) {
    const size_t lo = std::max(begin_, tensor.offset);
    const size_t hi = std::min(end_, tensor.offset + tensor.size);
    if (lo >= hi) continue;
    h.weight_decay = tensor.weight_decay ? spec_.weight_decay() : 0.0f;
    cpu::AdamWUpdate<float>(params + lo, grads + lo, m_.data() + (lo - begin_),
                            v_.data() + (lo - begin_), hi - lo, h);
  }
}

}  // namespace mtrain
