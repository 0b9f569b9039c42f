// The baseline: the placement policy of PyTorch's CUDA caching allocator
// (c10/cuda/CUDACachingAllocator.cpp), without streams and events, with its
// one fragmentation setting, max_split_size (PYTORCH_CUDA_ALLOC_CONF
// max_split_size_mb; unlimited by default): a cached block that large is
// never split for a smaller request, so long-lived small blocks cannot pin
// it, and is reused only by requests within 20 MiB of its size.
#include <c10/util/StringUtil.h>

#include <set>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "actkit/allocator/block_allocator.h"
#include "actkit/core/errors.h"
#include "actkit/core/extent_map.h"
#include "block_allocator_impl.h"

namespace actkit {
namespace {

using detail::kGranule;
using detail::round_up;

constexpr uint64_t kSmallSize = uint64_t(1) << 20;        // largest small block
constexpr uint64_t kSmallSegment = uint64_t(2) << 20;
constexpr uint64_t kLargeSegment = uint64_t(20) << 20;
constexpr uint64_t kMinLargeAlloc = uint64_t(10) << 20;   // below: share a 20 MiB segment
constexpr uint64_t kLargeBuffer = uint64_t(20) << 20;     // an oversize block's reuse window

struct Block {
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t requested = 0;
  bool small = false;
  bool free = true;
  Block* prev = nullptr;  // neighbours inside the same segment
  Block* next = nullptr;
};

struct BySizeThenAddress {
  bool operator()(const Block* a, const Block* b) const {
    return a->size != b->size ? a->size < b->size : a->address < b->address;
  }
};
using Pool = std::set<Block*, BySizeThenAddress>;

class CachingBlockAllocator final : public BlockAllocator {
 public:
  CachingBlockAllocator(int64_t limit, MemoryBacking* backing, uint64_t space, uint64_t max_split)
      : BlockAllocator(limit, backing), space_(space), max_split_(max_split) {
    segments_space_.release(0, space_);
  }

  ~CachingBlockAllocator() override {
    for (Block* b : all_blocks()) delete b;
  }

  const char* name() const override { return "caching"; }
  uint64_t address_space() const override { return space_; }

  uint64_t allocate(uint64_t bytes) override {
    const uint64_t size = detail::block_size_for(bytes);
    const bool small = size <= kSmallSize;
    Pool& pool = small ? small_pool_ : large_pool_;
    Block probe;
    probe.size = size;
    auto it = pool.lower_bound(&probe);
    Block* block = nullptr;
    if (it != pool.end() && usable(**it, size)) {
      block = *it;
      pool.erase(it);
    } else {
      block = new_segment(size, small, bytes);
    }
    // Split off the rest when it is worth keeping (PyTorch's thresholds).
    const uint64_t rest = block->size - size;
    if ((small && rest >= detail::kMinBlock) || (!small && rest > kSmallSize && size < max_split_)) {
      auto* tail = new Block{block->address + size, rest, 0, small, true, block, block->next};
      if (block->next != nullptr) block->next->prev = tail;
      block->next = tail;
      block->size = size;
      pool.insert(tail);
    }
    block->free = false;
    block->requested = bytes;
    live_.emplace(block->address, block);
    count_allocation(bytes);
    return block->address;
  }

  void free(uint64_t address) override {
    auto it = live_.find(address);
    if (it == live_.end()) throw InvalidInput(c10::str("caching allocator: free of unknown address ", address));
    Block* b = it->second;
    live_.erase(it);
    count_free(b->requested);
    b->free = true;
    b->requested = 0;
    Pool& pool = b->small ? small_pool_ : large_pool_;
    b = merge(b, b->prev, pool);
    b = merge(b, b->next, pool);
    pool.insert(b);
  }

  // PyTorch's get_free_block: the smallest fitting block serves unless it is
  // oversize (>= max_split) for a request below max_split, or more than 20
  // MiB larger than an oversize request. Larger blocks are larger still, so
  // the search ends there.
  bool usable(const Block& b, uint64_t size) const {
    if (size < max_split_ && b.size >= max_split_) return false;
    if (size >= max_split_ && b.size >= size + kLargeBuffer) return false;
    return true;
  }

