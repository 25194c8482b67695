#include "plan/schedule_checker.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "plan/pipeline_placement.h"

namespace mtrain {
namespace {

// What a compute action costs in the timed simulation (0 for messages).
double CostOf(PipelineAction::Kind kind, const ComputeCosts& costs) {
  switch (kind) {
    case PipelineAction::FORWARD:
      return costs.forward;
    case PipelineAction::BACKWARD:
      return costs.backward;
    case PipelineAction::BACKWARD_INPUT:
      return costs.backward_input;
    case PipelineAction::BACKWARD_WEIGHT:
      return costs.backward_weight;
    default:
      return 0;
  }
}

// Per (microbatch, chunk) progress bits of one stage, for the structural rules.
enum Progress : uint8_t {
  kReceivedInput = 1 << 0,
  kForwarded = 1 << 1,
  kSentOutput = 1 << 2,
  kReceivedGrad = 1 << 3,
  kBackwarded = 1 << 4,  // BACKWARD, or BACKWARD_INPUT
  kSentGrad = 1 << 5,
  kSplit = 1 << 6,     // by BACKWARD_INPUT: a BACKWARD_WEIGHT is owed
  kWeighted = 1 << 7,  // BACKWARD_WEIGHT
};

// (sender rank, receiver rank, PipelineMessageTag): how the executor matches messages.
using MessageKey = std::tuple<int, int, uint64_t>;

// An action's position, for error messages.
struct Site {
  int stage;
  int index;
};

bool IsSend(PipelineAction::Kind kind) {
  return kind == PipelineAction::SEND_FORWARD || kind == PipelineAction::SEND_BACKWARD;
}
bool IsRecv(PipelineAction::Kind kind) {
  return kind == PipelineAction::RECV_FORWARD || kind == PipelineAction::RECV_BACKWARD;
}
bool IsCompute(PipelineAction::Kind kind) {
  return kind == PipelineAction::FORWARD || kind == PipelineAction::BACKWARD ||
         kind == PipelineAction::BACKWARD_INPUT || kind == PipelineAction::BACKWARD_WEIGHT;
}

std::string KindName(PipelineAction::Kind kind) {
  if (!PipelineAction::Kind_IsValid(kind) || kind == PipelineAction::KIND_UNSPECIFIED) {
    return absl::StrCat("KIND_", static_cast<int>(kind));
  }
  return PipelineAction::Kind_Name(kind);
}

// "RECV_FORWARD(microbatch 3, chunk 1, from rank 5)".
std::string Describe(const PipelineAction& action) {
  std::string peer;
  if (IsSend(action.kind())) peer = absl::StrCat(", to rank ", action.peer_rank());
  if (IsRecv(action.kind())) peer = absl::StrCat(", from rank ", action.peer_rank());
  return absl::StrCat(KindName(action.kind()), "(microbatch ", action.microbatch(), ", chunk ",
                      action.chunk(), peer, ")");
}

// Which ranks hold which virtual stages of one pipeline group.
class Topology {
 public:
  Topology(const ScheduleConfig& config, const std::vector<int>& stage_ranks)
      : p_(config.pipeline),
        v_(config.virtual_stages),
        m_(config.microbatches),
        v_shape_(config.schedule == SCHEDULE_ZB_V),
        stage_ranks_(stage_ranks) {}

  int p() const { return p_; }
  int v() const { return v_; }
  int m() const { return m_; }
  bool v_shape() const { return v_shape_; }
  int rank(int stage) const { return stage_ranks_[stage]; }
  int VirtualStage(int stage, int chunk) const {
    return VirtualStageOf(stage, chunk, p_, v_shape_);
  }
  bool IsFirst(int stage, int chunk) const { return VirtualStage(stage, chunk) == 0; }
  bool IsLast(int stage, int chunk) const { return VirtualStage(stage, chunk) == p_ * v_ - 1; }

  // The stage a message action on `stage` talks to: the one holding the adjacent virtual
  // stage (itself, at ZB-V's turn).
  int PeerStage(const PipelineAction& action, int stage) const {
    const bool to_next = action.kind() == PipelineAction::SEND_FORWARD ||
                         action.kind() == PipelineAction::RECV_BACKWARD;
    const int k = VirtualStage(stage, action.chunk()) + (to_next ? 1 : -1);
    return StageChunkOf(k, p_, v_shape_).stage;
  }

  MessageKey Key(const PipelineAction& action, int stage) const {
    const uint64_t tag = PipelineMessageTag(action, stage, p_, v_shape_);
    if (IsSend(action.kind())) return {rank(stage), action.peer_rank(), tag};
    return {action.peer_rank(), rank(stage), tag};
  }

