// The L5 allocator. Large blocks: one arena, best fit over address-ordered
// free extents that coalesce across the whole range, and a 2 MiB granule is
// reserved only while some live block touches it, so memory between blocks
// goes back to the device instead of staying stranded inside a segment (the
// caching allocator's fragmentation). Small blocks: size-class slabs of
// eight blocks (16 KiB at least), themselves placed in the arena, so small
// blocks neither pepper the arena with holes nor hold a granule per class.
#include <c10/util/StringUtil.h>

#include <algorithm>
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
using detail::kMinBlock;

constexpr uint64_t kSlabMax = uint64_t(256) << 10;  // larger blocks go to the arena
constexpr uint64_t kSlabBlocks = 8;
constexpr uint64_t kMinSlab = uint64_t(16) << 10;

uint64_t slab_bytes(uint64_t class_size) { return std::max(kMinSlab, class_size * kSlabBlocks); }

// Size classes: 512-byte steps to 4 KiB, then eight per power of two (<= 12.5% waste).
std::vector<uint64_t> size_classes() {
  std::vector<uint64_t> c;
  for (uint64_t s = kMinBlock; s <= 4096; s += kMinBlock) c.push_back(s);
  for (uint64_t p = 4096; p < kSlabMax; p *= 2) {
    for (uint64_t k = 1; k <= 8; ++k) c.push_back(p + p / 8 * k);
  }
  return c;
}

class DefragBlockAllocator final : public BlockAllocator {
 public:
  DefragBlockAllocator(int64_t limit, MemoryBacking* backing, uint64_t space, bool retain)
      : BlockAllocator(limit, backing), space_(space), retain_(retain), users_(space / kGranule, 0),
        classes_(size_classes()), partial_(classes_.size()) {
    arena_.release(0, space_);
  }

  const char* name() const override { return "defrag"; }
  uint64_t address_space() const override { return space_; }

  uint64_t allocate(uint64_t bytes) override {
    const uint64_t size = detail::block_size_for(bytes);
    uint64_t address;
    if (size <= kSlabMax) {
      address = allocate_small(size, bytes);
    } else {
      address = take(size, kMinBlock, bytes);
      live_.emplace(address, Live{size, bytes, -1});
    }
    count_allocation(bytes);
    return address;
  }

  void free(uint64_t address) override {
    auto it = live_.find(address);
    if (it == live_.end()) throw InvalidInput(c10::str("defrag allocator: free of unknown address ", address));
    const Live l = it->second;
    live_.erase(it);
    count_free(l.requested);
    if (l.slab < 0) {
      give(address, l.size);
      return;
    }
    Slab& s = slabs_[size_t(l.slab)];
    s.free_slots.push_back(uint32_t((address - s.address) / l.size));
    if (s.free_slots.size() == s.slots) {  // empty: back to the arena
      partial_[s.cls].erase({s.address, l.slab});
      give(s.address, slab_bytes(classes_[s.cls]));
      s = Slab{};
      unused_slabs_.push_back(l.slab);
    } else if (s.free_slots.size() == 1) {
      partial_[s.cls].insert({s.address, l.slab});
    }
  }

  // Unreserves the granules kept for reuse (retain mode); without retain
  // there is nothing cached: granules go as soon as they empty.
  void release_cached() override {
    std::vector<uint64_t> granules(retained_.begin(), retained_.end());
    retained_.clear();
    if (granules.empty()) return;
    size_t i = 0;
    for_granule_runs(granules.front(), granules.back(),
                     [&](uint64_t g) {
                       if (i < granules.size() && granules[i] == g) {
                         ++i;
                         return true;
                       }
                       return false;
                     },
                     [&](uint64_t off, uint64_t len) { unreserve(off, len); });
  }

  void check_invariants() const override {
    std::vector<uint32_t> users(users_.size(), 0);
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // arena blocks and slabs
    int64_t allocated = 0;
    for (auto& [addr, l] : live_) {
      allocated += int64_t(l.requested);
      if (l.slab < 0) ranges.emplace_back(addr, l.size);
    }
    for (const Slab& s : slabs_) {
      if (s.slots != 0) ranges.emplace_back(s.address, slab_bytes(classes_[s.cls]));
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 0; i < ranges.size(); ++i) {
      const auto [addr, len] = ranges[i];
      if (addr + len > space_) throw std::logic_error("defrag allocator: block outside the address space");
      if (i + 1 < ranges.size() && addr + len > ranges[i + 1].first) throw std::logic_error("defrag allocator: blocks overlap");
      auto f = arena_.extents().upper_bound(addr);
      if (f != arena_.extents().begin() && std::prev(f)->first + std::prev(f)->second > addr) {
        throw std::logic_error("defrag allocator: a live block is in free space");
      }
      if (f != arena_.extents().end() && f->first < addr + len) throw std::logic_error("defrag allocator: free space inside a block");
      for (uint64_t g = addr / kGranule; g <= (addr + len - 1) / kGranule; ++g) ++users[g];
    }
    int64_t reserved = int64_t(retained_.size() * kGranule);
    for (size_t g = 0; g < users.size(); ++g) {
      if (users[g] != users_[g]) throw std::logic_error("defrag allocator: granule use counts drifted");
      if (users[g] > 0) reserved += int64_t(kGranule);
      if (users[g] > 0 && retained_.count(g)) throw std::logic_error("defrag allocator: a used granule is also retained");
    }
    if (reserved != stats_.reserved) throw std::logic_error("defrag allocator: reserved bytes drifted");
    if (allocated != stats_.allocated) throw std::logic_error("defrag allocator: allocated bytes drifted");
  }

