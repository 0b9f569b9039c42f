// Google Benchmark micro-benchmarks of the codecs on 64 MiB fp32 inputs
// (63 MiB for the boundary codecs),
// with the parallel memcpy baseline in the same binary. bytes_per_second is
// fp32 input bytes, as in `actkit bench codec`.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include "actkit/core/codecs/bitfield_codecs.h"
#include "actkit/core/codecs/boundary_codecs.h"
#include "actkit/core/codecs/pergroup_codec.h"
#include "actkit/bench/codec_bench.h"

namespace {

constexpr int64_t kNumel = (int64_t(64) << 20) / 4;

const at::Tensor& input() {
  static const at::Tensor x = at::randn({64, kNumel / 64});
  return x;
}

void BM_Memcpy(benchmark::State& state) {
  at::Tensor y = at::empty_like(input());
  for (auto _ : state) {
    actkit::bench::parallel_memcpy(y.data_ptr(), input().data_ptr(), size_t(kNumel) * 4);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kNumel * 4);
}
BENCHMARK(BM_Memcpy)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_PerGroupEncode(benchmark::State& state) {
  actkit::PerGroupOptions o;
  o.bits = int(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(actkit::encode_per_group(input(), o));
  state.SetBytesProcessed(state.iterations() * kNumel * 4);
}
BENCHMARK(BM_PerGroupEncode)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_PerGroupDecode(benchmark::State& state) {
  actkit::PerGroupOptions o;
  o.bits = int(state.range(0));
  const actkit::CompressedTensor ct = actkit::encode_per_group(input(), o);
  at::Tensor y = at::empty_like(input());
  for (auto _ : state) {
    ct.decode_into(y);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kNumel * 4);
}
BENCHMARK(BM_PerGroupDecode)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_MaskEncode(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(actkit::encode_positive_mask(input()));
  state.SetBytesProcessed(state.iterations() * kNumel * 4);
}
BENCHMARK(BM_MaskEncode)->UseRealTime()->Unit(benchmark::kMillisecond);

// Pipeline-boundary codecs on an activation of 42 x 512 tokens x 768
// channels (63 MiB of fp32).
const at::Tensor& activation() {
  static const at::Tensor x = at::randn({42, 512, 768});
  return x;
}

void BM_DirectQEncode(benchmark::State& state) {
  actkit::DirectQOptions o;
  o.bits = int(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(actkit::encode_directq(activation(), o));
  state.SetBytesProcessed(state.iterations() * activation().numel() * 4);
}
BENCHMARK(BM_DirectQEncode)->Arg(2)->Arg(4)->Arg(8)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_DirectQDecode(benchmark::State& state) {
  actkit::DirectQOptions o;
  o.bits = int(state.range(0));
  const actkit::CompressedTensor ct = actkit::encode_directq(activation(), o);
  at::Tensor y = at::empty_like(activation());
  for (auto _ : state) {
    ct.decode_into(y);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * activation().numel() * 4);
}
BENCHMARK(BM_DirectQDecode)->Arg(2)->Arg(4)->Arg(8)->UseRealTime()->Unit(benchmark::kMillisecond);

// Arg: the high bits; the low bits are one less.
void BM_TahEncode(benchmark::State& state) {
  actkit::TahOptions o;
  o.high_bits = int(state.range(0));
  o.low_bits = o.high_bits - 1;
  for (auto _ : state) benchmark::DoNotOptimize(actkit::encode_tah(activation(), o));
  state.SetBytesProcessed(state.iterations() * activation().numel() * 4);
}
BENCHMARK(BM_TahEncode)->Arg(3)->Arg(4)->Arg(8)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_TahDecode(benchmark::State& state) {
  actkit::TahOptions o;
  o.high_bits = int(state.range(0));
  o.low_bits = o.high_bits - 1;
  const actkit::CompressedTensor ct = actkit::encode_tah(activation(), o);
  at::Tensor y = at::empty_like(activation());
  for (auto _ : state) {
    ct.decode_into(y);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * activation().numel() * 4);
}
BENCHMARK(BM_TahDecode)->Arg(3)->Arg(4)->Arg(8)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
