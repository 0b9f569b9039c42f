#include "pickle/code_check.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "actkit/core/errors.h"
#include "pickle/pickle_check.h"  // kMaxPickleNesting

namespace actkit {
namespace {

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

// The types TorchScript knows by name that an attribute may have.
bool is_builtin_type(const std::string& name) {
  static const std::set<std::string> kTypes = {"Tensor", "int", "float",  "complex", "bool",
                                               "str",    "NoneType", "Device", "Any", "number"};
  return kTypes.count(name) != 0;
}

// Python's keywords, which TorchScript's lexer reads as such: never a name.
bool is_keyword(const std::string& name) {
  static const std::set<std::string> kKeywords = {
      "False", "None",  "True",  "and",      "as",     "assert", "async", "await",  "break",
      "class", "continue", "def", "del",     "elif",   "else",   "except", "finally", "for",
      "from",  "global", "if",    "import",   "in",     "is",     "lambda", "nonlocal", "not",
      "or",    "pass",  "raise", "return",   "try",    "while",  "with",  "yield"};
  return kKeywords.count(name) != 0;
}

// How many type arguments a generic type takes, at least and at most; none
// for a name that is not one of the generics an attribute may have.
std::optional<std::pair<size_t, size_t>> generic_arity(const std::string& name) {
  if (name == "List" || name == "Optional") return std::make_pair(size_t(1), size_t(1));
  if (name == "Dict") return std::make_pair(size_t(2), size_t(2));
  if (name == "Tuple") return std::make_pair(size_t(1), std::numeric_limits<size_t>::max());
  return std::nullopt;
}

// One line of the grammar in code_check.h, read left to right; anything
// else is a FormatError naming the record and the line. The classes its
// types name are added to `uses`.
class LineCheck {
 public:
  LineCheck(std::string line, const std::string& name, size_t number)
      : s_(std::move(line)), name_(name), number_(number) {}

  // The class's name.
  std::string class_header() {
    expect("class ");
    const std::string name = ident();
    if (is_builtin_type(name) || generic_arity(name)) fail(c10::str("a class named ", name));
    expect("(Module):");
    end();
    return name;
  }

  // Adds the attribute the line declares, if any, and the classes its type names.
  void class_body(std::set<std::string>& attributes, std::vector<std::string>& uses) {
    if (accept("__parameters__ = ") || accept("__buffers__ = ")) {
      string_list();
    } else if (accept("__annotations__ = []")) {
    } else if (accept("__annotations__[")) {
      attributes.insert(string_literal());
      expect("] = ");
      type(uses);
    } else {
      const std::string attribute = ident();
      if (attribute.compare(0, 2, "__") == 0) fail("an attribute named __...");
      attributes.insert(attribute);
      expect(" : ");
      type(uses);
    }
    end();
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw FormatError(c10::str("record ", name_, " line ", number_, ": ", why,
                               " (a checkpoint's code declares a module's attributes, nothing else)"));
  }

 private:
  bool accept(const char* text) {
    const size_t n = std::strlen(text);
    if (s_.compare(pos_, n, text) != 0) return false;
    pos_ += n;
    return true;
  }
  void expect(const char* text) {
    if (!accept(text)) fail(c10::str("expected \"", text, "\" at column ", pos_ + 1));
  }
  void end() const {
    if (pos_ != s_.size()) fail(c10::str("unexpected text at column ", pos_ + 1));
  }
  std::string ident() {
    const size_t at = pos_;
    if (pos_ >= s_.size() || !is_ident_start(s_[pos_])) fail(c10::str("expected a name at column ", pos_ + 1));
    while (pos_ < s_.size() && is_ident_char(s_[pos_])) ++pos_;
    std::string name = s_.substr(at, pos_ - at);
    if (is_keyword(name)) fail(c10::str("the keyword ", name, " as a name"));
    return name;
  }
  std::string dotted() {
    std::string name = ident();
    while (accept(".")) name += "." + ident();
    return name;
  }
  // "..." as LibTorch's printer writes names: raw bytes (a tab, UTF-8), or
  // the escapes \\ \' \" \a \b \f \n \r \t \v and three octal digits; no NUL
  // or carriage return. The string it stands for.
  std::string string_literal() {
    expect("\"");
    std::string text;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      const char c = s_[pos_++];
      if (c == '\\') {
        text += escape();
      } else if (c == '\0' || c == '\r') {
        fail("a NUL or carriage return in a string");
      } else {
        text += c;
      }
    }
    expect("\"");
    return text;
  }
  char escape() {
    static const char kNamed[] = "\\\\''\"\"a\ab\bf\fn\nr\rt\tv\v";  // pairs: the letter, the character
    for (size_t i = 0; pos_ < s_.size() && i + 1 < sizeof(kNamed); i += 2) {
      if (s_[pos_] == kNamed[i]) {
        ++pos_;
        return kNamed[i + 1];
      }
    }
    int code = 0;
    for (int i = 0; i < 3; ++i, ++pos_) {
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '7') fail("an unknown escape in a string");
      code = code * 8 + (s_[pos_] - '0');
    }
    return char(code);
  }
  // ["a", "b", ] as the printer writes lists of names.
  void string_list() {
    expect("[");
    while (!accept("]")) {
      string_literal();
      expect(", ");
    }
  }
  // One Type (code_check.h), read without recursion: `open` holds the
  // generics whose arguments are being read.
  void type(std::vector<std::string>& uses) {
    struct Open {
      size_t min, max, count;
    };
    std::vector<Open> open;
    for (;;) {
      if (type_head(open, uses)) continue;  // a generic opened: its first argument follows
      // A whole type: the next argument of the generic it is in, or its end.
      for (;;) {
        if (open.empty()) return;
        Open& o = open.back();
        if (++o.count < o.max && accept(", ")) break;
        expect("]");
        if (o.count < o.min) fail("too few type arguments");
        open.pop_back();
      }
    }
  }
  template <typename Open>
  bool type_head(std::vector<Open>& open, std::vector<std::string>& uses) {
    const std::string name = dotted();
    if (const auto arity = generic_arity(name)) {
      expect("[");
      if (name == "Tuple" && accept("()]")) return false;
      if (open.size() >= kMaxPickleNesting) fail("types nest too deeply");
      open.push_back({arity->first, arity->second, 0});
      return true;
    }
    if (name.find('.') != std::string::npos) {
      uses.push_back(name);  // a class: check_references finds it
    } else if (!is_builtin_type(name)) {
      fail(c10::str("unknown type ", name));
    }
    return false;
  }

