// The only file that includes ProcessGroupGloo.hpp (see process_group.h for
// why, and CMakeLists.txt for its hidden visibility).
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdlib>

#include "process_group.h"

namespace actkit::detail {

BackendGroup make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                             const GroupConfig& config) {
  auto options = c10d::ProcessGroupGloo::Options::create(config.timeout);
  // Bind to the interface the user names (as PyTorch does), else to the
  // address that reaches the master: loopback for a single machine.
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname != nullptr && *ifname != '\0') {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else if (config.master_addr == "127.0.0.1" || config.master_addr == "localhost") {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  options->threads = 2;  // sends and receives complete on the device thread; collectives are rare here
  c10::intrusive_ptr<CollectiveGroup> group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  return {group, c10::Device(c10::kCPU)};
}

}  // namespace actkit::detail
