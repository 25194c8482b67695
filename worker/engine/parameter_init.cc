#include "worker/engine/parameter_init.h"

#include <cmath>
#include <functional>

namespace mtrain {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// FNV-1a: a stable hash of the tensor name (std::hash may differ between builds).
uint64_t NameHash(const std::string& name) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ULL;
  return h;
}

}  // namespace

double CounterNormal(uint64_t key, uint64_t index) {
  const uint64_t a = SplitMix64(key ^ SplitMix64(2 * index));
  const uint64_t b = SplitMix64(key ^ SplitMix64(2 * index + 1));
  // Box-Muller; u1 in (0, 1] so the log is finite.
  const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53;
  const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

template <typename T>
void InitializeParameters(const ParameterLayout& layout, uint64_t seed, T* params) {
  const double scaled_std = kInitStd / std::sqrt(2.0 * layout.shape().num_layers);
  for (const ParamTensor& tensor : layout.tensors()) {
    T* data = params + tensor.offset;
    const uint64_t key = SplitMix64(seed) ^ NameHash(tensor.name);
    switch (tensor.init) {
      case ParamInit::kOnes:
        for (size_t i = 0; i < tensor.size; ++i) data[i] = T(1);
        break;
      case ParamInit::kZeros:
        for (size_t i = 0; i < tensor.size; ++i) data[i] = T(0);
        break;
      case ParamInit::kNormal:
      case ParamInit::kScaledNormal: {
        const double std_dev = tensor.init == ParamInit::kNormal ? kInitStd : scaled_std;
        for (size_t i = 0; i < tensor.size; ++i) {
          const int64_t g = GlobalIndex(tensor, static_cast<int64_t>(i));
          // Round through float so float and double models start from identical values.
          data[i] = static_cast<T>(static_cast<float>(std_dev * CounterNormal(key, g)));
        }
        break;
      }
    }
  }
}

template void InitializeParameters(const ParameterLayout&, uint64_t, float*);
template void InitializeParameters(const ParameterLayout&, uint64_t, double*);

}  // namespace mtrain
