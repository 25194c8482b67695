// BERT's CUDA layers under tensor and sequence parallelism (issue 35; tagged `gpu`, skipped
// visibly without one): two tensor ranks as threads of this process, each with its own
// stream and cuBLASLt on the one GPU and its collectives staged through the host over a real
// Gloo group on loopback (NCCL refuses two ranks of a communicator on one device). Each
// rank's masked-LM losses and sentence-order totals equal the one-rank CUDA model's, and its
// gradients the matching slices of the one-rank gradients (fp32, within 1e-5 of each
// tensor's scale), under both LayerNorm placements, with and without sequence parallelism.
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/shard_from_full.h"
#include "gtest/gtest.h"
#include "kernels/cuda/test_support.h"
#include "worker/engine/cuda/bert_testing.h"
#include "worker/engine/cuda/cuda_gpt_model.h"
#include "worker/engine/parameter_init.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/parallel/key_value_store.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

constexpr int kBatch = 2;
constexpr int kRanks = 2;

using testing::BertBatch;
using testing::SmallBert;

BertBatch MakeBatch(const ModelShape& shape) {
  return testing::MakeBertBatch(shape, 23, {31, shape.seq_length}, {1, 0}, 5);
}

struct RankResult {
  double loss_sum = 0;
  BertHeadTotals totals;
  std::vector<float> grads;
  absl::Status status;
};

// One microbatch's forward and backward on a model of `layout` over `tensor_group` (null:
// one rank), on this thread's own stream.
RankResult Run(const ParameterLayout& layout, const std::vector<float>& params,
               const ModelOptions& options, const BertBatch& b, DeviceCollectives* tensor_group) {
  RankResult result;
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) {
    result.status = absl::InternalError("no stream");
    return result;
  }
  absl::StatusOr<std::unique_ptr<CublasLt>> blas = CublasLt::Create();
  if (!blas.ok()) {
    result.status = blas.status();
    return result;
  }
  const int N = kBatch * layout.shape().seq_length;
  DeviceArray<float> device_params(params);
  DeviceArray<float> device_grads(std::vector<float>(layout.end_offset(), 0.0f));
  DeviceArray<float> losses(static_cast<size_t>(N));
  auto model = CudaGptModel<float>::Create(layout, kBatch, options, device_params.get(),
                                           device_grads.get(), blas->get(), stream, tensor_group);
  if (!model.ok()) {
    result.status = model.status();
    return result;
  }
  auto acts = (*model)->NewActivations();
  if (!acts.ok()) {
    result.status = acts.status();
    return result;
  }
  CudaMicrobatchInput<float> input;
  input.id = {2, 0};
  input.tokens = b.tokens.data();
  input.targets = b.targets.data();
  input.token_types = b.types.data();
  input.lengths = b.lengths.data();
  input.sentence_order = b.order.data();
  input.d_loss_per_sequence = 1.0f / kBatch;
  input.bert_totals = &result.totals;
  result.status = (*model)->Forward(input, acts->get(), losses.get());
  // A hook makes the backward sum the sequence-parallel LayerNorm gradients (the step's
  // last backward does, in training).
  const CudaGptModel<float>::LayerDoneHook hook = [](int) { return absl::OkStatus(); };
  if (result.status.ok()) {
    result.status = (*model)->Backward(acts->get(), nullptr, 1.0f / b.masked, nullptr, &hook);
  }
  if (result.status.ok() && cudaStreamSynchronize(stream) != cudaSuccess) {
    result.status = absl::InternalError("the stream failed");
  }
  if (result.status.ok()) {
    for (float loss : losses.Download()) result.loss_sum += loss;
    result.grads = device_grads.Download();
  }
  cudaStreamDestroy(stream);
  return result;
}

// `shard`'s values cut out of the one-rank buffer `full` (laid out by `full_layout`).
std::vector<float> ExpectedShard(const ParameterLayout& full_layout, const std::vector<float>& full,
                                 const ShardedTensor& shard) {
  std::vector<float> out(shard.offset + shard.size, 0.0f);
  for (const ShardedTensor& whole : ShardsOf(full_layout.tensors())) {
    if (whole.name != shard.name) continue;
    FullTensor tensor;
    tensor.shape = whole.global_shape;
    tensor.values.assign(full.begin() + whole.offset, full.begin() + whole.offset + whole.size);
    EXPECT_TRUE(CopyShardFromFull(tensor, shard, out.data()).ok()) << shard.name;
  }
  return std::vector<float>(out.begin() + shard.offset, out.end());
}

