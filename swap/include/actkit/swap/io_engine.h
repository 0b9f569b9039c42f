// The offload engine: moves byte ranges between memory and files, many in
// flight at once. Two implementations share this interface:
//   io_uring  liburing with registered files and registered bounce buffers,
//             batched submission, a completion thread that keeps the queue
//             full; O_DIRECT files bypass the page cache;
//   threads   a pool of workers doing pread/pwrite, for kernels or sandboxes
//             without io_uring (and filesystems without O_DIRECT).
// make_io_engine() picks io_uring when it works and says why when it does
// not; ACTKIT_IO_ENGINE=uring|threads forces one (tests cover both).
//
// Requests are tickets: write()/read() queue the transfer and return at
// once, wait() blocks until it is complete and throws its error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace actkit {

// Offsets and lengths of O_DIRECT transfers are multiples of this.
constexpr size_t kIoAlignment = 4096;

inline uint64_t round_up_io(uint64_t bytes) { return (bytes + kIoAlignment - 1) / kIoAlignment * kIoAlignment; }

enum class IoEngineKind { kAuto, kUring, kThreads };

const char* to_string(IoEngineKind kind);

struct IoEngineOptions {
  // kAuto: io_uring if it initializes, else threads. The environment
  // variable ACTKIT_IO_ENGINE (uring|threads) overrides kAuto.
  IoEngineKind kind = IoEngineKind::kAuto;
  unsigned queue_depth = 32;      // transfers in flight at most
  size_t block_size = 1 << 20;    // largest single transfer; a multiple of kIoAlignment
  unsigned threads = 4;           // workers of the thread engine
};

using IoTicket = uint64_t;

class IoEngine {
 public:
  virtual ~IoEngine() = default;

  // "io_uring" or "threads".
  virtual const char* name() const = 0;
  // Why this engine was chosen, e.g. "io_uring unavailable (Operation not
  // permitted); using threads". Empty when the requested engine runs.
  const std::string& note() const { return note_; }
  const IoEngineOptions& options() const { return options_; }

  // Makes an open file descriptor usable in requests and returns its id.
  // `direct`: fd was opened with O_DIRECT, so every transfer is issued at
  // kIoAlignment granularity (see write()). `path` names the file in errors.
  // The engine does not own fd; remove_file() before closing it.
  virtual int add_file(int fd, bool direct, const std::string& path) = 0;
  // Forgets a file. Throws InvalidInput if requests on it are unfinished.
  virtual void remove_file(int file) = 0;

  // Queues a write of data[0, len) at byte `offset` of `file`. On a direct
  // file `offset` must be a multiple of kIoAlignment and the engine writes
  // round_up_io(len) bytes, the tail zero-filled: the caller owns that space.
  // `data` must stay valid until wait() returns. `label` (a key, say) names
  // the request in errors. Throws InvalidInput for an unknown file or a
  // misaligned direct offset.
  virtual IoTicket write(int file, uint64_t offset, const void* data, size_t len, const std::string& label) = 0;
  // Queues a read of len bytes at `offset` into into[0, len); same rules.
  // Reading past the end of the file is a short read (an error).
  virtual IoTicket read(int file, uint64_t offset, void* into, size_t len, const std::string& label) = 0;

  // Blocks until the request is complete, then forgets the ticket. Throws
  // IoError naming the file and label if any part failed (ENOSPC, EIO, a
  // short transfer), InvalidInput for an unknown ticket.
  virtual void wait(IoTicket ticket) = 0;
  // True when wait() would not block. Throws InvalidInput for an unknown ticket.
  virtual bool ready(IoTicket ticket) = 0;

 protected:
  IoEngine(IoEngineOptions options, std::string note) : options_(options), note_(std::move(note)) {}

 private:
  IoEngineOptions options_;
  std::string note_;
};

// Creates the engine `options` asks for. Throws InvalidInput for bad
// options (queue depth 0, block size not a positive multiple of
// kIoAlignment, an unknown ACTKIT_IO_ENGINE value) and IoError when
// io_uring is requested explicitly but cannot start.
std::unique_ptr<IoEngine> make_io_engine(IoEngineOptions options = {});

// An open file for the engine: O_DIRECT when the filesystem supports it
// (tmpfs does not), else buffered. Closes on destruction.
class IoFile {
 public:
  // Opens (creating if `create`) `path` read-write. Throws IoError with the
  // path and errno if it cannot.
  static IoFile open(const std::string& path, bool create, bool try_direct = true);

  IoFile() = default;
  IoFile(IoFile&& other) noexcept;
  IoFile& operator=(IoFile&& other) noexcept;
  IoFile(const IoFile&) = delete;
  IoFile& operator=(const IoFile&) = delete;
  ~IoFile();

  int fd() const { return fd_; }
  bool direct() const { return direct_; }
  const std::string& path() const { return path_; }
  // Current size in bytes. Throws IoError.
  uint64_t size() const;

 private:
  int fd_ = -1;
  bool direct_ = false;
  std::string path_;
};

// Memory aligned to kIoAlignment (O_DIRECT needs it), freed on destruction.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Throws std::bad_alloc.
  explicit AlignedBuffer(size_t bytes);
  AlignedBuffer(AlignedBuffer&& other) noexcept : data_(other.data_), size_(other.size_) {
    other.data_ = nullptr;
    other.size_ = 0;
  }
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace actkit
