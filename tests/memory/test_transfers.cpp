// Transfer queues, and the L4 swapper's copies in flight. A CPU machine has
// no copy that runs behind its back, so a deferred queue stands in for a
// CUDA copy stream: its copies run only when the swapper waits for them,
// orders a stream behind them, lets go of them, or has asked often enough.
// A copy the swapper used before ordering it would show as wrong bytes.
#include <signal.h>
#include <sys/resource.h>

#include <torch/torch.h>

#include "actkit/core/device.h"
#include "actkit/core/errors.h"
#include "actkit/core/level.h"
#include "actkit/core/codecs/pergroup_codec.h"
#include "actkit/core/transfer_queue.h"
#include "actkit/swap/activation_swapper.h"
#include "test_util.h"

namespace actkit {
namespace {

class DeferredQueue final : public TransferQueue {
 public:
  class Copy final : public Transfer {
   public:
    Copy(at::Tensor dst, at::Tensor src, int queries) : dst_(std::move(dst)), src_(std::move(src)), queries_(queries) {}
    ~Copy() override { run(); }  // as on a device: letting go waits for the copy
    bool done() override {
      if (--queries_ < 0) run();
      return ran_;
    }
    void wait() override { run(); }
    void order_before_current_stream() override { run(); }
    const at::Tensor& destination() const override { return dst_; }

   private:
    void run() {
      if (!ran_) dst_.copy_(src_);
      ran_ = true;
    }
    at::Tensor dst_, src_;
    int queries_;
    bool ran_ = false;
  };

  explicit DeferredQueue(int queries_before_done) : queries_(queries_before_done) {}
  bool asynchronous(at::Device) const override { return true; }
  std::unique_ptr<Transfer> start(at::Tensor dst, at::Tensor src) override {
    detail::check_transfer(dst, src, "deferred transfer");
    return std::make_unique<Copy>(std::move(dst), std::move(src), queries_);
  }

