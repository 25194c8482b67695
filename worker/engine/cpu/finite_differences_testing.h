// Tests' finite-difference check of a model's gradients: every parameter of a layout
// perturbed by +-h in turn, the central difference of the loss compared with the analytic
// gradient. Written once for the model tests of every family.
#ifndef MTRAIN_WORKER_ENGINE_CPU_FINITE_DIFFERENCES_TESTING_H_
#define MTRAIN_WORKER_ENGINE_CPU_FINITE_DIFFERENCES_TESTING_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/parameter_layout.h"

namespace mtrain {

// Per tensor of `layout`, in order: its name and the worst relative error
// |numeric - analytic| / max(1e-3, |numeric| + |analytic|) over its elements (NaN if any
// error is NaN). `loss` evaluates the loss at the current `params`; `analytic` holds the
// gradients at `params`, which are left as they were.
inline std::vector<std::pair<std::string, double>> WorstFiniteDifferenceErrors(
    const ParameterLayout& layout, double* params, const std::vector<double>& analytic,
    const std::function<double()>& loss, double h = 1e-5) {
  std::vector<std::pair<std::string, double>> worst_per_tensor;
  for (const ParamTensor& tensor : layout.tensors()) {
    double worst = 0;
    for (size_t i = 0; i < tensor.size; ++i) {
      const size_t k = tensor.offset + i;
      const double saved = params[k];
      params[k] = saved + h;
      const double plus = loss();
      params[k] = saved - h;
      const double minus = loss();
      params[k] = saved;
      const double numeric = (plus - minus) / (2 * h);
      const double error = std::abs(numeric - analytic[k]) /
                           std::max(1e-3, std::abs(numeric) + std::abs(analytic[k]));
      if (!(error <= worst)) worst = error;  // NaN included (std::max would skip it)
    }
    worst_per_tensor.emplace_back(tensor.name, worst);
  }
  return worst_per_tensor;
}

// The whole check on one model: `loss(true)` runs forward and backward (gradients into
// `grads`), `loss(false)` the forward only; every tensor's worst error must stay below
// `tolerance`, and every tensor must get some gradient (a part of the model the loss never
// reaches would pass the comparison trivially), except those named in `zero_by_construction`,
// whose gradient is zero in exact arithmetic (and so, in floating point, sometimes exactly
// zero): still compared with the finite differences.
inline void ExpectGradientsMatchFiniteDifferences(
    const ParameterLayout& layout, double* params, const double* grads, size_t num_params,
    const std::function<double(bool)>& loss, double tolerance = 1e-5,
    const std::vector<std::string>& zero_by_construction = {}) {
  loss(/*backward=*/true);
  const std::vector<double> analytic(grads, grads + num_params);
  const auto worst =
      WorstFiniteDifferenceErrors(layout, params, analytic, [&] { return loss(false); });
  ASSERT_EQ(worst.size(), layout.tensors().size());
  for (const auto& [name, error] : worst) EXPECT_LT(error, tolerance) << name;
  for (const ParamTensor& tensor : layout.tensors()) {
    if (std::find(zero_by_construction.begin(), zero_by_construction.end(), tensor.name) !=
        zero_by_construction.end()) {
      continue;
    }
    double sum = 0;
    for (size_t i = 0; i < tensor.size; ++i) sum += std::abs(analytic[tensor.offset + i]);
    EXPECT_GT(sum, 0) << tensor.name;
  }
}

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_CPU_FINITE_DIFFERENCES_TESTING_H_
