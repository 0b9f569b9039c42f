// The CPU kernels' instruction-set paths (kernels/include/actkit/kernels/cpu_isa.h):
// the path ACTKIT_CPU_KERNELS forces is the one taken, and every path this
// machine runs writes the same bytes as the scalar one, entry by entry of
// the variant tables, on inputs with awkward sizes (tails shorter than a
// vector, groups that straddle bytes, per-sample bits, 16-bit inputs).
// ctest runs the codec tests once more per path (tests/CMakeLists.txt), so
// the payload digests pin each path too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "actkit/kernels/cpu_isa.h"
#include "actkit/kernels/directq_math.h"
#include "actkit/kernels/half.h"
#include "actkit/kernels/pergroup_math.h"
#include "isa/isa_kernels.h"

namespace k = actkit::kernels;

namespace {

const std::vector<k::CpuIsa> kAll = {k::CpuIsa::kScalar, k::CpuIsa::kAvx2, k::CpuIsa::kAvx512};

const k::cpu::IsaKernels& table(k::CpuIsa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case k::CpuIsa::kAvx2: return k::isa_avx2::table();
    case k::CpuIsa::kAvx512: return k::isa_avx512::table();
#endif
    default: return k::isa_scalar::table();
  }
}

// Bell-shaped values with a few outliers and exact zeros.
std::vector<float> values(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[size_t(i)] = i % 97 == 0 ? 0.0f : normal(gen) * (i % 61 == 0 ? 40.0f : 1.0f);
  }
  return v;
}

}  // namespace

TEST(CpuIsa, ForcedPathIsTaken) {
  const char* env = std::getenv("ACTKIT_CPU_KERNELS");
  k::CpuIsa wanted;
  if (env == nullptr || !k::parse_cpu_isa(env, &wanted)) GTEST_SKIP() << "no path forced";
  if (!k::cpu_isa_supported(wanted)) GTEST_SKIP() << env << ": this machine cannot run it";
  EXPECT_EQ(k::cpu_isa(), wanted);
}

TEST(CpuIsa, NamesRoundTripAndScalarAlwaysRuns) {
  for (k::CpuIsa isa : kAll) {
    k::CpuIsa back;
    ASSERT_TRUE(k::parse_cpu_isa(k::cpu_isa_name(isa), &back));
    EXPECT_EQ(back, isa);
  }
  k::CpuIsa dummy;
  EXPECT_FALSE(k::parse_cpu_isa("auto", &dummy));
  EXPECT_FALSE(k::parse_cpu_isa("AVX512", &dummy));
  EXPECT_TRUE(k::cpu_isa_supported(k::CpuIsa::kScalar));
  EXPECT_TRUE(k::cpu_isa_supported(k::cpu_isa()));
}

