#include "pickle/pickle_value.h"

#include <c10/util/StringUtil.h>

#include <algorithm>

#include "actkit/core/errors.h"

namespace actkit::pickle {

void Dict::set(const std::string& key, Value value) {
  depth = std::max(depth, value.nesting());
  if (depth >= kMaxPickleNesting) {
    throw FormatError(c10::str("values nest deeper than ", kMaxPickleNesting, " levels"));
  }
  auto [it, inserted] = index.emplace(key, entries.size());
  if (inserted) {
    entries.emplace_back(key, std::move(value));
  } else {
    entries[it->second].second = std::move(value);
  }
}

uint32_t Value::nesting() const {
  if (kind == Kind::kTuple) return depth + 1;
  if (kind == Kind::kDict) return dict->depth + 1;
  return 0;
}

Value Value::of_tuple(std::vector<Value> items) {
  Value x;
  x.kind = Kind::kTuple;
  for (const Value& item : items) x.depth = std::max(x.depth, item.nesting());
  if (x.depth >= kMaxPickleNesting) {
    throw FormatError(c10::str("values nest deeper than ", kMaxPickleNesting, " levels"));
  }
  x.items = std::make_shared<const std::vector<Value>>(std::move(items));
  return x;
}

Value Value::new_dict() {
  Value x;
  x.kind = Kind::kDict;
  x.dict = std::make_shared<Dict>();
  return x;
}

}  // namespace actkit::pickle
