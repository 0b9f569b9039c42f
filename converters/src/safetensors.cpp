#include "actkit/converters/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/StringUtil.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <tuple>
#include <vector>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"

// The tensors' bytes are copied as they lie in memory; the format is
// little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors.cpp assumes a little-endian host");

namespace actkit {
namespace {
// Named, so that no helper meets another file's in a unity batch.
namespace safetensors_impl {

using nlohmann::json;

// The reference reader's bound (100 MB), rounded up: a header length is
// checked against it before anything is allocated for it.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;
// The deepest a valid header nests: {name: {"shape": [dim]}}. Bounding it
// keeps a hostile header of nested brackets from building gigabytes of
// JSON values.
constexpr int kMaxHeaderDepth = 2;
// An index nests one level more in "metadata" (HF writes {"total_size": n}).
constexpr int kMaxIndexDepth = 3;

struct Dtype {
  const char* name;
  at::ScalarType type;
};
constexpr Dtype kDtypes[] = {{"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
                             {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
                             {"U8", at::kByte},    {"BOOL", at::kBool}};

const Dtype* dtype_named(const std::string& name) {
  for (const Dtype& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

const Dtype* dtype_of(at::ScalarType type) {
  for (const Dtype& d : kDtypes) {
    if (type == d.type) return &d;
  }
  return nullptr;
}

// A file opened for reading at offsets: the header first, its length
// checked, then each tensor straight into its own storage, so no byte is
// read twice or held twice.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail("cannot open", errno);
    struct stat st;
    if (::fstat(fd_, &st) != 0) fail("cannot stat", errno);
    if (!S_ISREG(st.st_mode)) fail("cannot read", S_ISDIR(st.st_mode) ? EISDIR : EINVAL);
    size_ = uint64_t(st.st_size);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }

  // Exactly `len` bytes from `offset` (the caller has checked the range
  // against size()); a file that shrank meanwhile is a short read.
  void read(uint64_t offset, void* into, uint64_t len) const {
    auto* out = static_cast<char*>(into);
    for (uint64_t done = 0; done < len;) {
      const ssize_t n = ::pread(fd_, out + done, size_t(std::min<uint64_t>(len - done, uint64_t(1) << 30)),
                                off_t(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("cannot read", errno);
      if (n == 0) {
        throw IoError(c10::str("cannot read ", path_, ": it ended at byte ", offset + done, " of ", size_), 0);
      }
      done += uint64_t(n);
    }
  }

 private:
  [[noreturn]] void fail(const char* what, int error_number) const {
    throw IoError(c10::str(what, " ", path_, ": ", std::strerror(error_number)), error_number);
  }

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// `text` parsed as a JSON object nested at most `max_depth` containers
// below the top one, with no key twice in one object (readers that keep
// the first and readers that keep the last would see different files).
// Throws FormatError prefixed by `where`.
json parse_object(const std::string& text, const std::string& where, int max_depth) {
  // Refused before parsing: a header must be an object (so the reference
  // reader checks its first byte too).
  if (text.empty() || text[0] != '{') throw FormatError(c10::str(where, " is not a JSON object"));
  std::vector<std::set<std::string>> keys;  // per open object
  auto check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth > max_depth) throw FormatError(c10::str(where, " nests deeper than ", max_depth + 1, " levels"));
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second) {
          throw FormatError(c10::str(where, " has the key \"", parsed.get<std::string>(), "\" twice in one object"));
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text, check);
  } catch (const json::exception& e) {  // not JSON, not UTF-8, trailing bytes, ...
    throw FormatError(c10::str(where, " is not JSON: ", e.what()));
  }
}

// One tensor as the header describes it, checked.
struct Entry {
  std::string name;
  at::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

Entry parse_entry(const std::string& name, const json& info, uint64_t data_size, const std::string& where) {
  const std::string at_tensor = c10::str(where, ": tensor \"", name, "\"");
  if (!info.is_object()) throw FormatError(c10::str(at_tensor, " is not an object"));
  for (const auto& [key, value] : info.items()) {
    // An unknown field may be an extension (quantization, say) that changes
    // what the bytes mean: refused, not read past.
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      throw FormatError(c10::str(at_tensor, " has an unknown field \"", key, "\""));
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!info.contains(key)) throw FormatError(c10::str(at_tensor, " has no \"", key, "\""));
  }
  Entry e;
  e.name = name;
  const json& dtype = info["dtype"];
  const Dtype* d = dtype.is_string() ? dtype_named(dtype.get<std::string>()) : nullptr;
  if (d == nullptr) throw FormatError(c10::str(at_tensor, " has an unknown dtype ", dtype.dump()));
  e.type = d->type;

  const json& shape = info["shape"];
  if (!shape.is_array()) throw FormatError(c10::str(at_tensor, ": the shape is not a list"));
  int64_t numel = 1;
  for (const json& dim : shape) {
    // JSON's unsigned integers only: a negative, fractional or out-of-range
    // number parses as another kind.
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > uint64_t(INT64_MAX)) {
      throw FormatError(c10::str(at_tensor, " has a dimension that is not a non-negative int64: ", dim.dump()));
    }
    e.shape.push_back(int64_t(dim.get<uint64_t>()));
    if (__builtin_mul_overflow(numel, e.shape.back(), &numel)) {
      throw FormatError(c10::str(at_tensor, ": its shape ", shape.dump(), " has more elements than an int64 counts"));
    }
  }

  const json& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    throw FormatError(c10::str(at_tensor, ": data_offsets ", offsets.dump(), " is not [begin, end]"));
  }
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.begin > e.end || e.end > data_size) {
    throw FormatError(c10::str(at_tensor, ": data_offsets [", e.begin, ", ", e.end, "] are not a range inside the ",
                               data_size, " data bytes"));
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(uint64_t(numel), uint64_t(c10::elementSize(e.type)), &nbytes) ||
      nbytes != e.end - e.begin) {
    throw FormatError(c10::str(at_tensor, " holds ", e.end - e.begin, " bytes, not the ", numel, " × ",
                               c10::elementSize(e.type), " of its shape ", shape.dump(), " and dtype ", d->name));
  }
  return e;
}

// The header's tensors, checked one by one and then together: sorted by
// offset they must tile the data section exactly, as the format requires.
std::vector<Entry> parse_header(const json& header, uint64_t data_size, const std::string& where,
                                std::map<std::string, std::string>* metadata) {
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) throw FormatError(c10::str(where, ": __metadata__ is not an object"));
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) throw FormatError(c10::str(where, ": __metadata__ \"", key, "\" is not a string"));
        if (metadata != nullptr) (*metadata)[key] = value.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(name, info, data_size, where));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered) {
      throw FormatError(c10::str(where, ": tensor \"", e.name, "\" [", e.begin, ", ", e.end, ") overlaps tensor \"",
                                 previous->name, "\" [", previous->begin, ", ", previous->end, ")"));
    }
    if (e.begin > covered) {
      throw FormatError(c10::str(where, ": data bytes [", covered, ", ", e.begin, ") before tensor \"", e.name,
                                 "\" belong to no tensor"));
    }
    covered = e.end;
    previous = &e;
  }
  if (covered != data_size) {
    throw FormatError(c10::str(where, ": data bytes [", covered, ", ", data_size, ") belong to no tensor"));
  }
  return entries;
}

