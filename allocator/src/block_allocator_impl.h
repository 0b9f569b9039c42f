// Constants and helpers the block allocators share.
#pragma once

#include <cstdint>

namespace actkit::detail {

constexpr uint64_t kMinBlock = 512;           // every block is a multiple of this
constexpr uint64_t kGranule = uint64_t(2) << 20;  // CUDA's VMM granularity; segment multiple

inline uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }
inline uint64_t block_size_for(uint64_t bytes) { return bytes == 0 ? kMinBlock : round_up(bytes, kMinBlock); }

uint64_t default_address_space(int64_t limit, uint64_t requested);

}  // namespace actkit::detail
