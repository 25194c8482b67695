// The thin gRPC adapter of the coordinator: converts protos and statuses and delegates to
// the logic classes (WorkerRegistry, RendezvousStore, ...), which are tested without a
// network. No decisions are made here.
#ifndef MTRAIN_COORDINATOR_GRPC_SERVICE_H_
#define MTRAIN_COORDINATOR_GRPC_SERVICE_H_

#include "coordinator/rendezvous_store.h"
#include "coordinator/worker_registry.h"
#include "proto/coordinator.grpc.pb.h"

namespace mtrain {

class CoordinatorGrpcService final : public Coordinator::Service {
 public:
  // Both must outlive the service.
  CoordinatorGrpcService(WorkerRegistry* workers, RendezvousStore* rendezvous);

  grpc::Status RegisterWorker(grpc::ServerContext* context, const RegisterWorkerRequest* request,
                              RegisterWorkerResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const HeartbeatRequest* request,
                         HeartbeatResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const ListWorkersRequest* request,
                           ListWorkersResponse* response) override;

  grpc::Status SubmitJob(grpc::ServerContext* context, const SubmitJobRequest* request,
                         SubmitJobResponse* response) override;

  grpc::Status KeyValueSet(grpc::ServerContext* context, const KeyValueSetRequest* request,
                           KeyValueSetResponse* response) override;
  grpc::Status KeyValueGet(grpc::ServerContext* context, const KeyValueGetRequest* request,
                           KeyValueGetResponse* response) override;
  grpc::Status KeyValueWait(grpc::ServerContext* context, const KeyValueWaitRequest* request,
                            KeyValueWaitResponse* response) override;

  // GetJob, ListJobs, CancelJob, WatchJob, ReportMetrics, ReportRankResult and
  // UploadCheckpoint are not overridden yet: the generated base class answers
  // UNIMPLEMENTED, as the contract documents.

 private:
  WorkerRegistry* const workers_;
  RendezvousStore* const rendezvous_;
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_GRPC_SERVICE_H_
