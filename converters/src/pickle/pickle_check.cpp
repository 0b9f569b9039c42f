#include "pickle/pickle_check.h"

#include <c10/util/ArrayRef.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "actkit/core/errors.h"
#include "pickle/pickle_globals.h"
#include "pickle/pickle_input.h"

namespace actkit {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The pickle machine with every value reduced to its shape. Containers get
// items only while they are being built (the list or dict on the stack that
// EMPTY_LIST, EMPTY_DICT, LIST, DICT or OrderedDict() made), and the memo
// hands out a container only once it is complete, so every value's depth is
// known when it is made and never changes after: a value cannot grow deeper
// through a copy nested elsewhere, nor contain itself.
class PickleWalk : PickleInput<PickleWalk> {
 public:
  PickleWalk(const std::string& pickle, const std::string& name, const RecordSizes& records, const ModuleCode* code)
      : PickleInput(pickle), name_(name), records_(records), code_(code) {}

  void run() {
    for (bool more = true; more;) {
      op_at_ = pos_;
      more = step(u8());
    }
  }

 private:
  // What the walk keeps of a value.
  enum class Kind : uint8_t {
    kOther,        // None, a bool, float, bytes, the result of a call
    kInt,          // a: its value
    kString,       // a, b: where its bytes lie in the pickle, how many
    kTuple,        // a, b: where its items are in kept_, how many (a = -1: more than kKeptItems)
    kContainer,    // a list or dict; a: its index in containers_
    kGlobal,       // a: which one (Global); b: the arguments it reads, or its class's index in classes_
    kStorageType,  // a: its element size (0: a type no reader here takes)
    kTensor,       // a storage (BINPERSID) or a tensor rebuilt on one; a: the storage's elements
    kObject,       // NEWOBJ of a class of the archive's code; a: the class's index in classes_
  };
  enum Global : int64_t { kAnyGlobal, kOrderedDict, kRebuildTensor, kReturnsFirst, kClass };
  // A tuple's items are kept up to this many: enough for a persistent id, a
  // tensor's arguments, size and stride.
  static constexpr size_t kKeptItems = 64;
  struct Slot {
    Kind kind = Kind::kOther;
    uint32_t depth = 0;      // 0 for a scalar, 1 + its deepest item's for a container (see depth())
    int32_t container = -1;  // a list or dict being built (this slot fills it): its index in containers_
    int64_t a = 0, b = 0;
  };
  struct Container {
    uint32_t depth = 1;
    bool open = true;            // still being built: its slot is on the stack
    std::set<std::string> keys;  // a dict's string keys (kept for LibTorch's loader only)
  };

  // One opcode; false at STOP.
  bool step(uint8_t op) {
    switch (op) {
      case 0x80: {  // PROTO
        const uint8_t protocol = u8();
        if (protocol < 2 || protocol > 5) fail(c10::str("pickle protocol ", int(protocol), " is not supported"));
      } break;
      case 0x95: skip(8); break;  // FRAME: a length for buffered reading
      case '.': stop(); return false;
      case '(': marks_.push_back(stack_.size()); break;
      case 'N': case 0x88: case 0x89: push(Slot{}); break;  // NONE, NEWTRUE, NEWFALSE
      case 'K': push_int(int64_t(u8())); break;              // BININT1
      case 'M': push_int(int64_t(le(2))); break;             // BININT2
      case 'J': push_int(int32_t(uint32_t(le(4)))); break;   // BININT
      case 0x8a: push_int(long1(u8())); break;               // LONG1
      case 'G': skip(8); push(Slot{}); break;                // BINFLOAT
      case 'X': push_string(le(4)); break;                   // BINUNICODE
      case 0x8c: push_string(u8()); break;                   // SHORT_BINUNICODE
      case 0x8d: push_string(le(8)); break;                  // BINUNICODE8
      case 'C': skip(u8()); push(Slot{}); break;             // SHORT_BINBYTES
      case 'B': skip(le(4)); push(Slot{}); break;            // BINBYTES
      case 0x8e: skip(le(8)); push(Slot{}); break;           // BINBYTES8
      case ')': tuple(stack_.size()); break;                 // EMPTY_TUPLE
      case 0x85: case 0x86: case 0x87: need(size_t(op - 0x84)); tuple(stack_.size() - size_t(op - 0x84)); break;
      case 't': tuple(pop_mark()); break;
      case ']': case '}': new_container(1); break;  // EMPTY_LIST, EMPTY_DICT
      case 'l': new_container(1 + items(pop_mark(), false)); break;  // LIST
      case 'd': dict(pop_mark()); break;
      case 'a': need(2); fill(stack_.size() - 2, stack_.size() - 1, false); break;  // APPEND
      case 's': need(3); fill(stack_.size() - 3, stack_.size() - 2, true); break;   // SETITEM
      case 'e': fill_to_mark(false); break;  // APPENDS
      case 'u': fill_to_mark(true); break;   // SETITEMS
      case 'c': global(); break;
      case 0x93: stack_global(); break;
      case 'R': call(true); break;    // REDUCE
      case 0x81: call(false); break;  // NEWOBJ
      case 'b': build(); break;
      case 'Q': persistent_id(); break;  // BINPERSID
      case 'q': memo_put(u8()); break;    // BINPUT
      case 'r': memo_put(le(4)); break;   // LONG_BINPUT
      case 0x94: memo_put(memo_.size()); break;  // MEMOIZE
      case 'h': memo_get(u8()); break;    // BINGET
      case 'j': memo_get(le(4)); break;   // LONG_BINGET
      default: fail(c10::str("unsupported pickle opcode 0x", std::hex, int(op)));
    }
    return true;
  }