  const std::string s_;
  const std::string& name_;
  const size_t number_;
  size_t pos_ = 0;
};

// __torch__.a for <archive>/code/__torch__/a.py (LibTorch's code/ folder is in
// the archive's own), or "" for a record TorchScript never reads as code.
std::string qualifier(const std::string& record) {
  const size_t folder = record.find('/');
  if (folder == std::string::npos || record.compare(folder, 6, "/code/") != 0) return "";
  std::string q = record.substr(folder + 6, record.size() - folder - 6 - 3);
  std::replace(q.begin(), q.end(), '/', '.');
  return q;
}

}  // namespace

bool is_code_record(const std::string& name) {
  return name.size() >= 3 && name.compare(name.size() - 3, 3, ".py") == 0;
}

void ModuleCode::add(const std::string& code, const std::string& name) {
  const std::string prefix = qualifier(name);
  Class* in_class = nullptr;
  size_t number = 0, header = 0, body = 0;  // the last class header's line, the lines under it
  auto check_body = [&] {
    if (in_class && body == 0) LineCheck("", name, header).fail("a class without attributes");
  };
  for (size_t at = 0; at < code.size();) {
    const size_t end = std::min(code.find('\n', at), code.size());
    const std::string line = code.substr(at, end - at);
    at = end + 1;
    ++number;
    if (line.empty()) continue;
    if (in_class && line.compare(0, 2, "  ") == 0) {
      LineCheck(line.substr(2), name, number).class_body(in_class->attributes, in_class->uses);
      ++body;
      continue;
    }
    check_body();
    LineCheck check(line, name, number);
    const std::string qualified = prefix + "." + check.class_header();
    if (classes_.count(qualified)) check.fail(c10::str("class ", qualified, " is defined twice"));
    in_class = &classes_[qualified];
    in_class->record = name;
    if (!prefix.empty()) names_.insert(qualified);
    header = number;
    body = 0;
  }
  check_body();
}

const std::set<std::string>* ModuleCode::attributes(const std::string& qualified) const {
  auto it = classes_.find(qualified);
  return it == classes_.end() || !names_.count(qualified) ? nullptr : &it->second.attributes;
}

void ModuleCode::check_references() const {
  // Depth-first over the classes each uses, without recursion: a class met
  // again while it is being visited names itself.
  enum State { kNew, kVisiting, kDone };
  std::map<std::string, State> state;
  for (const auto& [root, ignored] : classes_) {
    std::vector<std::pair<const std::string*, size_t>> path = {{&root, 0}};
    if (state[root] == kDone) continue;
    state[root] = kVisiting;
    while (!path.empty()) {
      auto& [name, next] = path.back();
      const Class& c = classes_.at(*name);
      if (next == c.uses.size()) {
        state[*name] = kDone;
        path.pop_back();
        continue;
      }
      const std::string& used = c.uses[next++];
      if (!names_.count(used)) {
        throw FormatError(c10::str("record ", c.record, ": class ", *name, " names class ", used,
                                   ", which no record of the archive defines"));
      }
      State& s = state[used];
      if (s == kVisiting) {
        throw FormatError(c10::str("record ", c.record, ": class ", *name, " names class ", used,
                                   ", which names it in turn (a class inside itself)"));
      }
      if (s == kNew) {
        s = kVisiting;
        path.push_back({&classes_.find(used)->first, 0});
      }
    }
  }
}

}  // namespace actkit
