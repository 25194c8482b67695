#include "checkpoint/crc32c.h"

#include <cstring>

namespace mtrain {
namespace {

// Reflected form of the Castagnoli polynomial 0x1EDC6F41: the CRC is computed least
// significant bit first, as the standard defines it.
constexpr uint32_t kReflectedPolynomial = 0x82F63B78u;

// table[0][b] is the CRC register update for byte b; table[k][b] the update for byte b
// followed by k zero bytes. With all eight, one step folds 8 input bytes with 8 lookups
// instead of 8 dependent lookup-shift rounds.
struct Tables {
  uint32_t table[8][256] = {};
};

constexpr Tables MakeTables() {
  Tables t;
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kReflectedPolynomial : 0u);
    t.table[0][b] = crc;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t prev = t.table[k - 1][b];
      t.table[k][b] = (prev >> 8) ^ t.table[0][prev & 0xFFu];
    }
  }
  return t;
}

// Built at compile time: no initialisation order or thread-safety questions.
constexpr Tables kTables = MakeTables();

// The 8-byte step loads words with memcpy and reads their bytes by shifting, which equals
// the byte order in memory only on a little-endian host.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "crc32c.cc assumes a little-endian host");

}  // namespace

uint32_t ExtendCrc32c(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  const auto& t = kTables.table;
  // The register holds the complement of the CRC (initial value and final xor 0xFFFFFFFF).
  uint32_t c = ~crc;
  while (size >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    word ^= c;
    c = t[7][word & 0xFF] ^ t[6][(word >> 8) & 0xFF] ^ t[5][(word >> 16) & 0xFF] ^
        t[4][(word >> 24) & 0xFF] ^ t[3][(word >> 32) & 0xFF] ^ t[2][(word >> 40) & 0xFF] ^
        t[1][(word >> 48) & 0xFF] ^ t[0][word >> 56];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) c = t[0][(c ^ *p++) & 0xFFu] ^ (c >> 8);
  return ~c;
}

}  // namespace mtrain
