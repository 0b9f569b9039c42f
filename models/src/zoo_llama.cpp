// A Llama / Qwen2-style decoder: transformers' LlamaForCausalLM and
// Qwen2ForCausalLM (their state-dict names without the leading "model."),
// with the same arithmetic, so that their fp32 weights give their logits.
// RMSNorm before each sublayer, rotary positions, grouped-query attention, a
// SwiGLU MLP. Every layer that saves activations (Linear, RMSNorm, SiLU, the
// gating product, Softmax, Dropout and the two attention products) is a
// module in a slot convert() can swap.
#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <cmath>
#include <limits>
#include <utility>

#include "actkit/core/errors.h"
#include "actkit/layers/branch_point.h"
#include "actkit/layers/modules.h"
#include "actkit/models/zoo.h"
#include "zoo_registry.h"

namespace actkit {
namespace {

namespace nn = torch::nn;

// ModelOptions resolved and checked (llama_shape()).
struct LlamaShape {
  int64_t vocab, layers, hidden, heads, kv_heads, head_dim, intermediate;
  double eps, dropout, theta;
  RopeScaling scaling;
  bool tie_embeddings, attention_bias, output_bias;
  int64_t window;  // ModelOptions::sliding_window
  bool qk_norm;    // ModelOptions::qk_norm
};

// The rotary inverse frequencies, (head_dim / 2) in fp32 on the CPU, with
// transformers' operations in its order (compute_default_rope_parameters,
// _compute_llama3_parameters): the same fp32 roundings, so the same values.
// Python's `s / t` for a number s is t.reciprocal() * s.
at::Tensor llama_inv_freq(int64_t head_dim, double theta, const RopeScaling& s) {
  const at::Tensor inv_freq = at::pow(theta, at::arange(0, head_dim, 2, at::kFloat) / head_dim).reciprocal();
  if (s.kind == RopeScaling::Kind::kNone) return inv_freq;
  const double old_context = double(s.original_max_positions);
  const double low_wavelen = old_context / s.low_freq_factor;
  const double high_wavelen = old_context / s.high_freq_factor;
  const double pi = 3.141592653589793;  // Python's math.pi
  const at::Tensor wavelen = inv_freq.reciprocal() * (2 * pi);
  // Long wavelengths are divided by the factor, short ones kept, and the band
  // between interpolated.
  const at::Tensor scaled = at::where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq);
  const at::Tensor smooth = (wavelen.reciprocal() * old_context - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const at::Tensor medium = at::logical_not(wavelen < high_wavelen).logical_and(at::logical_not(wavelen > low_wavelen));
  return at::where(medium, smoothed, scaled);
}

// cos and sin of position x frequency, as transformers' LlamaRotaryEmbedding
// (positions 0..T-1, each frequency twice: the halves rotate_half pairs).
// Every block of a forward asks for the same tables, so the last ones are
// kept. Not thread-safe (nor is a module's forward).
class LlamaRotary {
 public:
  LlamaRotary(int64_t head_dim, double theta, const RopeScaling& scaling)
      : inv_freq_(llama_inv_freq(head_dim, theta, scaling)) {}

  // (T, head_dim) tables on `like`'s device in its dtype.
  std::pair<at::Tensor, at::Tensor> tables(int64_t t, const at::Tensor& like) {
    if (t != t_ || like.device() != cos_.device() || like.scalar_type() != cos_.scalar_type()) {
      torch::NoGradGuard no_grad;
      // fp32 on the input's device, then cast, as transformers does.
      const at::Tensor positions = at::arange(t, like.options().dtype(at::kLong)).to(at::kFloat);
      const at::Tensor freqs = positions.unsqueeze(-1) * inv_freq_.to(like.device());
      const at::Tensor emb = at::cat({freqs, freqs}, -1);
      cos_ = emb.cos().to(like.scalar_type());
      sin_ = emb.sin().to(like.scalar_type());
      t_ = t;
    }
    return {cos_, sin_};
  }

