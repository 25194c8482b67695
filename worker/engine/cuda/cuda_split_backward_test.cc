// The CUDA model's backward in two parts (zero-bubble schedules, issue 36; tagged `gpu`,
// skipped visibly without one): BackwardInput of two microbatches, then their
// BackwardWeights, give the same gradients and input gradients as Backward, bit for bit (the
// same GEMM calls per tensor in the same order), over two steps that reuse the activation
// sets and their copies, for GPT-2 and Llama layers, with dropout and each recomputation (the
// weight gradients' inputs then copied from scratch buffers), in fp32 and bf16 (cuBLASLt's
// fused bias and GeLU-derivative epilogues); the hooks see the layers only from
// BackwardWeight; the engine runs the split through PipelineStages and refuses a weight
// gradient before its input gradient.
#include <cuda_bf16.h>

#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/test_support.h"
#include "worker/engine/cuda/cuda_engine.h"
#include "worker/engine/cuda/cuda_gpt_model.h"
#include "worker/engine/parameter_init.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

constexpr int kMicroBatch = 2;

// Head dim 32, a padded vocabulary; the Llama variant with grouped-query heads and SwiGLU.
ModelShape GptShape() { return Gpt2Config(2, 2, 64, 48, 100, 128); }
ModelShape LlamaShape() { return LlamaConfig(2, 4, 2, 128, 176, 48, 100, 128); }

std::vector<int32_t> Tokens(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % vocab);
  return tokens;
}

