// Writes the parity model's initial weights (the engine's own initialisation) with the
// configuration as metadata, for tests/parity/gpt2_reference.py to rebuild in PyTorch.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "checkpoint/safetensors.h"
#include "tests/parity/parity_config.h"
#include "worker/engine/parameter_init.h"
#include "worker/engine/parameter_layout.h"

ABSL_FLAG(std::string, output, "parity_init.safetensors", "where to write the weights");
ABSL_FLAG(std::string, model, "cpu",
          "cpu: ParityShape (gpt2_parity_test); gpu: GpuParityShape (cuda_parity_test)");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using namespace mtrain;
  const std::string model = absl::GetFlag(FLAGS_model);
  if (model != "cpu" && model != "gpu") {
    std::fprintf(stderr, "write_parity_weights: --model=%s: must be cpu or gpu\n", model.c_str());
    return 2;
  }
  const ModelShape shape = model == "gpu" ? GpuParityShape() : ParityShape();
  ParameterLayout layout(shape, WholeModel(shape));
  std::vector<float> params(layout.total_size());
  InitializeParameters(layout, kParityInitSeed, params.data());
  SafetensorsFile file;
  for (const ParamTensor& tensor : layout.tensors()) {
    file.tensors[tensor.name] = MakeF32Tensor(tensor.global_shape, params.data() + tensor.offset);
  }
  const OptimizerSpec o = ParityOptimizer();
  file.metadata["config"] = absl::StrFormat(
      R"({"layers": %d, "heads": %d, "hidden": %d, "seq": %d, "vocab": %d, )"
      R"("padded_vocab": %d, "batch": %d, "steps": %d, "data_seed": 7, "lr": %.9g, )"
      R"("min_lr": %.9g, "warmup_steps": %d, "decay_steps": %d, "weight_decay": %.9g, )"
      R"("beta1": %.9g, "beta2": %.9g, "eps": %.9g, "grad_clip": %.9g})",
      shape.num_layers, shape.num_heads, shape.hidden, shape.seq_length, shape.vocab,
      shape.padded_vocab, kParityBatch, kParitySteps, o.lr(), o.min_lr(), o.warmup_steps(),
      o.decay_steps(), o.weight_decay(), o.beta1(), o.beta2(), o.eps(), o.grad_clip());
  const absl::Status status = WriteSafetensors(absl::GetFlag(FLAGS_output), file);
  if (!status.ok()) {
    std::fprintf(stderr, "write_parity_weights: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
