// Megatron's dynamic loss scaling for fp16 training. The loss is multiplied by `scale()`
// before backward so small gradients survive fp16; the optimizer unscales them. A step
// whose gradients overflowed (inf or NaN anywhere, on any rank) is skipped, and the
// scale backs off; after `growth_interval` clean steps in a row it grows.
//
//   initial 2^32; x2 after 1000 clean steps in a row; on overflow, x0.5 once `hysteresis`
//   (2) overflows have been counted since the last growth (every overflow after that backs
//   off again); never below 1. Megatron-LM's DynamicGradScaler, step for step.
//
//   DynamicLossScaler scaler;                           // Megatron's defaults
//   loss *= scaler.scale(); ... backward ...
//   const bool found_inf = ... (all-reduced MAX over the model-parallel group) ...;
//   if (scaler.Update(found_inf)) optimizer.Step(1 / old_scale);  // else: step skipped
//
// The state round-trips through the checkpoint's TrainingState, so a resumed fp16 run
// continues with the same scale, counters and skipped-step count (bit-exact resume).
// Not thread-safe.
#ifndef MTRAIN_WORKER_ENGINE_LOSS_SCALER_H_
#define MTRAIN_WORKER_ENGINE_LOSS_SCALER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/checkpoint.pb.h"

namespace mtrain {

struct LossScalerOptions {
  double initial_scale = 4294967296.0;  // 2^32
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int growth_interval = 1000;
  int hysteresis = 2;
  double min_scale = 1.0;
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(const LossScalerOptions& options = LossScalerOptions());

  // INVALID_ARGUMENT naming the option and the rule (factors, interval, hysteresis,
  // minimum and initial scale).
  static absl::Status Validate(const LossScalerOptions& options);

  double scale() const { return scale_; }
  // 1 / scale(): what the optimizer multiplies gradients by.
  double inverse_scale() const { return 1.0 / scale_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  int clean_steps() const { return growth_tracker_; }
  int hysteresis_left() const { return hysteresis_tracker_; }

  // Records one step's outcome. Returns whether the optimizer should apply this step
  // (false: gradients overflowed, the step is skipped and counted).
  bool Update(bool found_inf);

  // Into / from the checkpoint (loss_scale, loss_scale_good_steps,
  // loss_scale_hysteresis_left, skipped_steps). Restore: INVALID_ARGUMENT for a state
  // no scaler could be in (scale below the minimum or not finite, negative counters).
  void SaveTo(TrainingState* state) const;
  absl::Status RestoreFrom(const TrainingState& state);

 private:
  LossScalerOptions options_;
  double scale_;
  int growth_tracker_ = 0;  // clean steps since the last overflow or growth
  int hysteresis_tracker_;  // overflows still tolerated before the scale drops
  int64_t skipped_steps_ = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_LOSS_SCALER_H_
