#include "plan/layout_search.h"

#include <map>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "spec/resolved_spec_for_test.h"

namespace mtrain {
namespace {

ClusterDescription Cluster(double link_bandwidth, int64_t memory_bytes) {
  ClusterDescription cluster;
  cluster.set_nodes(1);
  cluster.set_devices_per_node(4);
  DeviceProfile* device = cluster.mutable_device();
  device->set_fp32_flops(1e11);
  device->set_matmul_efficiency(0.8);
  device->set_matmul_half_size(16);
  device->set_memory_bandwidth_bytes_per_second(1e10);
  device->set_memory_bytes(memory_bytes);
  cluster.mutable_intra_node()->set_bandwidth_bytes_per_second(link_bandwidth);
  cluster.mutable_intra_node()->set_latency_seconds(link_bandwidth > 1e12 ? 0 : 50e-6);
  return cluster;
}

LayoutSearchOptions Devices(int devices) {
  LayoutSearchOptions options;
  options.devices = devices;
  return options;
}

const char kSpec[] = R"({"model": {"num_layers": 4, "num_heads": 4},
                         "parallel": {"global_batch_size": 16}})";

TEST(LayoutSearchTest, EveryFeasibleLayoutUsesTheDevicesAndTheFastestComesFirst) {
  const LayoutSearch search =
      SearchLayouts(ResolvedSpecForTest(kSpec), Cluster(1e9, int64_t{1} << 33), Devices(4));
  ASSERT_FALSE(search.feasible.empty());
  std::set<std::string> names;
  for (size_t i = 0; i < search.feasible.size(); ++i) {
    const ParallelSpec& par = search.feasible[i].spec.parallel();
    EXPECT_EQ(par.tensor() * par.pipeline() * par.data(), 4);
    EXPECT_EQ(par.global_batch_size(), 16) << "the global batch is the user's, never changed";
    EXPECT_TRUE(names.insert(LayoutName(search.feasible[i].spec)).second) << "duplicate";
    if (i > 0) {
      EXPECT_LE(search.feasible[i - 1].cost.step_seconds, search.feasible[i].cost.step_seconds);
    }
  }
  // t in {1, 2, 4} x p in {1, 2, 4} all divide; micro batches 1, 2 and 4 split the 16 / d
  // sequences of each replica; with and without recompute.
  EXPECT_TRUE(names.count("t=2 p=2 d=1 v=1 b=4 recompute"));
  EXPECT_TRUE(names.count("t=1 p=1 d=4 v=1 b=1"));
  EXPECT_TRUE(names.count("t=1 p=2 d=2 v=2 b=1"));
}

