// The values of the state-dict unpickler (unpickler.cpp): what its stack,
// memo and containers hold. How deeply they may nest is bounded by
// kMaxPickleNesting, the bound archive_check's walk applies to every pickle
// first: a state dict nests 3 or 4 levels (a dict of tensors rebuilt from
// tuples), and 10^6 nested tuples in a 1.2 KB pickle would otherwise overflow
// the stack when they are freed.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pickle/pickle_check.h"

namespace actkit::pickle {

struct Dict;

// One value of the pickle machine. Containers and strings are shared, as in
// Python: the memo and the stack refer to one dict, which SETITEMS fills after
// the memo stored it, and a BINGET of a long string costs no copy (so memory
// stays proportional to the input).
struct Value {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kTuple, kDict, kGlobal, kTensor };
  Kind kind = Kind::kNone;
  int64_t integer = 0;                              // kBool, kInt
  double real = 0;                                  // kFloat
  std::shared_ptr<const std::string> text;          // kString; kGlobal: "module.name"
  std::shared_ptr<const std::vector<Value>> items;  // kTuple
  std::shared_ptr<Dict> dict;                       // kDict
  at::Tensor tensor;                                // kTensor: a storage (1-D) or a tensor
  uint32_t depth = 0;                               // kTuple: 1 + the deepest item's (a dict keeps its own)

  static Value of_int(int64_t v) {
    Value x;
    x.kind = Kind::kInt;
    x.integer = v;
    return x;
  }
  static Value of_string(std::string s, Kind kind = Kind::kString) {
    Value x;
    x.kind = kind;
    x.text = std::make_shared<const std::string>(std::move(s));
    return x;
  }
  // Throws FormatError when the tuple would nest kMaxPickleNesting deep.
  static Value of_tuple(std::vector<Value> items);
  static Value of_tensor(at::Tensor t) {
    Value x;
    x.kind = Kind::kTensor;
    x.tensor = std::move(t);
    return x;
  }
  static Value new_dict();
  // How deeply this value nests: 1 + its deepest item's for containers.
  uint32_t nesting() const;
  bool is_global(const char* name) const { return kind == Kind::kGlobal && *text == name; }
};

// A Python dict with str keys (the only keys a state dict has), in insertion
// order; assigning an existing key replaces its value, as in Python.
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;
  std::unordered_map<std::string, size_t> index;
  uint32_t depth = 0;  // the deepest value set in it

  // Throws FormatError when the value would nest kMaxPickleNesting deep.
  void set(const std::string& key, Value value);
};

}  // namespace actkit::pickle