TEST(CpuIsa, PerGroupPathsWriteTheSameBytes) {
  // 3 samples of 1000 values: groups of 96 leave a tail of 40, and 3-bit
  // and 5-bit samples put groups at odd bit offsets.
  const int64_t N = 3, D = 1000;
  const std::vector<float> x = values(N * D, 1);
  std::vector<uint16_t> xbf(x.size()), xhalf(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xbf[i] = k::float_to_bf16_rne(x[i]);
    xhalf[i] = k::float_to_fp16_rne(x[i]);
  }
  const k::FloatType types[] = {k::FloatType::kFloat32, k::FloatType::kBFloat16, k::FloatType::kFloat16};
  const void* inputs[] = {x.data(), xbf.data(), xhalf.data()};
  const std::vector<uint8_t> bits = {3, 8, 5};
  const std::vector<int64_t> offsets = {0, D * 3, D * 11};
  for (int input = 0; input < 3; ++input) {
    std::vector<uint8_t> want_codes;
    std::vector<uint16_t> want_meta;
    std::vector<float> want_decoded;
    for (k::CpuIsa isa : kAll) {
      if (!k::cpu_isa_supported(isa)) continue;
      k::PerGroupEncodeArgs a;
      a.input = inputs[input];
      a.input_type = types[input];
      a.layout.num_samples = N;
      a.layout.sample_size = D;
      a.layout.group_size = 96;
      a.layout.sample_bits = bits.data();
      a.layout.sample_bit_offset = offsets.data();
      a.key = k::make_rng_key(7);
      std::vector<uint16_t> meta(static_cast<size_t>(2 * a.layout.num_groups()));
      std::vector<uint8_t> codes(static_cast<size_t>(D * 16 / 8 + 1), 0);
      a.meta = meta.data();
      a.codes = codes.data();
      const int64_t G = a.layout.num_groups();
      // Two ranges, as two tasks would take them.
      ASSERT_EQ(table(isa).pergroup_encode(a, 0, G / 2), k::EncodeStatus::kOk);
      ASSERT_EQ(table(isa).pergroup_encode(a, G / 2, G), k::EncodeStatus::kOk);
      k::PerGroupDecodeArgs d;
      d.meta = meta.data();
      d.codes = codes.data();
      d.layout = a.layout;
      d.output_type = types[input];
      std::vector<float> decoded(x.size());  // 16-bit outputs fill its first half
      d.output = decoded.data();
      table(isa).pergroup_decode(d, 0, G);
      if (want_codes.empty()) {
        want_codes = codes;
        want_meta = meta;
        want_decoded = decoded;
        continue;
      }
      EXPECT_EQ(codes, want_codes) << k::cpu_isa_name(isa);
      EXPECT_EQ(meta, want_meta) << k::cpu_isa_name(isa);
      EXPECT_EQ(std::memcmp(decoded.data(), want_decoded.data(), decoded.size() * 4), 0) << k::cpu_isa_name(isa);
    }
  }
}

TEST(CpuIsa, DirectQPathsWriteTheSameBytes) {
  const int64_t C = 77, rows = 131;  // per-channel runs cross run boundaries at odd channels
  const std::vector<float> x = values(C * rows, 2);
  std::vector<uint16_t> xhalf(x.size());
  for (size_t i = 0; i < x.size(); ++i) xhalf[i] = k::float_to_fp16_rne(x[i]);
  for (int bits : {2, 3, 4, 7, 8}) {
   for (bool half : {false, true}) {
    for (bool per_channel : {false, true}) {
      for (bool stochastic : {false, true}) {
       for (k::DirectQGrid grid : {k::DirectQGrid::kSymmetric, k::DirectQGrid::kFull}) {
        std::vector<uint8_t> want;
        std::vector<float> want_decoded;
        uint32_t want_max = 0;
        for (k::CpuIsa isa : kAll) {
          if (!k::cpu_isa_supported(isa)) continue;
          const k::cpu::IsaKernels& t = table(isa);
          k::DirectQEncodeArgs a;
          a.input = half ? static_cast<const void*>(xhalf.data()) : x.data();
          a.input_type = half ? k::FloatType::kFloat16 : k::FloatType::kFloat32;
          a.numel = int64_t(x.size());
          a.num_scales = per_channel ? C : 1;
          a.bits = bits;
          a.grid = grid;
          a.stochastic = stochastic;
          a.key = k::make_rng_key(3);
          std::vector<uint32_t> maxima(static_cast<size_t>(C), 0);
          const uint32_t m = t.directq_max_abs(a, 0, a.numel);
          t.directq_channel_max(a, 0, k::cpu::kDirectQRun, maxima.data());
          t.directq_channel_max(a, k::cpu::kDirectQRun, a.numel, maxima.data());
          std::vector<float> inv(static_cast<size_t>(a.num_scales)), step(size_t(a.num_scales));
          for (size_t c = 0; c < inv.size(); ++c) {
            std::memcpy(&inv[c], per_channel ? &maxima[c] : &m, 4);  // the scale s
            step[c] = k::directq_step(inv[c], k::directq_half(bits, grid));
            inv[c] = k::directq_inv_step(inv[c], k::directq_half(bits, grid));
          }
          std::vector<uint8_t> codes(static_cast<size_t>((a.numel * bits + 7) / 8), 0);
          a.codes = codes.data();
          t.directq_quantize(a, inv.data(), 0, k::cpu::kDirectQRun);
          t.directq_quantize(a, inv.data(), k::cpu::kDirectQRun, a.numel);
          k::DirectQDecodeArgs d;
          d.codes = codes.data();
          d.numel = a.numel;
          d.num_scales = a.num_scales;
          d.bits = bits;
          d.grid = grid;
          d.output_type = a.input_type;
          std::vector<float> decoded(x.size());  // fp16 outputs fill its first half
          d.output = decoded.data();
          t.directq_decode(d, step.data(), 0, a.numel);
          if (want.empty()) {
            want = codes;
            want_decoded = decoded;
            want_max = m;
            continue;
          }
          EXPECT_EQ(m, want_max);
          EXPECT_EQ(codes, want) << k::cpu_isa_name(isa) << " bits " << bits << " per channel " << per_channel
                                 << " grid " << int(grid);
          EXPECT_EQ(std::memcmp(decoded.data(), want_decoded.data(), decoded.size() * 4), 0) << k::cpu_isa_name(isa);
        }
       }
      }
    }
   }
  }
}