  friend class PickleInput<PickleWalk>;
  [[noreturn]] void fail(const std::string& why) const {
    throw FormatError(c10::str("record ", name_, " byte ", op_at_, ": ", why));
  }

  // --- the stack: slots above the innermost MARK are the current frame
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void need(size_t n) const {
    if (stack_.size() < floor() + n) fail("stack underflow");
  }
  uint32_t depth(const Slot& s) const {
    return s.kind == Kind::kContainer ? containers_[size_t(s.a)].depth : s.depth;
  }
  void check_depth(uint32_t d) const {
    if (d > kMaxPickleNesting) fail(c10::str("values nest deeper than ", kMaxPickleNesting, " levels"));
  }
  void push(const Slot& s) {
    check_depth(depth(s));
    stack_.push_back(s);
  }
  void push_int(int64_t v) {
    Slot s;
    s.kind = Kind::kInt;
    s.a = v;
    push(s);
  }
  void push_string(uint64_t n) {
    Slot s;
    s.kind = Kind::kString;
    s.b = int64_t(n);
    s.a = int64_t(skip(n));
    push(s);
  }
  // The slots from `from` on leave the stack: a container among them is
  // complete, its depth final.
  void drop(size_t from) {
    for (size_t i = from; i < stack_.size(); ++i) {
      if (stack_[i].container >= 0) containers_[size_t(stack_[i].container)].open = false;
    }
    stack_.resize(from);
  }
  // A copy of `s` that is no container to fill, its depth as it is now.
  Slot frozen(Slot s) const {
    s.depth = depth(s);
    s.container = -1;
    return s;
  }
  Slot pop() {
    need(1);
    const Slot s = frozen(stack_.back());
    drop(stack_.size() - 1);
    return s;
  }
  size_t pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    const size_t mark = marks_.back();
    marks_.pop_back();
    return mark;
  }
  // Drops the slots from `from` on; the deepest one's depth. `pairs`: they
  // must be keys and values.
  uint32_t items(size_t from, bool pairs) {
    if (pairs && (stack_.size() - from) % 2 != 0) fail("a dict item without a value");
    uint32_t deepest = 0;
    for (size_t i = from; i < stack_.size(); ++i) deepest = std::max(deepest, depth(stack_[i]));
    drop(from);
    return deepest;
  }

