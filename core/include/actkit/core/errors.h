// Exceptions thrown by ACTkit. Every public function documents which of
// these it throws; all derive from actkit::Error (a std::runtime_error).
#pragma once

#include <stdexcept>
#include <string>

namespace actkit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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

}  // namespace actkit
