#include "actkit/app/generate.h"
#include "actkit/app/run_spec.h"

#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

#include "actkit/hf/hf_folder.h"
#include "actkit/measure/run_device.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/text/tokenizer.h"

namespace actkit::app {
namespace {

// The next token from the logits of the last position, among the first
// `usable` ids (those the tokenizer can decode: a model's vocabulary is
// often padded past its tokenizer's).
int64_t choose(const at::Tensor& all_logits, int64_t usable, const GenerateConfig& c, at::Generator& gen,
               int64_t step) {
  const at::Tensor logits = all_logits.narrow(0, 0, usable);
  if (!at::isfinite(logits).all().item<bool>()) {
    throw Error(c10::str("generate: the model's logits at new token ", step + 1, " are not finite"));
  }
  if (c.sampling == Sampling::kGreedy) return logits.argmax().item<int64_t>();
  const at::Tensor scaled = logits.to(at::kDouble) / c.temperature;
  if (!at::isfinite(scaled).all().item<bool>()) {
    throw InvalidInput(c10::str("generate: --temperature ", c.temperature, " is too small for these logits"));
  }
  const at::Tensor p = at::softmax(scaled, 0);
  const auto sorted = p.sort(0, /*descending=*/true);
  const at::Tensor probs = std::get<0>(sorted), order = std::get<1>(sorted);
  // The nucleus: every token whose preceding mass is below top_p (the most
  // likely one always).
  const at::Tensor before = probs.cumsum(0) - probs;
  const at::Tensor kept = probs.masked_fill(before >= c.top_p, 0.0);
  const int64_t pick = at::multinomial(kept / kept.sum(), 1, false, gen).item<int64_t>();
  return order[pick].item<int64_t>();
}

// Whether decoded text ends inside a UTF-8 sequence still to be completed
// (the decoder's replacement character): not yet printable.
bool ends_unfinished(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

GenerateResult generate(const GenerateConfig& c, const std::function<void(const std::string&)>& on_token) {
  if (c.max_new_tokens < 1) throw InvalidInput("generate: --max-new-tokens must be >= 1");
  if (c.sampling == Sampling::kNucleus && (!(c.temperature > 0) || !std::isfinite(c.temperature))) {
    throw InvalidInput(c10::str("generate: --temperature must be a finite number > 0, got ", c.temperature));
  }
  if (c.sampling == Sampling::kNucleus && !(c.top_p > 0 && c.top_p <= 1)) {
    throw InvalidInput(c10::str("generate: --top-p must be in (0, 1], got ", c.top_p));
  }
  if (c.prompt.empty()) throw InvalidInput("generate: the prompt is empty");
  const at::Device device = parse_run_device(c.device, "generate");
  // The folder's model and tokenizer, opened as the training commands open them.
  ModelSpec spec;
  spec.init = c.init;
  spec.hf = read_hf_config(c.init);
  spec.zoo = spec.hf->zoo_name;
  const HfModelInfo& info = *spec.hf;
  if (!spec.text()) {
    throw InvalidInput(c10::str("generate: ", c.init, " holds a ", info.architecture, ", not a language model"));
  }
  const std::shared_ptr<const Tokenizer> tokenizer = open_tokenizer(spec);
  HfLoadReport loaded;
  std::shared_ptr<ZooModel> model = open_model(spec, &loaded);
  if (!loaded.fresh.empty()) {
    throw InvalidInput(c10::str("generate: ", c.init, " holds a bare ", info.architecture, " without ",
                                loaded.fresh.front(), ": it has no trained head to generate with"));
  }
  model->to(device);
  model->eval();

  GenerateResult r;
  r.architecture = info.architecture;
  // The prompt as transformers' tokenizer of the folder encodes it: with
  // the special tokens (a BOS, mostly) its own settings add, and no other.
  r.prompt_tokens = tokenizer->encode_with_special_tokens(c.prompt);
  if (r.prompt_tokens.empty()) throw InvalidInput("generate: the prompt makes no tokens");
  // The folder's end-of-text ids and the tokenizer's own.
  const std::vector<int64_t> end_ids = hf_end_ids(info);
  std::set<int64_t> eos(end_ids.begin(), end_ids.end());
  if (tokenizer->eos_id()) eos.insert(*tokenizer->eos_id());
  at::Generator gen = at::detail::createCPUGenerator(c.seed);
  std::vector<int64_t> context = r.prompt_tokens;
  size_t printed = 0;
  std::string decoded;
  torch::NoGradGuard no_grad;
  for (int64_t step = 0; step < c.max_new_tokens; ++step) {
    const int64_t window = std::min<int64_t>(int64_t(context.size()), info.options.max_positions);
    const at::Tensor ids =
        at::tensor(std::vector<int64_t>(context.end() - window, context.end()), at::kLong).unsqueeze(0).to(device);
    const at::Tensor logits = model->forward(ids).select(0, 0).select(0, window - 1).to(at::kCPU, at::kFloat);
    if (step == 0) r.last_logits.assign(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
    const int64_t next = choose(logits, tokenizer->vocab_size(), c, gen, step);
    r.tokens.push_back(next);
    context.push_back(next);
    if (eos.count(next) != 0) {
      r.ended = true;
      break;
    }
    decoded = tokenizer->decode(r.tokens);
    if (on_token && !ends_unfinished(decoded) && decoded.size() > printed) {
      on_token(decoded.substr(printed));
      printed = decoded.size();
    }
  }
  std::vector<int64_t> text_tokens = r.tokens;
  if (r.ended) text_tokens.pop_back();
  r.text = tokenizer->decode(text_tokens);
  if (on_token && r.text.size() > printed) on_token(r.text.substr(std::min(printed, r.text.size())));
  return r;
}

}  // namespace actkit::app
