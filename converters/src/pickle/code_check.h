// The TorchScript source in a LibTorch archive, checked before LibTorch
// compiles it.
//
// InputArchive::load_from (the optimizer state in pipeline and dp
// checkpoints) compiles every class its pickles name from the archive's
// code/ records with TorchScript's frontend, which trusts them: in LibTorch
// 1.13 a class constant without a type (`__parretmeas__ = []`, one mutated
// name) is a segmentation fault, and an unknown type name, List[int, int],
// a class no record defines or a class whose attributes name itself ends the
// process (std::terminate on the compiler's ErrorReport), however the caller
// catches. What OutputArchive writes is only a module's attribute
// declarations, so archive_check accepts exactly those and refuses anything
// else (methods included: no code of a checkpoint's runs when it loads).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace actkit {

// Whether a record of this name is TorchScript source (code/...py).
bool is_code_record(const std::string& name);

// The classes an archive's code records define, each checked.
class ModuleCode {
 public:
  // Checks `code`, the record `name`, and notes the classes it defines
  // (<archive>/code/__torch__/a.py's class Module is __torch__.a.Module).
  // Every line must be empty, or a class header `class <Name>(Module):`, or
  // in a class (indented two spaces; at least one line) one of
  //   __parameters__ = ["name", ...]      __buffers__ = ["name", ...]
  //   __annotations__ = []                __annotations__["name"] = <Type>
  //   <name> : <Type>
  // where a Type is Tensor, int, float, complex, bool, str, NoneType, Device,
  // Any, number, a class (a dotted name), or List[T], Optional[T],
  // Dict[K, V], Tuple[T, ...] or Tuple[()] of Types, nested at most
  // kMaxPickleNesting deep; no name a Python keyword, no attribute's name
  // starting with __, no class named as a type. Throws FormatError naming the
  // record and the line otherwise, or when it defines a class a record
  // defined already.
  void add(const std::string& code, const std::string& name);

  // Throws FormatError naming the class when an annotation names a class no
  // record defines, or a class names itself (directly or through others).
  void check_references() const;

  // The classes defined, by qualified name.
  const std::set<std::string>& classes() const { return names_; }

  // The attributes of the class `qualified` declares (LibTorch makes an
  // object of it from a dict holding every one), or null for a class no
  // record defines.
  const std::set<std::string>* attributes(const std::string& qualified) const;

 private:
  struct Class {
    std::string record;
    std::set<std::string> attributes;
    std::vector<std::string> uses;  // the classes its annotations name
  };
  std::map<std::string, Class> classes_;
  std::set<std::string> names_;
};

}  // namespace actkit