// The same for DirectQ's stochastic codes: a run whose element indices cross
// 2^32 (its loops cut it there) draws element i's noise from index i on
// every path, per tensor and per channel. Only that run is encoded, its
// buffers placed where the stream puts it.
TEST(CpuIsa, DirectQNoiseFollowsTheIndexAcrossTheLowWordWrap) {
  const int64_t first = (int64_t(1) << 32) - 96;  // a multiple of 8: whole bytes of codes
  const int64_t len = 320;
  const std::vector<float> x = values(len, 13);
  const int bits = 3;
  const int64_t C = 7;
  for (bool per_channel : {false, true}) {
    const int64_t scales = per_channel ? C : 1;
    std::vector<float> inv(static_cast<size_t>(scales)), s(static_cast<size_t>(scales), 0.0f);
    for (int64_t j = 0; j < len; ++j) {
      float& m = s[size_t(per_channel ? (first + j) % C : 0)];
      m = std::max(m, std::fabs(x[size_t(j)]));
    }
    const float top = k::directq_half(bits, k::DirectQGrid::kSymmetric);
    for (int64_t c = 0; c < scales; ++c) inv[size_t(c)] = k::directq_inv_step(s[size_t(c)], top);
    for (k::CpuIsa isa : kAll) {
      if (!k::cpu_isa_supported(isa)) continue;
      std::vector<uint8_t> codes(size_t(len * bits / 8), 0);
      k::DirectQEncodeArgs a;
      a.input = reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(x.data()) - uintptr_t(first) * 4);
      a.numel = first + len;
      a.num_scales = scales;
      a.bits = bits;
      a.stochastic = true;
      a.key = k::make_rng_key(17);
      a.codes = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(codes.data()) - uintptr_t(first * bits / 8));
      table(isa).directq_quantize(a, inv.data(), first, first + len);
      for (int64_t j = 0; j < len; ++j) {
        const float u = k::counter_uniform(a.key, uint64_t(first + j));
        const int want =
            k::directq_code_stochastic(x[size_t(j)], inv[size_t(per_channel ? (first + j) % C : 0)], top, u);
        int got = 0;
        for (int b = 0; b < bits; ++b) {
          const int64_t bit = j * bits + b;
          got |= ((codes[size_t(bit / 8)] >> (bit % 8)) & 1) << b;
        }
        ASSERT_EQ(got, want) << k::cpu_isa_name(isa) << " per channel " << per_channel << " element " << first + j;
      }
    }
  }
}

