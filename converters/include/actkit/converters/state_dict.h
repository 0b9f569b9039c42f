// State dicts in torch.save's format: the file Python's
// torch.save(model.state_dict()) writes, and torch.load reads.
#pragma once

#include <torch/nn.h>
#include <torch/ordered_dict.h>

#include <string>
#include <vector>

namespace actkit {

// Writes every parameter and buffer of `module` (with its full dotted name)
// as a {name: tensor} dict to `path`, atomically (files::write_file_atomic:
// a failed write leaves the previous file whole). Throws IoError naming the
// file and the cause if it cannot be written.
void save_state_dict(const torch::nn::Module& module, const std::string& path);

// Writes `tensors` as a {name: tensor} dict to `path`, in the same format
// (one pipeline stage's share of a model, say), atomically. Throws IoError
// naming the file and the cause if it cannot be written.
void save_tensors(const torch::OrderedDict<std::string, at::Tensor>& tensors, const std::string& path);

// The bytes save_tensors writes; of `module`, the bytes save_state_dict
// writes.
std::vector<char> state_dict_bytes(const torch::OrderedDict<std::string, at::Tensor>& tensors);
std::vector<char> state_dict_bytes(const torch::nn::Module& module);

// The {name: tensor} entries of a torch.save file, in the file's order, as
// CPU tensors. Reads what Python's torch.save writes for
// `model.state_dict()` (a collections.OrderedDict; its `_metadata` attribute,
// module versions for Python's loading hooks, is read past and dropped), for
// a plain dict of tensors, and what save_state_dict writes. Tensors may be
// views of one storage, as in the file. Throws actkit::FormatError for a file
// that cannot be opened, is not a torch.save zip archive (the message says
// when it is the legacy pre-1.6 format), holds anything but a {str: tensor}
// dict, is truncated or inconsistent, holds a record whose bytes do not
// match its CRC-32 (archive_check.h), or nests values more than 64 deep; it
// never reads outside the file's records (docs/formats.md, "State dicts").
// IoError when it cannot be read.
torch::OrderedDict<std::string, at::Tensor> read_state_dict(const std::string& path);

// The same over a file's bytes, read whole and checked already
// (read_checked_archive or check_archive: this does not check the CRCs
// again); `where` names the file in the FormatError it throws.
torch::OrderedDict<std::string, at::Tensor> state_dict_from_archive(const std::string& file, const std::string& where);

struct LoadReport {
  std::vector<std::string> missing;     // in the module, not in the file
  std::vector<std::string> unexpected;  // in the file, not in the module
  size_t loaded = 0;
};

// Copies the tensors of a state-dict file (any file read_state_dict reads)
// into `module`'s parameters and buffers of the same name (values are copied;
// storage is unchanged, so a converted model stays shared). With `strict`,
// missing or unexpected names throw. Throws actkit::FormatError for what
// read_state_dict rejects, or a shape mismatch (naming the tensor); the
// module is untouched when the file is rejected.
LoadReport load_state_dict(torch::nn::Module& module, const std::string& path, bool strict = true);

}  // namespace actkit