// A small JSON file (an index) read whole, its size bounded like a header.
json read_json_file(const std::string& path, const std::string& where, int max_depth) {
  const InputFile file(path);
  if (file.size() > kMaxHeaderBytes) {
    throw FormatError(c10::str(where, " is ", file.size(), " bytes, over the ", kMaxHeaderBytes, " allowed"));
  }
  std::string text(size_t(file.size()), '\0');
  file.read(0, text.data(), text.size());
  return parse_object(text, where, max_depth);
}

bool valid_shard_name(const std::string& name) {
  return !name.empty() && name[0] != '.' && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// Whether `s` is valid UTF-8, which JSON strings must be (nlohmann's dump
// throws otherwise).
bool utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

// A file's checked header: its tensors, and where their data starts.
struct Header {
  std::vector<Entry> entries;
  uint64_t data_start = 0;
};

// Reads and checks the length and header of `file` (nothing past them).
Header read_header(const InputFile& file, const std::string& where, std::map<std::string, std::string>* metadata) {
  if (file.size() < 8) throw FormatError(c10::str(where, " is ", file.size(), " bytes, shorter than a header length"));
  unsigned char length_bytes[8];
  file.read(0, length_bytes, 8);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | length_bytes[i];
  if (header_size > kMaxHeaderBytes) {
    throw FormatError(c10::str(where, ": the header length ", header_size, " is over the ", kMaxHeaderBytes,
                               " allowed"));
  }
  if (header_size > file.size() - 8) {
    throw FormatError(c10::str(where, ": the header length ", header_size, " reaches past the end of the file (",
                               file.size(), " bytes)"));
  }
  std::string text(size_t(header_size), '\0');
  file.read(8, text.data(), header_size);
  Header h;
  h.data_start = 8 + header_size;
  h.entries = parse_header(parse_object(text, c10::str(where, ": the header"), kMaxHeaderDepth),
                           file.size() - h.data_start, where, metadata);
  return h;
}

// The tensor of entry `e`: its own byte range read straight into its storage.
at::Tensor read_tensor(const InputFile& file, const Header& h, const Entry& e, const std::string& where) {
  at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.type));
  if (e.end > e.begin) file.read(h.data_start + e.begin, t.data_ptr(), e.end - e.begin);
  if (e.type == at::kBool) {
    // Any byte but 0 or 1 is not a bool, and LibTorch's kernels assume it never is.
    const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
    if (std::any_of(bytes, bytes + t.numel(), [](uint8_t b) { return b > 1; })) {
      throw FormatError(c10::str(where, ": tensor \"", e.name, "\" holds a BOOL byte other than 0 or 1"));
    }
  }
  return t;
}

}  // namespace safetensors_impl
}  // namespace

