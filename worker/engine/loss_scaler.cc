#include "worker/engine/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace mtrain {

DynamicLossScaler::DynamicLossScaler(const LossScalerOptions& options)
    : options_(options), scale_(options.initial_scale), hysteresis_tracker_(options.hysteresis) {}

absl::Status DynamicLossScaler::Validate(const LossScalerOptions& o) {
  auto bad = [](const char* field, double value, const char* rule) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", value, " [rule: ", rule, "]"));
  };
  if (!(o.min_scale > 0) || !std::isfinite(o.min_scale)) {
    return bad("min_scale", o.min_scale, "finite and > 0");
  }
  if (!(o.initial_scale >= o.min_scale) || !std::isfinite(o.initial_scale)) {
    return bad("initial_scale", o.initial_scale, "finite and >= min_scale");
  }
  if (!(o.growth_factor > 1)) return bad("growth_factor", o.growth_factor, "> 1");
  if (!(o.backoff_factor > 0 && o.backoff_factor < 1)) {
    return bad("backoff_factor", o.backoff_factor, "in (0, 1)");
  }
  if (o.growth_interval < 1) return bad("growth_interval", o.growth_interval, ">= 1");
  if (o.hysteresis < 1) return bad("hysteresis", o.hysteresis, ">= 1");
  return absl::OkStatus();
}

bool DynamicLossScaler::Update(bool found_inf) {
  if (found_inf) {
    ++skipped_steps_;
    growth_tracker_ = 0;
    // Megatron keeps counting down past zero: every further overflow backs off until a
    // growth resets the tolerance.
    hysteresis_tracker_ = std::max(0, hysteresis_tracker_ - 1);
    if (hysteresis_tracker_ <= 0) {
      scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale);
    }
    return false;
  }
  ++growth_tracker_;
  if (growth_tracker_ == options_.growth_interval) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = options_.hysteresis;
    scale_ *= options_.growth_factor;
  }
  return true;
}

void DynamicLossScaler::SaveTo(TrainingState* state) const {
  state->set_loss_scale(scale_);
  state->set_loss_scale_good_steps(growth_tracker_);
  state->set_loss_scale_hysteresis_left(hysteresis_tracker_);
  state->set_skipped_steps(skipped_steps_);
}

absl::Status DynamicLossScaler::RestoreFrom(const TrainingState& state) {
  if (!std::isfinite(state.loss_scale()) || state.loss_scale() < options_.min_scale) {
    return absl::InvalidArgumentError(absl::StrCat("loss_scale: ", state.loss_scale(),
                                                   " [rule: finite and >= the minimum ",
                                                   options_.min_scale, "]"));
  }
  if (state.loss_scale_good_steps() < 0 ||
      state.loss_scale_good_steps() >= options_.growth_interval) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss_scale_good_steps: ", state.loss_scale_good_steps(),
                     " [rule: in [0, growth_interval = ", options_.growth_interval, ")]"));
  }
  if (state.loss_scale_hysteresis_left() < 0 ||
      state.loss_scale_hysteresis_left() > options_.hysteresis) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss_scale_hysteresis_left: ", state.loss_scale_hysteresis_left(),
                     " [rule: in [0, hysteresis = ", options_.hysteresis, "]]"));
  }
  if (state.skipped_steps() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("skipped_steps: ", state.skipped_steps(), " [rule: >= 0]"));
  }
  scale_ = state.loss_scale();
  growth_tracker_ = state.loss_scale_good_steps();
  hysteresis_tracker_ = state.loss_scale_hysteresis_left();
  skipped_steps_ = state.skipped_steps();
  return absl::OkStatus();
}

}  // namespace mtrain
