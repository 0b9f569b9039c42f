// State dicts in torch.save's format: the file Python's
// torch.save(model.state_dict()) writes, and torch.load reads.
#pragma once

#include <torch/nn.h>

#include <string>
#include <vector>

namespace actkit {

// Writes every parameter and buffer of `module` (with its full dotted name)
// as a {name: tensor} dict to `path`. Throws actkit::Error if the file cannot
// be written.
void save_state_dict(const torch::nn::Module& module, const std::string& path);

struct LoadReport {
  std::vector<std::string> missing;     // in the module, not in the file
  std::vector<std::string> unexpected;  // in the file, not in the module
  size_t loaded = 0;
};

// Copies the tensors of a state-dict file into `module`'s parameters and
// buffers of the same name (values are copied; storage is unchanged, so a
// converted model stays shared). With `strict`, missing or unexpected names
// throw. Throws actkit::FormatError for an unreadable file, a file that is
// not a {str: tensor} dict, or a shape mismatch (naming the tensor).
LoadReport load_state_dict(torch::nn::Module& module, const std::string& path, bool strict = true);

}  // namespace actkit