std::map<std::string, at::Tensor> read_safetensors(const std::string& path,
                                                   std::map<std::string, std::string>* metadata) {
  using namespace safetensors_impl;
  const std::string where = c10::str("read_safetensors: ", path);
  if (metadata != nullptr) metadata->clear();
  const InputFile file(path);
  const Header header = read_header(file, where, metadata);
  std::map<std::string, at::Tensor> tensors;
  for (const Entry& e : header.entries) tensors.emplace(e.name, read_tensor(file, header, e, where));
  return tensors;
}

std::map<std::string, at::Tensor> read_safetensors(const std::string& path, const std::set<std::string>& names) {
  using namespace safetensors_impl;
  const std::string where = c10::str("read_safetensors: ", path);
  const InputFile file(path);
  const Header header = read_header(file, where, nullptr);
  std::map<std::string, const Entry*> by_name;
  for (const Entry& e : header.entries) by_name.emplace(e.name, &e);
  std::map<std::string, at::Tensor> tensors;
  for (const std::string& name : names) {
    const auto it = by_name.find(name);
    if (it == by_name.end()) throw FormatError(c10::str(where, " holds no tensor \"", name, "\""));
    tensors.emplace(name, read_tensor(file, header, *it->second, where));
  }
  return tensors;
}

std::map<std::string, SafetensorsEntry> read_safetensors_header(const std::string& path) {
  using namespace safetensors_impl;
  const InputFile file(path);
  const Header header = read_header(file, c10::str("read_safetensors: ", path), nullptr);
  std::map<std::string, SafetensorsEntry> out;
  for (const Entry& e : header.entries) out.emplace(e.name, SafetensorsEntry{e.type, e.shape, path});
  return out;
}

std::map<std::string, SafetensorsEntry> read_safetensors_folder_header(const std::string& dir) {
  using namespace safetensors_impl;
  const std::string single = dir + "/model.safetensors";
  // The single file first, as transformers' loader looks for it first.
  if (files::is_regular_file(single)) return read_safetensors_header(single);
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (!files::exists(index_path)) {
    throw IoError(c10::str("read_safetensors_folder: ", dir,
                           " holds neither model.safetensors nor model.safetensors.index.json"),
                  ENOENT);
  }
  const std::string where = c10::str("read_safetensors_folder: ", index_path);
  const json index = read_json_file(index_path, where, kMaxIndexDepth);
  if (index.contains("metadata") && !index["metadata"].is_object()) {
    throw FormatError(c10::str(where, ": \"metadata\" is not an object"));
  }
  if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw FormatError(c10::str(where, " has no \"weight_map\" object"));
  }
  std::map<std::string, std::string> shard_of;  // tensor -> shard
  std::map<std::string, std::set<std::string>> names_in;  // shard -> its tensors
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) throw FormatError(c10::str(where, ": tensor \"", name, "\" maps to ", shard.dump()));
    const std::string file = shard.get<std::string>();
    if (!valid_shard_name(file)) {
      throw FormatError(c10::str(where, ": tensor \"", name, "\" maps to \"", file,
                                 "\", not a file name inside the folder"));
    }
    shard_of[name] = file;
    names_in[file].insert(name);
  }

  std::map<std::string, SafetensorsEntry> entries;
  for (const auto& [file, names] : names_in) {
    const std::string shard_path = dir + "/" + file;
    if (!files::is_regular_file(shard_path)) {
      throw FormatError(c10::str(where, ": shard ", file, " (of tensor \"", *names.begin(), "\") is not in ", dir));
    }
    for (auto& [name, entry] : read_safetensors_header(shard_path)) {
      auto it = shard_of.find(name);
      if (it == shard_of.end()) {
        throw FormatError(c10::str(where, ": shard ", file, " holds tensor \"", name, "\", which the weight map omits"));
      }
      if (it->second != file) {
        throw FormatError(c10::str(where, ": shard ", file, " holds tensor \"", name, "\", which the weight map places in ",
                                   it->second));
      }
      entries.emplace(name, std::move(entry));
    }
    for (const std::string& name : names) {
      if (!entries.count(name)) {
        throw FormatError(c10::str(where, ": tensor \"", name, "\" is missing from its shard ", shard_path));
      }
    }
  }
  return entries;
}

