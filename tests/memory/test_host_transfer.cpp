// The device <-> host transfer benchmark behind `actkit bench host`: every
// path moves the bytes intact and is timed, and bad configurations are clear
// errors.
#include <gtest/gtest.h>

#include "actkit/core/device.h"
#include "actkit/core/errors.h"
#include "actkit/bench/host_transfer_bench.h"

namespace actkit {
namespace {

TEST(HostTransfer, EveryPathMovesTheBytesIntactAndIsTimed) {
  bench::HostTransferConfig c;
  c.device = "cpu";
  c.bytes = 4 << 20;
  c.chunk = 1 << 20;
  c.repeats = 1;
  const bench::HostTransferReport r = bench::run_host_transfer_bench(c);
  EXPECT_EQ(r.chunks, 4);
  EXPECT_EQ(r.pinned, cuda_available());
  EXPECT_TRUE(r.verified) << "the whole copy or the swapper changed the bytes it moved";
  for (const bench::Direction& d : {r.pinned_whole, r.pinned_chunks, r.pageable_chunks, r.swapper}) {
    EXPECT_GT(d.to_host_gbps, 0);
    EXPECT_GT(d.to_device_gbps, 0);
  }
}

TEST(HostTransfer, BadConfigurationsAreClearErrors) {
  bench::HostTransferConfig c;
  c.device = "cpu";
  c.bytes = 1 << 20;
  c.chunk = 2 << 20;  // larger than the whole
  EXPECT_THROW(bench::run_host_transfer_bench(c), InvalidInput);
  c.chunk = 0;
  EXPECT_THROW(bench::run_host_transfer_bench(c), InvalidInput);
  c = {};
  c.device = "tpu";
  EXPECT_THROW(bench::run_host_transfer_bench(c), InvalidInput);
  c.device = "vulkan";
  EXPECT_THROW(bench::run_host_transfer_bench(c), InvalidInput);
  if (!cuda_available()) {
    c.device = "cuda";
    EXPECT_THROW(bench::run_host_transfer_bench(c), InvalidInput);
  }
}

}  // namespace
}  // namespace actkit
