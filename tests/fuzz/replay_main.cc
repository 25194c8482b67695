// Runs a libFuzzer target outside libFuzzer: its built-in seeds (FuzzSeeds), then every
// file under the directories named on the command line. Under Bazel this makes each
// fuzz target a test that compiles with the project's flags and replays its corpus (and
// any crash reproducer added to it); tools/fuzz.sh does the fuzzing itself.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace mtrain {
std::vector<std::string> FuzzSeeds();
}  // namespace mtrain

int main(int argc, char** argv) {
  int inputs = 0;
  for (const std::string& seed : mtrain::FuzzSeeds()) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(seed.data()), seed.size());
    ++inputs;
  }
  for (int i = 1; i < argc; ++i) {
    std::error_code error;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(argv[i], error)) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      std::stringstream bytes;
      bytes << in.rdbuf();
      const std::string input = bytes.str();
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
      ++inputs;
    }
  }
  std::printf("replayed %d inputs without a crash\n", inputs);
  return 0;
}
