#include "plan/zero_bubble_schedule.h"

#include <algorithm>
#include <cstddef>
#include <deque>
#include <utility>
#include <vector>

#include "plan/pipeline_placement.h"

namespace mtrain {
namespace {

constexpr int kNotYet = -1;

// Finish times (in time units) of one kind of computation, by virtual stage and microbatch.
class Finished {
 public:
  Finished(int virtual_stages, int microbatches)
      : microbatches_(microbatches),
        at_(static_cast<size_t>(virtual_stages) * microbatches, kNotYet) {}
  // Whether (k, mb) had finished by time t.
  bool By(int k, int mb, int t) const {
    const int at = at_[Index(k, mb)];
    return at != kNotYet && at <= t;
  }
  void Set(int k, int mb, int t) { at_[Index(k, mb)] = t; }

 private:
  size_t Index(int k, int mb) const { return static_cast<size_t>(k) * microbatches_ + mb; }
  int microbatches_;
  std::vector<int> at_;
};

struct StageState {
  std::vector<int> next_forward;                 // per chunk: the next microbatch to forward
  std::vector<int> next_backward;                // per chunk: the next microbatch's B
  std::deque<std::pair<int, int>> weights_owed;  // (microbatch, chunk), in B order
  int kept = 0;  // forwards whose W has not run: the activations held
};

// ZB-H1 (see the header): stage s forwards p - s microbatches ahead, then for each
// microbatch b: B(b), a W when more than s are owed, the next F.
std::vector<ZeroBubbleCompute> H1Order(int p, int m, int s) {
  std::vector<ZeroBubbleCompute> order;
  const int warmup = std::min(p - s, m);
  for (int mb = 0; mb < warmup; ++mb) order.push_back({ZeroBubbleCompute::kForward, mb, 0});
  int forwarded = warmup, weighted = 0;
  for (int b = 0; b < m; ++b) {
    order.push_back({ZeroBubbleCompute::kBackwardInput, b, 0});
    if (b + 1 - weighted > s) order.push_back({ZeroBubbleCompute::kBackwardWeight, weighted++, 0});
    if (forwarded < m) order.push_back({ZeroBubbleCompute::kForward, forwarded++, 0});
  }
  while (weighted < m) order.push_back({ZeroBubbleCompute::kBackwardWeight, weighted++, 0});
  return order;
}

// ZB-V: list scheduling in unit time (see the header).
std::vector<std::vector<ZeroBubbleCompute>> VOrders(int pipeline, int microbatches) {
  const bool v_shape = true;
  const int p = pipeline;
  const int m = microbatches;
  const int v = 2;
  const int last = p * v - 1;  // the virtual stage with the loss
  Finished forward(p * v, m), backward(p * v, m);
  std::vector<StageState> stages(p);
  for (StageState& state : stages) {
    state.next_forward.assign(v, 0);
    state.next_backward.assign(v, 0);
  }
  std::vector<std::vector<ZeroBubbleCompute>> orders(p);
  const int total = 3 * m * v * p;
  int scheduled = 0;
  for (int t = 0; scheduled < total; ++t) {
    // Decisions at t see what finished by t; what starts now finishes at t + 1, recorded
    // after every stage has chosen.
    std::vector<std::pair<ZeroBubbleCompute, int>> started;  // (compute, virtual stage)
    for (int s = 0; s < p; ++s) {
      StageState& state = stages[s];
      const int limit = 2 * p;
      // The best ready (microbatch, chunk) of one kind: oldest, then nearer the loss.
      int best_chunk = -1;
      auto consider = [&](int chunk, int mb, int best_mb) {
        if (best_chunk < 0 || mb < best_mb) return true;
        return mb == best_mb &&
               VirtualStageOf(s, chunk, p, v_shape) > VirtualStageOf(s, best_chunk, p, v_shape);
      };
      int best_mb = 0;
      for (int c = 0; c < v; ++c) {
        const int k = VirtualStageOf(s, c, p, v_shape);
        const int mb = state.next_backward[c];
        if (mb >= m) continue;
        const bool ready = k == last ? forward.By(k, mb, t) : backward.By(k + 1, mb, t);
        if (ready && consider(c, mb, best_mb)) {
          best_chunk = c;
          best_mb = mb;
        }
      }
      if (best_chunk >= 0) {
        ++state.next_backward[best_chunk];
        state.weights_owed.emplace_back(best_mb, best_chunk);
        started.push_back({{ZeroBubbleCompute::kBackwardInput, best_mb, best_chunk},
                           VirtualStageOf(s, best_chunk, p, v_shape)});
        orders[s].push_back(started.back().first);
        continue;
      }
      if (state.kept < limit) {
        for (int c = 0; c < v; ++c) {
          const int k = VirtualStageOf(s, c, p, v_shape);
          const int mb = state.next_forward[c];
          if (mb >= m) continue;
          const bool ready = k == 0 || forward.By(k - 1, mb, t);
          if (ready && consider(c, mb, best_mb)) {
            best_chunk = c;
            best_mb = mb;
          }
        }
        if (best_chunk >= 0) {
          ++state.next_forward[best_chunk];
          ++state.kept;
          started.push_back({{ZeroBubbleCompute::kForward, best_mb, best_chunk},
                             VirtualStageOf(s, best_chunk, p, v_shape)});
          orders[s].push_back(started.back().first);
          continue;
        }
      }
      if (!state.weights_owed.empty()) {
        const auto [mb, chunk] = state.weights_owed.front();
        state.weights_owed.pop_front();
        --state.kept;
        orders[s].push_back({ZeroBubbleCompute::kBackwardWeight, mb, chunk});
        ++scheduled;  // W feeds no other computation: nothing to record
      }
    }
    for (const auto& [compute, k] : started) {
      (compute.kind == ZeroBubbleCompute::kForward ? forward : backward)
          .Set(k, compute.microbatch, t + 1);
      ++scheduled;
    }
  }
  return orders;
}

}  // namespace

std::vector<std::vector<ZeroBubbleCompute>> ZeroBubbleOrders(int pipeline, int microbatches,
                                                             bool v_shape) {
  if (v_shape) return VOrders(pipeline, microbatches);
  std::vector<std::vector<ZeroBubbleCompute>> orders;
  for (int s = 0; s < pipeline; ++s) orders.push_back(H1Order(pipeline, microbatches, s));
  return orders;
}

}  // namespace mtrain
