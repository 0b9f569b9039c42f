// The input of a pickle reader, never read past its end: the opcode
// arguments both of ACTkit's readers take (the checker, pickle_check.h, and
// the unpickler, unpickler.h). A reader derives from PickleInput<Reader>
// and has `[[noreturn]] void fail(const std::string&) const`, which names
// where it is; every read that would pass the end calls it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace actkit {

template <class Reader>
class PickleInput {
 protected:
  explicit PickleInput(const std::string& data) : data_(data) {}

  uint8_t u8() {
    if (pos_ >= data_.size()) reader().fail("the pickle is truncated (it ends before its STOP)");
    return uint8_t(data_[pos_++]);
  }
  uint64_t le(size_t n) {  // an unsigned little-endian integer of n <= 8 bytes
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t(u8()) << (8 * i);
    return v;
  }
  size_t skip(uint64_t n) {  // where the n bytes skipped begin
    if (n > data_.size() - pos_) reader().fail("the pickle is truncated");
    const size_t at = pos_;
    pos_ += size_t(n);
    return at;
  }
  std::string bytes(uint64_t n) {
    const size_t at = skip(n);
    return data_.substr(at, size_t(n));
  }
  std::string line() {  // up to the next newline, which is passed
    const size_t end = data_.find('\n', pos_);
    if (end == std::string::npos) reader().fail("the pickle is truncated");
    const size_t at = pos_;
    pos_ = end + 1;
    return data_.substr(at, end - at);
  }
  int64_t long1(uint8_t n) {  // a signed little-endian integer of n bytes (LONG1)
    if (n > 8) reader().fail("an integer wider than 64 bits");
    if (n == 0) return 0;
    uint64_t v = le(n);
    if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t(0) << (8 * n);  // sign-extend
    return int64_t(v);
  }

  const std::string& data_;
  size_t pos_ = 0;

 private:
  const Reader& reader() const { return static_cast<const Reader&>(*this); }
};

}  // namespace actkit