std::map<std::string, at::Tensor> read_safetensors_folder(const std::string& dir, const std::set<std::string>& names) {
  const std::map<std::string, SafetensorsEntry> entries = read_safetensors_folder_header(dir);
  std::map<std::string, std::set<std::string>> wanted;  // file -> the names read from it
  for (const std::string& name : names) {
    const auto it = entries.find(name);
    if (it == entries.end()) {
      const std::string single = dir + "/model.safetensors";
      throw FormatError(c10::str("read_safetensors_folder: ",
                                 files::is_regular_file(single) ? single : dir + "/model.safetensors.index.json",
                                 " holds no tensor \"", name, "\""));
    }
    wanted[it->second.file].insert(name);
  }
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [file, in_file] : wanted) tensors.merge(read_safetensors(file, in_file));
  return tensors;
}

std::map<std::string, at::Tensor> read_safetensors_folder(const std::string& dir) {
  const std::string single = dir + "/model.safetensors";
  if (files::is_regular_file(single)) return read_safetensors(single);
  std::set<std::string> names;
  for (const auto& [name, entry] : read_safetensors_folder_header(dir)) names.insert(name);
  return read_safetensors_folder(dir, names);
}

void write_safetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  using namespace safetensors_impl;
  const std::string where = c10::str("write_safetensors: ", path);
  json header = json::object();
  json& meta = header["__metadata__"] = {{"format", "pt"}};
  for (const auto& [key, value] : metadata) {
    if (!utf8(key) || !utf8(value)) throw InvalidInput(c10::str(where, ": a metadata entry is not UTF-8"));
    meta[key] = value;
  }
  std::vector<at::Tensor> contiguous;
  uint64_t data_size = 0;
  for (const auto& [name, tensor] : tensors) {  // std::map: name order
    const std::string at_tensor = c10::str(where, ": tensor \"", name, "\"");
    if (name == "__metadata__") throw InvalidInput(c10::str(where, ": no tensor may be named __metadata__"));
    if (!utf8(name)) throw InvalidInput(c10::str(where, ": a tensor name is not UTF-8"));
    if (!tensor.defined()) throw InvalidInput(c10::str(at_tensor, " is undefined"));
    if (tensor.layout() != at::kStrided) throw InvalidInput(c10::str(at_tensor, " is not a strided (dense) tensor"));
    const Dtype* d = dtype_of(tensor.scalar_type());
    if (d == nullptr) {
      throw InvalidInput(c10::str(at_tensor, " has dtype ", tensor.scalar_type(), ", which safetensors here does not "
                                  "store (fp64, fp32, fp16, bf16, int64, int32, int16, int8, uint8, bool)"));
    }
    contiguous.push_back(tensor.detach().to(at::kCPU).contiguous());
    const uint64_t nbytes = uint64_t(contiguous.back().nbytes());
    header[name] = {{"dtype", d->name}, {"shape", tensor.sizes().vec()}, {"data_offsets", {data_size, data_size + nbytes}}};
    data_size += nbytes;
  }
  std::string text = header.dump();
  // Padded so the data starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');

  std::string bytes;
  bytes.reserve(size_t(8 + text.size() + data_size));
  for (int i = 0; i < 8; ++i) bytes.push_back(char((uint64_t(text.size()) >> (8 * i)) & 0xff));
  bytes += text;
  for (const at::Tensor& t : contiguous) {
    if (t.nbytes() > 0) bytes.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  // Whole or not at all: a full disk leaves the previous file as it was.
  files::write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace actkit
