#include "plan/pipeline_schedule.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

// Ranks that differ from stage indices, so a peer filled with a stage is caught.
std::vector<int> Ranks(int p) {
  std::vector<int> ranks;
  for (int s = 0; s < p; ++s) ranks.push_back(10 + s);
  return ranks;
}

std::string Token(const PipelineAction& a, bool with_chunk, bool with_peer) {
  static const char* const kNames[] = {"?", "F", "B", "SF", "RF", "SB", "RB"};
  std::string token = absl::StrCat(kNames[a.kind()], a.microbatch());
  if (with_chunk) absl::StrAppend(&token, ".", a.chunk());
  const bool message = a.kind() != PipelineAction::FORWARD && a.kind() != PipelineAction::BACKWARD;
  if (with_peer && message) absl::StrAppend(&token, "@", a.peer_rank());
  return token;
}

// "F0 SF0 RB0 B0": kind and microbatch, optionally ".chunk" and "@peer".
std::string Render(const PipelineSchedule& schedule, bool with_chunk, bool with_peer) {
  std::vector<std::string> tokens;
  for (const PipelineAction& a : schedule.actions()) {
    tokens.push_back(Token(a, with_chunk, with_peer));
  }
  return absl::StrJoin(tokens, " ");
}

// Only the computations, "F0.1 B2.0", to compare orders with Megatron's.
std::string RenderComputeOrder(const PipelineSchedule& schedule) {
  std::vector<std::string> tokens;
  for (const PipelineAction& a : schedule.actions()) {
    if (a.kind() == PipelineAction::FORWARD || a.kind() == PipelineAction::BACKWARD) {
      tokens.push_back(Token(a, true, false));
    }
  }
  return absl::StrJoin(tokens, " ");
}

PipelineSchedule BuildOrDie(const ScheduleConfig& config, int stage) {
  absl::StatusOr<PipelineSchedule> schedule =
      BuildPipelineSchedule(config, stage, Ranks(config.pipeline));
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? *schedule : PipelineSchedule();
}

struct ListCase {
  ScheduleConfig config;
  int stage;
  std::string expected;
};

TEST(PipelineScheduleTest, OneChunkListsAreExact) {
  const std::vector<ListCase> cases = {
      {{SCHEDULE_1F1B, 1, 1, 3}, 0, "F0 B0 F1 B1 F2 B2"},
      {{SCHEDULE_GPIPE, 1, 1, 3}, 0, "F0 F1 F2 B0 B1 B2"},
      {{SCHEDULE_GPIPE, 2, 1, 2}, 0, "F0 SF0@11 F1 SF1@11 RB0@11 B0 RB1@11 B1"},
      {{SCHEDULE_GPIPE, 2, 1, 2}, 1, "RF0@10 F0 RF1@10 F1 B0 SB0@10 B1 SB1@10"},
      {{SCHEDULE_1F1B, 2, 1, 3}, 0, "F0 SF0@11 F1 SF1@11 RB0@11 B0 F2 SF2@11 RB1@11 B1 RB2@11 B2"},
      {{SCHEDULE_1F1B, 2, 1, 3}, 1, "RF0@10 F0 B0 SB0@10 RF1@10 F1 B1 SB1@10 RF2@10 F2 B2 SB2@10"},
      // Warm-up is capped at m: stage 0 of four would run ahead by 3.
      {{SCHEDULE_1F1B, 4, 1, 2}, 0, "F0 SF0@11 F1 SF1@11 RB0@11 B0 RB1@11 B1"},
      // A middle stage (warm-up 1) receives from and sends to both neighbours.
      {{SCHEDULE_1F1B, 3, 1, 2},
       1,
       "RF0@10 F0 SF0@12 RF1@10 F1 SF1@12 RB0@12 B0 SB0@10 RB1@12 B1 SB1@10"},
      // SCHEDULE_UNSPECIFIED means the default, 1F1B.
      {{SCHEDULE_UNSPECIFIED, 2, 1, 3},
       1,
       "RF0@10 F0 B0 SB0@10 RF1@10 F1 B1 SB1@10 RF2@10 F2 B2 SB2@10"},
  };
  for (const ListCase& c : cases) {
    PipelineSchedule schedule = BuildOrDie(c.config, c.stage);
    EXPECT_EQ(Render(schedule, false, true), c.expected)
        << "schedule " << c.config.schedule << " p=" << c.config.pipeline
        << " m=" << c.config.microbatches << " stage " << c.stage;
    EXPECT_EQ(schedule.num_microbatches(), c.config.microbatches);
  }
}

