// The fallback engine: worker threads doing pread/pwrite. Used when
// io_uring is missing or forbidden (old kernels, seccomp profiles).
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <thread>

#include "actkit/core/errors.h"
#include "chunked_engine.h"

namespace actkit::detail {
namespace {

class ThreadEngine final : public ChunkedEngine {
 public:
  ThreadEngine(IoEngineOptions options, std::string note) : ChunkedEngine(options, std::move(note)) {
    for (unsigned i = 0; i < std::max(1u, options.threads); ++i) workers_.emplace_back([this] { work(); });
  }

  ~ThreadEngine() override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  const char* name() const override { return "threads"; }

 protected:
  void dispatch_locked(std::vector<IoChunk> chunks) override {
    for (IoChunk& c : chunks) queue_.push_back(c);
    work_cv_.notify_all();
  }

 private:
  void work() {
    AlignedBuffer bounce;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      IoChunk c = queue_.front();
      queue_.pop_front();
      const FileEntry& f = files_[size_t(c.file)];
      const int fd = f.fd;
      const bool direct = f.direct;
      ++running_;
      lock.unlock();
      if (c.bounce && bounce.size() < c.span) bounce = AlignedBuffer(options().block_size);
      int error = 0;
      const bool ok = transfer(c, fd, direct, bounce.data(), &error);
      lock.lock();
      --running_;
      finish_chunk_locked(c, error, !ok && error == 0);
    }
  }

  // Moves the chunk with blocking calls; false on error or short transfer.
  static bool transfer(IoChunk& c, int fd, bool direct, uint8_t* bounce, int* error) {
    uint8_t* mem = c.bounce ? bounce : c.user;
    if (c.bounce && c.op == IoOp::kWrite) stage_write(c, bounce);
    for (;;) {
      const size_t left = c.span - c.done;
      const off_t at = off_t(c.offset + c.done);
      ssize_t r = c.op == IoOp::kWrite ? ::pwrite(fd, mem + c.done, left, at) : ::pread(fd, mem + c.done, left, at);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) *error = errno;
      switch (advance(c, r < 0 ? -int64_t(errno) : int64_t(r), direct)) {
        case ChunkProgress::kComplete:
          if (c.bounce && c.op == IoOp::kRead) unstage_read(c, bounce);
          return true;
        case ChunkProgress::kContinue: continue;
        case ChunkProgress::kShort:
        case ChunkProgress::kFailed: return false;
      }
    }
  }

  std::deque<IoChunk> queue_;
  std::condition_variable work_cv_;
  std::vector<std::thread> workers_;
  int running_ = 0;
  bool stop_ = false;
};

}  // namespace

std::unique_ptr<IoEngine> make_thread_engine(IoEngineOptions options, std::string note) {
  return std::make_unique<ThreadEngine>(options, std::move(note));
}

}  // namespace actkit::detail