 private:
  at::Tensor inv_freq_;
  int64_t t_ = -1;
  at::Tensor cos_ = at::empty({0}), sin_;
};

// x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1) for the halves
// x1, x2 of the last dim (transformers' non-interleaved rotary). This needs
// no compressed layer: the backward of a product by the constant cos or sin
// reads only that constant (autograd keeps an operand only for the other
// operand's gradient, and the tables need none), and narrow, neg and cat
// keep nothing, so no activation is saved here at all.
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

class LlamaAttentionImpl : public ReplaceableModule {
 public:
  LlamaAttentionImpl(const LlamaShape& c, std::shared_ptr<LlamaRotary> rotary)
      : ReplaceableModule("LlamaAttention"), heads_(c.heads), kv_heads_(c.kv_heads), head_dim_(c.head_dim),
        window_(c.window),
        scaling_(std::pow(double(c.head_dim), -0.5)), rotary_(std::move(rotary)),
        q_proj_(add_slot("q_proj", nn::Linear(nn::LinearOptions(c.hidden, c.heads * c.head_dim)
                                                   .bias(c.attention_bias)))),
        k_proj_(add_slot("k_proj", nn::Linear(nn::LinearOptions(c.hidden, c.kv_heads * c.head_dim)
                                                   .bias(c.attention_bias)))),
        v_proj_(add_slot("v_proj", nn::Linear(nn::LinearOptions(c.hidden, c.kv_heads * c.head_dim)
                                                   .bias(c.attention_bias)))),
        o_proj_(add_slot("o_proj", nn::Linear(nn::LinearOptions(c.heads * c.head_dim, c.hidden)
                                                   .bias(c.output_bias)))),
        scores_(add_slot("scores", MatMul())),
        softmax_(add_slot("softmax", nn::Softmax(-1))),
        attn_drop_(add_slot("attn_drop", nn::Dropout(c.dropout))),
        context_(add_slot("context", MatMul())) {
    // After o_proj, as transformers registers them (named_parameters' order).
    if (c.qk_norm) {
      q_norm_ = &add_slot("q_norm", RMSNorm(c.head_dim, c.eps));
      k_norm_ = &add_slot("k_norm", RMSNorm(c.head_dim, c.eps));
    }
  }

  at::Tensor forward(const at::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), rep = heads_ / kv_heads_;
    // (b, t, n·d) -> (b, n, t, d); Qwen3 normalizes each head's vector first.
    const auto split = [&](const at::Tensor& m, int64_t n, nn::AnyModule* norm = nullptr) {
      at::Tensor h = m.view({b, t, n, head_dim_});
      if (norm != nullptr) h = norm->forward(h);
      return h.transpose(1, 2);
    };
    const at::Tensor qp = q_proj_.forward(x);
    const auto tables = rotary_->tables(t, qp);  // cos, sin
    const at::Tensor q = apply_rotary(split(qp, heads_, q_norm_), tables.first, tables.second);
    const at::Tensor k = apply_rotary(split(k_proj_.forward(x), kv_heads_, k_norm_), tables.first, tables.second);
    const at::Tensor v = split(v_proj_.forward(x), kv_heads_);
    // Grouped-query attention without repeating k and v (transformers'
    // repeat_kv): the `rep` query heads that share a key/value head are
    // stacked along the rows of one product, so head h still meets key/value
    // head h / rep, and the products save k and v kv_heads wide, not heads.
    at::Tensor s = scores_.forward(q.reshape({b, kv_heads_, rep * t, head_dim_}), k.transpose(-1, -2))
                       .reshape({b, heads_, t, t}) * scaling_;
    const at::Tensor all = at::ones({t, t}, x.options().dtype(at::kBool));
    at::Tensor hidden = all.triu(1);                                       // the future
    if (window_ > 0 && window_ < t) hidden = hidden.logical_or(all.tril(-window_));  // beyond the window
    s = s.masked_fill(hidden, -std::numeric_limits<double>::infinity());
    // Softmax in fp32 (a no-op cast for an fp32 model), as transformers does.
    const at::Tensor p = attn_drop_.forward(softmax_.forward(s.to(at::kFloat)).to(q.scalar_type()));
    const at::Tensor y = context_.forward(p.reshape({b, kv_heads_, rep * t, t}), v)
                             .reshape({b, heads_, t, head_dim_})
                             .transpose(1, 2)
                             .reshape({b, t, heads_ * head_dim_});
    return o_proj_.forward(y);
  }

 private:
  int64_t heads_, kv_heads_, head_dim_, window_;
  double scaling_;  // head_dim ** -0.5, as transformers computes it
  std::shared_ptr<LlamaRotary> rotary_;
  nn::AnyModule &q_proj_, &k_proj_, &v_proj_, &o_proj_, &scores_, &softmax_, &attn_drop_, &context_;
  nn::AnyModule* q_norm_ = nullptr;  // Qwen3's
  nn::AnyModule* k_norm_ = nullptr;
};
TORCH_MODULE(LlamaAttention);

// down_proj(silu(gate_proj(x)) * up_proj(x)); gate and up read one input,
// saved once.
class LlamaMlpImpl : public ReplaceableModule {
 public:
  explicit LlamaMlpImpl(const LlamaShape& c)
      : ReplaceableModule("LlamaMlp"),
        gate_proj_(add_slot("gate_proj", nn::Linear(nn::LinearOptions(c.hidden, c.intermediate).bias(false)))),
        up_proj_(add_slot("up_proj", nn::Linear(nn::LinearOptions(c.hidden, c.intermediate).bias(false)))),
        down_proj_(add_slot("down_proj", nn::Linear(nn::LinearOptions(c.intermediate, c.hidden).bias(false)))),
        act_(add_slot("act_fn", nn::SiLU())),
        gate_(add_slot("gate", Mul())) {}

