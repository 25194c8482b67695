// The group of one: every collective is the identity (or a copy), so a rank that is alone
// in a group needs no transport, no rendezvous and no network. Point-to-point has no peer
// and answers INVALID_ARGUMENT.
#ifndef MTRAIN_WORKER_PARALLEL_SOLO_COMMUNICATOR_H_
#define MTRAIN_WORKER_PARALLEL_SOLO_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "worker/parallel/communicator.h"

namespace mtrain {

std::unique_ptr<Communicator> MakeSoloCommunicator(std::string name);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_SOLO_COMMUNICATOR_H_
