// The io_uring engine. Callers queue chunks under the engine mutex; pump
// moves queued chunks into the submission ring while fewer than
// queue_depth are in flight; one completion thread reaps completions in
// batches, finishes or resubmits chunks, and pumps again, so the queue stays
// full without callers polling. Files and the bounce buffers (one per queue
// slot) are registered with the ring, which saves the kernel a file lookup
// and a page pinning per request.
#include <liburing.h>

#include <c10/util/StringUtil.h>

#include <cstring>
#include <deque>
#include <thread>

#include "actkit/core/errors.h"
#include "chunked_engine.h"

namespace actkit::detail {
namespace {

constexpr unsigned kRegisteredFiles = 64;
constexpr uint64_t kStopTag = 0;  // user_data of the NOP that ends the completion thread

class UringEngine final : public ChunkedEngine {
 public:
  // Throws IoError if the ring cannot be set up.
  UringEngine(IoEngineOptions options, std::string note) : ChunkedEngine(options, std::move(note)) {
    const int rc = io_uring_queue_init(options.queue_depth * 2, &ring_, 0);
    if (rc < 0) throw IoError(c10::str("io_uring_queue_init: ", std::strerror(-rc)), -rc);
    bounce_ = AlignedBuffer(size_t(options.queue_depth) * options.block_size);
    std::vector<iovec> iov(options.queue_depth);
    for (unsigned i = 0; i < options.queue_depth; ++i) {
      iov[i] = {bounce_.data() + size_t(i) * options.block_size, options.block_size};
      free_bounce_.push_back(int(i));
    }
    // Both registrations are optimisations: without them requests name the
    // descriptor and the kernel pins the buffer per request.
    fixed_buffers_ = io_uring_register_buffers(&ring_, iov.data(), unsigned(iov.size())) == 0;
    fixed_files_ = io_uring_register_files_sparse(&ring_, kRegisteredFiles) == 0;
    reaper_ = std::thread([this] { reap(); });
  }

  ~UringEngine() override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return pending_.empty() && in_flight_ == 0; });
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) {
        io_uring_submit(&ring_);
        sqe = io_uring_get_sqe(&ring_);
      }
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data64(sqe, kStopTag);
      io_uring_submit(&ring_);
    }
    reaper_.join();
    io_uring_queue_exit(&ring_);
  }

  const char* name() const override { return "io_uring"; }

 protected:
  void dispatch_locked(std::vector<IoChunk> chunks) override {
    for (IoChunk& c : chunks) pending_.push_back(c);
    pump_locked();
  }

  void on_add_file_locked(FileEntry& entry) override {
    if (!fixed_files_) return;
    for (unsigned slot = 0; slot < kRegisteredFiles; ++slot) {
      if (slot_used_[slot]) continue;
      int fd = entry.fd;
      if (io_uring_register_files_update(&ring_, slot, &fd, 1) == 1) {
        slot_used_[slot] = true;
        entry.slot = int(slot);
      }
      return;
    }
  }

  void on_remove_file_locked(FileEntry& entry) override {
    if (entry.slot < 0) return;
    int none = -1;
    io_uring_register_files_update(&ring_, unsigned(entry.slot), &none, 1);
    slot_used_[size_t(entry.slot)] = false;
  }

 private:
  // Submits queued chunks while the queue has room (and bounce buffers).
  void pump_locked() {
    unsigned queued = 0;
    while (in_flight_ < options().queue_depth && !pending_.empty()) {
      IoChunk& next = pending_.front();
      if (next.bounce && next.bounce_slot < 0) {
        if (free_bounce_.empty()) break;
        next.bounce_slot = free_bounce_.back();
        free_bounce_.pop_back();
        if (next.op == IoOp::kWrite) stage_write(next, bounce_at(next.bounce_slot));
      }
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) {
        io_uring_submit(&ring_);
        queued = 0;
        sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) break;
      }
      auto* c = new IoChunk(next);
      pending_.pop_front();
      prepare(sqe, *c);
      ++in_flight_;
      ++queued;
    }
    if (queued > 0) io_uring_submit(&ring_);
  }

  uint8_t* bounce_at(int slot) const { return bounce_.data() + size_t(slot) * options().block_size; }

  void prepare(io_uring_sqe* sqe, IoChunk& c) {
    const FileEntry& f = files_[size_t(c.file)];
    const int target = f.slot >= 0 ? f.slot : f.fd;
    uint8_t* mem = (c.bounce ? bounce_at(c.bounce_slot) : c.user) + c.done;
    const unsigned len = unsigned(c.span - c.done);
    const uint64_t at = c.offset + c.done;
    if (c.bounce && fixed_buffers_) {
      if (c.op == IoOp::kWrite) {
        io_uring_prep_write_fixed(sqe, target, mem, len, at, c.bounce_slot);
      } else {
        io_uring_prep_read_fixed(sqe, target, mem, len, at, c.bounce_slot);
      }
    } else if (c.op == IoOp::kWrite) {
      io_uring_prep_write(sqe, target, mem, len, at);
    } else {
      io_uring_prep_read(sqe, target, mem, len, at);
    }
    if (f.slot >= 0) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data(sqe, &c);
  }

  void reap() {
    std::vector<io_uring_cqe*> batch(options().queue_depth * 2);
    for (;;) {
      io_uring_cqe* first = nullptr;
      const int rc = io_uring_wait_cqe(&ring_, &first);
      if (rc == -EINTR) continue;
      const unsigned n = io_uring_peek_batch_cqe(&ring_, batch.data(), unsigned(batch.size()));
      bool stop = false;
      std::lock_guard<std::mutex> lock(mu_);
      for (unsigned i = 0; i < n; ++i) {
        if (io_uring_cqe_get_data64(batch[i]) == kStopTag) {
          stop = true;
          continue;
        }
        complete(static_cast<IoChunk*>(io_uring_cqe_get_data(batch[i])), batch[i]->res);
      }
      io_uring_cq_advance(&ring_, n);
      if (stop) return;
      pump_locked();
    }
  }

  void complete(IoChunk* c, int res) {
    --in_flight_;
    if (res == -EAGAIN || res == -EINTR) {  // transient: try again
      pending_.push_front(*c);
      delete c;
      return;
    }
    const ChunkProgress p = advance(*c, res, files_[size_t(c->file)].direct);
    if (p == ChunkProgress::kContinue) {
      pending_.push_front(*c);  // keeps its bounce slot and the bytes staged in it
      delete c;
      return;
    }
    if (p == ChunkProgress::kComplete && c->bounce && c->op == IoOp::kRead) unstage_read(*c, bounce_at(c->bounce_slot));
    if (c->bounce_slot >= 0) free_bounce_.push_back(c->bounce_slot);
    finish_chunk_locked(*c, p == ChunkProgress::kFailed ? -res : 0, p == ChunkProgress::kShort);
    delete c;
    if (pending_.empty() && in_flight_ == 0) cv_.notify_all();
  }

  io_uring ring_{};
  AlignedBuffer bounce_;
  std::vector<int> free_bounce_;
  bool fixed_buffers_ = false;
  bool fixed_files_ = false;
  bool slot_used_[kRegisteredFiles] = {};
  std::deque<IoChunk> pending_;
  unsigned in_flight_ = 0;
  std::thread reaper_;
};

}  // namespace

std::unique_ptr<IoEngine> make_uring_engine(IoEngineOptions options, std::string note, std::string* why_not) {
  try {
    return std::make_unique<UringEngine>(options, std::move(note));
  } catch (const IoError& e) {
    if (why_not != nullptr) *why_not = e.what();
    return nullptr;
  }
}

}  // namespace actkit::detail
