// What the pickle check knows of the globals torch.save and LibTorch write.
#include "pickle/pickle_globals.h"

#include <map>
#include <utility>

namespace actkit {

// Element sizes of the storage types torch.save and LibTorch name
// (GLOBAL torch.<Type>Storage); 0 for any other (no reader here takes it).
uint64_t storage_element_size(const std::string& type) {
  static const std::map<std::string, uint64_t> kSizes = {
      {"FloatStorage", 4}, {"DoubleStorage", 8}, {"HalfStorage", 2},         {"BFloat16Storage", 2},
      {"LongStorage", 8},  {"IntStorage", 4},    {"ShortStorage", 2},        {"CharStorage", 1},
      {"ByteStorage", 1},  {"BoolStorage", 1},   {"ComplexFloatStorage", 8}, {"ComplexDoubleStorage", 16}};
  auto it = kSizes.find(type);
  return it == kSizes.end() ? 0 : it->second;
}

// The globals LibTorch's TorchScript unpickler knows (besides the storage
// types and the classes of the archive's code) that its writer uses, each
// with the number of arguments it reads unchecked (std::out_of_range past
// them); -1 for any other.
int libtorch_global_arguments(const std::string& module, const std::string& name) {
  static const std::map<std::pair<std::string, std::string>, int> kGlobals = {
      {{"torch.jit._pickle", "restore_type_tag"}, 2}, {{"torch.jit._pickle", "build_intlist"}, 1},
      {{"torch.jit._pickle", "build_tensorlist"}, 1}, {{"torch.jit._pickle", "build_doublelist"}, 1},
      {{"torch.jit._pickle", "build_boollist"}, 1},   {{"torch._utils", "_rebuild_tensor_v2"}, 6},
      {{"collections", "OrderedDict"}, 0},            {{"torch", "device"}, 1},
      {{"builtins", "complex"}, 2}};
  auto it = kGlobals.find({module, name});
  return it == kGlobals.end() ? -1 : it->second;
}

// The globals that return their first argument (a list or dict, complete).
bool returns_first_argument(const std::string& module, const std::string& name) {
  return module == "torch.jit._pickle" && (name == "restore_type_tag" || name.compare(0, 6, "build_") == 0);
}

}  // namespace actkit
