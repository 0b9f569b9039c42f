// CPU TAH-Quant: TBB over tokens. Encode makes two passes over the input:
// one for the token entropies (the ranking needs every token's before any
// token's bits are known), one for the tiles. Each range of tokens runs in
// the selected instruction-set variant (isa/tah_isa.cpp); the ranking and the
// map are here.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <vector>

#include "actkit/kernels/tah.h"
#include "actkit/kernels/tah_math.h"
#include "isa/isa_kernels.h"

namespace actkit::kernels {
namespace {

// Tokens per TBB task (8 tokens of 768 fp32 channels = 24 KiB).
constexpr int64_t kGrainTokens = 8;

EncodeStatus entropy_all(const void* input, FloatType type, int64_t T, int64_t C, float* entropy) {
  const cpu::IsaKernels& k = cpu::isa_kernels();
  std::atomic<bool> bad{false};
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, T, kGrainTokens), [&](const tbb::blocked_range<int64_t>& r) {
    std::vector<float> buf(type == FloatType::kFloat32 ? 0 : size_t(C));
    if (!k.tah_entropy(input, type, C, r.begin(), r.end(), entropy, buf.data())) {
      bad.store(true, std::memory_order_relaxed);
    }
  });
  return bad.load() ? EncodeStatus::kNonFinite : EncodeStatus::kOk;
}

// Sets the map bits of the high_tokens tokens of highest entropy (ties: the
// lower index first). The order is total, so any selection algorithm picks
// the same set.
void select_tokens(const float* entropy, const TahLayout& L, uint64_t* map) {
  const int64_t T = L.num_tokens;
  const int64_t H = L.high_tokens;
  if (H == 0) return;
  std::vector<int64_t> order(static_cast<size_t>(T));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (H < T) {
    std::nth_element(order.begin(), order.begin() + H, order.end(), [&](int64_t a, int64_t b) {
      return entropy[a] > entropy[b] || (entropy[a] == entropy[b] && a < b);
    });
  }
  for (int64_t i = 0; i < H; ++i) {
    const int64_t t = order[size_t(i)];
    map[t / 64] |= uint64_t(1) << (t % 64);
  }
}

// Exclusive popcount prefix of the map words; entry W is the total.
std::vector<int64_t> word_ranks(const uint64_t* map, const TahLayout& L) {
  const int64_t W = L.map_words();
  std::vector<int64_t> ranks(size_t(W + 1));
  int64_t total = 0;
  for (int64_t w = 0; w < W; ++w) {
    ranks[size_t(w)] = total;
    total += popcount64(map[w]);
  }
  ranks[size_t(W)] = total;
  return ranks;
}

// A task's scratch, owned here and lent to the variant as pointers.
struct TokenScratch {
  TokenScratch(int64_t C, int64_t K, bool convert)
      : values(convert ? size_t(C) : 0), q(size_t(C)), transformed(size_t(C)), mn(size_t(K)), mx(size_t(K)),
        pivot(size_t(K), -1) {}
  cpu::TahScratch view() {
    return cpu::TahScratch{values.data(), q.data(), transformed.data(), mn.data(), mx.data(), pivot.data()};
  }
  std::vector<float> values;
  std::vector<uint8_t> q;
  std::vector<float> transformed;
  std::vector<float> mn, mx;
  std::vector<int32_t> pivot;
};

}  // namespace

EncodeStatus tah_entropy_cpu(const void* input, FloatType type, int64_t num_tokens, int64_t channels,
                             float* entropy) {
  return entropy_all(input, type, num_tokens, channels, entropy);
}

EncodeStatus tah_encode_cpu(const TahEncodeArgs& args) {
  const TahLayout& L = args.layout;
  const int64_t T = L.num_tokens;
  const int64_t C = L.channels;
  std::vector<float> entropy(static_cast<size_t>(T));
  if (entropy_all(args.input, args.input_type, T, C, entropy.data()) != EncodeStatus::kOk) {
    return EncodeStatus::kNonFinite;
  }
  uint64_t* map = reinterpret_cast<uint64_t*>(args.payload + L.map_offset());
  select_tokens(entropy.data(), L, map);
  const std::vector<int64_t> ranks = word_ranks(map, L);

  const cpu::IsaKernels& k = cpu::isa_kernels();
  std::atomic<bool> overflow{false};
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, T, kGrainTokens), [&](const tbb::blocked_range<int64_t>& r) {
    TokenScratch scratch(C, L.tiles_per_token(), args.input_type != FloatType::kFloat32);
    if (!k.tah_encode(args, ranks.data(), r.begin(), r.end(), scratch.view())) {
      overflow.store(true, std::memory_order_relaxed);
    }
  });
  return overflow.load() ? EncodeStatus::kMetaOverflow : EncodeStatus::kOk;
}

bool tah_decode_cpu(const TahDecodeArgs& args) {
  const TahLayout& L = args.layout;
  const std::vector<int64_t> ranks =
      word_ranks(reinterpret_cast<const uint64_t*>(args.payload + L.map_offset()), L);
  if (ranks.back() != L.high_tokens) return false;
  const cpu::IsaKernels& k = cpu::isa_kernels();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, L.num_tokens, kGrainTokens),
                    [&](const tbb::blocked_range<int64_t>& r) { k.tah_decode(args, ranks.data(), r.begin(), r.end()); });
  return true;
}

}  // namespace actkit::kernels
