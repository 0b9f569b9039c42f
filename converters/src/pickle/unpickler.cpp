#include "pickle/unpickler.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "actkit/core/errors.h"
#include "pickle/pickle_check.h"
#include "pickle/pickle_input.h"
#include "pickle/pickle_value.h"

namespace actkit {
namespace {

using pickle::Dict;
using pickle::Value;

// Element types of the storage classes torch.save names (torch.FloatStorage, ...).
std::optional<at::ScalarType> storage_dtype(const std::string& global) {
  static const std::map<std::string, at::ScalarType> kTypes = {
      {"torch.FloatStorage", at::kFloat},
      {"torch.DoubleStorage", at::kDouble},
      {"torch.HalfStorage", at::kHalf},
      {"torch.BFloat16Storage", at::kBFloat16},
      {"torch.LongStorage", at::kLong},
      {"torch.IntStorage", at::kInt},
      {"torch.ShortStorage", at::kShort},
      {"torch.CharStorage", at::kChar},
      {"torch.ByteStorage", at::kByte},
      {"torch.BoolStorage", at::kBool},
      {"torch.ComplexFloatStorage", at::kComplexFloat},
      {"torch.ComplexDoubleStorage", at::kComplexDouble},
  };
  auto it = kTypes.find(global);
  if (it == kTypes.end()) return std::nullopt;
  return it->second;
}

// The functions a state-dict pickle may call (REDUCE). Anything else is
// refused when the GLOBAL opcode names it, so the message names it too.
bool callable_global(const std::string& name) {
  return name == "collections.OrderedDict" || name == "torch._utils._rebuild_tensor_v2" ||
         name == "torch._utils._rebuild_parameter" || name == "torch.jit._pickle.restore_type_tag";
}

// --------------------------------------------------------------- unpickler

// Reads one pickle (protocols 2 to 5; torch.save writes 2 by default) made of
// dicts, tuples, strings, numbers and tensors. Every read is checked against
// the end of the pickle and every stack, mark and memo access against its
// container; anything else is a FormatError naming the byte offset.
class Unpickler : PickleInput<Unpickler> {
 public:
  // `load_storage(key, dtype, numel)` returns the storage record `key` as a
  // 1-D tensor of `numel` elements, or throws FormatError.
  using StorageLoader = std::function<at::Tensor(const std::string&, at::ScalarType, int64_t)>;

  Unpickler(const std::string& pickle, StorageLoader load_storage)
      : PickleInput(pickle), load_storage_(std::move(load_storage)) {}
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;

  // A corrupt pickle can put a dict inside itself (through the memo), which
  // shared ownership alone would never free: emptying every dict breaks such
  // cycles. So values from run() live only as long as the Unpickler.
  ~Unpickler() {
    for (const auto& weak : dicts_) {
      if (auto dict = weak.lock()) {
        dict->entries.clear();
        dict->index.clear();
      }
    }
  }

