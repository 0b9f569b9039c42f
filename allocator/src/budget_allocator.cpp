#include "actkit/allocator/budget_allocator.h"

#include <sys/mman.h>

#include <c10/core/CPUAllocator.h>
#include <c10/util/StringUtil.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <new>

#include "actkit/core/errors.h"

namespace actkit {

// The reserved address range; commit is implicit (pages appear on first
// touch), decommit hands pages back to the kernel.
class BudgetAllocator::Mapping final : public MemoryBacking {
 public:
  explicit Mapping(uint64_t bytes) : bytes_(bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<uint8_t*>(p);
  }
  ~Mapping() override { ::munmap(base_, bytes_); }
  void commit(uint64_t, uint64_t) override {}
  void decommit(uint64_t offset, uint64_t bytes) override { ::madvise(base_ + offset, bytes, MADV_DONTNEED); }
  uint8_t* base() const { return base_; }
  uint64_t size() const { return bytes_; }

 private:
  uint8_t* base_ = nullptr;
  uint64_t bytes_;
};

namespace {

// Which allocator owns a pointer: the raw deleter gets only the pointer.
constexpr size_t kMaxLive = 64;
struct Owner {
  std::atomic<uint8_t*> begin{nullptr};
  std::atomic<uint8_t*> end{nullptr};
  std::atomic<BudgetAllocator*> allocator{nullptr};
};
std::array<Owner, kMaxLive> g_owners;

void register_owner(BudgetAllocator* a, uint8_t* begin, uint8_t* end) {
  for (Owner& o : g_owners) {
    BudgetAllocator* none = nullptr;
    if (o.allocator.compare_exchange_strong(none, a)) {
      o.begin = begin;
      o.end = end;
      return;
    }
  }
  throw Error("BudgetAllocator: too many live allocators");
}

void unregister_owner(BudgetAllocator* a) {
  for (Owner& o : g_owners) {
    if (o.allocator.load() == a) {
      o.begin = nullptr;
      o.end = nullptr;
      o.allocator = nullptr;
    }
  }
}

BudgetAllocator* owner_of(void* p) {
  auto* b = static_cast<uint8_t*>(p);
  for (Owner& o : g_owners) {
    if (b >= o.begin.load() && b < o.end.load()) return o.allocator.load();
  }
  return nullptr;
}

}  // namespace

BudgetAllocator::BudgetAllocator(const std::string& policy, int64_t budget) {
  auto probe = make_block_allocator(policy, budget);  // validates, and sizes the range
  mapping_ = std::make_unique<Mapping>(probe->address_space());
  // Under a budget, the defrag policy keeps emptied granules until the
  // budget needs them: the next step reuses them without page faults.
  blocks_ = policy == "defrag" ? make_defrag_allocator(budget, mapping_.get(), mapping_->size(), /*retain_freed=*/true)
                               : make_block_allocator(policy, budget, mapping_.get(), mapping_->size());
}

std::shared_ptr<BudgetAllocator> BudgetAllocator::create(const std::string& policy, int64_t budget) {
  auto* a = new BudgetAllocator(policy, budget);
  register_owner(a, a->mapping_->base(), a->mapping_->base() + a->mapping_->size());
  return std::shared_ptr<BudgetAllocator>(a, [](BudgetAllocator* p) {
    {
      std::lock_guard<std::mutex> lock(p->mu_);
      if (p->blocks_->stats().allocated > 0) {
        // Something (a LibTorch cache, a failed graph's gradients) still
        // holds a block: the allocator lives on until the last one is freed.
        p->orphaned_ = true;
        return;
      }
    }
    delete p;
  });
}

BudgetAllocator::~BudgetAllocator() { unregister_owner(this); }

c10::DataPtr BudgetAllocator::allocate(size_t bytes) const {
  return const_cast<BudgetAllocator*>(this)->allocate(bytes);
}

c10::DataPtr BudgetAllocator::allocate(size_t bytes) {
  uint64_t offset;
  {
    std::lock_guard<std::mutex> lock(mu_);
    offset = blocks_->allocate(bytes);
#ifndef NDEBUG
    blocks_->check_invariants();
#endif
  }
  void* p = mapping_->base() + offset;
  return {p, p, &BudgetAllocator::release, c10::Device(c10::DeviceType::CPU)};
}

void BudgetAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count != 0) std::memcpy(dest, src, count);
}

void BudgetAllocator::release(void* data) {
  if (data == nullptr) return;
  BudgetAllocator* owner = owner_of(data);
  if (owner == nullptr) {
    std::fprintf(stderr, "actkit: BudgetAllocator asked to free %p, which it does not own\n", data);
    std::abort();
  }
  owner->free_block(data);
}

void BudgetAllocator::free_block(void* data) {
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_->free(uint64_t(static_cast<uint8_t*>(data) - mapping_->base()));
#ifndef NDEBUG
    blocks_->check_invariants();
#endif
    last = orphaned_ && blocks_->stats().allocated == 0;
  }
  if (last) delete this;  // its owner let go earlier; this was the last block
}

BlockStats BudgetAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return blocks_->stats();
}

void BudgetAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  blocks_->reset_peaks();
}

void BudgetAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  blocks_->release_cached();
}

const char* BudgetAllocator::policy() const { return blocks_->name(); }

void BudgetAllocator::check_invariants() const {
  std::lock_guard<std::mutex> lock(mu_);
  blocks_->check_invariants();
}

}  // namespace actkit
