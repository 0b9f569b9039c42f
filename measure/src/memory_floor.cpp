#include "actkit/measure/memory_floor.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "actkit/core/errors.h"

namespace actkit {
namespace {

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", bytes / double(int64_t(1) << 30));
  return text;
}

}  // namespace

double step_memory_floor(const std::string& model, const ModelOptions& options, int64_t batch, int64_t length) {
  const ModelEntry& info = find_model(model);
  const double n = double(batch);
  if (info.task == Task::kLanguageModel) {
    const double tokens = n * double(length);
    return tokens * 8 + 2 * tokens * double(options.vocab_size) * 4;  // int64 ids; logits and their gradient
  }
  const double input = info.input == InputKind::kTokens
                           ? n * double(length) * 8
                           : n * double(options.in_channels) * double(length) * double(length) * 4;
  return input + 2 * n * double(options.num_classes) * 4;
}

int64_t machine_memory_bytes() {
  int64_t total = 0;
  {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    int64_t kib = 0;
    while (meminfo >> key >> kib) {
      if (key == "MemTotal:") {
        total = kib * 1024;
        break;
      }
      meminfo.ignore(256, '\n');
    }
  }
  std::ifstream limit("/sys/fs/cgroup/memory.max");  // "max" when unlimited
  int64_t cgroup = 0;
  if (limit >> cgroup && cgroup > 0) total = total > 0 ? std::min(total, cgroup) : cgroup;
  return total;
}

void check_fits_machine(const std::string& what, double bytes) {
  const int64_t machine = machine_memory_bytes();
  if (machine <= 0 || bytes <= double(machine)) return;
  throw InvalidInput(c10::str(what, ": a step needs at least ", gib(bytes),
                              " (the batch and its output, at any level), more than this machine's ", gib(double(machine)),
                              " of memory; ask for a smaller batch"));
}

}  // namespace actkit
