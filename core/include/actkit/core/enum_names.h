// One table per enum gives its parse, its name and the list of choices a
// help text or an error shows, so that a new value is one entry:
//
//   constexpr EnumName<LinkMode> kLinkModeNames[] = {{LinkMode::kProcess, "process"}, {LinkMode::kKernel, "kernel"}};
//   const char* to_string(LinkMode m) { return enum_name(kLinkModeNames, m); }
//   LinkMode parse_link_mode(const std::string& t) { return parse_enum(kLinkModeNames, t, "--link"); }
//
// The first name of a value is its own; later entries for the same value
// are accepted spellings ("parameters" for "params"). A table whose values
// carry more than a name (a data set's kinds and opener) uses its own entry
// type with the same `value` and `name` fields, and these functions work on
// it unchanged.
#pragma once

#include <c10/util/StringUtil.h>

#include <cstddef>
#include <string>
#include <vector>

#include "actkit/core/errors.h"

namespace actkit {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `value` in `table`: its first entry ("?" when the table lacks
// it, which a test of each table rules out).
template <typename Entry, size_t N>
const char* enum_name(const Entry (&table)[N], decltype(Entry::value) value) {
  for (const auto& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "?";
}

// The values' own names, in table order: for CLI::IsMember and help texts.
template <typename Entry, size_t N>
std::vector<std::string> enum_names(const Entry (&table)[N]) {
  std::vector<std::string> names;
  for (const auto& entry : table) {
    if (enum_name(table, entry.value) == entry.name) names.emplace_back(entry.name);
  }
  return names;
}

// "a, b or c".
template <typename Entry, size_t N>
std::string enum_choices(const Entry (&table)[N]) {
  const std::vector<std::string> names = enum_names(table);
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return text;
}

// The value named `text` (any of its spellings). Throws InvalidInput
// "<what> 'text': expected a, b or c".
template <typename Entry, size_t N>
decltype(Entry::value) parse_enum(const Entry (&table)[N], const std::string& text, const std::string& what) {
  for (const auto& entry : table) {
    if (text == entry.name) return entry.value;
  }
  throw InvalidInput(c10::str(what, " '", text, "': expected ", enum_choices(table)));
}

}  // namespace actkit
