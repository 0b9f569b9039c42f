#include "bpe/byte_level.h"

#include <array>


namespace actkit::text {
namespace {

struct Alphabet {
  std::array<std::string, 256> symbol;  // byte -> UTF-8 of its character
  std::array<int16_t, 512> byte;        // character (all below U+0200) -> byte, or -1

  Alphabet() {
    byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const int c = printable ? b : next++;
      symbol[size_t(b)] = c < 0x80 ? std::string(1, char(c))
                                   : std::string{char(0xC0 | (c >> 6)), char(0x80 | (c & 0x3F))};
      byte[size_t(c)] = int16_t(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

std::string bytes_to_symbols(std::string_view bytes) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char b : bytes) out += a.symbol[uint8_t(b)];
  return out;
}

std::string symbols_to_bytes(std::string_view token) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    // Every character of the alphabet is below U+0200: one or two bytes.
    const auto b0 = uint8_t(token[i]);
    int c = -1;
    size_t n = 1;
    if (b0 < 0x80) {
      c = b0;
    } else if ((b0 == 0xC2 || b0 == 0xC3 || b0 == 0xC4 || b0 == 0xC5 || b0 == 0xC6 || b0 == 0xC7) &&
               i + 1 < token.size()) {
      c = ((b0 & 0x1F) << 6) | (uint8_t(token[i + 1]) & 0x3F);
      n = 2;
    }
    if (c < 0 || a.byte[size_t(c)] < 0) return std::string(token);
    out += char(a.byte[size_t(c)]);
    i += n;
  }
  return out;
}

}  // namespace actkit::text