 private:
  int p_;
  int v_;
  int m_;
  bool v_shape_;
  const std::vector<int>& stage_ranks_;
};

absl::Status Violation(int stage, int index, const PipelineAction& action, absl::string_view what) {
  return absl::FailedPreconditionError(
      absl::StrCat("stage ", stage, ", action ", index, " ", Describe(action), ": ", what));
}

absl::Status CheckArguments(const ScheduleConfig& config,
                            const std::vector<PipelineSchedule>& schedules,
                            const std::vector<int>& stage_ranks) {
  const int p = config.pipeline;
  if (p < 1 || config.virtual_stages < 1 || config.microbatches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "schedule checker: needs pipeline, virtual_stages and microbatches >= 1 (p=", p,
        ", v=", config.virtual_stages, ", m=", config.microbatches, ")"));
  }
  if (schedules.size() != static_cast<size_t>(p) || stage_ranks.size() != static_cast<size_t>(p)) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule checker: needs one schedule and one rank per stage (p=", p,
                     ", schedules=", schedules.size(), ", stage_ranks=", stage_ranks.size(), ")"));
  }
  // Messages are matched by rank, so two stages on one rank would be indistinguishable.
  if (std::set<int>(stage_ranks.begin(), stage_ranks.end()).size() != stage_ranks.size()) {
    return absl::InvalidArgumentError(absl::StrCat("schedule checker: stage_ranks repeat a rank [",
                                                   absl::StrJoin(stage_ranks, ", "), "]"));
  }
  return absl::OkStatus();
}

// The rules one stage's list must satisfy on its own (see schedule_checker.h).
absl::Status CheckStage(const Topology& topo, int stage, const PipelineSchedule& schedule) {
  if (schedule.v_shape() != topo.v_shape()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stage ", stage, ": v_shape is ", schedule.v_shape() ? "true" : "false",
        ", the config's schedule places its stages ", topo.v_shape() ? "in a V" : "in a loop"));
  }
  if (schedule.num_microbatches() != topo.m()) {
    return absl::FailedPreconditionError(absl::StrCat("stage ", stage, ": num_microbatches is ",
                                                      schedule.num_microbatches(),
                                                      ", the config has ", topo.m()));
  }
  std::vector<uint8_t> progress(static_cast<size_t>(topo.m()) * topo.v(), 0);
  for (int i = 0; i < schedule.actions_size(); ++i) {
    const PipelineAction& a = schedule.actions(i);
    const PipelineAction::Kind kind = a.kind();
    if (kind < PipelineAction::FORWARD || kind > PipelineAction::BACKWARD_WEIGHT) {
      return Violation(stage, i, a, "unknown action kind");
    }
    if (a.microbatch() < 0 || a.microbatch() >= topo.m()) {
      return Violation(stage, i, a, absl::StrCat("microbatch outside [0, ", topo.m(), ")"));
    }
    if (a.chunk() < 0 || a.chunk() >= topo.v()) {
      return Violation(stage, i, a, absl::StrCat("chunk outside [0, ", topo.v(), ")"));
    }
    const bool first = topo.IsFirst(stage, a.chunk());
    const bool last = topo.IsLast(stage, a.chunk());
    if (first && (kind == PipelineAction::RECV_FORWARD || kind == PipelineAction::SEND_BACKWARD)) {
      return Violation(stage, i, a, "the first virtual stage takes tokens and has no predecessor");
    }
    if (last && (kind == PipelineAction::SEND_FORWARD || kind == PipelineAction::RECV_BACKWARD)) {
      return Violation(stage, i, a, "the last virtual stage computes the loss; no successor");
    }
    if (IsSend(kind) || IsRecv(kind)) {
      const int peer = topo.PeerStage(a, stage);
      if (a.peer_rank() != topo.rank(peer)) {
        return Violation(stage, i, a,
                         absl::StrCat("wrong peer: the adjacent virtual stage is on stage ", peer,
                                      ", rank ", topo.rank(peer)));
      }
    }
    uint8_t& done = progress[static_cast<size_t>(a.microbatch()) * topo.v() + a.chunk()];
    const auto require = [&](uint8_t bit, absl::string_view what) -> absl::Status {
      if ((done & bit) == 0) return Violation(stage, i, a, what);
      return absl::OkStatus();
    };
    const auto once = [&](uint8_t bit) -> absl::Status {
      if ((done & bit) != 0) return Violation(stage, i, a, "appears twice");
      done |= bit;
      return absl::OkStatus();
    };
    absl::Status status;
    switch (kind) {
      case PipelineAction::RECV_FORWARD:
        if ((done & kForwarded) != 0) return Violation(stage, i, a, "received after its FORWARD");
        status = once(kReceivedInput);
        break;
      case PipelineAction::FORWARD:
        if (!first) status = require(kReceivedInput, "input used before its RECV_FORWARD");
        if (status.ok()) status = once(kForwarded);
        break;
      case PipelineAction::SEND_FORWARD:
        status = require(kForwarded, "sends an output before the FORWARD that computes it");
        if (status.ok()) status = once(kSentOutput);
        break;
      case PipelineAction::RECV_BACKWARD:
        if ((done & kBackwarded) != 0) return Violation(stage, i, a, "received after its BACKWARD");
        status = once(kReceivedGrad);
        break;
      case PipelineAction::BACKWARD:
      case PipelineAction::BACKWARD_INPUT:
        status = require(kForwarded, "backward before its FORWARD");
        if (status.ok() && !last) {
          status = require(kReceivedGrad, "output gradient used before its RECV_BACKWARD");
        }
        if (status.ok()) status = once(kBackwarded);
        if (status.ok() && kind == PipelineAction::BACKWARD_INPUT) done |= kSplit;
        break;
      case PipelineAction::BACKWARD_WEIGHT:
        status = require(kSplit, "BACKWARD_WEIGHT without its BACKWARD_INPUT before it");
        if (status.ok()) status = once(kWeighted);
        break;
      case PipelineAction::SEND_BACKWARD:
        status = require(kBackwarded, "sends a gradient before the BACKWARD that computes it");
        if (status.ok()) status = once(kSentGrad);
        break;
      default:
        break;
    }
    if (!status.ok()) return status;
  }
  for (int mb = 0; mb < topo.m(); ++mb) {
    for (int c = 0; c < topo.v(); ++c) {
      const uint8_t done = progress[static_cast<size_t>(mb) * topo.v() + c];
      const char* missing = (done & kForwarded) == 0                          ? "FORWARD"
                            : (done & kBackwarded) == 0                       ? "BACKWARD"
                            : (done & kSplit) != 0 && (done & kWeighted) == 0 ? "BACKWARD_WEIGHT"
                                                                              : nullptr;
      if (missing != nullptr) {
        return absl::FailedPreconditionError(absl::StrCat("stage ", stage, ": microbatch ", mb,
                                                          ", chunk ", c, " never runs ", missing));
      }
    }
  }
  return absl::OkStatus();
}

