// Linked into the libFuzzer builds of tools/fuzz.sh: when MTRAIN_FUZZ_SEED_DIR is set,
// writes the target's built-in seeds (FuzzSeeds) there before fuzzing starts, so libFuzzer
// begins from well-formed inputs (the RPC target's are binary protobuf sequences).
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace mtrain {
std::vector<std::string> FuzzSeeds();
}  // namespace mtrain

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  const char* dir = std::getenv("MTRAIN_FUZZ_SEED_DIR");
  if (dir == nullptr) return 0;
  int n = 0;
  for (const std::string& seed : mtrain::FuzzSeeds()) {
    std::ofstream(std::string(dir) + "/seed-" + std::to_string(n++), std::ios::binary) << seed;
  }
  return 0;
}