  // --- values
  void tuple(size_t from) {
    Slot t;
    t.kind = Kind::kTuple;
    t.a = -1;
    if (stack_.size() - from <= kKeptItems) {
      t.a = int64_t(kept_.size());
      t.b = int64_t(stack_.size() - from);
      for (size_t i = from; i < stack_.size(); ++i) kept_.push_back(frozen(stack_[i]));
    }
    t.depth = 1 + items(from, false);
    push(t);
  }
  void new_container(uint32_t d, std::set<std::string> keys = {}) {
    check_depth(d);
    containers_.push_back({d, true, std::move(keys)});
    Slot s;
    s.kind = Kind::kContainer;
    s.a = int64_t(containers_.size() - 1);
    s.container = int32_t(s.a);
    push(s);
  }
  // DICT: a dict of the keys and values from `from` on.
  void dict(size_t from) {
    std::set<std::string> keys;
    add_keys(keys, from);
    new_container(1 + items(from, true), std::move(keys));
  }
  // The string keys among the pairs from `from` on, for LibTorch's loader
  // (which looks a class's attributes up in a dict, unchecked).
  void add_keys(std::set<std::string>& keys, size_t from) const {
    for (size_t i = from; code_ && i < stack_.size(); i += 2) {
      if (stack_[i].kind == Kind::kString) keys.insert(text(stack_[i]));
    }
  }
  std::string text(const Slot& s) const { return data_.substr(size_t(s.a), size_t(s.b)); }
  // APPEND(S), SETITEM(S): the items from `first` on go into the list or dict at `target`.
  void fill(size_t target, size_t first, bool pairs) {
    if (target < floor() || target >= first) fail("stack underflow");
    const int32_t c = stack_[target].container;
    if (c < 0) fail("items added to something that is not a list or dict being built");
    if (pairs) add_keys(containers_[size_t(c)].keys, first);
    const uint32_t d = 1 + items(first, pairs);
    check_depth(d);
    containers_[size_t(c)].depth = std::max(containers_[size_t(c)].depth, d);
  }
  void fill_to_mark(bool pairs) {
    const size_t mark = pop_mark();
    if (mark == 0) fail("stack underflow");
    fill(mark - 1, mark, pairs);
  }

  void global() {
    const std::string module = line();
    push_global(module, line());
  }
  void stack_global() {
    const Slot name = pop(), module = pop();
    if (module.kind != Kind::kString || name.kind != Kind::kString) fail("STACK_GLOBAL needs two strings");
    push_global(text(module), text(name));
  }
  void push_global(const std::string& module, const std::string& name) {
    Slot s;
    s.kind = Kind::kGlobal;
    s.a = module == "collections" && name == "OrderedDict"          ? kOrderedDict
          : module == "torch._utils" && name == "_rebuild_tensor_v2" ? kRebuildTensor
          : returns_first_argument(module, name)                     ? kReturnsFirst
                                                                     : kAnyGlobal;
    if (module == "torch" && ends_with(name, "Storage")) {
      s.kind = Kind::kStorageType;
      s.a = int64_t(storage_element_size(name));
    }
    if (code_) libtorch_global(module, name, s);
    push(s);
  }
  // In an archive LibTorch's TorchScript loader reads: `s`, the global
  // module.name, must be one it knows; b is set to the arguments it reads,
  // or to its class's index in classes_.
  void libtorch_global(const std::string& module, const std::string& name, Slot& s) {
    const int arguments = libtorch_global_arguments(module, name);
    if (s.kind == Kind::kStorageType ? s.a != 0 : arguments >= 0) {
      s.b = std::max(arguments, 0);
      return;
    }
    const std::set<std::string>* attributes = code_->attributes(module + "." + name);
    if (!attributes) {
      fail(c10::str("global ", module, ".", name,
                    " is neither one LibTorch's loader knows nor a class of the archive"));
    }
    s.a = kClass;
    s.b = int64_t(classes_.size());
    classes_.push_back({module + "." + name, attributes});
  }
  // REDUCE (`reduce`) or NEWOBJ: a global called with a tuple. Only
  // OrderedDict() returns a dict to fill.
  void call(bool reduce) {
    const Slot args = pop(), callable = pop();
    if (callable.kind != Kind::kGlobal) {
      fail(c10::str(reduce ? "REDUCE" : "NEWOBJ", " of something that is not a global"));
    }
    if (reduce && callable.a == kOrderedDict) {
      new_container(std::max<uint32_t>(args.depth, 1));
    } else {
      push(call_result(reduce, callable, args));
    }
  }
  // What a call returns nests at most one level deeper than its arguments;
  // a tensor is checked against its storage; restore_type_tag and
  // build_*list return their first argument, complete; NEWOBJ of a class
  // makes an object for BUILD to fill.
  Slot call_result(bool reduce, const Slot& callable, const Slot& args) {
    const auto a = items_of(args);
    if (code_ && callable.a != kClass && a && int64_t(a->size()) < callable.b) {
      fail(c10::str("a call with ", a->size(), " arguments where LibTorch's loader reads ", callable.b));
    }
    Slot result;
    result.depth = args.depth + 1;
    if (callable.a == kClass && reduce) {
      check_state(args, callable.b);
    } else if (callable.a == kClass) {
      result.kind = Kind::kObject;
      result.a = callable.b;
    } else if (reduce && callable.a == kRebuildTensor) {
      result = rebuild_tensor(args);
    } else if (reduce && callable.a == kReturnsFirst && a && !a->empty()) {
      result = (*a)[0];
    }
    return result;
  }
  // BUILD: an object's state, set on the object below it (ACTkit's unpickler
  // reads past it; LibTorch's makes the object from it).
  void build() {
    const Slot state = pop();
    need(1);
    Slot& target = stack_.back();
    if (target.kind != Kind::kOther && target.kind != Kind::kContainer && target.kind != Kind::kObject) {
      fail("BUILD of something that is not an object");
    }
    if (target.kind == Kind::kObject) check_state(state, target.a);
    const uint32_t d = state.depth + 1;
    check_depth(d);
    uint32_t& target_depth = target.container >= 0 ? containers_[size_t(target.container)].depth : target.depth;
    target_depth = std::max(target_depth, d);
  }
  // LibTorch's loader makes an object of class classes_[index] from `state`
  // by looking up each attribute the class declares in it, unchecked
  // (std::out_of_range for one missing); a state that is no dict it refuses
  // itself.
  void check_state(const Slot& state, int64_t index) const {
    if (state.kind != Kind::kContainer) return;
    const auto& [name, attributes] = classes_[size_t(index)];
    for (const std::string& attribute : *attributes) {
      if (!containers_[size_t(state.a)].keys.count(attribute)) {
        fail(c10::str("an object of class ", name, " without its attribute ", attribute));
      }
    }
  }

