// Helpers shared by the kernel tests: seeded random tensors and finite-difference gradient
// checks in double precision.
#ifndef MTRAIN_KERNELS_TEST_UTIL_H_
#define MTRAIN_KERNELS_TEST_UTIL_H_

#include <cstddef>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace mtrain::kernel_testing {

// n values uniform in [lo, hi).
std::vector<double> RandomVector(size_t n, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0);
std::vector<float> RandomFloatVector(size_t n, std::mt19937_64& rng, double lo = -1.0,
                                     double hi = 1.0);

// sum_i a[i] * b[i]: the scalar objective L = <forward output, R>.
double Dot(const std::vector<double>& a, const std::vector<double>& b);

// Central differences (L(x + h e_i) - L(x - h e_i)) / 2h for every element of *x; `objective`
// reads *x. *x is restored exactly afterwards.
std::vector<double> NumericalGradient(std::vector<double>* x,
                                      const std::function<double()>& objective, double h = 1e-6);

// Expects |analytic - numeric| <= rel_tol * max(|analytic|, |numeric|, floor) element by
// element (the floor keeps near-zero components from demanding impossible relative accuracy),
// and that the gradient is not trivially zero.
void ExpectGradientNear(const std::vector<double>& analytic, const std::vector<double>& numeric,
                        const std::string& name, double rel_tol = 1e-6, double floor = 1e-2);

}  // namespace mtrain::kernel_testing

#endif  // MTRAIN_KERNELS_TEST_UTIL_H_
