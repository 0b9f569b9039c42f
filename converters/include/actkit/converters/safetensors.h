// Checkpoints in the safetensors format (Hugging Face's): an 8-byte header
// length, a JSON header naming each tensor's dtype, shape and byte range,
// then the tensors' raw bytes. Nothing in it is executed, and every number
// in it is checked before it is used (docs/formats.md, "safetensors").
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace actkit {

// Every tensor of the .safetensors file at `path`, by name, as contiguous
// CPU tensors of their own (fp32, fp16, bf16, F64, I64, I32, I16, I8, U8 and
// BOOL: real checkpoints hold integer buffers such as position_ids). When
// `metadata` is given it receives the header's "__metadata__" (empty when
// there is none). Throws FormatError naming the file (and the tensor) for: a
// file shorter than 8 bytes, a header length over 100 MiB or past the end of
// the file, a header that is not a JSON object of {name: {dtype, shape,
// data_offsets}} (no other fields; nested no deeper than that) plus an
// optional "__metadata__": {str: str}, an unknown dtype, a negative or
// overflowing shape, offsets that are not [begin, end] with begin <= end
// inside the data section, a byte length other than numel × element size,
// overlapping tensors, data bytes no tensor covers (the format requires the
// data section be covered whole), or a BOOL byte other than 0 or 1. IoError
// when the file cannot be read.
std::map<std::string, at::Tensor> read_safetensors(const std::string& path,
                                                   std::map<std::string, std::string>* metadata = nullptr);

// What a header says of one tensor.
struct SafetensorsEntry {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  std::string file;  // the file that holds it (in a folder, its shard)
};

// The tensors of the .safetensors file at `path`, by name, from its header
// alone: no tensor's bytes are read. Checks the header and throws as
// read_safetensors does (all but the BOOL bytes, which are data).
std::map<std::string, SafetensorsEntry> read_safetensors_header(const std::string& path);

// The tensors `names` of the .safetensors file at `path`, reading only their
// byte ranges (each straight into its tensor), so that a file's other
// tensors cost nothing however large. Checks and throws as read_safetensors
// (the whole header is checked), and FormatError naming the file and the
// tensor for a name the file does not hold.
std::map<std::string, at::Tensor> read_safetensors(const std::string& path, const std::set<std::string>& names);

// A model folder's tensors: DIR/model.safetensors when it exists, else the
// shards listed by DIR/model.safetensors.index.json ({"metadata": {...},
// "weight_map": {tensor: shard file}}). Every shard the map names is read,
// and each must hold exactly the tensors the map assigns to it (so every
// tensor of the map is present in its named shard, and none is in two
// shards). A shard name that is empty, holds a '/' or starts with '.' is
// refused, so every file read stays inside DIR. Throws FormatError naming
// the file and tensor for what read_safetensors refuses or the index
// contradicts; IoError when DIR holds neither file or one cannot be read.
std::map<std::string, at::Tensor> read_safetensors_folder(const std::string& dir);

// The tensors of a model folder (as read_safetensors_folder finds and checks
// them: the single file, else the index and every shard it names), from the
// headers alone; each entry names the file holding it. Throws as
// read_safetensors_folder.
std::map<std::string, SafetensorsEntry> read_safetensors_folder_header(const std::string& dir);

// The tensors `names` of a model folder, each read from its file's own byte
// range alone (shards holding none of them are not opened past their
// header). Throws as read_safetensors_folder, and FormatError naming the
// folder's file for a name it does not hold.
std::map<std::string, at::Tensor> read_safetensors_folder(const std::string& dir, const std::set<std::string>& names);

// Writes `tensors` (any dtype above, any device or strides: copied
// contiguous to the CPU) to `path` atomically (files::write_file_atomic:
// a failed write leaves the previous file whole), with "__metadata__":
// {"format": "pt"} plus `metadata` (an entry "format" there replaces "pt"),
// the tensors laid out in name order and the header padded with spaces to a
// multiple of 8 bytes, as the reference writer does. Throws InvalidInput
// naming the tensor for an unsupported dtype, an undefined or non-strided
// tensor, or the name "__metadata__", and for a name or metadata string that
// is not UTF-8; IoError naming the file when it cannot be written.
void write_safetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace actkit
