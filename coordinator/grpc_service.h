// The thin gRPC adapter of the coordinator: converts protos and statuses and delegates to
// the logic classes (WorkerRegistry, RendezvousStore, JobManager), which are tested
// without a network. No decisions are made here, except authentication: when the
// coordinator has a token, every RPC of this service must carry `authorization: Bearer
// <token>` (else UNAUTHENTICATED, and nothing changes or is read). That includes the reads
// (GetJob, ListJobs, WatchJob, ListJobEvents, ListWorkers, KeyValueGet/Wait,
// ListCheckpoints, DownloadCheckpoint): rendezvous values, job specs (data paths),
// metrics and weights are the job owner's, and a worker list maps the cluster. The
// standard health and reflection services are separate and stay open, so probes need no
// secret.
#ifndef MTRAIN_COORDINATOR_GRPC_SERVICE_H_
#define MTRAIN_COORDINATOR_GRPC_SERVICE_H_

#include <string>

#include "coordinator/checkpoint_store.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_manager.h"
#include "coordinator/rendezvous_store.h"
#include "coordinator/worker_registry.h"
#include "proto/coordinator.grpc.pb.h"

namespace mtrain {

// SubmitJob is served from the request's bytes (a raw callback method): proto3 refuses a
// spec whose strings are not UTF-8 before any typed handler runs, and gRPC would answer
// INTERNAL; parsing here answers INVALID_ARGUMENT naming the field.
//
// ReportMetrics is a callback (reactor) method: every training rank keeps one such stream
// open for its whole run, and the synchronous API parks a thread on each (1,044 threads at
// 1,024 ranks); a reactor holds no thread between messages, and reads the next message
// only once the last is stored, so a fast sender waits in gRPC's flow control instead of
// growing the coordinator's memory.
//
// Heartbeat is a callback method too: every worker sends one a second, its work is a few
// map lookups under two mutexes, and answering on gRPC's callback threads saves the sync
// server's hand-off between its polling and handler threads (the coordinator's CPU is the
// limit at 4,096 workers).
//
// KeyValueWait is a callback method: at a generation's start every rank waits for its
// peers' rendezvous keys, up to 30 s, and a thread parked per waiting rank would be 4,096
// threads at 4,096 ranks. The store answers the call when the keys are set, the generation
// ends, the wait times out or the client goes (RendezvousStore::WaitAsync).
//
// UploadCheckpoint and DownloadCheckpoint are callback streams: at a checkpoint every rank
// of a job uploads its shard at once (and a restart downloads them), so a thread per
// stream would be a thread per rank. Each chunk is written (read) on the callback thread
// that delivered (will send) it, and the next is read (written) only after: a slow disk
// or client holds its stream back through gRPC's flow control, not a thread.
//
// WatchJob is a callback stream too: `trainctl watch` and dashboards keep one open per job
// for the job's whole run; the job manager's watchers (JobWatchers, one thread) say when
// the job changed.
class CoordinatorGrpcService final
    : public Coordinator::WithRawCallbackMethod_SubmitJob<
          Coordinator::WithCallbackMethod_Heartbeat<Coordinator::WithCallbackMethod_ReportMetrics<
              Coordinator::WithCallbackMethod_KeyValueWait<
                  Coordinator::WithCallbackMethod_UploadCheckpoint<
                      Coordinator::WithCallbackMethod_DownloadCheckpoint<
                          Coordinator::WithCallbackMethod_WatchJob<Coordinator::Service>>>>>>> {
 public:
  // Pointers must outlive the service; `jobs`, `metrics` and `checkpoints` may be null
  // (job and checkpoint RPCs then answer UNAVAILABLE). An empty `auth_token` disables
  // authentication.
  CoordinatorGrpcService(WorkerRegistry* workers, RendezvousStore* rendezvous, JobManager* jobs,
                         CoordinatorMetrics* metrics, std::string auth_token,
                         CheckpointStore* checkpoints = nullptr);

  grpc::Status RegisterWorker(grpc::ServerContext* context, const RegisterWorkerRequest* request,
                              RegisterWorkerResponse* response) override;
  // What gRPC calls; answers as the synchronous overload below (which tests and the
  // fuzzer call directly).
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const HeartbeatRequest* request,
                                      HeartbeatResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const HeartbeatRequest* request,
                         HeartbeatResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const ListWorkersRequest* request,
                           ListWorkersResponse* response) override;
  grpc::Status RemoveWorker(grpc::ServerContext* context, const RemoveWorkerRequest* request,
                            RemoveWorkerResponse* response) override;

