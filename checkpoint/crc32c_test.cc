#include "checkpoint/crc32c.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

TEST(Crc32cTest, StandardCheckValue) {
  const std::string message = "123456789";
  EXPECT_EQ(Crc32c(message.data(), message.size()), 0xE3069283u);
}

// Test vectors from RFC 3720 (iSCSI), appendix B.4.
TEST(Crc32cTest, Rfc3720Vectors) {
  const std::vector<unsigned char> zeros(32, 0x00);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  const std::vector<unsigned char> ones(32, 0xFF);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::vector<unsigned char> ascending(32);
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(Crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
}

TEST(Crc32cTest, EmptyIsZero) { EXPECT_EQ(Crc32c(nullptr, 0), 0u); }

// Every split point and length exercises both the 8-byte step and the byte tail, against
// a one-shot computation.
TEST(Crc32cTest, ExtendingOverPiecesEqualsOneShot) {
  std::string data;
  for (int i = 0; i < 100; ++i) data.push_back(static_cast<char>(i * 37 + 11));
  for (size_t length = 0; length <= data.size(); ++length) {
    const uint32_t whole = Crc32c(data.data(), length);
    for (size_t split = 0; split <= length; ++split) {
      const uint32_t first = ExtendCrc32c(0, data.data(), split);
      ASSERT_EQ(ExtendCrc32c(first, data.data() + split, length - split), whole)
          << "length " << length << " split " << split;
    }
  }
}

TEST(Crc32cTest, DetectsASingleFlippedBit) {
  std::string data(4096, 'x');
  const uint32_t original = Crc32c(data.data(), data.size());
  data[1234] ^= 0x10;
  EXPECT_NE(Crc32c(data.data(), data.size()), original);
}

}  // namespace
}  // namespace mtrain