  // --- storages
  bool is_text(const Slot& s, const char* text) const {
    return s.kind == Kind::kString && data_.compare(size_t(s.a), size_t(s.b), text) == 0;
  }
  // The items of a tuple whose items were kept (valid until the next tuple
  // is made); nullopt for anything else.
  std::optional<c10::ArrayRef<Slot>> items_of(const Slot& s) const {
    if (s.kind != Kind::kTuple || s.a < 0) return std::nullopt;
    return c10::ArrayRef<Slot>(kept_.data() + s.a, size_t(s.b));
  }
  // BINPERSID of ('storage', torch.<Type>Storage, key, location, numel): a
  // storage, which its record must hold whole. LibTorch sizes the storage
  // from numel and reads the record without comparing the two.
  void persistent_id() {
    const auto pid = items_of(pop());
    const Slot* s = pid && pid->size() == 5 ? pid->data() : nullptr;
    if (!s || !is_text(s[0], "storage") || s[1].kind != Kind::kStorageType || s[2].kind != Kind::kString ||
        s[3].kind != Kind::kString || s[4].kind != Kind::kInt) {
      fail("a persistent id that is not ('storage', type, key, location, numel)");
    }
    const std::string record = storage_record(data_.substr(size_t(s[2].a), size_t(s[2].b)));
    const int64_t numel = s[4].a;
    uint64_t nbytes = 0;
    if (s[1].a == 0) fail(c10::str("storage ", record, " is of an unsupported type"));
    if (numel < 0 || __builtin_mul_overflow(uint64_t(numel), uint64_t(s[1].a), &nbytes)) {
      fail(c10::str("storage ", record, " has ", numel, " elements"));
    }
    if (numel > 0) {
      auto it = records_.find(lowercase_name(record));
      if (it == records_.end()) fail(c10::str("storage record ", record, " is missing"));
      if (it->second < nbytes) {
        fail(c10::str("storage record ", record, " holds ", it->second, " bytes, fewer than the ", nbytes, " of its ",
                      numel, " elements"));
      }
    }
    Slot storage;
    storage.kind = Kind::kTensor;
    storage.a = numel;
    push(storage);
  }
  // A tensor's size or stride: non-negative ints.
  std::vector<int64_t> int_tuple(const Slot& s, const char* what) const {
    const auto items = items_of(s);
    if (!items) fail(c10::str("a malformed tensor ", what));
    std::vector<int64_t> out;
    for (const Slot& x : *items) {
      if (x.kind != Kind::kInt || x.a < 0) fail(c10::str("a malformed tensor ", what));
      out.push_back(x.a);
    }
    return out;
  }
  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks
  // [, metadata]): a view of the storage, which must hold every element the
  // view reaches. LibTorch 1.13 makes the view without checking that (a
  // 0-dim tensor at offset 61 of a storage of one element reads past it).
  Slot rebuild_tensor(const Slot& args) {
    const auto a = items_of(args);
    if (!a || a->size() < 6 || a->size() > 7 || (*a)[0].kind != Kind::kTensor || (*a)[1].kind != Kind::kInt ||
        (*a)[1].a < 0) {
      fail("malformed arguments of _rebuild_tensor_v2");
    }
    const std::vector<int64_t> size = int_tuple((*a)[2], "size"), stride = int_tuple((*a)[3], "stride");
    if (size.size() != stride.size()) fail("a tensor's size and stride differ in rank");
    int64_t end = (*a)[1].a;  // the last element the view reaches
    bool empty = false;
    for (size_t d = 0; d < size.size(); ++d) {
      int64_t reach = 0;
      empty |= size[d] == 0;
      if (__builtin_mul_overflow(std::max<int64_t>(size[d] - 1, 0), stride[d], &reach) ||
          __builtin_add_overflow(end, reach, &end)) {
        fail("a tensor's extent overflows");
      }
    }
    if (!empty && end >= (*a)[0].a) {
      fail(c10::str("a tensor at offset ", (*a)[1].a, " of size ", c10::IntArrayRef(size),
                    " reaches past its storage of ", (*a)[0].a, " elements"));
    }
    Slot tensor;
    tensor.kind = Kind::kTensor;
    tensor.a = (*a)[0].a;
    tensor.depth = args.depth + 1;
    return tensor;
  }
  // <archive>/data.pkl's storages are <archive>/data/<key>.
  std::string storage_record(const std::string& key) const {
    const size_t dot = name_.rfind('.');
    return name_.substr(0, dot) + "/" + key;
  }

