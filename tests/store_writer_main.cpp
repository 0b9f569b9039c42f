// Helper for the crash-recovery test: rewrites records in a RecordStore
// forever and prints "done KEY VERSION" after each completed write, until
// the test kills it with SIGKILL (usually mid-write).
//   actkit_store_writer PATH KEYS BYTES
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "actkit/swap/record_store.h"
#include "store_payload.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s PATH KEYS BYTES\n", argv[0]);
    return 2;
  }
  const int keys = std::atoi(argv[2]);
  const size_t bytes = size_t(std::atoll(argv[3]));
  actkit::RecordStore store(argv[1], actkit::make_io_engine());
  for (uint64_t version = 1;; ++version) {
    for (int k = 0; k < keys; ++k) {
      const std::string key = "example/" + std::to_string(k);
      const std::vector<uint8_t> data = actkit::test::store_payload(key, version, bytes);
      store.put(key, data.data(), data.size());
      std::printf("done %s %llu\n", key.c_str(), static_cast<unsigned long long>(version));
      std::fflush(stdout);
    }
  }
}
