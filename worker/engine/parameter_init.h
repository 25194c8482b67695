// Seeded, layout-independent initialisation: each element's value is a pure function of
// (seed, tensor name, global element index), drawn with a counter-based generator. A rank
// holding any shard of a tensor computes exactly the values a single rank would hold
// there, and a run is reproducible bit for bit.
#ifndef MTRAIN_WORKER_ENGINE_PARAMETER_INIT_H_
#define MTRAIN_WORKER_ENGINE_PARAMETER_INIT_H_

#include <cstdint>

#include "worker/engine/parameter_layout.h"

namespace mtrain {

// GPT-2 / Megatron initialisation: N(0, 0.02); output projections N(0, 0.02/sqrt(2L));
// LayerNorm gains 1; biases 0.
template <typename T>
void InitializeParameters(const ParameterLayout& layout, uint64_t seed, T* params);

// A standard normal sample that depends only on (key, index).
double CounterNormal(uint64_t key, uint64_t index);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_PARAMETER_INIT_H_
