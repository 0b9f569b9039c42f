#include "actkit/converters/state_dict.h"

#include <torch/torch.h>

#include <c10/util/StringUtil.h>
#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "actkit/converters/archive_check.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "pickle/unpickler.h"

namespace actkit {
namespace {

std::map<std::string, at::Tensor> named_state(const torch::nn::Module& module) {
  std::map<std::string, at::Tensor> state;
  for (const auto& p : module.named_parameters()) state[p.key()] = p.value();
  for (const auto& b : module.named_buffers()) state[b.key()] = b.value();
  return state;
}


// The first bytes of a legacy (pre-1.6, or _use_new_zipfile_serialization=False)
// torch.save file: a pickled magic number, PROTO 2 then LONG1 0x1950a86a20f9469cfc6c.
bool is_legacy_torch_save(const std::string& path) {
  static const unsigned char kMagic[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8};
  char head[sizeof(kMagic)] = {};
  std::ifstream in(path, std::ios::binary);
  return in.read(head, sizeof(head)) && std::memcmp(head, kMagic, sizeof(kMagic)) == 0;
}

}  // namespace

void save_state_dict(const torch::nn::Module& module, const std::string& path) {
  const std::vector<char> bytes = state_dict_bytes(module);
  files::write_file_atomic(path, bytes.data(), bytes.size());
}

std::vector<char> state_dict_bytes(const torch::nn::Module& module) {
  torch::OrderedDict<std::string, at::Tensor> tensors;
  for (const auto& [name, tensor] : named_state(module)) tensors.insert(name, tensor);
  return state_dict_bytes(tensors);
}

std::vector<char> state_dict_bytes(const torch::OrderedDict<std::string, at::Tensor>& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& item : tensors) dict.insert(item.key(), item.value().detach().cpu());
  return torch::pickle_save(c10::IValue(dict));
}

void save_tensors(const torch::OrderedDict<std::string, at::Tensor>& tensors, const std::string& path) {
  const std::vector<char> bytes = state_dict_bytes(tensors);
  // Whole or not at all: a full disk leaves the previous file as it was.
  files::write_file_atomic(path, bytes.data(), bytes.size());
}

torch::OrderedDict<std::string, at::Tensor> read_state_dict(const std::string& path) {
  const std::string where = c10::str("read_state_dict: ", path);
  if (!std::ifstream(path, std::ios::binary)) throw FormatError(c10::str(where, ": cannot open"));
  if (is_legacy_torch_save(path)) {
    throw FormatError(c10::str(where, " is in torch.save's legacy format; save it again with torch.save's default "
                                      "(zip) format"));
  }
  // Read whole and every record's CRC-32 checked, before anything is used.
  return state_dict_from_archive(read_checked_archive(path), where);
}

torch::OrderedDict<std::string, at::Tensor> state_dict_from_archive(const std::string& file, const std::string& where) {
  try {
    std::istringstream stream(file);
    caffe2::serialize::PyTorchStreamReader archive(&stream);
    // Newer writers record their byte order; records are read as they are.
    if (archive.hasRecord("byteorder")) {
      auto [order, order_size] = archive.getRecord("byteorder");
      if (std::string(static_cast<const char*>(order.get()), order_size) != "little") {
        throw FormatError("the tensors are stored big-endian");
      }
    }
    // A storage record holds exactly the raw bytes of its numel elements; a
    // shorter one would leave the tensor reading past it.
    auto load_storage = [&](const std::string& key, at::ScalarType dtype, int64_t numel) {
      const auto options = at::TensorOptions().dtype(dtype);
      if (numel == 0) return at::empty({0}, options);
      size_t nbytes = 0;
      if (__builtin_mul_overflow(size_t(numel), c10::elementSize(dtype), &nbytes)) {
        throw FormatError(c10::str("storage ", key, " is too large"));
      }
      const std::string record = "data/" + key;
      if (!archive.hasRecord(record)) throw FormatError(c10::str("storage record ", record, " is missing"));
      auto [data, size] = archive.getRecord(record);
      if (size != nbytes) {
        throw FormatError(c10::str("storage record ", record, " holds ", size, " bytes, not the ", nbytes, " of its ",
                                   numel, " elements"));
      }
      at::Storage storage(at::Storage::use_byte_size_t(), nbytes, std::move(data), /*allocator=*/nullptr,
                          /*resizable=*/false);
      return at::empty({0}, options).set_(storage, 0, {numel}, {1});
    };
    if (!archive.hasRecord("data.pkl")) throw FormatError("the archive has no data.pkl");
    auto [pickle_data, pickle_size] = archive.getRecord("data.pkl");
    const std::string pickle(static_cast<const char*>(pickle_data.get()), pickle_size);

    return unpickle_state_dict(pickle, load_storage);
  } catch (const FormatError& e) {
    throw FormatError(c10::str(where, ": ", e.what()));
  } catch (const c10::Error& e) {  // from the zip reader: not a zip, a missing or unreadable record, ...
    throw FormatError(c10::str(where, " is not a torch.save file: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {  // std::bad_alloc for a record claiming an absurd size, ...
    throw FormatError(c10::str(where, " is not a torch.save file: ", e.what()));
  }
}

LoadReport load_state_dict(torch::nn::Module& module, const std::string& path, bool strict) {
  const torch::OrderedDict<std::string, at::Tensor> file = read_state_dict(path);
  std::map<std::string, at::Tensor> state = named_state(module);

  // Check everything before copying anything, so a rejected file leaves the
  // module as it was.
  LoadReport report;
  std::set<std::string> seen;
  for (const auto& item : file) {
    auto it = state.find(item.key());
    if (it == state.end()) {
      report.unexpected.push_back(item.key());
      continue;
    }
    if (item.value().sizes() != it->second.sizes()) {
      throw FormatError(c10::str("load_state_dict: ", item.key(), " has shape ", item.value().sizes(),
                                 " in the file, ", it->second.sizes(), " in the model"));
    }
    seen.insert(item.key());
  }
  for (const auto& [name, tensor] : state) {
    if (!seen.count(name)) report.missing.push_back(name);
  }
  if (strict && (!report.missing.empty() || !report.unexpected.empty())) {
    throw FormatError(c10::str("load_state_dict: ", report.missing.size(), " missing and ", report.unexpected.size(),
                               " unexpected entries (first missing: ",
                               report.missing.empty() ? "-" : report.missing.front(), ", first unexpected: ",
                               report.unexpected.empty() ? "-" : report.unexpected.front(), ")"));
  }

  torch::NoGradGuard no_grad;
  for (const auto& item : file) {
    auto it = state.find(item.key());
    if (it == state.end()) continue;
    it->second.copy_(item.value());
    ++report.loaded;
  }
  return report;
}

}  // namespace actkit