// Every send has exactly one receive with the same key and vice versa. Runs after
// CheckStage, so each list already holds each message at most once with the right peer.
absl::Status CheckMatching(const Topology& topo, const std::vector<PipelineSchedule>& schedules) {
  std::map<MessageKey, Site> sends;
  std::map<MessageKey, Site> recvs;
  for (int s = 0; s < topo.p(); ++s) {
    for (int i = 0; i < schedules[s].actions_size(); ++i) {
      const PipelineAction& a = schedules[s].actions(i);
      if (!IsSend(a.kind()) && !IsRecv(a.kind())) continue;
      auto& side = IsSend(a.kind()) ? sends : recvs;
      if (!side.emplace(topo.Key(a, s), Site{s, i}).second) {
        return Violation(s, i, a, "the same message appears twice");
      }
    }
  }
  // Report in stage and action order so the first violation is deterministic.
  for (int s = 0; s < topo.p(); ++s) {
    for (int i = 0; i < schedules[s].actions_size(); ++i) {
      const PipelineAction& a = schedules[s].actions(i);
      if (!IsSend(a.kind()) && !IsRecv(a.kind())) continue;
      const auto& other = IsSend(a.kind()) ? recvs : sends;
      if (other.count(topo.Key(a, s)) == 0) {
        return Violation(
            s, i, a,
            absl::StrCat("no matching ", IsSend(a.kind()) ? "receive" : "send", " on stage ",
                         topo.PeerStage(a, s), " (rank ", a.peer_rank(), ")"));
      }
    }
  }
  return absl::OkStatus();
}

