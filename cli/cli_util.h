// Small helpers every subcommand uses.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/models/zoo.h"

namespace actkit::cli {

// A finite number above `low` (or at least `low`): a refusal reads
// "--steps: -5: must be a finite number >= 0" (CLI11's own range checks
// print the largest double as their upper end).
inline CLI::Validator finite_number_from(double low, bool low_allowed) {
  const std::string rule = fmt::format("must be a finite number {} {:g}", low_allowed ? ">=" : ">", low);
  return CLI::Validator(
      [low, low_allowed, rule](std::string& text) -> std::string {
        double v = 0;
        std::istringstream in(text);
        in >> v;
        const bool number = !in.fail() && (in >> std::ws).eof();
        if (number && std::isfinite(v) && (v > low || (low_allowed && v == low))) return "";
        return text + ": " + rule;
      },
      low_allowed ? "NUMBER>=" + fmt::format("{:g}", low) : "NUMBER>" + fmt::format("{:g}", low), "finite number");
}
inline const CLI::Validator kPositiveNumber = finite_number_from(0, false);
inline const CLI::Validator kNonNegativeNumber = finite_number_from(0, true);

// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Zoo models that take token sequences (--seq-len) rather than images.
// Throws InvalidInput for an unknown model.
inline bool is_token_model(const std::string& model) { return find_model(model).input == InputKind::kTokens; }

// The input length a command runs `model` at: --seq-len for token models,
// --image-size otherwise (0 = not given, use the default). Throws
// InvalidInput naming `command` when the wrong one is given.
inline int64_t input_length(const std::string& command, const std::string& model, int64_t image_size,
                            int64_t seq_len, int64_t default_image, int64_t default_seq = 256) {
  const bool tokens = is_token_model(model);
  if (tokens && image_size != 0) throw InvalidInput(command + ": " + model + " takes --seq-len, not --image-size");
  if (!tokens && seq_len != 0) throw InvalidInput(command + ": " + model + " takes --image-size, not --seq-len");
  if (tokens) return seq_len != 0 ? seq_len : default_seq;
  return image_size != 0 ? image_size : default_image;
}

// The arguments `actkit` was started with (argv[1...]), for commands that
// start themselves again in other processes.
inline std::vector<std::string>& command_line() {
  static std::vector<std::string> args;
  return args;
}

// What a training command says (on stderr) when it resumes from a
// checkpoint that holds no controller state: `who` names the rank's part.
inline void print_no_controller_state(const std::string& who, const std::string& checkpoint) {
  fmt::print(stderr, "{}: {} holds no controller state (saved by an older ACTkit): the level's rounding counters and "
             "bit budgets start afresh, so the run does not continue bit for bit\n", who, checkpoint);
}

inline std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

// --json PATH, as every command that reports results declares it.
inline void add_json_option(CLI::App* command, std::string* path) {
  command->add_option("--json", *path, "Also write the results as JSON to this file");
}

// Writes `j` (pretty-printed) to `path`, whole or not at all; throws
// IoError naming the file and the cause if it cannot.
inline void write_json(const std::string& path, const nlohmann::json& j) {
  const std::string text = j.dump(2) + "\n";
  files::write_output_file(path, text.data(), text.size());
}

}  // namespace actkit::cli
