#include "listen_socket.h"

#include <c10/util/StringUtil.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "actkit/comm/comm_error.h"

namespace actkit {

int listen_socket(const std::string& addr, int port, int rank) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) {
    throw CommError(c10::str("rank ", rank, ": cannot resolve the master address ", addr), -1);
  }
  int fd = -1, error_number = 0;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error_number = errno;
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    // 1024: every rank of a large group connects at once.
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
      error_number = errno;
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    throw CommError(error_number == EADDRINUSE
                        ? c10::str("rank ", rank, ": port ", port, " on ", addr,
                                   " is in use by another program: give another --port (MASTER_PORT)")
                        : c10::str("rank ", rank, ": cannot listen on ", addr, ":", port, ": ",
                                   std::strerror(error_number)),
                    -1);
  }
  return fd;
}

}  // namespace actkit