  // What gRPC calls: parses the bytes, then as the typed overload below.
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  // The same for a parsed request (tests and the fuzzer call it directly).
  grpc::Status SubmitJob(grpc::ServerContext* context, const SubmitJobRequest* request,
                         SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const GetJobRequest* request,
                      JobStatus* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const ListJobsRequest* request,
                        ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const CancelJobRequest* request,
                         CancelJobResponse* response) override;
  grpc::Status DeleteJob(grpc::ServerContext* context, const DeleteJobRequest* request,
                         DeleteJobResponse* response) override;
  grpc::Status ListJobEvents(grpc::ServerContext* context, const ListJobEventsRequest* request,
                             ListJobEventsResponse* response) override;
  grpc::ServerWriteReactor<JobStatus>* WatchJob(grpc::CallbackServerContext* context,
                                                const WatchJobRequest* request) override;

  grpc::Status KeyValueSet(grpc::ServerContext* context, const KeyValueSetRequest* request,
                           KeyValueSetResponse* response) override;
  grpc::Status KeyValueGet(grpc::ServerContext* context, const KeyValueGetRequest* request,
                           KeyValueGetResponse* response) override;
  // What gRPC calls: answered by the rendezvous store without a waiting thread.
  grpc::ServerUnaryReactor* KeyValueWait(grpc::CallbackServerContext* context,
                                         const KeyValueWaitRequest* request,
                                         KeyValueWaitResponse* response) override;
  // The blocking form (tests call it directly).
  grpc::Status KeyValueWait(grpc::ServerContext* context, const KeyValueWaitRequest* request,
                            KeyValueWaitResponse* response) override;

  grpc::ServerReadReactor<StepMetrics>* ReportMetrics(grpc::CallbackServerContext* context,
                                                      ReportMetricsResponse* response) override;
  grpc::Status ReportRankResult(grpc::ServerContext* context, const RankResult* request,
                                ReportRankResultResponse* response) override;

  grpc::ServerReadReactor<CheckpointChunk>* UploadCheckpoint(
      grpc::CallbackServerContext* context, UploadCheckpointResponse* response) override;
  grpc::Status ListCheckpoints(grpc::ServerContext* context, const ListCheckpointsRequest* request,
                               ListCheckpointsResponse* response) override;
  grpc::ServerWriteReactor<CheckpointChunk>* DownloadCheckpoint(
      grpc::CallbackServerContext* context, const DownloadCheckpointRequest* request) override;

 private:
  class MetricsStream;     // the reactor of one ReportMetrics stream
  class KeyValueWaitCall;  // the reactor of one KeyValueWait
  class UploadStream;      // the reactor of one UploadCheckpoint
  class DownloadStream;    // the reactor of one DownloadCheckpoint
  class WatchStream;       // the reactor of one WatchJob
  // UNAUTHENTICATED unless the call carries the token (or none is configured).
  grpc::Status Authorize(const grpc::ServerContextBase& context) const;
  grpc::Status SubmitParsed(const grpc::ServerContextBase& context, const SubmitJobRequest& request,
                            SubmitJobResponse* response);
  grpc::Status HeartbeatOf(const grpc::ServerContextBase& context, const HeartbeatRequest& request,
                           HeartbeatResponse* response);
  grpc::Status SubmitBytes(const grpc::ServerContextBase& context, const grpc::ByteBuffer& request,
                           grpc::ByteBuffer* response);
  // Counts an error answer in the metrics and passes it through.
  grpc::Status Answer(const char* method, const grpc::Status& status) const;
  grpc::Status NoJobs() const;

  WorkerRegistry* const workers_;
  RendezvousStore* const rendezvous_;
  JobManager* const jobs_;
  CoordinatorMetrics* const metrics_;
  const std::string auth_token_;
  CheckpointStore* const checkpoints_;
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_GRPC_SERVICE_H_
