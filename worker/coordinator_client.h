// What a rank process needs from the coordinator: a KeyValueStore over its rendezvous RPCs
// (Gloo addresses, NCCL ids), a stream of per-step metrics, and the final result. Every
// call carries the bearer token when one is configured.
//
//   CoordinatorClient client(address, token);
//   CoordinatorKeyValueStore store(&client, assignment.rendezvous_prefix());
//   RETURN_IF_ERROR(client.ReportStep(metrics));      // FAILED_PRECONDITION: stop
//   client.ReportResult(assignment, status);
#ifndef MTRAIN_WORKER_COORDINATOR_CLIENT_H_
#define MTRAIN_WORKER_COORDINATOR_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/assignment.pb.h"
#include "proto/coordinator.grpc.pb.h"
#include "worker/parallel/key_value_store.h"

namespace mtrain {

// Reads a bearer token from a file (trailing whitespace dropped); "" for an empty path.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

class CoordinatorClient {
 public:
  CoordinatorClient(const std::string& address, std::string token);
  ~CoordinatorClient();

  Coordinator::Stub* stub() { return stub_.get(); }
  // Adds the bearer token (if any) and a deadline `timeout` from now.
  void Prepare(grpc::ClientContext* context, absl::Duration timeout) const;

  // Sends one step on the metrics stream (opened on first use). When the coordinator ends
  // the stream (e.g. the generation is stale), returns its status: the rank must stop.
  absl::Status ReportStep(const StepMetrics& metrics);
  // Closes the metrics stream and reports the rank's end.
  absl::Status ReportResult(const Assignment& assignment, const absl::Status& result);

 private:
  std::unique_ptr<Coordinator::Stub> stub_;
  const std::string token_;
  std::unique_ptr<grpc::ClientContext> metrics_context_;
  std::unique_ptr<grpc::ClientWriter<StepMetrics>> metrics_stream_;
  ReportMetricsResponse metrics_response_;
};

// Keys live under `prefix` (the generation's rendezvous prefix) in the coordinator.
class CoordinatorKeyValueStore : public KeyValueStore {
 public:
  CoordinatorKeyValueStore(CoordinatorClient* client, std::string prefix)
      : client_(client), prefix_(std::move(prefix)) {}

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;

 private:
  CoordinatorClient* const client_;
  const std::string prefix_;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_COORDINATOR_CLIENT_H_
