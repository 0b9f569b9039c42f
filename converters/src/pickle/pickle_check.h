// A bounded walk over a pickle, before any unpickler sees it.
//
// ACTkit's own unpickler (unpickler.h) bounds itself, but the optimizer state
// in checkpoints (pipeline --resume, dp's optimizer-rank*.pt) is read by
// LibTorch's TorchScript unpickler (InputArchive::load_from), which is not
// depth-bounded and, in LibTorch 1.13, trusts the pickle: it pops an empty
// stack, reads a dict's value past the stack's end, sizes a memo from any id
// the pickle names, and sizes a storage from the pickle's element count
// without comparing it to its record. So archive_check runs this over every
// pickle record first: it follows the opcodes torch.save and LibTorch write,
// keeping only the shape of each value (its kind and how deeply it nests),
// never the value, and refuses what either unpickler could trip over.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "pickle/code_check.h"

namespace actkit {

// How deeply pickled values may nest, for every reader of ACTkit's files (a
// state dict nests 3 or 4 levels, LibTorch's optimizer state about 10): a
// 1.2 KB pickle of 10^6 nested tuples would otherwise overflow the stack of an
// unpickler that builds, hashes or frees values recursively.
constexpr uint32_t kMaxPickleNesting = 64;

// LibTorch's zip reader (miniz) finds a record by its name in any case:
// `name` with A-Z lowered, the key records are known by here.
std::string lowercase_name(std::string name);

// An archive's records by lowercase_name: each one's uncompressed size in bytes.
using RecordSizes = std::map<std::string, uint64_t>;

// Whether a record of this name is a pickle (data.pkl, constants.pkl,
// code/*.debug_pkl, ...): its name ends in "pkl".
bool is_pickle_record(const std::string& name);

// Walks `pickle`, the record `name` of an archive whose records are
// `records`, without building any value. Throws FormatError naming the record
// and the byte offset when the pickle reads past its end, has no STOP, uses
// an opcode outside those torch.save and LibTorch write (pickle protocols 2
// to 5), underflows its stack or a MARK, gets a memo entry never put (or one
// still being filled: no value may contain itself), puts one out of order,
// mutates a value other than a list or dict it is building, calls something
// that is not a global, nests values more than kMaxPickleNesting deep, or
// names a storage (a persistent id) that is not ('storage', torch.<T>Storage,
// key, location, numel) with numel elements in the record <stem>/<key> beside
// it, or a tensor (_rebuild_tensor_v2) reaching past its storage.
//
// `code`: for an archive LibTorch's TorchScript loader reads (it has
// constants.pkl or code), the classes its code defines (code_check.h), else
// null. Every global must then be one of those or one that loader knows,
// called with as many arguments as it reads, and every object of a class
// made from a dict holding each attribute the class declares: that loader
// throws something other than c10::Error otherwise. Memory and time are
// linear in the pickle's size.
void check_pickle(const std::string& pickle, const std::string& name, const RecordSizes& records,
                  const ModuleCode* code);

}  // namespace actkit
