#include "worker/engine/engine_choice.h"

#include "absl/strings/str_cat.h"

namespace mtrain {
namespace {

bool IsFp32(Precision precision) {
  return precision == PRECISION_FP32 || precision == PRECISION_UNSPECIFIED;
}

absl::Status CpuSupports(const JobSpec& spec, const absl::Status& cpu_bf16) {
  if (IsFp32(spec.precision())) return absl::OkStatus();
  if (spec.precision() == PRECISION_BF16) return cpu_bf16;
  return absl::UnimplementedError(
      absl::StrCat("precision: ", Precision_Name(spec.precision()),
                   " needs the CUDA engine (the CPU engine trains in PRECISION_FP32, or "
                   "PRECISION_BF16 on processors with AVX512_BF16 or AMX)"));
}

}  // namespace

absl::Status CudaEngineSupports(const JobSpec& spec) {
  if (spec.model().family() == MODEL_FAMILY_LLAMA) {
    return absl::UnimplementedError(
        "model.family: MODEL_FAMILY_LLAMA: the CUDA engine has no RMSNorm, rotary, SwiGLU or "
        "grouped-query attention kernels yet (the CPU engine trains it: device DEVICE_CPU)");
  }
  if (spec.model().family() == MODEL_FAMILY_BERT) {
    return absl::UnimplementedError(
        "model.family: MODEL_FAMILY_BERT: the CUDA engine's BERT layers have not run on a GPU "
        "yet (the CPU engine trains it: device DEVICE_CPU)");
  }
  if (spec.parallel().schedule() == SCHEDULE_ZB_H1 || spec.parallel().schedule() == SCHEDULE_ZB_V) {
    return absl::UnimplementedError(
        absl::StrCat("parallel.schedule: ", Schedule_Name(spec.parallel().schedule()),
                     ": the CUDA engine's split backward has not run on a GPU yet (the CPU "
                     "engine runs the zero-bubble schedules: device DEVICE_CPU)"));
  }
  const int heads = spec.model().num_heads();
  const int head_dim = heads > 0 ? spec.model().hidden_size() / heads : 0;
  if (head_dim != 32 && head_dim != 64 && head_dim != 128) {
    return absl::UnimplementedError(
        absl::StrCat("model: hidden_size / num_heads = ", head_dim,
                     ": the CUDA attention kernels take head dimensions 32, 64 and 128"));
  }
  return absl::OkStatus();
}

absl::StatusOr<EngineChoice> ChooseEngine(const JobSpec& spec, const absl::Status& gpu,
                                          const absl::Status& cpu_bf16) {
  // Protobuf keeps enum numbers it does not know; a rank must not read `device` -5 as
  // "auto" (or precision 99 as fp32) and train anyway.
  if (!Device_IsValid(spec.device())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device: ", spec.device(), " is not a Device (DEVICE_AUTO, DEVICE_CPU or DEVICE_CUDA)"));
  }
  if (!Precision_IsValid(spec.precision())) {
    return absl::InvalidArgumentError(
        absl::StrCat("precision: ", spec.precision(),
                     " is not a Precision (PRECISION_FP32, PRECISION_BF16 or PRECISION_FP16)"));
  }
  EngineChoice choice;
  switch (spec.device()) {
    case DEVICE_CPU: {
      if (absl::Status s = CpuSupports(spec, cpu_bf16); !s.ok()) return s;
      choice.note = "engine: CPU (device: DEVICE_CPU)";
      return choice;
    }
    case DEVICE_CUDA: {
      if (!gpu.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "device: DEVICE_CUDA but this machine has no usable GPU: ", gpu.message()));
      }
      if (absl::Status s = CudaEngineSupports(spec); !s.ok()) return s;
      choice.kind = EngineKind::kCuda;
      choice.note = "engine: CUDA (device: DEVICE_CUDA)";
      return choice;
    }
    default: {  // DEVICE_AUTO, DEVICE_UNSPECIFIED
      if (!gpu.ok()) {
        if (absl::Status s = CpuSupports(spec, cpu_bf16); !s.ok()) {
          return absl::Status(s.code(),
                              absl::StrCat(s.message(), "; no usable GPU here: ", gpu.message()));
        }
        choice.note =
            absl::StrCat("engine: CPU (device: auto; no usable GPU: ", gpu.message(), ")");
        return choice;
      }
      const absl::Status supported = CudaEngineSupports(spec);
      if (supported.ok()) {
        choice.kind = EngineKind::kCuda;
        choice.note = "engine: CUDA (device: auto; a GPU is present)";
        return choice;
      }
      if (absl::Status s = CpuSupports(spec, cpu_bf16); !s.ok()) return supported;
      choice.note = absl::StrCat(
          "engine: CPU (device: auto; the GPU is not used: ", supported.message(), ")");
      return choice;
    }
  }
}

}  // namespace mtrain
