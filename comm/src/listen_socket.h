// The rendezvous store's listening socket, for LibTorch's that can take
// one (TCPStoreOptions::masterListenFd, LibTorch 2.2 and later).
#pragma once

#include <torch/version.h>

#include <string>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
#define ACTKIT_STORE_LISTEN_FD 1
#endif

namespace actkit {

// A socket listening on `addr`:`port` only: c10d's own binds every
// interface, which would open an unauthenticated store to the network for
// a run on one machine. Throws CommError naming rank `rank`: a port in use
// is named at once.
int listen_socket(const std::string& addr, int port, int rank);

}  // namespace actkit