  // --- the memo
  void memo_put(uint64_t id) {
    need(1);
    if (id > memo_.size()) fail(c10::str("memo entry ", id, " is put before entry ", memo_.size()));
    if (id == memo_.size()) {
      memo_.push_back(stack_.back());
    } else {
      memo_[size_t(id)] = stack_.back();
    }
  }
  void memo_get(uint64_t id) {
    if (id >= memo_.size()) fail(c10::str("GET of memo entry ", id, ", which was never put"));
    const Slot& s = memo_[size_t(id)];
    if (s.kind == Kind::kContainer && containers_[size_t(s.a)].open) {
      fail(c10::str("GET of memo entry ", id, " while it is being built (a value inside itself)"));
    }
    push(frozen(s));
  }

  void stop() {
    if (stack_.size() != 1 || !marks_.empty()) fail("the pickle ends with an unbalanced stack");
  }

  const std::string& name_;
  const RecordSizes& records_;
  const ModuleCode* code_;
  size_t op_at_ = 0;
  std::vector<Slot> stack_;
  std::vector<size_t> marks_;
  std::vector<Slot> memo_;
  std::vector<Container> containers_;
  std::vector<Slot> kept_;  // the items of tuples of up to kKeptItems, one after another
  // The classes of the archive's code that globals named: name, attributes.
  std::vector<std::pair<std::string, const std::set<std::string>*>> classes_;
};

}  // namespace

std::string lowercase_name(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  }
  return s;
}

bool is_pickle_record(const std::string& name) { return ends_with(name, "pkl"); }

void check_pickle(const std::string& pickle, const std::string& name, const RecordSizes& records,
                  const ModuleCode* code) {
  PickleWalk(pickle, name, records, code).run();
}

}  // namespace actkit
