// The globals a state-dict pickle may name, as the pickle check
// (pickle_check.h) needs them: storage element sizes, the LibTorch
// unpickler's known globals and how many arguments each reads.
#pragma once

#include <cstdint>
#include <string>

namespace actkit {

// Element sizes of the storage types torch.save and LibTorch name
// (GLOBAL torch.<Type>Storage); 0 for any other.
uint64_t storage_element_size(const std::string& type);

// The number of arguments LibTorch's unpickler reads unchecked for a
// global its writer uses; -1 for any other.
int libtorch_global_arguments(const std::string& module, const std::string& name);

// Whether the global returns its first argument (a list or dict, complete).
bool returns_first_argument(const std::string& module, const std::string& name);

}  // namespace actkit