TEST(CpuIsa, TahPathsWriteTheSameBytes) {
  for (int G : {8, 32, 64, 256}) {
   for (bool stochastic : {false, true}) {
    const int64_t T = 70, C = 512;
    std::vector<float> x = values(T * C, 4);
    for (int64_t t = 0; t < T; t += 3) x[size_t(t * C + (t * 7) % C)] = 300.0f;  // outlier tiles
    std::vector<uint8_t> want;
    std::vector<float> want_decoded, want_entropy;
    for (k::CpuIsa isa : kAll) {
      if (!k::cpu_isa_supported(isa)) continue;
      const k::cpu::IsaKernels& t = table(isa);
      k::TahEncodeArgs a;
      a.input = x.data();
      a.layout.num_tokens = T;
      a.layout.channels = C;
      a.layout.group_size = G;
      a.layout.high_bits = 4;
      a.layout.low_bits = 3;
      a.layout.high_tokens = 20;
      a.stochastic = stochastic;
      a.key = k::make_rng_key(31);
      std::vector<uint8_t> payload(static_cast<size_t>(a.layout.total_bytes()), 0);
      a.payload = payload.data();
      std::vector<float> entropy(static_cast<size_t>(T));
      ASSERT_TRUE(t.tah_entropy(x.data(), k::FloatType::kFloat32, C, 0, T, entropy.data(), nullptr));
      // Every fourth token (18 of them) at high bits, the last two high slots
      // unused: the kernels take the map as given.
      uint64_t* map = reinterpret_cast<uint64_t*>(payload.data() + a.layout.map_offset());
      for (int64_t tok = 0; tok < T; tok += 4) {
        if (tok / 4 < a.layout.high_tokens) map[tok / 64] |= uint64_t(1) << (tok % 64);
      }
      std::vector<int64_t> ranks(static_cast<size_t>(a.layout.map_words() + 1), 0);
      for (int64_t w = 0; w < a.layout.map_words(); ++w) ranks[size_t(w + 1)] = ranks[size_t(w)] + __builtin_popcountll(map[w]);
      std::vector<float> values_buf(static_cast<size_t>(C)), transformed(static_cast<size_t>(C)), mn(size_t(C / G)), mx(size_t(C / G));
      std::vector<uint8_t> q(static_cast<size_t>(C));
      std::vector<int32_t> pivot(static_cast<size_t>(C / G), -1);
      const k::cpu::TahScratch s{values_buf.data(), q.data(), transformed.data(), mn.data(), mx.data(), pivot.data()};
      ASSERT_TRUE(t.tah_encode(a, ranks.data(), 0, T, s));
      k::TahDecodeArgs d;
      d.payload = payload.data();
      d.layout = a.layout;
      std::vector<float> decoded(x.size());
      d.output = decoded.data();
      t.tah_decode(d, ranks.data(), 0, T);
      if (want.empty()) {
        want = payload;
        want_decoded = decoded;
        want_entropy = entropy;
        continue;
      }
      EXPECT_EQ(payload, want) << k::cpu_isa_name(isa) << " G " << G << " stochastic " << stochastic;
      EXPECT_EQ(std::memcmp(decoded.data(), want_decoded.data(), decoded.size() * 4), 0) << k::cpu_isa_name(isa);
      EXPECT_EQ(std::memcmp(entropy.data(), want_entropy.data(), entropy.size() * 4), 0) << k::cpu_isa_name(isa);
    }
   }
  }
}

TEST(CpuIsa, OneBitPathsWriteTheSameBytes) {
  const int64_t n = 5000;  // a block and a short one
  const std::vector<float> x = values(n, 5), e = values(n, 6);
  std::vector<uint8_t> want;
  std::vector<float> want_error, want_decoded;
  // The documented order (docs/formats.md, "1-bit chunks"): 8 lanes per
  // block of 4096, lanes combined pairwise, blocks in order.
  auto block = [&](int64_t begin, int64_t len) {
    double part[8] = {};
    for (int64_t i = 0; i < len; ++i) {
      const double y = double(x[size_t(begin + i)] + e[size_t(begin + i)]);
      part[i % 8] += y * y;
    }
    return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  };
  double want_sum = block(0, 4096) + block(4096, n - 4096);
  for (k::CpuIsa isa : kAll) {
    if (!k::cpu_isa_supported(isa)) continue;
    const k::cpu::IsaKernels& t = table(isa);
    const double sum = t.onebit_block_sum(x.data(), e.data(), 4096) + t.onebit_block_sum(x.data() + 4096, e.data() + 4096, n - 4096);
    std::vector<uint8_t> signs(static_cast<size_t>(n / 8));
    std::vector<float> error(static_cast<size_t>(n)), decoded(size_t(n), 1.0f);
    t.onebit_signs(x.data(), e.data(), error.data(), 0.75f, n, signs.data());
    t.onebit_decode(signs.data(), 0.75f, n, decoded.data(), /*accumulate=*/true);
    EXPECT_EQ(sum, want_sum) << k::cpu_isa_name(isa);
    if (want.empty()) {
      want = signs;
      want_error = error;
      want_decoded = decoded;
      continue;
    }
    EXPECT_EQ(signs, want) << k::cpu_isa_name(isa);
    EXPECT_EQ(error, want_error) << k::cpu_isa_name(isa);
    EXPECT_EQ(decoded, want_decoded) << k::cpu_isa_name(isa);
  }
}

