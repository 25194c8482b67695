// libFuzzer target for the files a rank reads on a user's behalf: a safetensors file
// (train.init_from) and a Megatron MMIDIDX dataset (data.path). The first input byte picks
// the reader; the rest is the file (for MMIDIDX: two length bytes, then the .idx, then the
// .bin). A reader may accept the bytes or refuse them with the codes its header promises
// (DATA_LOSS, INVALID_ARGUMENT); anything else, a crash or a sanitizer report, is a bug.
// What it accepts must keep its promises: every tensor's bytes match its shape, and every
// token of an accepted dataset can be read.
//
//   tools/fuzz_rank_inputs.sh 60   # builds with Debian's clang, runs 60 s
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "checkpoint/safetensors.h"
#include "data/indexed_dataset.h"

namespace {

// Files live on tmpfs when there is one: libFuzzer runs thousands of inputs a second.
const std::string& Prefix() {
  static const std::string* const prefix = [] {
    const char* dir = std::getenv("FUZZ_TMPDIR");
    return new std::string(std::string(dir != nullptr ? dir : "/dev/shm") + "/rank_input_fuzz-" +
                           std::to_string(::getpid()));
  }();
  return *prefix;
}

void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "rank_input_fuzz: broken promise: %s\n", what);
    std::abort();
  }
}

void FuzzSafetensors(const uint8_t* data, size_t size) {
  const std::string path = Prefix() + ".safetensors";
  WriteFile(path, data, size);
  const absl::StatusOr<mtrain::SafetensorsFile> file = mtrain::ReadSafetensors(path);
  if (!file.ok()) {
    Check(file.status().code() == absl::StatusCode::kDataLoss, "safetensors: code not DATA_LOSS");
    return;
  }
  for (const auto& [name, tensor] : file->tensors) {
    if (tensor.dtype == "F32" || tensor.dtype == "F64") {
      const absl::StatusOr<std::vector<float>> values = mtrain::TensorAsFloats(tensor);
      Check(values.ok() && static_cast<int64_t>(values->size()) == tensor.num_elements(),
            "safetensors: an accepted tensor's values do not match its shape");
    }
  }
}

void FuzzIndexedDataset(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const size_t idx_size = std::min<size_t>(size - 2, data[0] | (size_t{data[1]} << 8));
  WriteFile(Prefix() + ".idx", data + 2, idx_size);
  WriteFile(Prefix() + ".bin", data + 2 + idx_size, size - 2 - idx_size);
  const absl::StatusOr<std::unique_ptr<mtrain::IndexedDataset>> dataset =
      mtrain::IndexedDataset::Open(Prefix());
  if (!dataset.ok()) {
    Check(dataset.status().code() == absl::StatusCode::kDataLoss ||
              dataset.status().code() == absl::StatusCode::kInvalidArgument,
          "indexed dataset: code neither DATA_LOSS nor INVALID_ARGUMENT");
    return;
  }
  std::vector<int32_t> tokens(static_cast<size_t>((*dataset)->size()));
  const absl::Status read = (*dataset)->Read(0, static_cast<int>(tokens.size()), tokens.data());
  Check(read.ok() || read.code() == absl::StatusCode::kDataLoss,
        "indexed dataset: reading an accepted dataset failed otherwise than DATA_LOSS");
  for (int64_t i = 0; i < (*dataset)->num_sequences(); ++i) {
    Check((*dataset)->Sequence(i).ok() || read.code() == absl::StatusCode::kDataLoss,
          "indexed dataset: a listed sequence cannot be read");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    FuzzSafetensors(data + 1, size - 1);
  } else {
    FuzzIndexedDataset(data + 1, size - 1);
  }
  return 0;
}
