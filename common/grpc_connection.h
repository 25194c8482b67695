// The gRPC settings of every connection to the coordinator, on both ends: the coordinator's
// server, the worker daemon, its ranks and trainctl use these, so that they agree.
//
// BDP probing off. gRPC's default sizes each connection's flow-control window by
// estimating its bandwidth-delay product: every time data arrives and no probe is out, the
// receiver sends a PING and times its ACK. A worker's heartbeat (one small message a
// second on an otherwise idle connection) triggered one on each end, every call: at 4,096
// workers on two cores it cost the coordinator a third of its CPU (90% of a core -> 61%)
// and the clients a quarter, and the heartbeats' p99 went from 260-590 ms to 12-25 ms
// (docs/PERFORMANCE.md, "The coordinator at cluster scale").
//
// A fixed 4 MiB stream window instead of the probe's: the bulk transfers (a rank's
// checkpoint shard, 1 MiB chunks, and its download) keep four chunks in flight, which
// holds a stream at 4 GB/s over a 1 ms round trip (gRPC's 64 KiB default would be 64 MB/s
// there). Small-message streams never fill it: the coordinator reads a metrics stream at
// most kMetricsReadAhead messages ahead of its store, and a rank writes one a step.
#ifndef MTRAIN_COMMON_GRPC_CONNECTION_H_
#define MTRAIN_COMMON_GRPC_CONNECTION_H_

#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"

namespace mtrain {

inline constexpr int kCoordinatorStreamWindowBytes = 4 << 20;

// The settings, for a channel (add GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL and the like after).
inline grpc::ChannelArguments CoordinatorChannelArguments() {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  arguments.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kCoordinatorStreamWindowBytes);
  return arguments;
}

// A channel to the coordinator at `address` ("HOST:PORT"), without TLS.
inline std::shared_ptr<grpc::Channel> CoordinatorChannel(const std::string& address) {
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   CoordinatorChannelArguments());
}

// The same settings on the coordinator's server.
inline void ApplyCoordinatorServerArguments(grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kCoordinatorStreamWindowBytes);
}

}  // namespace mtrain

#endif  // MTRAIN_COMMON_GRPC_CONNECTION_H_
