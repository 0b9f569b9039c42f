// Exceptions thrown by ACTkit. Every public function documents which of
// these it throws; all derive from actkit::Error (a std::runtime_error).
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>

namespace actkit {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
  explicit Error(const char* what) : std::runtime_error(what) {}
  // When it was made: a rank's launcher names the rank whose error came
  // first by this, not by which rank ended first.
  std::chrono::system_clock::time_point raised_at() const { return raised_at_; }

 private:
  std::chrono::system_clock::time_point raised_at_ = std::chrono::system_clock::now();
};

// A caller passed something the function cannot work on: wrong dtype or
// device, unsupported bits, NaN/Inf under the error policy, and the like.
class InvalidInput : public Error {
 public:
  using Error::Error;
};

// A serialized payload is truncated, oversized, corrupted or of an
// unsupported format version.
class FormatError : public Error {
 public:
  using Error::Error;
};

// A file operation failed: the message names the file, the key or request
// and the system error (ENOSPC, EIO, a short read or write, ...). What was
// stored before the failed operation is still intact.
class IoError : public Error {
 public:
  IoError(const std::string& what, int error_number) : Error(what), errno_(error_number) {}
  // errno of the failure; 0 for a short transfer or a checksum mismatch.
  int error_number() const { return errno_; }

 private:
  int errno_;
};

// An allocator refused a request because it would exceed its budget. The
// max-batch search catches exactly this type (and c10::OutOfMemoryError for
// real device memory).
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

}  // namespace actkit
