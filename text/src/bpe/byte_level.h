// The byte-level alphabet of GPT-2 and its successors: each of the 256 byte
// values stands for one printable character (bytes that are printable in
// Latin-1 for themselves, the others for U+0100 onwards, in order), so that
// BPE runs over characters while any byte sequence stays representable.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace actkit::text {

// The UTF-8 of the characters that stand for `bytes`, in order.
std::string bytes_to_symbols(std::string_view bytes);

// The bytes a token stands for, as the ByteLevel decoder reads it: each
// character of `token` mapped back to its byte when all of them are in the
// alphabet; else (an added token such as one with a space or a CJK
// character) the token's own UTF-8.
std::string symbols_to_bytes(std::string_view token);

}  // namespace actkit::text