  at::Tensor forward(const at::Tensor& x) {
    return down_proj_.forward(gate_.forward(act_.forward(gate_proj_.forward(x)), up_proj_.forward(x)));
  }

 private:
  nn::AnyModule &gate_proj_, &up_proj_, &down_proj_, &act_, &gate_;
};
TORCH_MODULE(LlamaMlp);

class LlamaBlockImpl : public ReplaceableModule {
 public:
  LlamaBlockImpl(const LlamaShape& c, const std::shared_ptr<LlamaRotary>& rotary)
      : ReplaceableModule("LlamaDecoderLayer") {
    // transformers' order of registration, so named_parameters() lists the
    // tensors in its state dict's order.
    self_attn_ = register_module("self_attn", LlamaAttention(c, rotary));
    mlp_ = register_module("mlp", LlamaMlp(c));
    input_layernorm_ = &add_slot("input_layernorm", RMSNorm(c.hidden, c.eps));
    post_attention_layernorm_ = &add_slot("post_attention_layernorm", RMSNorm(c.hidden, c.eps));
  }

  // Each residual input feeds its branch and the shortcut through
  // branch_point(), so backward sums the two gradients in place.
  at::Tensor forward(const at::Tensor& input) {
    const auto x = branch_point(input);
    const auto h = branch_point(x[1] + self_attn_->forward(input_layernorm_->forward(x[0])));
    return h[1] + mlp_->forward(post_attention_layernorm_->forward(h[0]));
  }

 private:
  LlamaAttention self_attn_{nullptr};
  LlamaMlp mlp_{nullptr};
  nn::AnyModule *input_layernorm_ = nullptr, *post_attention_layernorm_ = nullptr;
};
TORCH_MODULE(LlamaBlock);

class LlamaImpl : public ZooModel {
 public:
  LlamaImpl(const std::string& name, const LlamaShape& c)
      : ZooModel(name, Task::kLanguageModel), vocab_(c.vocab), tied_(c.tie_embeddings) {
    const auto rotary = std::make_shared<LlamaRotary>(c.head_dim, c.theta, c.scaling);
    embed_tokens_ = register_module("embed_tokens", nn::Embedding(c.vocab, c.hidden));
    layers_ = register_module("layers", nn::ModuleList());
    for (int64_t i = 0; i < c.layers; ++i) layers_->push_back(LlamaBlock(c, rotary));
    norm_ = &add_slot("norm", RMSNorm(c.hidden, c.eps));
    if (!tied_) lm_head_ = &add_slot("lm_head", nn::Linear(nn::LinearOptions(c.hidden, c.vocab).bias(false)));
    // transformers' initialization (initializer_range 0.02): N(0, 0.02) for
    // the embedding and every weight matrix, zero biases; the norms start
    // at ones (RMSNorm's own).
    torch::NoGradGuard no_grad;
    for (auto& item : named_parameters()) {
      at::Tensor p = item.value();
      const std::string& n = item.key();
      if (p.dim() >= 2) {
        p.normal_(0.0, 0.02);
      } else if (n.size() >= 4 && n.compare(n.size() - 4, 4, "bias") == 0) {
        p.zero_();
      }
    }
  }

  at::Tensor forward(const at::Tensor& tokens) override {
    at::Tensor x = embed_tokens_->forward(tokens);
    for (const auto& block : *layers_) x = block->as<LlamaBlockImpl>()->forward(x);
    return head(x);
  }

  at::Tensor example_input(int64_t batch, int64_t length) const override {
    return at::randint(0, vocab_, {batch, length}, at::kLong);
  }

  // embeddings, layers.0 ... layers.{L-1}, head: the same arithmetic as
  // forward(). Tied, the head uses embed_tokens.weight too.
  std::vector<ModelPiece> pieces() override {
    std::vector<ModelPiece> p;
    p.push_back({"embeddings", [this](const at::Tensor& tokens) { return embed_tokens_->forward(tokens); },
                 {"embed_tokens.weight"}});
    for (size_t i = 0; i < layers_->size(); ++i) {
      const std::string prefix = c10::str("layers.", i);
      std::vector<std::string> names;
      for (const auto& np : layers_[i]->named_parameters()) names.push_back(prefix + "." + np.key());
      p.push_back(
          {prefix, [this, i](const at::Tensor& x) { return layers_[i]->as<LlamaBlockImpl>()->forward(x); }, names});
    }
    std::vector<std::string> head_names{"norm.weight", tied_ ? "embed_tokens.weight" : "lm_head.weight"};
    p.push_back({"head", [this](const at::Tensor& x) { return head(x); }, head_names});
    return p;
  }

