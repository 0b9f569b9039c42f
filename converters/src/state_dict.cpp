#include "actkit/converters/state_dict.h"

#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "actkit/core/errors.h"

namespace actkit {
namespace {

std::map<std::string, at::Tensor> named_state(const torch::nn::Module& module) {
  std::map<std::string, at::Tensor> state;
  for (const auto& p : module.named_parameters()) state[p.key()] = p.value();
  for (const auto& b : module.named_buffers()) state[b.key()] = b.value();
  return state;
}

}  // namespace

void save_state_dict(const torch::nn::Module& module, const std::string& path) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : named_state(module)) dict.insert(name, tensor.detach().cpu());
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.close();
  if (!out) throw Error(c10::str("save_state_dict: cannot write ", path));
}

LoadReport load_state_dict(torch::nn::Module& module, const std::string& path, bool strict) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(c10::str("load_state_dict: cannot open ", path));
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw FormatError(c10::str("load_state_dict: ", path, " is not a torch.save file: ", e.what()));
  }
  if (!value.isGenericDict()) throw FormatError(c10::str("load_state_dict: ", path, " does not hold a dict"));

  std::map<std::string, at::Tensor> state = named_state(module);
  LoadReport report;
  std::set<std::string> seen;
  torch::NoGradGuard no_grad;
  for (const auto& item : value.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor()) {
      throw FormatError(c10::str("load_state_dict: ", path, " holds a non {str: tensor} entry"));
    }
    const std::string name = item.key().toStringRef();
    auto it = state.find(name);
    if (it == state.end()) {
      report.unexpected.push_back(name);
      continue;
    }
    const at::Tensor src = item.value().toTensor();
    if (src.sizes() != it->second.sizes()) {
      throw FormatError(c10::str("load_state_dict: ", name, " has shape ", src.sizes(), " in the file, ",
                                 it->second.sizes(), " in the model"));
    }
    it->second.copy_(src);
    seen.insert(name);
    ++report.loaded;
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
  return report;
}

}  // namespace actkit
