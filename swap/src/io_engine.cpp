// Engine selection, files and aligned buffers.
#include "actkit/swap/io_engine.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/StringUtil.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "actkit/core/errors.h"
#include "chunked_engine.h"

namespace actkit {

const char* to_string(IoEngineKind kind) {
  switch (kind) {
    case IoEngineKind::kAuto: return "auto";
    case IoEngineKind::kUring: return "io_uring";
    case IoEngineKind::kThreads: return "threads";
  }
  return "unknown";
}

std::unique_ptr<IoEngine> make_io_engine(IoEngineOptions options) {
  if (options.queue_depth == 0 || options.queue_depth > 4096) {
    throw InvalidInput(c10::str("I/O queue depth must be 1..4096, got ", options.queue_depth));
  }
  if (options.block_size == 0 || options.block_size % kIoAlignment != 0 || options.block_size > (size_t(1) << 30)) {
    throw InvalidInput(c10::str("I/O block size must be a positive multiple of ", kIoAlignment,
                                " up to 1 GiB, got ", options.block_size));
  }
  if (options.kind == IoEngineKind::kAuto) {
    if (const char* env = std::getenv("ACTKIT_IO_ENGINE"); env != nullptr && *env != '\0') {
      const std::string v = env;
      if (v == "uring" || v == "io_uring") {
        options.kind = IoEngineKind::kUring;
      } else if (v == "threads") {
        options.kind = IoEngineKind::kThreads;
      } else {
        throw InvalidInput(c10::str("ACTKIT_IO_ENGINE must be 'uring' or 'threads', got '", v, "'"));
      }
    }
  }
  if (options.kind == IoEngineKind::kThreads) return detail::make_thread_engine(options, "");
  std::string why_not;
  auto uring = detail::make_uring_engine(options, "", &why_not);
  if (uring) return uring;
  if (options.kind == IoEngineKind::kUring) throw IoError("io_uring was requested but " + why_not, 0);
  return detail::make_thread_engine(options, "io_uring unavailable (" + why_not + "); using threads");
}

IoFile IoFile::open(const std::string& path, bool create, bool try_direct) {
  // Never through a link planted where the file should be.
  const int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0);
  IoFile f;
  f.path_ = path;
  if (try_direct) {
    f.fd_ = ::open(path.c_str(), flags | O_DIRECT, 0644);
    f.direct_ = f.fd_ >= 0;
  }
  // tmpfs and some network filesystems refuse O_DIRECT with EINVAL.
  if (f.fd_ < 0) f.fd_ = ::open(path.c_str(), flags, 0644);
  if (f.fd_ < 0) throw IoError(c10::str("cannot open ", path, ": ", std::strerror(errno)), errno);
  return f;
}

IoFile::IoFile(IoFile&& other) noexcept : fd_(other.fd_), direct_(other.direct_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

IoFile& IoFile::operator=(IoFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    direct_ = other.direct_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

IoFile::~IoFile() {
  if (fd_ >= 0) ::close(fd_);
}

uint64_t IoFile::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw IoError(c10::str("cannot stat ", path_, ": ", std::strerror(errno)), errno);
  return uint64_t(st.st_size);
}

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  data_ = static_cast<uint8_t*>(std::aligned_alloc(kIoAlignment, round_up_io(bytes)));
  if (data_ == nullptr) throw std::bad_alloc();
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

}  // namespace actkit