// The raw bits of a device array of T, for exact comparison in every precision.
template <typename T>
std::vector<uint8_t> Bits(const T* data, size_t n) {
  std::vector<uint8_t> bytes(n * sizeof(T));
  EXPECT_EQ(cudaMemcpy(bytes.data(), data, bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return bytes;
}

// One model of `placement` over its own gradients; the chunk without the embeddings reads a
// fixed hidden_in and writes d_hidden_in; the chunk without the head takes a fixed d_out.
template <typename T>
struct Rig {
  Rig(const ParameterLayout& layout, const ModelOptions& options, const std::vector<float>& params,
      cudaStream_t stream)
      : layout(layout),
        params(params),
        grads(std::vector<float>(layout.end_offset(), 0.0f)),
        rows(kMicroBatch * layout.shape().seq_length) {
    absl::StatusOr<std::unique_ptr<CublasLt>> created_blas = CublasLt::Create();
    EXPECT_TRUE(created_blas.ok()) << created_blas.status();
    if (created_blas.ok()) blas = std::move(*created_blas);
    auto created = CudaGptModel<T>::Create(layout, kMicroBatch, options, this->params.get(),
                                           grads.get(), blas.get(), stream);
    EXPECT_TRUE(created.ok()) << created.status();
    model = std::move(*created);
    for (int k = 0; k < 2; ++k) {
      auto acts = model->NewActivations();
      EXPECT_TRUE(acts.ok()) << acts.status();
      sets.push_back(std::move(*acts));
    }
    const size_t hidden = static_cast<size_t>(rows) * layout.shape().hidden;
    hidden_in = std::make_unique<DeviceArray<T>>(testing::RandomFloats(hidden, 31, -1, 1));
    d_hidden_out = std::make_unique<DeviceArray<T>>(testing::RandomFloats(hidden, 32, -0.01, 0.01));
    for (int k = 0; k < 2; ++k) d_hidden_in.push_back(std::make_unique<DeviceArray<T>>(hidden));
  }

  absl::Status Forward(int k, int step) {
    CudaMicrobatchInput<T> input;
    input.id = {step, k * kMicroBatch};
    tokens[k] = Tokens(rows, layout.shape().vocab, 10 * step + k);
    targets[k] = Tokens(rows, layout.shape().vocab, 10 * step + k + 5);
    input.tokens = tokens[k].data();
    input.targets = targets[k].data();
    if (!layout.placement().has_embedding) input.hidden_in = hidden_in->get();
    return model->Forward(input, sets[k].get(), nullptr);
  }
  const T* d_out() { return layout.placement().has_head ? nullptr : d_hidden_out->get(); }
  T* d_in(int k) { return layout.placement().has_embedding ? nullptr : d_hidden_in[k]->get(); }
  float d_loss() const { return 1.0f / (2 * rows); }

  const ParameterLayout& layout;
  DeviceArray<T> params;
  DeviceArray<float> grads;
  const int rows;
  std::unique_ptr<CublasLt> blas;
  std::unique_ptr<CudaGptModel<T>> model;
  std::vector<std::unique_ptr<CudaActivations<T>>> sets;
  std::unique_ptr<DeviceArray<T>> hidden_in, d_hidden_out;
  std::vector<std::unique_ptr<DeviceArray<T>>> d_hidden_in;
  std::vector<int32_t> tokens[2], targets[2];
};

template <typename T>
void CheckSplitEqualsBackward(const ModelShape& shape, const ModelOptions& options,
                              const ModelPlacement& placement) {
  MTRAIN_SKIP_WITHOUT_GPU();
  const ParameterLayout layout(shape, placement);
  std::vector<float> params(layout.end_offset());
  InitializeParameters(layout, 7, params.data());
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  Rig<T> whole(layout, options, params, stream), split(layout, options, params, stream);
  const int L = placement.num_layers;
  // Two steps: the second reuses each set's deferred buffers.
  for (int step = 1; step <= 2; ++step) {
    for (int k = 0; k < 2; ++k) {
      ASSERT_TRUE(whole.Forward(k, step).ok());
      const absl::Status backward =
          whole.model->Backward(whole.sets[k].get(), whole.d_out(), whole.d_loss(), whole.d_in(k));
      ASSERT_TRUE(backward.ok()) << backward;
    }
    // Split: both forwards, both input gradients, then both weight gradients (ZB-H1's
    // order on a stage that has two microbatches in flight).
    for (int k = 0; k < 2; ++k) ASSERT_TRUE(split.Forward(k, step).ok());
    std::vector<int> reported;
    const typename CudaGptModel<T>::LayerDoneHook hook = [&](int layer) {
      reported.push_back(layer);
      return absl::OkStatus();
    };
    for (int k = 0; k < 2; ++k) {
      const absl::Status input =
          split.model->BackwardInput(split.sets[k].get(), split.d_out(), split.d_loss(),
                                     split.d_in(k), k == 1 ? &hook : nullptr);
      ASSERT_TRUE(input.ok()) << input;
      EXPECT_EQ(split.sets[k]->deferred_count, static_cast<size_t>(4 * L));
    }
    // The input gradients' part reports the rest (-1) only.
    EXPECT_EQ(reported, std::vector<int>({-1}));
    // A second BackwardInput before the weights' turn is refused.
    EXPECT_EQ(split.model
                  ->BackwardInput(split.sets[0].get(), split.d_out(), split.d_loss(), split.d_in(0))
                  .code(),
              absl::StatusCode::kFailedPrecondition);
    reported.clear();
    for (int k = 0; k < 2; ++k) {
      const absl::Status weight =
          split.model->BackwardWeight(split.sets[k].get(), k == 1 ? &hook : nullptr);
      ASSERT_TRUE(weight.ok()) << weight;
    }
    std::vector<int> layers;
    for (int l = L - 1; l >= 0; --l) layers.push_back(l);
    EXPECT_EQ(reported, layers) << "each layer once its weights are done, the last first";
    EXPECT_EQ(split.model->BackwardWeight(split.sets[0].get()).code(),
              absl::StatusCode::kFailedPrecondition);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(Bits(split.grads.get(), layout.end_offset()),
              Bits(whole.grads.get(), layout.end_offset()))
        << "step " << step;
    if (!placement.has_embedding) {
      const size_t hidden = static_cast<size_t>(whole.rows) * shape.hidden;
      for (int k = 0; k < 2; ++k) {
        EXPECT_EQ(Bits(split.d_in(k), hidden), Bits(whole.d_in(k), hidden)) << "microbatch " << k;
      }
    }
  }
  // Where the weights' inputs were copied rather than read in place, the set says so.
  size_t copies = 0;
  for (const CudaDeferredWeightGradient<T>& job : split.sets[0]->deferred) {
    copies += job.in.size() > 0 ? 1 : 0;
  }
  std::printf("%s: %zu of %zu deferred inputs copied\n", testing::TypeName<T>(), copies,
              split.sets[0]->deferred.size());
  if (!options.recompute && !options.selective_recompute) {
    EXPECT_EQ(copies, 0u);
  }
  if (options.recompute) {
    EXPECT_EQ(copies, split.sets[0]->deferred.size());
  }
  cudaStreamDestroy(stream);
}

// The last pipeline stage's chunk: layer 1 and the head, its input from a previous stage.
ModelPlacement LastStage(const ModelShape& shape) {
  ModelPlacement placement = WholeModel(shape);
  placement.first_layer = 1;
  placement.num_layers = 1;
  placement.has_embedding = false;
  return placement;
}
// A middle stage: both layers, neither end.
ModelPlacement MiddleStage(const ModelShape& shape) {
  ModelPlacement placement = WholeModel(shape);
  placement.has_embedding = false;
  placement.has_head = false;
  return placement;
}

ModelOptions Dropout() {
  ModelOptions options;
  options.dropout = 0.1f;
  options.seed = 11;
  return options;
}

TEST(CudaSplitBackwardTest, Fp32WholeModelEqualsBackward) {
  CheckSplitEqualsBackward<float>(GptShape(), ModelOptions{}, WholeModel(GptShape()));
}

TEST(CudaSplitBackwardTest, Fp32StagesWithDropoutEqualBackward) {
  CheckSplitEqualsBackward<float>(GptShape(), Dropout(), LastStage(GptShape()));
  CheckSplitEqualsBackward<float>(GptShape(), Dropout(), MiddleStage(GptShape()));
}

TEST(CudaSplitBackwardTest, Fp32WithRecomputationEqualsBackward) {
  ModelOptions full = Dropout();
  full.recompute = true;
  full.recompute_group = 2;
  CheckSplitEqualsBackward<float>(GptShape(), full, WholeModel(GptShape()));
  ModelOptions selective = Dropout();
  selective.selective_recompute = true;
  CheckSplitEqualsBackward<float>(GptShape(), selective, MiddleStage(GptShape()));
}

TEST(CudaSplitBackwardTest, LlamaFp32EqualsBackward) {
  CheckSplitEqualsBackward<float>(LlamaShape(), Dropout(), WholeModel(LlamaShape()));
  CheckSplitEqualsBackward<float>(LlamaShape(), ModelOptions{}, LastStage(LlamaShape()));
}

TEST(CudaSplitBackwardTest, Bf16EqualsBackward) {
  CheckSplitEqualsBackward<__nv_bfloat16>(GptShape(), ModelOptions{}, WholeModel(GptShape()));
  CheckSplitEqualsBackward<__nv_bfloat16>(LlamaShape(), ModelOptions{}, MiddleStage(LlamaShape()));
}

// The engine as PipelineStages: BACKWARD_INPUT / BACKWARD_WEIGHT of two microbatches give
// BACKWARD's gradients; the sets waiting for their weights count in the activation peak
// (more than the combined run's); a weight gradient before its input gradient, or of an
// unknown chunk, is refused by name.
TEST(CudaSplitBackwardTest, EngineSplitsThroughPipelineStages) {
  MTRAIN_SKIP_WITHOUT_GPU();
  const ModelShape shape = GptShape();
  const ParameterLayout layout(shape, WholeModel(shape));
  std::vector<float> params(layout.end_offset());
  InitializeParameters(layout, 3, params.data());
  auto create = [&] {
    CudaEngineConfig config;
    config.chunks = {&layout};
    config.buffer_size = layout.end_offset();
    config.micro_batch = kMicroBatch;
    config.precision = PRECISION_FP32;
    absl::StatusOr<std::unique_ptr<CudaEngine>> engine = CudaEngine::Create(config);
    EXPECT_TRUE(engine.ok()) << engine.status();
    EXPECT_TRUE((*engine)->UploadParameters(params.data()).ok());
    EXPECT_TRUE((*engine)->ZeroGradients().ok());
    return std::move(*engine);
  };
  const int N = kMicroBatch * shape.seq_length;
  std::vector<Microbatch> microbatches(2);
  for (int k = 0; k < 2; ++k) {
    microbatches[k].id = {1, k * kMicroBatch};
    microbatches[k].tokens = Tokens(N, shape.vocab, 40 + k);
    microbatches[k].targets = Tokens(N, shape.vocab, 50 + k);
  }
  const float d_loss = 1.0f / (2 * N);
  std::unique_ptr<CudaEngine> whole = create(), split = create();
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(whole->Forward(0, k, microbatches[k], nullptr, nullptr).ok());
    ASSERT_TRUE(whole->Backward(0, k, nullptr, d_loss, nullptr, k == 1).ok());
  }
  EXPECT_EQ(split->BackwardWeight(0, 0, false).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(split->BackwardInput(3, 0, nullptr, d_loss, nullptr, false).code(),
            absl::StatusCode::kInvalidArgument);
  for (int k = 0; k < 2; ++k)
    ASSERT_TRUE(split->Forward(0, k, microbatches[k], nullptr, nullptr).ok());
  for (int k = 0; k < 2; ++k) {
    const absl::Status input = split->BackwardInput(0, k, nullptr, d_loss, nullptr, k == 1);
    ASSERT_TRUE(input.ok()) << input;
  }
  for (int k = 0; k < 2; ++k) {
    const absl::Status weight = split->BackwardWeight(0, k, k == 1);
    ASSERT_TRUE(weight.ok()) << weight;
  }
  const absl::Status owed = split->BackwardWeight(0, 1, true);
  EXPECT_EQ(owed.code(), absl::StatusCode::kFailedPrecondition) << owed;
  EXPECT_NE(owed.message().find("BACKWARD_INPUT"), std::string::npos) << owed;
  ASSERT_TRUE(split->WaitForGradientSums().ok());
  std::vector<float> whole_params(layout.end_offset()), split_params(layout.end_offset());
  std::vector<float> whole_grads(layout.end_offset()), split_grads(layout.end_offset());
  // The gradients through one AdamW step: equal gradients give equal weights.
  ASSERT_TRUE(whole->Update(1, 1e-3, 1.0).ok());
  ASSERT_TRUE(split->Update(1, 1e-3, 1.0).ok());
  ASSERT_TRUE(whole->DownloadParameters(whole_params.data()).ok());
  ASSERT_TRUE(split->DownloadParameters(split_params.data()).ok());
  EXPECT_EQ(split_params, whole_params);
  EXPECT_NE(split_params, params) << "the step must have moved the weights";
  std::printf("activation peak: combined %zu bytes, split %zu bytes\n",
              whole->activation_peak_bytes(), split->activation_peak_bytes());
  EXPECT_GT(split->activation_peak_bytes(), whole->activation_peak_bytes());
}

}  // namespace
}  // namespace mtrain::cuda
