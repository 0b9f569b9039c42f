// TAH-Quant's tile sizes as compile-time constants, for the variants' files.
#pragma once

#include <cstdlib>

#include "actkit/kernels/common.h"

namespace actkit::kernels::ACTKIT_CPU_ISA {
namespace {

// Calls f(TileSize<G>{}) for the layout's tile size G: one instance of a
// kernel per tile size the layout accepts.
template <int G>
struct TileSize {
  static constexpr int value = G;
};

template <typename F>
ACTKIT_CPU_INLINE auto with_group_size(int g, F&& f) {
  switch (g) {
    case 8: return f(TileSize<8>{});
    case 16: return f(TileSize<16>{});
    case 32: return f(TileSize<32>{});
    case 64: return f(TileSize<64>{});
    case 128: return f(TileSize<128>{});
    case 256: return f(TileSize<256>{});
    default: std::abort();  // the layout was validated: a power of two in [8, 256]
  }
}

}  // namespace
}  // namespace actkit::kernels::ACTKIT_CPU_ISA
