// `actkit generate`: text from a Hugging Face folder's language model (one
// fine-tuned by `actkit train --init DIR --save-hf OUT`, say).
#include <fmt/core.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "actkit/app/generate.h"
#include "cli_util.h"
#include "commands.h"

namespace actkit::cli {
namespace {

struct GenerateArgs {
  app::GenerateConfig config;
  bool greedy = false;
  bool sample = false;  // --temperature or --top-p given
  std::string json_path;
};

void run_generate(GenerateArgs& a) {
  app::GenerateConfig& c = a.config;
  if (a.greedy && a.sample) throw InvalidInput("generate: --greedy and --temperature/--top-p exclude each other");
  c.sampling = a.sample ? app::Sampling::kNucleus : app::Sampling::kGreedy;
  if (!a.json_path.empty()) files::check_writable_file(a.json_path);
  const app::GenerateResult r = app::generate(c, [](const std::string& piece) {
    fmt::print("{}", piece);
    std::fflush(stdout);
  });
  fmt::print("\n[{} prompt tokens, {} generated{}]\n", r.prompt_tokens.size(), r.tokens.size(),
             r.ended ? ", ended by the model" : "");
  if (!a.json_path.empty()) {
    write_json(a.json_path, {{"init", c.init},
                             {"architecture", r.architecture},
                             {"prompt", c.prompt},
                             {"prompt_tokens", r.prompt_tokens},
                             {"tokens", r.tokens},
                             {"text", r.text},
                             {"ended", r.ended},
                             {"sampling", c.sampling == app::Sampling::kGreedy ? "greedy" : "nucleus"},
                             {"temperature", c.temperature},
                             {"top_p", c.top_p},
                             {"seed", c.seed},
                             {"last_logits", r.last_logits}});
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  app::GenerateConfig& c = a->config;
  CLI::App* g = app.add_subcommand("generate", "Generate text with a Hugging Face folder's language model");
  g->add_option("--init", c.init, "The Hugging Face folder (config.json, safetensors, tokenizer)")->required();
  g->add_option("--prompt", c.prompt, "The text to continue")->required();
  g->add_option("--max-new-tokens", c.max_new_tokens, "Tokens to generate at most")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  g->add_flag("--greedy", a->greedy, "The most likely token every time (the default)");
  g->add_option("--temperature", c.temperature, "Sample at this temperature (top-p sampling)")
      ->check(kPositiveNumber)
      ->each([a](const std::string&) { a->sample = true; });
  g->add_option("--top-p", c.top_p, "Sample from the smallest set of tokens holding this much probability")
      ->check(CLI::Range(0.0, 1.0))
      ->each([a](const std::string&) { a->sample = true; });
  g->add_option("--seed", c.seed, "Seed of the sampling")->check(kNonNegativeNumber)->capture_default_str();
  g->add_option("--device", c.device, "cpu or cuda[:N]")->capture_default_str();
  add_json_option(g, &a->json_path);
  g->callback([a] { run_generate(*a); });
}

}  // namespace actkit::cli