// A group whose element indices cross 2^32 (the counter's low word wraps
// inside it) draws element i's noise from index i on every path. Only that
// group is encoded: its input and outputs are small buffers placed where the
// layout puts that group.
TEST(CpuIsa, PerGroupNoiseFollowsTheIndexAcrossTheLowWordWrap) {
  const int64_t D = (int64_t(1) << 31) + 64;  // sample 1 starts at D
  const int64_t gps = (D + 255) / 256;
  const int64_t k = ((int64_t(1) << 32) - D) / 256;  // sample 1's group holding 2^32
  const int64_t g = gps + k;
  const int64_t first = D + 256 * k;
  ASSERT_LT(first, int64_t(1) << 32);
  ASSERT_GT(first + 256, int64_t(1) << 32);
  const std::vector<float> x = values(256, 9);
  const int bits = 2;
  const int64_t bit_pos = D * bits + 256 * k * bits;
  ASSERT_EQ(bit_pos % 8, 0);
  for (k::CpuIsa isa : kAll) {
    if (!k::cpu_isa_supported(isa)) continue;
    std::vector<uint8_t> codes(64, 0);
    uint16_t meta[2] = {0, 0};
    k::PerGroupEncodeArgs a;
    // Pointers offset so that the layout's positions land in the buffers.
    a.input = reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(x.data()) - uintptr_t(first) * 4);
    a.layout.num_samples = 2;
    a.layout.sample_size = D;
    a.layout.group_size = 256;
    a.layout.uniform_bits = bits;
    a.key = k::make_rng_key(11);
    a.meta = reinterpret_cast<uint16_t*>(reinterpret_cast<uintptr_t>(meta) - uintptr_t(g) * 4);
    a.codes = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(codes.data()) - uintptr_t(bit_pos / 8));
    ASSERT_EQ(table(isa).pergroup_encode(a, g, g + 1), k::EncodeStatus::kOk);
    float mn = x[0], mx = x[0];
    for (float v : x) mn = std::min(mn, v), mx = std::max(mx, v);
    k::GroupMeta gm;
    ASSERT_TRUE(k::make_group_meta(mn, mx, bits, a.meta_format, &gm));
    EXPECT_EQ(meta[0], gm.zero_bits);
    EXPECT_EQ(meta[1], gm.range_bits);
    for (int64_t j = 0; j < 256; ++j) {
      const float u = k::counter_uniform(a.key, uint64_t(first + j));
      const int want = k::quantize_value(x[size_t(j)], gm.zero, gm.scale, u, 3.0f);
      const int got = (codes[size_t(j / 4)] >> (2 * (j % 4))) & 3;
      ASSERT_EQ(got, want) << k::cpu_isa_name(isa) << " element " << first + j;
    }
  }
}

namespace {

// n bytes whose last one sits just before an inaccessible page: a read past
// them faults.
class BytesBeforeAGuardPage {
 public:
  explicit BytesBeforeAGuardPage(size_t n) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    span_ = (n + page - 1) / page * page + page;
    void* p = mmap(nullptr, span_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<uint8_t*>(p);
    if (mprotect(base_ + span_ - page, page, PROT_NONE) != 0) throw std::runtime_error("mprotect failed");
    data_ = base_ + span_ - page - n;
  }
  ~BytesBeforeAGuardPage() { munmap(base_, span_); }
  BytesBeforeAGuardPage(const BytesBeforeAGuardPage&) = delete;
  BytesBeforeAGuardPage& operator=(const BytesBeforeAGuardPage&) = delete;
  uint8_t* data() { return data_; }

