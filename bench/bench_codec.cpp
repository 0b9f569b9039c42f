// Google Benchmark micro-benchmarks of the codecs on 64 MiB fp32 inputs,
// with the parallel memcpy baseline in the same binary. bytes_per_second is
// fp32 input bytes, as in `actkit bench codec`.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include "actkit/core/bitfield_codecs.h"
#include "actkit/core/pergroup_codec.h"
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

}  // namespace

BENCHMARK_MAIN();