void CheckTensorParallel(NormPlacement placement, bool sequence_parallel) {
  MTRAIN_SKIP_WITHOUT_GPU();
  const ModelShape shape = SmallBert(placement);
  const ParameterLayout full_layout(shape, WholeModel(shape));
  std::vector<float> full_params(full_layout.end_offset());
  InitializeParameters(full_layout, 7, full_params.data());
  ModelOptions options;
  options.dropout = 0.1f;
  options.seed = 5;
  options.sequence_parallel = sequence_parallel;
  const BertBatch batch = MakeBatch(shape);
  const RankResult want = Run(full_layout, full_params, options, batch, nullptr);
  ASSERT_TRUE(want.status.ok()) << want.status;

  static std::atomic<int> run{0};
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/bert-tp-", ::getpid(), "-", run++);
  absl::StatusOr<std::unique_ptr<DirectoryStore>> store = DirectoryStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<ParameterLayout> layouts;
  layouts.reserve(kRanks);
  for (int rank = 0; rank < kRanks; ++rank) {
    ModelPlacement sliced = WholeModel(shape);
    sliced.tensor_size = kRanks;
    sliced.tensor_rank = rank;
    layouts.emplace_back(shape, sliced);
  }
  std::vector<RankResult> results(kRanks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, rank] {
      const ParameterLayout& layout = layouts[rank];
      std::vector<float> params(layout.end_offset(), 0.0f);
      for (const ShardedTensor& shard : ShardsOf(layout.tensors())) {
        const std::vector<float> values = ExpectedShard(full_layout, full_params, shard);
        std::copy(values.begin(), values.end(), params.begin() + shard.offset);
      }
      absl::StatusOr<GlooDevice> device = CreateGlooDevice("127.0.0.1");
      if (!device.ok()) {
        results[rank].status = device.status();
        return;
      }
      GroupSpec spec;
      spec.name = "tensor-0";
      spec.members = {0, 1};
      spec.global_rank = rank;
      spec.timeout = absl::Seconds(60);
      absl::StatusOr<std::unique_ptr<Communicator>> comm = ConnectGlooGroup(**store, *device, spec);
      if (!comm.ok()) {
        results[rank].status = comm.status();
        return;
      }
      DeviceCollectives group(comm->get(), /*device_memory=*/false);
      results[rank] = Run(layout, params, options, batch, &group);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < kRanks; ++rank) {
    const RankResult& got = results[rank];
    ASSERT_TRUE(got.status.ok()) << "rank " << rank << ": " << got.status;
    std::printf(
        "%s t=2%s rank %d: masked-LM sum %.7g (one rank %.7g), sentence order %.7g "
        "(%.7g)\n",
        placement == NormPlacement::kPre ? "pre" : "post", sequence_parallel ? " sp" : "", rank,
        got.loss_sum, want.loss_sum, got.totals.sentence_order_loss,
        want.totals.sentence_order_loss);
    EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-5 * std::abs(want.loss_sum));
    EXPECT_NEAR(got.totals.sentence_order_loss, want.totals.sentence_order_loss,
                1e-5 * std::abs(want.totals.sentence_order_loss) + 1e-7);
    EXPECT_EQ(got.totals.masked_correct, want.totals.masked_correct);
    for (const ShardedTensor& shard : ShardsOf(layouts[rank].tensors())) {
      const std::vector<double> expected =
          testing::ToDouble(ExpectedShard(full_layout, want.grads, shard));
      const std::vector<float> actual(got.grads.begin() + shard.offset,
                                      got.grads.begin() + shard.offset + shard.size);
      const double error = testing::RelativeError(actual, expected);
      EXPECT_LT(error, 1e-5) << "rank " << rank << " " << shard.name;
    }
  }
}

TEST(CudaBertParallelTest, PreNormTensorParallelMatchesOneRank) {
  CheckTensorParallel(NormPlacement::kPre, /*sequence_parallel=*/false);
}

TEST(CudaBertParallelTest, PostNormTensorParallelMatchesOneRank) {
  CheckTensorParallel(NormPlacement::kPost, /*sequence_parallel=*/false);
}

TEST(CudaBertParallelTest, PreNormSequenceParallelMatchesOneRank) {
  CheckTensorParallel(NormPlacement::kPre, /*sequence_parallel=*/true);
}

TEST(CudaBertParallelTest, PostNormSequenceParallelMatchesOneRank) {
  CheckTensorParallel(NormPlacement::kPost, /*sequence_parallel=*/true);
}

}  // namespace
}  // namespace mtrain::cuda
