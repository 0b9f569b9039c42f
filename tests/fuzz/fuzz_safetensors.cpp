// libFuzzer target for the safetensors reader (converters/src/safetensors.cpp):
// bytes in, written to a file, read as a .safetensors file. Built with ASan
// and UBSan (scripts/fuzz.sh). A crash, a sanitizer report, a hang or an
// exception other than actkit::Error is a bug: a refusal must be a
// FormatError (or an IoError) naming the file. Every tensor that comes back
// is read whole, so a tensor reaching past the bytes it was given traps.
#include <torch/torch.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "actkit/converters/safetensors.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"

namespace {

volatile double g_sink;

const std::string& scratch_file() {
  static const std::string path = actkit::files::temp_directory() + "/actkit-fuzz-st-" + std::to_string(::getpid());
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = scratch_file();
  // A plain write: no fsync per input (the reader sees the same bytes).
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size)) std::abort();
  std::fclose(f);
  try {
    for (const auto& [name, t] : actkit::read_safetensors(path)) {
      if (t.numel() > 0) g_sink = t.to(at::kDouble).abs().sum().item<double>();
    }
  } catch (const actkit::Error&) {
    // A refusal: what a hostile file must get.
  }
  return 0;
}
