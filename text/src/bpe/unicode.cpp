#include "bpe/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include "actkit/core/errors.h"

namespace actkit::text {
namespace {

// The length of the well-formed UTF-8 sequence at bytes[i], or, where it is
// ill-formed, minus the length of its maximal subpart (at least 1): the
// ranges of Table 3-7 of the Unicode Standard.
ptrdiff_t sequence_at(std::string_view bytes, size_t i) {
  const auto b0 = uint8_t(bytes[i]);
  if (b0 < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return -1;  // a continuation byte, an overlong lead (C0, C1) or F5..FF
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= bytes.size()) return -ptrdiff_t(k);
    const auto b = uint8_t(bytes[i + k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return -ptrdiff_t(k);
  }
  return ptrdiff_t(need + 1);
}

void check(UErrorCode status, const char* what) {
  if (U_FAILURE(status)) throw InvalidInput(std::string(what) + ": " + u_errorName(status));
}

}  // namespace

size_t find_invalid_utf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    // Runs of ASCII are the common case.
    if (uint8_t(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const ptrdiff_t n = sequence_at(bytes, i);
    if (n < 0) return i;
    i += size_t(n);
  }
  return std::string_view::npos;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const ptrdiff_t n = sequence_at(bytes, i);
    if (n > 0) {
      out.append(bytes.data() + i, size_t(n));
      i += size_t(n);
    } else {
      out += "\xEF\xBF\xBD";
      i += size_t(-n);
    }
  }
  return out;
}

icu::UnicodeString to_utf16(std::string_view utf8) {
  return icu::UnicodeString::fromUTF8(icu::StringPiece(utf8.data(), int32_t(utf8.size())));
}

std::string to_utf8(const icu::UnicodeString& utf16) {
  std::string out;
  utf16.toUTF8String(out);
  return out;
}

std::string nfc(std::string_view utf8) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = icu::Normalizer2::getNFCInstance(status);
  check(status, "ICU's NFC normalizer");
  const icu::StringPiece in(utf8.data(), int32_t(utf8.size()));
  // Most text is already NFC; then it is returned as it is.
  if (normalizer->isNormalizedUTF8(in, status) && U_SUCCESS(status)) return std::string(utf8);
  status = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  normalizer->normalizeUTF8(0, in, sink, nullptr, status);
  check(status, "NFC normalization");
  return out;
}

bool is_white_space(char32_t c) { return u_isUWhiteSpace(UChar32(c)) != 0; }

bool is_word_char(char32_t c) {
  const auto cp = UChar32(c);
  if (u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) || u_hasBinaryProperty(cp, UCHAR_JOIN_CONTROL)) return true;
  switch (u_charType(cp)) {
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK:
    case U_DECIMAL_DIGIT_NUMBER:
    case U_CONNECTOR_PUNCTUATION:
      return true;
    default:
      return false;
  }
}

char32_t first_code_point(std::string_view utf8) {
  int32_t i = 0;
  UChar32 c;
  U8_NEXT(reinterpret_cast<const uint8_t*>(utf8.data()), i, int32_t(utf8.size()), c);
  return char32_t(c);
}

char32_t last_code_point(std::string_view utf8) {
  auto i = int32_t(utf8.size());
  UChar32 c;
  U8_PREV(reinterpret_cast<const uint8_t*>(utf8.data()), 0, i, c);
  return char32_t(c);
}

}  // namespace actkit::text