// Orders worked out by hand from Megatron-LM's forward_backward_pipelining_with_interleaving
// (warm-up = 2 (p - s - 1) + (v - 1) p forwards, all forwards first when m == p).
TEST(PipelineScheduleTest, InterleavedComputeOrderFollowsMegatron) {
  const std::vector<ListCase> cases = {
      {{SCHEDULE_INTERLEAVED_1F1B, 2, 2, 4},
       0,
       "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0"},
      {{SCHEDULE_INTERLEAVED_1F1B, 2, 2, 4},
       1,
       "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0"},
      {{SCHEDULE_INTERLEAVED_1F1B, 2, 2, 2}, 1, "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0"},
  };
  for (const ListCase& c : cases) {
    EXPECT_EQ(RenderComputeOrder(BuildOrDie(c.config, c.stage)), c.expected)
        << "m=" << c.config.microbatches << " stage " << c.stage;
  }
}

// The wrap-around: stage p-1's chunk c feeds stage 0's chunk c+1, and only the very first
// and very last virtual stages skip their messages.
TEST(PipelineScheduleTest, InterleavedMessagesWrapAroundThePipeline) {
  const ScheduleConfig config{SCHEDULE_INTERLEAVED_1F1B, 2, 2, 2};
  EXPECT_EQ(Render(BuildOrDie(config, 0), true, true),
            "F0.0 SF0.0@11 F1.0 SF1.0@11 RF0.1@11 F0.1 SF0.1@11 RF1.1@11 F1.1 SF1.1@11 "
            "RB0.1@11 B0.1 SB0.1@11 RB1.1@11 B1.1 SB1.1@11 RB0.0@11 B0.0 RB1.0@11 B1.0");
  EXPECT_EQ(Render(BuildOrDie(config, 1), true, true),
            "RF0.0@10 F0.0 SF0.0@10 RF1.0@10 F1.0 SF1.0@10 RF0.1@10 F0.1 RF1.1@10 F1.1 "
            "B0.1 SB0.1@10 B1.1 SB1.1@10 RB0.0@10 B0.0 SB0.0@10 RB1.0@10 B1.0 SB1.0@10");
}

PipelineAction Action(PipelineAction::Kind kind, int microbatch, int chunk) {
  PipelineAction action;
  action.set_kind(kind);
  action.set_microbatch(microbatch);
  action.set_chunk(chunk);
  return action;
}

TEST(PipelineMessageTagTest, SendAndMatchingRecvAgree) {
  const int p = 4;
  // Stage 3 chunk 0 (virtual stage 3) -> stage 0 chunk 1 (virtual stage 4).
  EXPECT_EQ(PipelineMessageTag(Action(PipelineAction::SEND_FORWARD, 5, 0), 3, p),
            PipelineMessageTag(Action(PipelineAction::RECV_FORWARD, 5, 1), 0, p));
  EXPECT_EQ(PipelineMessageTag(Action(PipelineAction::SEND_BACKWARD, 5, 1), 0, p),
            PipelineMessageTag(Action(PipelineAction::RECV_BACKWARD, 5, 0), 3, p));
  EXPECT_EQ(PipelineMessageTag(Action(PipelineAction::SEND_FORWARD, 2, 1), 1, p),
            PipelineMessageTag(Action(PipelineAction::RECV_FORWARD, 2, 1), 2, p));
  // Same pair of ranks, opposite directions, or another microbatch: different tags.
  EXPECT_NE(PipelineMessageTag(Action(PipelineAction::SEND_FORWARD, 0, 0), 0, 2),
            PipelineMessageTag(Action(PipelineAction::SEND_BACKWARD, 0, 1), 0, 2));
  EXPECT_NE(PipelineMessageTag(Action(PipelineAction::SEND_FORWARD, 0, 0), 0, p),
            PipelineMessageTag(Action(PipelineAction::SEND_FORWARD, 1, 0), 0, p));
}