  Value run() {
    while (true) {
      op_pos_ = pos_;
      const uint8_t op = u8();
      switch (op) {
        case 0x80: {  // PROTO
          const uint8_t protocol = u8();
          if (protocol < 2 || protocol > 5) fail(c10::str("pickle protocol ", int(protocol), " is not supported"));
        } break;
        case 0x95:  // FRAME (protocol 4): a length prefix for buffered reading, nothing to do
          bytes(8);
          break;
        case '.':  // STOP
          if (stack_.size() != 1 || !marks_.empty()) fail("the pickle ends with an unbalanced stack");
          return stack_.back();
        case '(':  // MARK
          marks_.push_back(stack_.size());
          break;
        case 'N':
          stack_.emplace_back();
          break;
        case 0x88:  // NEWTRUE
        case 0x89: {  // NEWFALSE
          Value v;
          v.kind = Value::Kind::kBool;
          v.integer = op == 0x88;
          stack_.push_back(v);
        } break;
        case 'K':  // BININT1
          stack_.push_back(Value::of_int(u8()));
          break;
        case 'M':  // BININT2
          stack_.push_back(Value::of_int(le(2)));
          break;
        case 'J':  // BININT: signed 32-bit
          stack_.push_back(Value::of_int(int32_t(uint32_t(le(4)))));
          break;
        case 0x8a:  // LONG1: a little-endian two's-complement integer of n bytes
          stack_.push_back(Value::of_int(long1(u8())));
          break;
        case 'G': {  // BINFLOAT: big-endian IEEE double
          uint64_t bits = 0;
          for (const char c : bytes(8)) bits = (bits << 8) | uint8_t(c);
          Value v;
          v.kind = Value::Kind::kFloat;
          std::memcpy(&v.real, &bits, sizeof(double));
          stack_.push_back(v);
        } break;
        case 'X':  // BINUNICODE
          stack_.push_back(Value::of_string(bytes(le(4))));
          break;
        case 0x8c:  // SHORT_BINUNICODE
          stack_.push_back(Value::of_string(bytes(u8())));
          break;
        case 0x8d:  // BINUNICODE8
          stack_.push_back(Value::of_string(bytes(le(8))));
          break;
        case ')':  // EMPTY_TUPLE
          stack_.push_back(Value::of_tuple({}));
          break;
        case 't':  // TUPLE
          stack_.push_back(Value::of_tuple(pop_to_mark()));
          break;
        case 0x85:  // TUPLE1
        case 0x86:  // TUPLE2
        case 0x87: {  // TUPLE3
          const size_t n = op - 0x84;
          need_stack(n);
          std::vector<Value> items(stack_.end() - std::ptrdiff_t(n), stack_.end());
          stack_.resize(stack_.size() - n);
          stack_.push_back(Value::of_tuple(std::move(items)));
        } break;
        case '}':  // EMPTY_DICT
          stack_.push_back(new_dict());
          break;
        case 'd': {  // DICT: a dict of the key/value pairs above the mark
          Value dict = new_dict();
          set_items(dict, pop_to_mark());
          stack_.push_back(dict);
        } break;
        case 's': {  // SETITEM
          need_stack(3);
          std::vector<Value> kv(stack_.end() - 2, stack_.end());
          stack_.resize(stack_.size() - 2);
          set_items(stack_.back(), std::move(kv));
        } break;
        case 'u': {  // SETITEMS
          std::vector<Value> kv = pop_to_mark();
          need_stack(1);
          set_items(stack_.back(), std::move(kv));
        } break;
        case 'c': {  // GLOBAL: "module\nname\n"
          std::string module = line();
          push_global(module + "." + line());
        } break;
        case 0x93: {  // STACK_GLOBAL (protocol 4)
          const Value name = pop();
          const Value module = pop();
          if (module.kind != Value::Kind::kString || name.kind != Value::Kind::kString) {
            fail("STACK_GLOBAL needs two strings");
          }
          push_global(*module.text + "." + *name.text);
        } break;
        case 'R': {  // REDUCE: call the global below the argument tuple
          const Value args = pop();
          const Value callable = pop();
          stack_.push_back(call(callable, args));
        } break;
        case 'b': {  // BUILD: set an object's state
          const Value state = pop();
          need_stack(1);
          // Only OrderedDict state reaches here: its instance attributes,
          // `_metadata` for a state dict (module versions that only Python's
          // loading hooks read). The entries are already in the dict.
          if (stack_.back().kind != Value::Kind::kDict || state.kind != Value::Kind::kDict) {
            fail("BUILD applies only to a dict's attributes here");
          }
        } break;
        case 'Q':  // BINPERSID: a storage record
          stack_.push_back(persistent_load(pop()));
          break;
        case 'q':  // BINPUT
          memo_put(u8());
          break;
        case 'r':  // LONG_BINPUT
          memo_put(le(4));
          break;
        case 0x94:  // MEMOIZE (protocol 4)
          memo_put(memo_.size());
          break;
        case 'h':  // BINGET
          memo_get(u8());
          break;
        case 'j':  // LONG_BINGET
          memo_get(le(4));
          break;
        default:
          fail(c10::str("unsupported pickle opcode 0x", std::hex, int(op),
                        " (a state dict holds only dicts, tuples, strings, numbers and tensors)"));
      }
    }
  }