 private:
  struct Live {
    uint64_t size = 0;       // granted bytes (class size for slab blocks)
    uint64_t requested = 0;
    int32_t slab = -1;
  };
  struct Slab {
    uint64_t address = 0;
    size_t cls = 0;
    uint32_t slots = 0;  // 0: unused entry
    std::vector<uint32_t> free_slots;
  };

  uint64_t allocate_small(uint64_t size, uint64_t requested) {
    const size_t cls = size_t(std::lower_bound(classes_.begin(), classes_.end(), size) - classes_.begin());
    const uint64_t class_size = classes_[cls];
    int32_t index;
    if (!partial_[cls].empty()) {
      index = partial_[cls].begin()->second;  // lowest address first: packs towards the bottom
    } else {
      const uint64_t at = take(slab_bytes(class_size), kMinBlock, requested);
      if (unused_slabs_.empty()) {
        unused_slabs_.push_back(int32_t(slabs_.size()));
        slabs_.emplace_back();
      }
      index = unused_slabs_.back();
      unused_slabs_.pop_back();
      Slab& s = slabs_[size_t(index)];
      s.address = at;
      s.cls = cls;
      s.slots = uint32_t(slab_bytes(class_size) / class_size);
      s.free_slots.clear();
      for (uint32_t i = s.slots; i-- > 0;) s.free_slots.push_back(i);
      partial_[cls].insert({at, index});
    }
    Slab& s = slabs_[size_t(index)];
    const uint32_t slot = s.free_slots.back();
    s.free_slots.pop_back();
    if (s.free_slots.empty()) partial_[cls].erase({s.address, index});
    const uint64_t address = s.address + uint64_t(slot) * class_size;
    live_.emplace(address, Live{class_size, requested, index});
    return address;
  }

  // Places `size` bytes in the arena and reserves the granules it newly touches.
  uint64_t take(uint64_t size, uint64_t align, uint64_t requested) {
    const auto at = arena_.take(size, align);
    if (!at) refuse(requested);
    const uint64_t first = *at / kGranule, last = (*at + size - 1) / kGranule;
    auto fresh = [&] {
      int64_t n = 0;
      for (uint64_t g = first; g <= last; ++g) n += users_[g] == 0 && !retained_.count(g) ? 1 : 0;
      return n * int64_t(kGranule);
    };
    if (!fits(fresh())) {
      release_cached();  // retained granules go back first
      if (!fits(fresh())) {
        arena_.release(*at, size);
        refuse(requested);
      }
    }
    // The backing may refuse although the limit allows (a GPU shared with
    // other processes): retained granules go back to it, then one retry.
    if (!reserve_fresh(first, last)) {
      release_cached();
      if (!reserve_fresh(first, last)) {
        arena_.release(*at, size);
        refuse(requested);
      }
    }
    // Granules kept from earlier frees are reused as they are (no page faults).
    for (uint64_t g = first; g <= last; ++g) {
      if (users_[g]++ == 0) retained_.erase(g);
    }
    return *at;
  }

  // Reserves the runs of granules in first..last that are neither used nor
  // retained. Nothing is counted as used yet, so when the backing throws
  // OutOfMemory the runs reserved so far are unreserved and the state is as
  // before: returns false.
  bool reserve_fresh(uint64_t first, uint64_t last) {
    std::vector<std::pair<uint64_t, uint64_t>> done;
    try {
      for_granule_runs(first, last, [&](uint64_t g) { return users_[g] == 0 && !retained_.count(g); },
                       [&](uint64_t off, uint64_t len) {
                         reserve(off, len);
                         done.emplace_back(off, len);
                       });
    } catch (const OutOfMemory&) {
      for (const auto& [off, len] : done) unreserve(off, len);
      return false;
    }
    return true;
  }

  void give(uint64_t address, uint64_t size) {
    arena_.release(address, size);
    const uint64_t first = address / kGranule, last = (address + size - 1) / kGranule;
    for_granule_runs(first, last,
                     [&](uint64_t g) {
                       if (--users_[g] != 0) return false;
                       if (!retain_) return true;
                       retained_.insert(g);  // stays reserved until an allocation needs the room
                       return false;
                     },
                     [&](uint64_t off, uint64_t len) { unreserve(off, len); });
  }

  // Applies `step` to granules first..last and calls `run` once per maximal
  // run of granules for which it returned true (one backing call per run).
  template <typename Step, typename Run>
  static void for_granule_runs(uint64_t first, uint64_t last, Step step, Run run) {
    uint64_t start = 0, count = 0;
    for (uint64_t g = first; g <= last; ++g) {
      if (step(g)) {
        if (count == 0) start = g;
        ++count;
      } else if (count > 0) {
        run(start * kGranule, count * kGranule);
        count = 0;
      }
    }
    if (count > 0) run(start * kGranule, count * kGranule);
  }

  uint64_t space_;
  bool retain_;
  std::set<uint64_t> retained_;  // empty granules still reserved (retain mode)
  ExtentMap arena_;
  std::vector<uint32_t> users_;  // live blocks touching each granule
  std::vector<uint64_t> classes_;
  std::vector<std::set<std::pair<uint64_t, int32_t>>> partial_;  // per class: slabs with free slots
  std::vector<Slab> slabs_;
  std::vector<int32_t> unused_slabs_;
  std::unordered_map<uint64_t, Live> live_;
};

}  // namespace

std::unique_ptr<BlockAllocator> make_defrag_allocator(int64_t limit, MemoryBacking* backing, uint64_t address_space,
                                                      bool retain_freed) {
  return std::make_unique<DefragBlockAllocator>(limit, backing, detail::default_address_space(limit, address_space),
                                                retain_freed);
}

}  // namespace actkit
