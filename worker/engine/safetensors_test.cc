#include "worker/engine/safetensors.h"

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  const std::vector<float> weights = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  const std::vector<int32_t> ids = {4, 5, 6};
  SafetensorsFile file;
  file.tensors["w"] = MakeF32Tensor({2, 3}, weights.data());
  file.tensors["ids"] = MakeI32Tensor({3}, ids.data());
  file.metadata["format"] = "pt";
  const std::string path = TempPath("round_trip.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, file).ok());
  absl::StatusOr<SafetensorsFile> read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->metadata.at("format"), "pt");
  EXPECT_EQ(read->tensors.at("w").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*TensorAsFloats(read->tensors.at("w")), weights);
  EXPECT_EQ(*TensorAsInt32(read->tensors.at("ids")), ids);
  EXPECT_FALSE(TensorAsInt32(read->tensors.at("w")).ok());
}

TEST(SafetensorsTest, RejectsTruncatedAndMalformedFiles) {
  const std::vector<float> weights(100, 1.0f);
  SafetensorsFile file;
  file.tensors["w"] = MakeF32Tensor({100}, weights.data());
  const std::string path = TempPath("truncated.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, file).ok());
  std::ifstream in(path, std::ios::binary);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(content.data(), content.size() - 10);
  }
  absl::StatusOr<SafetensorsFile> read = ReadSafetensors(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find("outside"), absl::string_view::npos) << read.status();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write("\x05\x00\x00\x00\x00\x00\x00\x00{bad}", 13);
  }
  EXPECT_EQ(ReadSafetensors(path).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadSafetensors(TempPath("missing")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace mtrain
