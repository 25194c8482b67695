// Learning-rate schedule: linear warm-up, then cosine decay to a floor (Megatron-LM's
// "cosine" style).
#ifndef MTRAIN_KERNELS_LR_SCHEDULE_H_
#define MTRAIN_KERNELS_LR_SCHEDULE_H_

namespace mtrain::cpu {

struct LrSchedule {
  double max_lr = 0;
  double min_lr = 0;
  long long warmup_steps = 0;
  long long decay_steps = 0;  // >= warmup_steps
};

// Learning rate of update number `step` (1-based):
//   step <= warmup:              max_lr * step / warmup
//   warmup < step <= decay:      min_lr + (max_lr - min_lr) * 0.5 * (1 + cos(pi * r)),
//                                r = (step - warmup) / (decay - warmup)
//   step > decay:                min_lr
double LearningRate(const LrSchedule& schedule, long long step);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_LR_SCHEDULE_H_