// With the zero-bubble schedules allowed, every pipelined layout of one or two chunks is
// also priced under ZB-H1 or ZB-V (and ZB-V where interleaving's microbatches % pipeline
// rule refuses v = 2); at the paper's equal split costs they idle less than their Megatron
// counterparts, so the fastest pipelined layout is one of them.
TEST(LayoutSearchTest, ZeroBubbleSchedulesAreCandidatesBesideTheOthers) {
  const JobSpec spec = ResolvedSpecForTest(kSpec);
  const ClusterDescription cluster = Cluster(1e9, int64_t{1} << 33);
  LayoutSearchOptions options = Devices(4);
  options.try_recompute = false;
  options.cost.backward_input_share = options.cost.backward_weight_share = 0.5;
  const LayoutSearch plain = SearchLayouts(spec, cluster, options);
  options.try_zero_bubble = true;
  const LayoutSearch search = SearchLayouts(spec, cluster, options);
  std::map<std::string, const PricedLayout*> by_name;
  for (const PricedLayout& layout : search.feasible) by_name[LayoutName(layout.spec)] = &layout;
  int zero_bubble_layouts = 0;
  for (const PricedLayout& layout : search.feasible) {
    const Schedule schedule = layout.spec.parallel().schedule();
    if (schedule == SCHEDULE_ZB_H1 || schedule == SCHEDULE_ZB_V) ++zero_bubble_layouts;
  }
  for (const PricedLayout& layout : plain.feasible) {
    const ParallelSpec& par = layout.spec.parallel();
    const std::string name = LayoutName(layout.spec);
    ASSERT_TRUE(by_name.count(name)) << name;
    if (par.pipeline() > 1 && par.virtual_stages() <= 2) {
      std::string twin = name;
      twin.insert(twin.find(" b="), par.virtual_stages() == 1 ? " zb-h1" : " zb-v");
      EXPECT_TRUE(by_name.count(twin)) << twin;
    }
  }
  EXPECT_EQ(search.feasible.size(), plain.feasible.size() + zero_bubble_layouts);
  // p = 2, d = 2, b = 8: one microbatch a step, which the interleaved schedule refuses
  // (microbatches % pipeline) and ZB-V runs.
  EXPECT_TRUE(by_name.count("t=1 p=2 d=2 v=2 zb-v b=8"));
  bool interleaved_refused = false;
  for (const RejectedLayout& r : search.rejected) {
    if (LayoutName(r.spec) == "t=1 p=2 d=2 v=2 b=8") {
      interleaved_refused = r.reason.find("interleaved schedule needs") != std::string::npos;
    }
  }
  EXPECT_TRUE(interleaved_refused);
  ASSERT_TRUE(by_name.count("t=1 p=4 d=1 v=1 zb-h1 b=1"));
  ASSERT_TRUE(by_name.count("t=1 p=2 d=2 v=2 zb-v b=1"));
  EXPECT_LT(by_name["t=1 p=4 d=1 v=1 zb-h1 b=1"]->cost.bubble_fraction,
            by_name["t=1 p=4 d=1 v=1 b=1"]->cost.bubble_fraction);
  EXPECT_LT(by_name["t=1 p=2 d=2 v=2 zb-v b=1"]->cost.bubble_fraction,
            by_name["t=1 p=2 d=2 v=2 b=1"]->cost.bubble_fraction);
  EXPECT_EQ(by_name["t=1 p=2 d=2 v=2 zb-v b=1"]->spec.parallel().schedule(), SCHEDULE_ZB_V);
  for (const PricedLayout& layout : search.feasible) {
    if (layout.spec.parallel().pipeline() > 1) {
      const Schedule schedule = layout.spec.parallel().schedule();
      EXPECT_TRUE(schedule == SCHEDULE_ZB_H1 || schedule == SCHEDULE_ZB_V)
          << "fastest pipelined: " << LayoutName(layout.spec);
      break;
    }
  }
}

TEST(LayoutSearchTest, SequenceParallelismRescuesLayoutsThatDoNotFitAndSelectiveIsAChoice) {
  const JobSpec spec = ResolvedSpecForTest(kSpec);
  // A device between what t=4 b=4 needs with and without sequence parallelism.
  JobSpec whole = spec;
  whole.mutable_parallel()->set_tensor(4);
  whole.mutable_parallel()->set_micro_batch_size(4);
  JobSpec split = whole;
  split.mutable_parallel()->set_sequence_parallel(true);
  const int64_t with = EstimateRankMemory(split).total_bytes;
  const int64_t without = EstimateRankMemory(whole).total_bytes;
  ASSERT_LT(with, without);
  const ClusterDescription cluster = Cluster(1e9, (with + without) / 2);
  LayoutSearchOptions options = Devices(4);
  options.micro_batch_sizes = {4};
  options.try_recompute = false;
  auto names_of = [](const std::vector<PricedLayout>& layouts) {
    std::set<std::string> names;
    for (const PricedLayout& layout : layouts) names.insert(LayoutName(layout.spec));
    return names;
  };
  // Without the option the layout is rejected for memory; with it, its split version runs.
  std::set<std::string> plain = names_of(SearchLayouts(spec, cluster, options).feasible);
  EXPECT_FALSE(plain.count("t=4 p=1 d=1 v=1 b=4"));
  EXPECT_FALSE(plain.count("t=4 p=1 d=1 v=1 b=4 sp"));
  options.try_sequence_parallel = true;
  const LayoutSearch search = SearchLayouts(spec, cluster, options);
  std::set<std::string> with_sp = names_of(search.feasible);
  EXPECT_TRUE(with_sp.count("t=4 p=1 d=1 v=1 b=4 sp"));
  EXPECT_FALSE(with_sp.count("t=4 p=1 d=1 v=1 b=4"));
  // Layouts that fit as they are are not also tried split.
  for (const std::string& name : with_sp) {
    if (name.find(" sp") != std::string::npos) {
      EXPECT_FALSE(plain.count(name.substr(0, name.size() - 3))) << name;
    }
  }
  bool rejected_whole = false;
  for (const RejectedLayout& r : search.rejected) {
    if (LayoutName(r.spec) == "t=4 p=1 d=1 v=1 b=4") {
      rejected_whole = r.reason.find("does not fit") == 0;
    }
  }
  EXPECT_TRUE(rejected_whole);
  // Selective recomputation is one more choice, named as such.
  options.try_selective_recompute = true;
  std::set<std::string> selective = names_of(SearchLayouts(spec, cluster, options).feasible);
  int selective_layouts = 0;
  for (const std::string& name : selective) {
    if (absl::EndsWith(name, " selective")) ++selective_layouts;
  }
  EXPECT_GT(selective_layouts, 0);
  EXPECT_EQ(selective.size(), with_sp.size() + selective_layouts);
}

