// The pickle inside a torch.save file, read as a {str: tensor} dict.
//
// A torch.save file is a zip archive: <archive>/data.pkl is a pickle of the
// saved object, and each tensor storage is a raw little-endian record
// <archive>/data/<key>. LibTorch's own reader (torch::pickle_load, i.e.
// torch::jit::Unpickler) cannot read what Python's
// torch.save(model.state_dict()) writes: state_dict() returns a
// collections.OrderedDict, which that unpickler turns into None (it only
// expects OrderedDict as a tensor's empty backward-hooks argument), and the
// dict's `_metadata` attribute arrives as a BUILD opcode it runs as a
// function call. It also sizes each storage from the pickle's element count
// without comparing it to the record it reads, so a corrupt file makes it read
// past the record. Neither behaviour can be changed from outside (its global
// resolution is not configurable), so ACTkit has its own unpickler for
// the part of the pickle language a state dict uses, with every read checked,
// and takes the zip container from LibTorch (PyTorchStreamReader).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/ordered_dict.h>

#include <cstdint>
#include <functional>
#include <string>

namespace actkit {

// `load(key, dtype, numel)` returns the storage record `key` as a 1-D
// tensor of `numel` elements, or throws FormatError.
using StorageLoader = std::function<at::Tensor(const std::string&, at::ScalarType, int64_t)>;

// The {name: tensor} entries of `pickle` (protocols 2 to 5), in its order.
// Throws FormatError naming the byte offset for a pickle that does not
// parse, holds anything but a {str: tensor} dict, or nests values more
// than 64 deep.
torch::OrderedDict<std::string, at::Tensor> unpickle_state_dict(const std::string& pickle, const StorageLoader& load);

}  // namespace actkit