 private:
  uint8_t* base_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t span_ = 0;
};

// Calls f(bits, begin, len, stream_bytes) for runs of codes of every width:
// all lengths around the eight-octet steps of the AVX-512 paths, starting on
// a byte or not; stream_bytes ends at the run's last byte.
template <typename F>
void for_each_run_of_every_width(F&& f) {
  for (int bits = 1; bits <= 8; ++bits) {
    for (int64_t begin : {0, 5, 8, 64}) {
      for (int64_t len : {0, 1, 7, 8, 9, 56, 63, 64, 65, 71, 72, 128, 511, 512, 513, 1029}) {
        f(bits, begin, len, size_t(((begin + len) * bits + 7) / 8));
      }
    }
  }
}

}  // namespace

// Every path unpacks codes of every width to the bits of the stream: runs of
// all lengths around the eight-octet steps of the AVX-512 unpack, starting on
// a byte or not, from a stream whose last byte is the last before a guard
// page (a vector load that reads past the run faults) into an output with
// guard bytes.
TEST(CpuIsa, UnpackOfEveryWidthReadsTheStreamBits) {
  std::mt19937 rng(23);
  for_each_run_of_every_width([&](int bits, int64_t begin, int64_t len, size_t stream_bytes) {
    BytesBeforeAGuardPage guarded(stream_bytes);
    uint8_t* stream = guarded.data();
    for (size_t b = 0; b < stream_bytes; ++b) stream[b] = uint8_t(rng());
    std::vector<uint8_t> want(size_t(begin + len), 0xa5);
    for (int64_t i = begin; i < begin + len; ++i) {
      uint32_t code = 0;
      for (int b = 0; b < bits; ++b) {
        const int64_t s = i * bits + b;
        code |= uint32_t((stream[size_t(s / 8)] >> (s % 8)) & 1u) << b;
      }
      want[size_t(i)] = uint8_t(code);
    }
    for (k::CpuIsa isa : kAll) {
      if (!k::cpu_isa_supported(isa)) continue;
      std::vector<uint8_t> got(size_t(begin + len) + 64, 0xa5);
      table(isa).bitfield_decode(stream, begin, len, bits, got.data(), k::IntType::kUInt8);
      ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin()))
          << k::cpu_isa_name(isa) << " bits " << bits << " begin " << begin << " len " << len;
      for (size_t g = want.size(); g < got.size(); ++g) {
        ASSERT_EQ(got[g], 0xa5) << k::cpu_isa_name(isa) << " wrote past the run: bits " << bits << " len " << len;
      }
    }
  });
}

// Every path packs codes of every width into exactly the run's bits: the
// stream's other bits (random, in the bytes shared with the run's
// neighbours too) stay as they were, and its last byte is the last before a
// guard page (a vector store past the run faults).
TEST(CpuIsa, PackOfEveryWidthWritesOnlyTheRunsBits) {
  std::mt19937 rng(29);
  for_each_run_of_every_width([&](int bits, int64_t begin, int64_t len, size_t stream_bytes) {
    const int64_t end_bit = (begin + len) * bits;
    std::vector<uint8_t> codes(size_t(begin + len));
    for (auto& c : codes) c = uint8_t(rng() & ((1u << bits) - 1));
    // The stream before packing: random, with the run's bits cleared
    // (pack_codes ORs the bytes it shares with neighbouring runs).
    std::vector<uint8_t> before(stream_bytes);
    for (auto& b : before) b = uint8_t(rng());
    for (int64_t s = begin * bits; s < end_bit; ++s) before[size_t(s / 8)] &= uint8_t(~(1u << (s % 8)));
    std::vector<uint8_t> want = before;
    for (int64_t i = begin; i < begin + len; ++i) {
      for (int b = 0; b < bits; ++b) {
        const int64_t s = i * bits + b;
        want[size_t(s / 8)] |= uint8_t(((codes[size_t(i)] >> b) & 1u) << (s % 8));
      }
    }
    for (k::CpuIsa isa : kAll) {
      if (!k::cpu_isa_supported(isa)) continue;
      BytesBeforeAGuardPage guarded(stream_bytes);
      uint8_t* stream = guarded.data();
      std::copy(before.begin(), before.end(), stream);
      ASSERT_TRUE(table(isa).bitfield_encode(codes.data(), k::IntType::kUInt8, begin, len, bits, stream));
      ASSERT_TRUE(std::equal(want.begin(), want.end(), stream))
          << k::cpu_isa_name(isa) << " bits " << bits << " begin " << begin << " len " << len;
    }
  });
}