// Over a whole interleaved pipeline: sends have pairwise different tags, so do receives,
// and both sides produce the same set.
TEST(PipelineMessageTagTest, TagsAreUniqueAndPairUp) {
  const ScheduleConfig config{SCHEDULE_INTERLEAVED_1F1B, 4, 3, 8};
  std::multiset<uint64_t> sends;
  std::multiset<uint64_t> recvs;
  for (int s = 0; s < config.pipeline; ++s) {
    const PipelineSchedule schedule = BuildOrDie(config, s);
    for (const PipelineAction& a : schedule.actions()) {
      const uint64_t tag = PipelineMessageTag(a, s, config.pipeline);
      if (a.kind() == PipelineAction::SEND_FORWARD || a.kind() == PipelineAction::SEND_BACKWARD) {
        sends.insert(tag);
      } else if (a.kind() != PipelineAction::FORWARD && a.kind() != PipelineAction::BACKWARD) {
        recvs.insert(tag);
      }
    }
  }
  // m * (p v - 1) messages each way.
  EXPECT_EQ(sends.size(), 2u * 8 * (4 * 3 - 1));
  EXPECT_EQ(std::set<uint64_t>(sends.begin(), sends.end()).size(), sends.size());
  EXPECT_EQ(std::set<uint64_t>(recvs.begin(), recvs.end()).size(), recvs.size());
  EXPECT_EQ(sends, recvs);
}

struct RejectCase {
  ScheduleConfig config;
  int stage;
  int num_ranks;
  std::string rule;
};

TEST(PipelineScheduleTest, RejectsInconsistentConfigs) {
  const std::vector<RejectCase> cases = {
      {{SCHEDULE_1F1B, 2, 1, 0}, 0, 2, "needs microbatches >= 1"},
      {{SCHEDULE_1F1B, 0, 1, 4}, 0, 0, "needs pipeline >= 1"},
      {{SCHEDULE_INTERLEAVED_1F1B, 2, 0, 4}, 0, 2, "needs virtual_stages >= 1"},
      {{SCHEDULE_1F1B, 2, 2, 4},
       0,
       2,
       "virtual_stages > 1 needs the interleaved or the ZB-V schedule"},
      {{SCHEDULE_GPIPE, 2, 2, 4},
       0,
       2,
       "virtual_stages > 1 needs the interleaved or the ZB-V schedule"},
      {{SCHEDULE_INTERLEAVED_1F1B, 1, 2, 4}, 0, 1, "interleaved schedule needs pipeline >= 2"},
      {{SCHEDULE_INTERLEAVED_1F1B, 4, 2, 6},
       0,
       4,
       "interleaved schedule needs microbatches % pipeline == 0 (m=6, p=4"},
      {{SCHEDULE_1F1B, 2, 1, 4}, 2, 2, "needs 0 <= stage < pipeline"},
      {{SCHEDULE_1F1B, 2, 1, 4}, -1, 2, "needs 0 <= stage < pipeline"},
      {{SCHEDULE_1F1B, 2, 1, 4}, 0, 3, "needs one rank per stage"},
      {{static_cast<Schedule>(42), 2, 1, 4}, 0, 2, "unknown schedule 42"},
  };
  for (const RejectCase& c : cases) {
    std::vector<int> ranks(c.num_ranks);
    absl::StatusOr<PipelineSchedule> schedule = BuildPipelineSchedule(c.config, c.stage, ranks);
    ASSERT_FALSE(schedule.ok()) << c.rule;
    EXPECT_EQ(schedule.status().code(), absl::StatusCode::kInvalidArgument) << c.rule;
    EXPECT_THAT(std::string(schedule.status().message()), HasSubstr(c.rule));
  }
}

}  // namespace
}  // namespace mtrain