// Executes all lists together: compute advances the stage's clock, a send posts its
// message at the current clock, a receive blocks until its message is posted and then
// resumes no earlier than that. The result (and whether it deadlocks) does not depend on
// the order stages are advanced in, so a round-robin sweep is enough.
absl::StatusOr<double> SimulateMakespan(const Topology& topo,
                                        const std::vector<PipelineSchedule>& schedules,
                                        const ComputeCosts& costs) {
  std::vector<int> next(topo.p(), 0);
  std::vector<double> clock(topo.p(), 0);
  std::map<MessageKey, double> posted;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < topo.p(); ++s) {
      for (; next[s] < schedules[s].actions_size(); ++next[s], progress = true) {
        const PipelineAction& a = schedules[s].actions(next[s]);
        if (IsCompute(a.kind())) {
          clock[s] += CostOf(a.kind(), costs);
        } else if (IsSend(a.kind())) {
          posted[topo.Key(a, s)] = clock[s];
        } else {
          auto it = posted.find(topo.Key(a, s));
          if (it == posted.end()) break;  // Blocked until the peer posts the send.
          clock[s] = std::max(clock[s], it->second);
        }
      }
    }
  }
  std::vector<std::string> blocked;
  for (int s = 0; s < topo.p(); ++s) {
    if (next[s] == schedules[s].actions_size()) {
      blocked.push_back(absl::StrCat("stage ", s, " finished"));
    } else {
      blocked.push_back(absl::StrCat("stage ", s, " blocked at action ", next[s], " ",
                                     Describe(schedules[s].actions(next[s]))));
    }
  }
  for (int s = 0; s < topo.p(); ++s) {
    if (next[s] != schedules[s].actions_size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("deadlock: ", absl::StrJoin(blocked, "; ")));
    }
  }
  return *std::max_element(clock.begin(), clock.end());
}

// (microbatch, chunk) pairs forwarded and not yet backwarded: the activations kept alive.
// A split backward keeps them until its BACKWARD_WEIGHT (the weights' gradients read the
// layers' inputs).
int MaxInFlight(const PipelineSchedule& schedule) {
  int in_flight = 0;
  int max_in_flight = 0;
  for (const PipelineAction& a : schedule.actions()) {
    if (a.kind() == PipelineAction::FORWARD) max_in_flight = std::max(max_in_flight, ++in_flight);
    if (a.kind() == PipelineAction::BACKWARD || a.kind() == PipelineAction::BACKWARD_WEIGHT) {
      --in_flight;
    }
  }
  return max_in_flight;
}

}  // namespace

absl::StatusOr<ScheduleReport> CheckPipelineSchedules(
    const ScheduleConfig& config, const std::vector<PipelineSchedule>& schedules,
    const std::vector<int>& stage_ranks, const ComputeCosts& costs) {
  absl::Status status = CheckArguments(config, schedules, stage_ranks);
  if (!status.ok()) return status;
  const Topology topo(config, stage_ranks);
  for (int s = 0; s < topo.p(); ++s) {
    status = CheckStage(topo, s, schedules[s]);
    if (!status.ok()) return status;
  }
  status = CheckMatching(topo, schedules);
  if (!status.ok()) return status;
  absl::StatusOr<double> makespan = SimulateMakespan(topo, schedules, costs);
  if (!makespan.ok()) return makespan.status();

  ScheduleReport report;
  for (const PipelineSchedule& schedule : schedules) {
    report.max_in_flight.push_back(MaxInFlight(schedule));
  }
  // Every stage computes the same: m v forwards and backwards (split or not).
  double busy = 0;
  for (const PipelineAction& a : schedules[0].actions()) busy += CostOf(a.kind(), costs);
  report.makespan = *makespan;
  report.bubble_fraction = busy > 0 ? (*makespan - busy) / busy : 0;
  return report;
}

absl::StatusOr<double> SimulatedBubbleFraction(const ScheduleConfig& config,
                                               const ComputeCosts& costs) {
  std::vector<int> ranks(std::max(config.pipeline, 0));
  for (int s = 0; s < config.pipeline; ++s) ranks[s] = s;
  std::vector<PipelineSchedule> schedules;
  for (int s = 0; s < config.pipeline; ++s) {
    absl::StatusOr<PipelineSchedule> schedule = BuildPipelineSchedule(config, s, ranks);
    if (!schedule.ok()) return schedule.status();
    schedules.push_back(*std::move(schedule));
  }
  absl::StatusOr<ScheduleReport> report = CheckPipelineSchedules(config, schedules, ranks, costs);
  if (!report.ok()) return report.status();
  return report->bubble_fraction;
}

double IdealBubbleFraction(const ScheduleConfig& config) {
  if (config.pipeline < 1 || config.microbatches < 1) return 0;  // No pipeline to idle.
  // The zero-bubble paper's, with F = B = W: ZB-H1 idles (p - 1)(F + B - W) = p - 1 units
  // a stage against 3 m busy ones; ZB-V none.
  if (config.schedule == SCHEDULE_ZB_H1) {
    return (config.pipeline - 1) / (3.0 * config.microbatches);
  }
  if (config.schedule == SCHEDULE_ZB_V) return 0;
  const double v =
      config.schedule == SCHEDULE_INTERLEAVED_1F1B ? std::max(config.virtual_stages, 1) : 1;
  return (config.pipeline - 1) / (v * config.microbatches);
}

}  // namespace mtrain
