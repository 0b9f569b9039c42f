// Writing a whole buffer to a descriptor: the one loop files.cpp and
// output_file.cpp share. Private to core.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace actkit::files::detail {

// Writes all `size` bytes of `data` to `fd`, through interrupted and short
// writes, waiting (poll) while a non-blocking descriptor is full. Returns 0,
// or the errno that stopped it (ENOSPC for a write that took nothing).
inline int write_fully(int fd, const void* data, size_t size) noexcept {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd writable{fd, POLLOUT, 0};
      ::poll(&writable, 1, -1);
      continue;
    }
    if (n <= 0) return n < 0 ? errno : ENOSPC;
    p += n;
    size -= size_t(n);
  }
  return 0;
}

}  // namespace actkit::files::detail
