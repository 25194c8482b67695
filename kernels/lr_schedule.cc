#include "kernels/lr_schedule.h"

#include <cmath>

namespace mtrain::cpu {

double LearningRate(const LrSchedule& schedule, long long step) {
  const long long warmup = schedule.warmup_steps;
  const long long decay = schedule.decay_steps;
  if (warmup > 0 && step <= warmup) {
    return schedule.max_lr * static_cast<double>(step) / static_cast<double>(warmup);
  }
  if (step > decay) return schedule.min_lr;
  // Here step <= decay; with no room to decay (decay <= warmup) the warm-up just ended.
  if (decay <= warmup) return schedule.max_lr;
  const double ratio = static_cast<double>(step - warmup) / static_cast<double>(decay - warmup);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * ratio));
  return schedule.min_lr + (schedule.max_lr - schedule.min_lr) * cosine;
}

}  // namespace mtrain::cpu