TEST(LayoutSearchTest, WithFreeLinksPureDataParallelismWins) {
  // No bubble, no replicated LayerNorms, no messages that cost anything.
  const LayoutSearch search =
      SearchLayouts(ResolvedSpecForTest(kSpec), Cluster(1e15, int64_t{1} << 33), Devices(4));
  ASSERT_FALSE(search.feasible.empty());
  const ParallelSpec& best = search.feasible.front().spec.parallel();
  EXPECT_EQ(best.data(), 4) << LayoutName(search.feasible.front().spec);
  EXPECT_FALSE(search.feasible.front().spec.train().recompute());
}

TEST(LayoutSearchTest, LayoutsThatDoNotFitAreRejectedWithTheEstimate) {
  const JobSpec spec = ResolvedSpecForTest(kSpec);
  // Room for what a (4, 1, 1) rank needs but not a full replica's weights and moments.
  JobSpec replica = spec;
  replica.mutable_parallel()->set_data(4);
  replica.mutable_parallel()->set_global_batch_size(16);
  const int64_t replica_bytes = EstimateRankMemory(replica).total_bytes;
  const LayoutSearch search = SearchLayouts(spec, Cluster(1e9, replica_bytes - 1), Devices(4));
  ASSERT_FALSE(search.feasible.empty());
  for (const PricedLayout& layout : search.feasible) {
    EXPECT_LE(layout.memory.total_bytes, replica_bytes - 1);
  }
  bool saw_fit_refusal = false;
  for (const RejectedLayout& rejected : search.rejected) {
    if (LayoutName(rejected.spec) == "t=1 p=1 d=4 v=1 b=1") {
      EXPECT_NE(rejected.reason.find("does not fit: needs"), std::string::npos) << rejected.reason;
      saw_fit_refusal = true;
    }
  }
  EXPECT_TRUE(saw_fit_refusal);
}

TEST(LayoutSearchTest, NothingFitsOnATinyDevice) {
  const LayoutSearch search =
      SearchLayouts(ResolvedSpecForTest(kSpec), Cluster(1e9, 1024), Devices(4));
  EXPECT_TRUE(search.feasible.empty());
  ASSERT_FALSE(search.rejected.empty());
  for (const RejectedLayout& rejected : search.rejected) {
    EXPECT_FALSE(rejected.reason.empty());
  }
}

TEST(LayoutSearchTest, InvalidCombinationsSayWhy) {
  // 3 devices: d = 3 does not split the global batch of 16.
  const LayoutSearch search =
      SearchLayouts(ResolvedSpecForTest(kSpec), Cluster(1e9, int64_t{1} << 33), Devices(3));
  EXPECT_TRUE(search.feasible.empty());
  ASSERT_FALSE(search.rejected.empty());
  EXPECT_NE(search.rejected.front().reason.find("not valid: "), std::string::npos);
  EXPECT_NE(search.rejected.front().reason.find("global_batch_size"), std::string::npos)
      << search.rejected.front().reason;
}

}  // namespace
}  // namespace mtrain