  void release_cached() override {
    for (Pool* pool : {&small_pool_, &large_pool_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->prev == nullptr && b->next == nullptr) {  // a whole, unused segment
          unreserve(b->address, b->size);
          segments_space_.release(b->address, b->size);
          it = pool->erase(it);
          delete b;
        } else {
          ++it;
        }
      }
    }
  }

  void check_invariants() const override {
    int64_t reserved = 0, allocated = 0;
    size_t free_blocks = 0, live = 0;
    for (Block* head : segment_heads()) {
      uint64_t expect = head->address;
      for (const Block* b = head; b != nullptr; b = b->next) {
        if (b->address != expect) throw std::logic_error("caching allocator: blocks of a segment do not tile it");
        if (b->next != nullptr && b->next->prev != b) throw std::logic_error("caching allocator: broken block list");
        if (b->free && b->next != nullptr && b->next->free) throw std::logic_error("caching allocator: uncoalesced free blocks");
        expect += b->size;
        reserved += int64_t(b->size);
        if (b->free) {
          ++free_blocks;
        } else {
          ++live;
          allocated += int64_t(b->requested);
        }
      }
      if (expect > space_) throw std::logic_error("caching allocator: segment outside the address space");
    }
    if (reserved != stats_.reserved) throw std::logic_error("caching allocator: reserved bytes drifted");
    if (allocated != stats_.allocated) throw std::logic_error("caching allocator: allocated bytes drifted");
    if (live != live_.size() || free_blocks != small_pool_.size() + large_pool_.size()) {
      throw std::logic_error("caching allocator: pools disagree with the segments");
    }
  }

 private:
  Block* new_segment(uint64_t size, bool small, uint64_t requested) {
    const uint64_t segment = small ? kSmallSegment : size < kMinLargeAlloc ? kLargeSegment : round_up(size, kGranule);
    if (!fits(int64_t(segment))) {
      release_cached();  // PyTorch frees cached segments and retries before failing
      if (!fits(int64_t(segment))) refuse(requested);
    }
    const auto at = segments_space_.take(segment, kGranule);
    if (!at) refuse(requested);
    try {
      reserve(*at, segment);
    } catch (const OutOfMemory&) {  // the backing ran out below the limit
      release_cached();
      try {
        reserve(*at, segment);
      } catch (const OutOfMemory&) {
        segments_space_.release(*at, segment);
        refuse(requested);
      }
    }
    return new Block{*at, segment, 0, small, true, nullptr, nullptr};
  }

  // Merges free neighbour `other` into `b`; returns the surviving block.
  Block* merge(Block* b, Block* other, Pool& pool) {
    if (other == nullptr || !other->free) return b;
    pool.erase(other);
    Block* first = other->address < b->address ? other : b;
    Block* second = first == b ? other : b;
    first->size += second->size;
    first->next = second->next;
    if (second->next != nullptr) second->next->prev = first;
    delete second;
    return first;
  }

  std::vector<Block*> segment_heads() const {
    std::vector<Block*> heads;
    auto add = [&](Block* b) {
      if (b->prev == nullptr) heads.push_back(b);
    };
    for (Block* b : small_pool_) add(b);
    for (Block* b : large_pool_) add(b);
    for (auto& [addr, b] : live_) add(b);
    return heads;
  }

  std::vector<Block*> all_blocks() const {
    std::vector<Block*> out;
    for (Block* head : segment_heads()) {
      for (Block* b = head; b != nullptr; b = b->next) out.push_back(b);
    }
    return out;
  }

  uint64_t space_;
  uint64_t max_split_;
  ExtentMap segments_space_;  // where new segments go
  Pool small_pool_, large_pool_;
  std::unordered_map<uint64_t, Block*> live_;
};

}  // namespace

std::unique_ptr<BlockAllocator> make_caching_allocator(int64_t limit, MemoryBacking* backing, uint64_t address_space,
                                                       uint64_t max_split) {
  if (max_split <= kSmallSize) {
    throw InvalidInput(c10::str("caching allocator: max_split must be above 1 MiB, got ", max_split, " bytes"));
  }
  return std::make_unique<CachingBlockAllocator>(limit, backing, detail::default_address_space(limit, address_space),
                                                 max_split);
}

}  // namespace actkit