 private:
  // The final norm and the output projection: lm_head, or tied the token
  // embedding's weight, as F.linear computes both in transformers.
  at::Tensor head(const at::Tensor& x) {
    const at::Tensor h = norm_->forward(x);
    return tied_ ? at::linear(h, embed_tokens_->weight) : lm_head_->forward(h);
  }

  int64_t vocab_;
  bool tied_;
  nn::Embedding embed_tokens_{nullptr};
  nn::ModuleList layers_{nullptr};
  nn::AnyModule *norm_ = nullptr, *lm_head_ = nullptr;
};

// `o` resolved (defaults filled in) and checked; InvalidInput names the
// option at fault.
LlamaShape llama_shape(const std::string& name, const ModelOptions& o) {
  const auto fail = [&](const std::string& what) { throw InvalidInput(c10::str(name, ": ", what)); };
  if (o.vocab_size < 1) fail(c10::str("vocab_size (", o.vocab_size, ") must be positive"));
  if (o.layers < 0) fail(c10::str("layers (", o.layers, ") must be >= 0"));
  if (o.hidden < 1 || o.heads < 1) fail(c10::str("hidden (", o.hidden, ") and heads (", o.heads, ") must be positive"));
  LlamaShape c{};
  c.vocab = o.vocab_size;
  c.layers = o.layers;
  c.hidden = o.hidden;
  c.heads = o.heads;
  c.kv_heads = o.kv_heads == 0 ? o.heads : o.kv_heads;
  if (c.kv_heads < 1 || o.heads % c.kv_heads != 0) {
    fail(c10::str("heads (", o.heads, ") must be a multiple of kv_heads (", o.kv_heads, ")"));
  }
  if (o.head_dim == 0 && o.hidden % o.heads != 0) {
    fail(c10::str("hidden (", o.hidden, ") is not a multiple of heads (", o.heads, "): set head_dim"));
  }
  c.head_dim = o.head_dim == 0 ? o.hidden / o.heads : o.head_dim;
  if (c.head_dim < 2 || c.head_dim % 2 != 0) {
    fail(c10::str("head_dim (", c.head_dim, ") must be even and positive (rotary turns pairs of halves)"));
  }
  if (o.intermediate < 0) fail(c10::str("intermediate (", o.intermediate, ") must be >= 0"));
  // Llama 1/2's SwiGLU width: 8 * hidden / 3, rounded up to a multiple of 256.
  c.intermediate = o.intermediate > 0 ? o.intermediate : (8 * o.hidden / 3 + 255) / 256 * 256;
  if (!(o.norm_eps >= 0)) fail(c10::str("norm_eps (", o.norm_eps, ") must be >= 0"));
  c.eps = o.norm_eps > 0 ? o.norm_eps : 1e-6;
  if (!(o.dropout >= 0 && o.dropout <= 1)) fail(c10::str("dropout (", o.dropout, ") must be in [0, 1]"));
  c.dropout = o.dropout;
  if (!(o.rope_theta > 0)) fail(c10::str("rope_theta (", o.rope_theta, ") must be positive"));
  c.theta = o.rope_theta;
  c.scaling = o.rope_scaling;
  const RopeScaling& s = o.rope_scaling;
  if (s.kind == RopeScaling::Kind::kLlama3 &&
      !(s.factor > 0 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor &&
        s.original_max_positions > 0)) {
    fail(c10::str("rope_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                  "original_max_positions > 0, got ",
                  s.factor, ", ", s.low_freq_factor, ", ", s.high_freq_factor, ", ", s.original_max_positions));
  }
  c.tie_embeddings = o.tie_embeddings;
  c.attention_bias = o.attention_bias;
  c.output_bias = o.output_bias;
  if (o.sliding_window < 0) fail(c10::str("sliding_window (", o.sliding_window, ") must be >= 0 (0: none)"));
  c.window = o.sliding_window;
  c.qk_norm = o.qk_norm;
  return c;
}

}  // namespace

std::vector<ModelEntry> detail::llama_models() {
  return {
      {"llama", Task::kLanguageModel, InputKind::kTokens,
       "Llama / Qwen2-style decoder (RMSNorm, rotary, grouped-query attention, SwiGLU), shape from the options",
       [](const std::string& name, const ModelOptions& o) -> std::shared_ptr<ZooModel> {
         return std::make_shared<LlamaImpl>(name, llama_shape(name, o));
       }},
  };
}

}  // namespace actkit
