// The Unicode operations the tokenizers need, over ICU: UTF-8 checks and
// conversions, NFC, and the character classes the tokenizers package tests
// around added tokens.
#pragma once

#include <unicode/unistr.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace actkit::text {

// The offset of the first byte of `bytes` that does not begin or continue a
// well-formed UTF-8 sequence (overlong forms, surrogates and code points past
// U+10FFFF are ill-formed), or npos when all of it is well formed.
size_t find_invalid_utf8(std::string_view bytes);

// `bytes` as UTF-8, each maximal subpart of an ill-formed sequence replaced
// by U+FFFD (the Unicode Standard's "substitution of maximal subparts", which
// Rust's String::from_utf8_lossy and so the tokenizers package follow).
std::string utf8_lossy(std::string_view bytes);

// Conversions between well-formed UTF-8 and ICU's UTF-16 strings.
icu::UnicodeString to_utf16(std::string_view utf8);
std::string to_utf8(const icu::UnicodeString& utf16);

// The NFC form of well-formed UTF-8.
std::string nfc(std::string_view utf8);

// Whether a code point is Unicode White_Space, and whether it is a word
// character as the Rust regex crate's Unicode \w has it (Alphabetic, marks,
// decimal digits, connector punctuation, join controls).
bool is_white_space(char32_t c);
bool is_word_char(char32_t c);

// The first and last code points of non-empty well-formed UTF-8.
char32_t first_code_point(std::string_view utf8);
char32_t last_code_point(std::string_view utf8);

}  // namespace actkit::text