 private:
  int queries_;
};

std::vector<CompressedTensor> payloads(int n) {
  at::manual_seed(3);
  std::vector<CompressedTensor> out;
  for (int i = 0; i < n; ++i) out.push_back(encode_per_group(at::randn({4, 64 + 32 * i}), PerGroupOptions{}));
  return out;
}

TEST(Transfers, BadTensorsAreRefused) {
  const auto q = default_transfer_queue();
  const at::Tensor bytes = at::zeros({16}, at::kByte);
  EXPECT_THROW(q->start(at::Tensor(), bytes), InvalidInput);
  EXPECT_THROW(q->start(at::zeros({8}, at::kByte), bytes), InvalidInput);
  EXPECT_THROW(q->start(at::zeros({4}, at::kFloat), bytes), InvalidInput);
  EXPECT_THROW(q->start(at::zeros({4, 4}, at::kByte).t(), at::zeros({4, 4}, at::kByte)), InvalidInput);
}

TEST(Transfers, TheCpuQueueCopiesAtOnce) {
  const auto q = default_transfer_queue();
  EXPECT_FALSE(q->asynchronous(at::kCPU));
  const at::Tensor src = at::arange(100, at::kInt).to(at::kByte);
  const at::Tensor dst = at::empty({100}, at::kByte);
  const auto t = q->start(dst, src);
  EXPECT_TRUE(t->done());
  t->order_before_current_stream();
  EXPECT_TRUE(test::bitwise_equal(t->destination(), src));
  EXPECT_TRUE(test::bitwise_equal(dst, src));
}

// Backward's order with copies in flight both ways: the newest payloads are
// used where they still are, older ones come back ahead of need, and every
// payload comes back with its bytes, also a second time (retain_graph).
void swap_in_reverse(const std::string& level, int queries_before_done) {
  SCOPED_TRACE(level + " done after " + std::to_string(queries_before_done) + " queries");
  test::TempDir dir;
  auto queue = std::make_shared<DeferredQueue>(queries_before_done);
  ActivationSwapper swapper(parse_level(level + ",swap_dir=" + dir.path()), {}, queue);
  const std::vector<CompressedTensor> cts = payloads(12);
  std::vector<std::shared_ptr<SwappedPayload>> handles;
  for (const CompressedTensor& ct : cts) handles.push_back(swapper.stash(ct));
  EXPECT_EQ(swapper.stats().swapped_out, 12);
  EXPECT_GE(swapper.stats().tier.host_bytes + swapper.stats().tier.file_bytes, 1);  // the oldest reached the tier

  const CompressedTensor again = handles[7]->load();
  EXPECT_TRUE(test::bitwise_equal(again.payload(), cts[7].payload()));
  for (int i = 11; i >= 0; --i) {
    const CompressedTensor back = handles[size_t(i)]->load();
    ASSERT_TRUE(test::bitwise_equal(back.payload(), cts[size_t(i)].payload())) << i;
    EXPECT_EQ(back.meta().shape, cts[size_t(i)].meta().shape);
    handles[size_t(i)].reset();
  }
  const SwapStats s = swapper.stats();
  EXPECT_EQ(s.swapped_in, 13);
  if (queries_before_done > 100) EXPECT_GT(s.never_left, 0);  // the newest were still on their way out
  if (queries_before_done == 0) EXPECT_EQ(s.never_left, 0);   // every copy out was seen finished at once
  if (parse_level(level).prefetch > 0) EXPECT_GT(s.device_prefetched + s.prefetched, 0);
  if (parse_level(level).prefetch == 0) EXPECT_EQ(s.device_prefetched + s.prefetched, 0);
  EXPECT_EQ(s.tier.host_bytes, 0);    // every handle gone: no space held
  EXPECT_EQ(s.tier.file_bytes, 0);
}

TEST(SwapperInFlight, PayloadsComeBackWithTheirBytes) {
  for (int q : {0, 3, 1000}) {
    swap_in_reverse("L4:prefetch=2", q);
    swap_in_reverse("L4:prefetch=0", q);
    swap_in_reverse("L4:swap=file,prefetch=3", q);
    swap_in_reverse("L4:host_budget=2K,prefetch=4", q);
  }
}

// A copy out stays unfinished until a stash needs its place: the payload
// stays on the device meanwhile and at most max(prefetch, 1) such copies
// are in flight.
TEST(SwapperInFlight, CopiesOutAreBounded) {
  auto queue = std::make_shared<DeferredQueue>(1 << 30);  // never done by asking
  ActivationSwapper swapper(parse_level("L4:prefetch=3"), {}, queue);
  const std::vector<CompressedTensor> cts = payloads(10);
  std::vector<std::shared_ptr<SwappedPayload>> handles;
  int64_t bytes = 0;
  for (const CompressedTensor& ct : cts) {
    handles.push_back(swapper.stash(ct));
    bytes += ct.payload().numel();
  }
  int64_t newest = 0;
  for (size_t i = 7; i < 10; ++i) newest += cts[i].payload().numel();
  EXPECT_EQ(swapper.stats().tier.host_bytes, bytes - newest);  // three still on their way out
  // Device prefetch after the first load: the next three older ones.
  handles[6]->load();
  EXPECT_EQ(swapper.stats().device_prefetched, 3);
  EXPECT_EQ(swapper.stats().never_left, 0);
  for (size_t i : {9u, 8u}) EXPECT_TRUE(test::bitwise_equal(handles[i]->load().payload(), cts[i].payload()));
  EXPECT_EQ(swapper.stats().never_left, 2);
  swapper.finish_copies_out();
  EXPECT_EQ(swapper.stats().tier.host_bytes, bytes);
  EXPECT_TRUE(test::bitwise_equal(handles[7]->load().payload(), cts[7].payload()));
  EXPECT_EQ(swapper.stats().never_left, 2);
}

// A full disk while payloads are in flight: the stash that finds no room
// says so, and every payload stashed before it still comes back.
TEST(SwapperInFlight, AFullDiskLosesNothing) {
  for (int q : {0, 1 << 30}) {
    SCOPED_TRACE(q);
    test::TempDir dir;
    auto queue = std::make_shared<DeferredQueue>(q);
    ActivationSwapper swapper(parse_level("L4:swap=file,prefetch=0,swap_dir=" + dir.path()), {}, queue);
    const std::vector<CompressedTensor> cts = payloads(4);
    std::vector<std::shared_ptr<SwappedPayload>> handles;
    struct rlimit old {};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit low = old;
    low.rlim_cur = 4096;  // the spill file cannot grow
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &low), 0);
    int failures = 0;
    for (const CompressedTensor& ct : cts) {
      try {
        handles.push_back(swapper.stash(ct));
      } catch (const IoError& e) {
        ++failures;
        handles.push_back(nullptr);
        EXPECT_NE(std::string(e.what()).find("activation/"), std::string::npos) << e.what();
      }
    }
    ::setrlimit(RLIMIT_FSIZE, &old);
    EXPECT_GT(failures, 0);
    for (size_t i = handles.size(); i-- > 0;) {
      if (handles[i]) EXPECT_TRUE(test::bitwise_equal(handles[i]->load().payload(), cts[i].payload())) << i;
    }
    // With room again, stashing works.
    const auto more = swapper.stash(cts[0]);
    EXPECT_TRUE(test::bitwise_equal(more->load().payload(), cts[0].payload()));
  }
}

