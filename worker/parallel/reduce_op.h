// The reductions collectives support. Shared by the engine's tensor-parallel hooks and the
// communicators, so the engine does not depend on a communicator implementation.
#ifndef MTRAIN_WORKER_PARALLEL_REDUCE_OP_H_
#define MTRAIN_WORKER_PARALLEL_REDUCE_OP_H_

namespace mtrain {

enum class ReduceOp { kSum, kMax };

}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_REDUCE_OP_H_
