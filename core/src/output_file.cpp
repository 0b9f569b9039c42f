// Output paths that are not ACTkit's to replace (files.h: output_way,
// write_in_place): devices, FIFOs and links are written through, so that
// `--json /dev/stdout` prints and `--json /dev/null` discards, and the
// system's nodes stay what they are.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "write_fully.h"

namespace actkit::files {
namespace {

[[noreturn]] void fail_output(const std::string& path, const std::string& why, int error_number) {
  throw IoError("cannot write " + path + ": " + why, error_number);
}

// The standard output or error of this process when `st` is the same file,
// else -1.
int standard_stream_of(const struct stat& st) {
  for (const int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    struct stat s;
    if (::fstat(fd, &s) == 0 && s.st_dev == st.st_dev && s.st_ino == st.st_ino) return fd;
  }
  return -1;
}

// Standard output may be a non-blocking descriptor we were given:
// write_fully waits while it is full.
void write_all(int fd, const std::string& path, const void* data, size_t size) {
  if (const int error_number = detail::write_fully(fd, data, size)) {
    fail_output(path, std::strerror(error_number), error_number);
  }
}

}  // namespace

OutputWay output_way(const std::string& path) {
  struct stat node;
  if (::lstat(path.c_str(), &node) != 0) {
    if (errno == ENOENT) return OutputWay::kReplace;
    fail_output(path, std::strerror(errno), errno);
  }
  if (S_ISREG(node.st_mode)) return OutputWay::kReplace;
  struct stat st = node;
  if (S_ISLNK(node.st_mode) && ::stat(path.c_str(), &st) != 0) {
    const int error_number = errno;
    fail_output(path, error_number == ENOENT ? "a link to nothing" : std::strerror(error_number), error_number);
  }
  if (S_ISDIR(st.st_mode)) fail_output(path, "a folder", EISDIR);
  if (S_ISBLK(st.st_mode)) fail_output(path, "a block device is never written (give a file's path)", EPERM);
  // A socket only as this process's own output (/dev/stdout into a journal).
  if (S_ISSOCK(st.st_mode) && standard_stream_of(st) < 0) fail_output(path, "a socket (give a file's path)", ENXIO);
  return OutputWay::kInPlace;
}

void write_in_place(const std::string& path, const void* data, size_t size) {
  struct stat target;
  if (::stat(path.c_str(), &target) != 0) fail_output(path, std::strerror(errno), errno);
  const int stream = standard_stream_of(target);
  if (stream >= 0) {
    // What this process printed through stdio (or iostreams) goes first.
    std::cout.flush();
    std::fflush(nullptr);
    write_all(stream, path, data, size);
    return;
  }
  // O_NONBLOCK: a FIFO nobody reads fails the open (ENXIO) instead of
  // waiting for a reader forever.
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int error_number = errno;
    const bool fifo = S_ISFIFO(target.st_mode) && error_number == ENXIO;
    fail_output(path, fifo ? "a FIFO with no reader" : std::strerror(error_number), error_number);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    ::close(fd);
    fail_output(path, "not a file, a character device or a FIFO", EPERM);
  }
  try {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (S_ISREG(st.st_mode) && ::ftruncate(fd, 0) != 0) fail_output(path, std::strerror(errno), errno);
    write_all(fd, path, data, size);
    if (S_ISREG(st.st_mode) && ::fsync(fd) != 0) fail_output(path, std::strerror(errno), errno);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0 && S_ISREG(st.st_mode)) fail_output(path, std::strerror(errno), errno);
}

void write_output_file(const std::string& path, const void* data, size_t size) {
  if (output_way(path) == OutputWay::kInPlace) return write_in_place(path, data, size);
  write_file_atomic(path, data, size);
}

}  // namespace actkit::files
