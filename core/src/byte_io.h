// Little-endian byte writing and bounds-checked reading, shared by the
// payload format (serialize.cpp) and the controller's state
// (controller_state.cpp). Private to core.
#pragma once

#include <c10/util/StringUtil.h>

#include <cstdint>
#include <cstring>

#include "actkit/core/errors.h"

namespace actkit::detail {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "ACTkit's byte formats are little-endian");

// Writes into a buffer its caller sized beforehand.
class Writer {
 public:
  explicit Writer(uint8_t* p) : p_(p) {}
  template <typename T>
  void put(T v) {
    std::memcpy(p_, &v, sizeof v);
    p_ += sizeof v;
  }
  void put_bytes(const void* src, size_t n) {
    if (n != 0) std::memcpy(p_, src, n);
    p_ += n;
  }
  uint8_t* pos() const { return p_; }

 private:
  uint8_t* p_;
};

// Reads a buffer front to back; every read is bounds-checked, and a read
// past the end throws FormatError naming the field and `what` the buffer is.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const char* what = "payload") : data_(data), size_(size), what_(what) {}
  template <typename T>
  T get(const char* field) {
    T v;
    std::memcpy(&v, take(sizeof v, field), sizeof v);
    return v;
  }
  const uint8_t* take(size_t n, const char* field) {
    if (n > size_ - off_) {
      throw FormatError(c10::str(what_, " truncated: ", field, " needs ", n, " bytes at offset ", off_, ", only ",
                                 size_ - off_, " left"));
    }
    const uint8_t* p = data_ + off_;
    off_ += n;
    return p;
  }
  size_t offset() const { return off_; }
  size_t left() const { return size_ - off_; }

 private:
  const uint8_t* data_;
  size_t size_;
  const char* what_;
  size_t off_ = 0;
};

}  // namespace actkit::detail
