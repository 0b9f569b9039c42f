// The error every comm/ operation throws when another rank is the problem:
// it died, hung past the timeout, disagreed at the handshake or sent bytes
// that do not parse. The message names the peer rank and what this rank was
// waiting for, so a failed multi-process run says where to look.
#pragma once

#include "actkit/core/errors.h"

namespace actkit {

class CommError : public Error {
 public:
  // `peer` is the rank at fault, or -1 when no single rank is.
  CommError(const std::string& what, int peer) : Error(what), peer_(peer) {}
  int peer() const { return peer_; }

 private:
  int peer_;
};

}  // namespace actkit
