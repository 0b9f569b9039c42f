#include "actkit/converters/controller_archive.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include "actkit/core/errors.h"

namespace actkit {

namespace {
constexpr const char* kKey = "controller";
}  // namespace

void write_controller_state(torch::serialize::OutputArchive& archive, const Controller& controller) {
  const std::vector<uint8_t> bytes = controller.save_state();
  archive.write(kKey, at::tensor(at::ArrayRef<uint8_t>(bytes)));
}

std::optional<std::vector<uint8_t>> read_controller_state(torch::serialize::InputArchive& archive) {
  at::Tensor t;
  if (!archive.try_read(kKey, t)) return std::nullopt;
  t = t.to(at::kByte).contiguous();
  const uint8_t* p = t.data_ptr<uint8_t>();
  return std::vector<uint8_t>(p, p + t.numel());
}

void restore_controller_state(Controller& controller, const std::vector<uint8_t>& bytes, const std::string& where) {
  try {
    controller.load_state(bytes);
  } catch (const FormatError& e) {
    throw FormatError(c10::str(where, ": ", e.what()));
  }
}

}  // namespace actkit