 private:
  friend class PickleInput<Unpickler>;
  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(c10::str("data.pkl byte ", op_pos_, ": ", what));
  }

  // --- stack, marks, memo
  void need_stack(size_t n) const {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n) fail("stack underflow");
  }
  Value pop() {
    need_stack(1);
    Value v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  std::vector<Value> pop_to_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<Value> items(std::make_move_iterator(stack_.begin() + std::ptrdiff_t(mark)),
                             std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return items;
  }
  void memo_put(uint64_t id) {
    if (stack_.empty()) fail("PUT on an empty stack");
    memo_[id] = stack_.back();
  }
  void memo_get(uint64_t id) {
    auto it = memo_.find(id);
    if (it == memo_.end()) fail(c10::str("GET of memo entry ", id, ", which was never PUT"));
    stack_.push_back(it->second);
  }

  // --- objects
  Value new_dict() {
    Value dict = Value::new_dict();
    dicts_.push_back(dict.dict);
    return dict;
  }

  void set_items(Value& target, std::vector<Value> kv) {
    if (target.kind != Value::Kind::kDict) fail("SETITEMS on something that is not a dict");
    if (kv.size() % 2 != 0) fail("a dict item without a value");
    for (size_t i = 0; i < kv.size(); i += 2) {
      if (kv[i].kind != Value::Kind::kString) fail("a dict key that is not a string");
      target.dict->set(*kv[i].text, std::move(kv[i + 1]));
    }
  }

  void push_global(const std::string& name) {
    if (!callable_global(name) && !storage_dtype(name)) fail(c10::str("unsupported global ", name));
    stack_.push_back(Value::of_string(name, Value::Kind::kGlobal));
  }

  const std::vector<Value>& tuple(const Value& v, size_t min_size, size_t max_size, const char* what) const {
    if (v.kind != Value::Kind::kTuple || v.items->size() < min_size || v.items->size() > max_size) {
      fail(c10::str("malformed arguments of ", what));
    }
    return *v.items;
  }
  // A tensor's size or stride: at most 64 non-negative ints.
  std::vector<int64_t> int_tuple(const Value& v, const char* what) const {
    if (v.kind != Value::Kind::kTuple || v.items->size() > 64) fail(c10::str("malformed ", what));
    std::vector<int64_t> out;
    for (const Value& x : *v.items) {
      if (x.kind != Value::Kind::kInt || x.integer < 0) fail(c10::str("malformed ", what));
      out.push_back(x.integer);
    }
    return out;
  }

  Value call(const Value& callable, const Value& args) {
    if (callable.kind != Value::Kind::kGlobal || !callable_global(*callable.text)) {
      fail("REDUCE on something that is not a supported function");
    }
    if (callable.is_global("collections.OrderedDict")) {
      tuple(args, 0, 0, "OrderedDict");  // its entries follow as SETITEMS
      return new_dict();
    }
    if (callable.is_global("torch.jit._pickle.restore_type_tag")) {
      // LibTorch's pickler wraps typed containers in this: (value, type name).
      return tuple(args, 2, 2, "restore_type_tag")[0];
    }
    if (callable.is_global("torch._utils._rebuild_parameter")) {
      // (data, requires_grad, backward_hooks): a Parameter's data.
      const Value& data = tuple(args, 3, 3, "_rebuild_parameter")[0];
      if (data.kind != Value::Kind::kTensor) fail("a Parameter without tensor data");
      return data;
    }
    return rebuild_tensor(tuple(args, 6, 7, "_rebuild_tensor_v2"));
  }

  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
  // backward_hooks[, metadata]): a strided view of the storage, which must
  // hold every element the view reaches.
  Value rebuild_tensor(const std::vector<Value>& a) {
    if (a[0].kind != Value::Kind::kTensor || a[1].kind != Value::Kind::kInt || a[1].integer < 0) {
      fail("malformed arguments of _rebuild_tensor_v2");
    }
    const at::Tensor& storage = a[0].tensor;
    const std::vector<int64_t> size = int_tuple(a[2], "tensor size");
    const std::vector<int64_t> stride = int_tuple(a[3], "tensor stride");
    if (size.size() != stride.size()) fail("a tensor's size and stride differ in rank");
    // The last element the view reaches, in elements of the storage; none when empty.
    int64_t end = a[1].integer;
    bool empty = false;
    for (size_t d = 0; d < size.size(); ++d) {
      int64_t reach = 0;
      if (size[d] == 0) empty = true;
      if (__builtin_mul_overflow(std::max<int64_t>(size[d] - 1, 0), stride[d], &reach) ||
          __builtin_add_overflow(end, reach, &end)) {
        fail("a tensor's extent overflows");
      }
    }
    if (!empty && end >= storage.numel()) {
      fail(c10::str("a tensor of size ", c10::IntArrayRef(size), " at offset ", a[1].integer,
                    " reaches past its storage of ", storage.numel(), " elements"));
    }
    if (empty) return Value::of_tensor(at::empty(size, storage.options()));
    return Value::of_tensor(storage.as_strided(size, stride, a[1].integer));
  }

  // ('storage', storage type, key, location, numel): the record data/<key>.
  // Tensors sharing a storage name the same key; it is read once.
  Value persistent_load(const Value& pid) {
    const std::vector<Value>& t = tuple(pid, 5, 5, "a storage reference");
    if (t[0].kind != Value::Kind::kString || *t[0].text != "storage" || t[1].kind != Value::Kind::kGlobal ||
        t[2].kind != Value::Kind::kString || t[3].kind != Value::Kind::kString || t[4].kind != Value::Kind::kInt ||
        t[4].integer < 0) {
      fail("malformed storage reference");
    }
    const std::optional<at::ScalarType> dtype = storage_dtype(*t[1].text);
    if (!dtype) fail(c10::str("unsupported storage type ", *t[1].text));
    const std::string& key = *t[2].text;
    auto it = storages_.find(key);
    if (it == storages_.end()) {
      it = storages_.emplace(key, load_storage_(key, *dtype, t[4].integer)).first;
    } else if (it->second.scalar_type() != *dtype || it->second.numel() != t[4].integer) {
      fail(c10::str("storage ", key, " is referenced with two different types or sizes"));
    }
    return Value::of_tensor(it->second);
  }

  StorageLoader load_storage_;
  size_t op_pos_ = 0;
  std::vector<Value> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Value> memo_;
  std::unordered_map<std::string, at::Tensor> storages_;
  std::vector<std::weak_ptr<Dict>> dicts_;  // every dict made, see ~Unpickler
};

}  // namespace

torch::OrderedDict<std::string, at::Tensor> unpickle_state_dict(const std::string& pickle, const StorageLoader& load) {
  Unpickler unpickler(pickle, load);
  const Value root = unpickler.run();
  if (root.kind != Value::Kind::kDict) throw FormatError("it does not hold a dict");
  torch::OrderedDict<std::string, at::Tensor> out;
  out.reserve(root.dict->entries.size());
  for (const auto& [name, value] : root.dict->entries) {
    if (value.kind != Value::Kind::kTensor) {
      throw FormatError(c10::str("entry ", name, " is not a tensor (not a {str: tensor} dict)"));
    }
    out.insert(name, value.tensor);
  }
  return out;
}

}  // namespace actkit