TEST(SwapperInFlight, TheCpuQueueKeepsNothingInFlight) {
  ActivationSwapper swapper(parse_level("L4:prefetch=2"));
  const std::vector<CompressedTensor> cts = payloads(5);
  std::vector<std::shared_ptr<SwappedPayload>> handles;
  for (const CompressedTensor& ct : cts) handles.push_back(swapper.stash(ct));
  int64_t bytes = 0;
  for (const CompressedTensor& ct : cts) bytes += ct.payload().numel();
  EXPECT_EQ(swapper.stats().tier.host_bytes, bytes);  // all in the tier at once
  for (int i = 4; i >= 0; --i) EXPECT_TRUE(test::bitwise_equal(handles[size_t(i)]->load().payload(), cts[size_t(i)].payload()));
  EXPECT_EQ(swapper.stats().never_left, 0);
  EXPECT_EQ(swapper.stats().device_prefetched, 0);  // nothing to gain from reading ahead on the CPU
}

// The CUDA queue: copies on the copy stream wait for compute queued before
// them, and work ordered behind a copy sees its bytes.
TEST(Transfers, CudaCopiesKeepTheirOrder) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto q = default_transfer_queue();
  EXPECT_TRUE(q->asynchronous(at::kCUDA));
  EXPECT_FALSE(q->asynchronous(at::kCPU));
  const int64_t n = int64_t(64) << 20;
  at::Tensor on_device = at::zeros({n}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  on_device.add_(7);  // queued on the compute stream: the copy must wait for it
  const at::Tensor host = at::empty({n}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  const auto out = q->start(host, on_device);
  out->wait();
  EXPECT_TRUE(out->done());
  EXPECT_EQ(host.min().item<int>(), 7);
  EXPECT_EQ(host.max().item<int>(), 7);
  host.fill_(9);
  const at::Tensor back = at::empty({n}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  const auto in = q->start(back, host);
  in->order_before_current_stream();  // no host wait: the reduction below is queued behind the copy
  EXPECT_EQ(back.min().item<int>(), 9);
  EXPECT_EQ(back.max().item<int>(), 9);
  EXPECT_TRUE(in->destination().is_same(back));
}

TEST(SwapperInFlight, CudaPayloadsComeBackWithTheirBytes) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  ActivationSwapper swapper(parse_level("L4:prefetch=2"));
  at::manual_seed(5);
  std::vector<CompressedTensor> cts;
  std::vector<std::shared_ptr<SwappedPayload>> handles;
  for (int i = 0; i < 12; ++i) {
    cts.push_back(encode_per_group(at::randn({64, 4096 + 512 * i}, at::kCUDA), PerGroupOptions{}));
    handles.push_back(swapper.stash(cts.back()));
  }
  for (int i = 11; i >= 0; --i) {
    const CompressedTensor back = handles[size_t(i)]->load();
    EXPECT_TRUE(back.payload().is_cuda());
    ASSERT_TRUE(test::bitwise_equal(back.payload().cpu(), cts[size_t(i)].payload().cpu())) << i;
    handles[size_t(i)].reset();
  }
  const SwapStats s = swapper.stats();
  EXPECT_GT(s.device_prefetched, 0);
  EXPECT_EQ(s.tier.host_bytes, 0);
}

}  // namespace
}  // namespace actkit
