// GPT-2, BERT-style and ViT models on one transformer block. Every layer
// that saves activations (Linear, LayerNorm, GELU, Softmax, Dropout and the
// two attention products) is a module convert() can swap.
#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <cmath>

#include "actkit/models/zoo.h"
#include "actkit/core/errors.h"
#include "actkit/layers/branch_point.h"
#include "actkit/layers/modules.h"
#include "zoo_registry.h"

namespace actkit {
namespace {

namespace nn = torch::nn;

// ModelOptions::norm_eps where set, else the norm's own default.
double eps_or(const ModelOptions& o, double fallback) { return o.norm_eps > 0 ? o.norm_eps : fallback; }

struct BlockConfig {
  int64_t hidden, heads;
  double dropout;
  bool causal;       // GPT-2: each token sees only the past
  bool pre_norm;     // GPT-2 / ViT: x + f(ln(x)); BERT: ln(x + f(x))
  std::string gelu;  // "tanh" (GPT-2) or "none"
  int64_t intermediate;  // MLP width
  double eps;            // the blocks' LayerNorm epsilon
};

class SelfAttentionImpl : public ReplaceableModule {
 public:
  explicit SelfAttentionImpl(const BlockConfig& c)
      : ReplaceableModule("SelfAttention"), heads_(c.heads), causal_(c.causal),
        c_attn_(add_slot("c_attn", nn::Linear(c.hidden, 3 * c.hidden))),
        scores_(add_slot("scores", MatMul())),
        softmax_(add_slot("softmax", nn::Softmax(-1))),
        attn_drop_(add_slot("attn_drop", nn::Dropout(c.dropout))),
        context_(add_slot("context", MatMul())),
        c_proj_(add_slot("c_proj", nn::Linear(c.hidden, c.hidden))),
        resid_drop_(add_slot("resid_drop", nn::Dropout(c.dropout))) {}

  at::Tensor forward(const at::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / heads_;
    const auto qkv = c_attn_.forward(x).split(c, -1);
    auto heads = [&](const at::Tensor& m) { return m.view({b, t, heads_, d}).transpose(1, 2); };
    const at::Tensor q = heads(qkv[0]) * (1.0 / std::sqrt(double(d)));
    at::Tensor s = scores_.forward(q, heads(qkv[1]).transpose(-1, -2));
    if (causal_) {
      const at::Tensor future = at::ones({t, t}, x.options().dtype(at::kBool)).triu(1);
      s = s.masked_fill(future, -std::numeric_limits<float>::infinity());
    }
    const at::Tensor p = attn_drop_.forward(softmax_.forward(s));
    const at::Tensor y = context_.forward(p, heads(qkv[2])).transpose(1, 2).reshape({b, t, c});
    return resid_drop_.forward(c_proj_.forward(y));
  }

 private:
  int64_t heads_;
  bool causal_;
  nn::AnyModule &c_attn_, &scores_, &softmax_, &attn_drop_, &context_, &c_proj_, &resid_drop_;
};
TORCH_MODULE(SelfAttention);

class MlpImpl : public ReplaceableModule {
 public:
  explicit MlpImpl(const BlockConfig& c)
      : ReplaceableModule("Mlp"),
        c_fc_(add_slot("c_fc", nn::Linear(c.hidden, c.intermediate))),
        act_(add_slot("act", nn::GELU(nn::GELUOptions().approximate(c.gelu)))),
        c_proj_(add_slot("c_proj", nn::Linear(c.intermediate, c.hidden))),
        drop_(add_slot("drop", nn::Dropout(c.dropout))) {}

  at::Tensor forward(const at::Tensor& x) { return drop_.forward(c_proj_.forward(act_.forward(c_fc_.forward(x)))); }

 private:
  nn::AnyModule &c_fc_, &act_, &c_proj_, &drop_;
};
TORCH_MODULE(Mlp);

class BlockImpl : public ReplaceableModule {
 public:
  explicit BlockImpl(const BlockConfig& c)
      : ReplaceableModule("TransformerBlock"), pre_norm_(c.pre_norm),
        ln_1_(add_slot("ln_1", nn::LayerNorm(nn::LayerNormOptions({c.hidden}).eps(c.eps)))),
        ln_2_(add_slot("ln_2", nn::LayerNorm(nn::LayerNormOptions({c.hidden}).eps(c.eps)))) {
    attn_ = register_module("attn", SelfAttention(c));
    mlp_ = register_module("mlp", Mlp(c));
  }

  // Each residual input feeds its branch and the shortcut through
  // branch_point(), so backward sums the two gradients in place.
  at::Tensor forward(const at::Tensor& input) {
    const auto x = branch_point(input);
    if (pre_norm_) {
      const auto h = branch_point(x[1] + attn_->forward(ln_1_.forward(x[0])));
      return h[1] + mlp_->forward(ln_2_.forward(h[0]));
    }
    const auto h = branch_point(ln_1_.forward(x[1] + attn_->forward(x[0])));
    return ln_2_.forward(h[1] + mlp_->forward(h[0]));
  }

 private:
  bool pre_norm_;
  nn::AnyModule &ln_1_, &ln_2_;
  SelfAttention attn_{nullptr};
  Mlp mlp_{nullptr};
};
TORCH_MODULE(Block);

nn::ModuleList make_blocks(int64_t n, const BlockConfig& c) {
  nn::ModuleList blocks;
  for (int64_t i = 0; i < n; ++i) blocks->push_back(Block(c));
  return blocks;
}

at::Tensor run_blocks(const nn::ModuleList& blocks, at::Tensor x) {
  for (const auto& b : *blocks) x = b->as<BlockImpl>()->forward(x);
  return x;
}

class GPT2Impl : public ZooModel {
 public:
  GPT2Impl(const std::string& name, const ModelOptions& o)
      : ZooModel(name, Task::kLanguageModel), vocab_(o.vocab_size), max_positions_(o.max_positions) {
    const BlockConfig c{o.hidden, o.heads, o.dropout, /*causal=*/true, /*pre_norm=*/true, "tanh", o.intermediate,
                        eps_or(o, 1e-5)};
    wte_ = register_module("wte", nn::Embedding(o.vocab_size, o.hidden));
    wpe_ = register_module("wpe", nn::Embedding(o.max_positions, o.hidden));
    drop_ = &add_slot("drop", nn::Dropout(o.dropout));
    h_ = register_module("h", make_blocks(o.layers, c));
    ln_f_ = &add_slot("ln_f", nn::LayerNorm(nn::LayerNormOptions({o.hidden}).eps(eps_or(o, 1e-5))));
    // GPT-2's initialization: N(0, 0.02) for embeddings and weights, the
    // residual projections scaled down by sqrt(2 * layers), zero biases.
    // LibTorch's defaults (N(0, 1) embeddings) would start the tied output
    // projection with logits of size sqrt(hidden) and a loss far above
    // log(vocab).
    torch::NoGradGuard no_grad;
    for (auto& item : named_parameters()) {
      at::Tensor p = item.value();
      const std::string& n = item.key();
      if (p.dim() < 2) {
        if (n.size() >= 4 && n.compare(n.size() - 4, 4, "bias") == 0) p.zero_();
        continue;
      }
      const bool residual = n.find("c_proj.weight") != std::string::npos;
      p.normal_(0.0, residual ? 0.02 / std::sqrt(2.0 * double(o.layers)) : 0.02);
    }
  }

  at::Tensor forward(const at::Tensor& tokens) override {
    const int64_t t = tokens.size(1);
    if (t > max_positions_) {
      throw InvalidInput(c10::str(name(), ": sequence of ", t, " tokens exceeds ", max_positions_, " positions"));
    }
    const at::Tensor pos = at::arange(t, tokens.options().dtype(at::kLong));
    at::Tensor x = drop_->forward(wte_->forward(tokens) + wpe_->forward(pos));
    x = ln_f_->forward(run_blocks(h_, x));
    // The output projection is tied to the token embedding, as in GPT-2.
    return at::matmul(x, wte_->weight.t());
  }

  at::Tensor example_input(int64_t batch, int64_t length) const override {
    return at::randint(0, vocab_, {batch, length}, at::kLong);
  }

  // embeddings, h.0 ... h.{L-1}, head: the same arithmetic as forward().
  std::vector<ModelPiece> pieces() override {
    std::vector<ModelPiece> p;
    p.push_back({"embeddings",
                 [this](const at::Tensor& tokens) {
                   const int64_t t = tokens.size(1);
                   if (t > max_positions_) {
                     throw InvalidInput(c10::str(name(), ": sequence of ", t, " tokens exceeds ", max_positions_,
                                                 " positions"));
                   }
                   const at::Tensor pos = at::arange(t, tokens.options().dtype(at::kLong));
                   return drop_->forward(wte_->forward(tokens) + wpe_->forward(pos));
                 },
                 {"wte.weight", "wpe.weight"}});
    for (size_t i = 0; i < h_->size(); ++i) {
      const std::string prefix = c10::str("h.", i);
      std::vector<std::string> names;
      for (const auto& np : h_[i]->named_parameters()) names.push_back(prefix + "." + np.key());
      p.push_back({prefix, [this, i](const at::Tensor& x) { return h_[i]->as<BlockImpl>()->forward(x); }, names});
    }
    std::vector<std::string> head{"wte.weight"};
    for (const auto& np : ln_f_->ptr()->named_parameters()) head.push_back("ln_f." + np.key());
    p.push_back({"head", [this](const at::Tensor& x) { return at::matmul(ln_f_->forward(x), wte_->weight.t()); },
                 head});
    return p;
  }

 private:
  int64_t vocab_, max_positions_;
  nn::Embedding wte_{nullptr}, wpe_{nullptr};
  nn::AnyModule* drop_ = nullptr;
  nn::ModuleList h_{nullptr};
  nn::AnyModule* ln_f_ = nullptr;
};

class BertImpl : public ZooModel {
 public:
  BertImpl(const std::string& name, const ModelOptions& o)
      : ZooModel(name, Task::kClassification), vocab_(o.vocab_size), max_positions_(o.max_positions) {
    num_classes_ = o.num_classes;
    const BlockConfig c{o.hidden, o.heads, o.dropout, /*causal=*/false, /*pre_norm=*/false, "none", o.intermediate,
                        eps_or(o, 1e-5)};
    word_embeddings_ = register_module("word_embeddings", nn::Embedding(o.vocab_size, o.hidden));
    position_embeddings_ = register_module("position_embeddings", nn::Embedding(o.max_positions, o.hidden));
    emb_norm_ = &add_slot("emb_norm", nn::LayerNorm(nn::LayerNormOptions({o.hidden}).eps(eps_or(o, 1e-12))));
    emb_drop_ = &add_slot("emb_drop", nn::Dropout(o.dropout));
    layer_ = register_module("layer", make_blocks(o.layers, c));
    pooler_ = &add_slot("pooler", nn::Linear(o.hidden, o.hidden));
    classifier_ = &add_slot("classifier", nn::Linear(o.hidden, o.num_classes));
  }

  at::Tensor forward(const at::Tensor& tokens) override {
    const int64_t t = tokens.size(1);
    if (t > max_positions_) {
      throw InvalidInput(c10::str(name(), ": sequence of ", t, " tokens exceeds ", max_positions_, " positions"));
    }
    const at::Tensor pos = at::arange(t, tokens.options().dtype(at::kLong));
    at::Tensor x = emb_drop_->forward(emb_norm_->forward(word_embeddings_->forward(tokens) + position_embeddings_->forward(pos)));
    x = run_blocks(layer_, x);
    const at::Tensor pooled = at::tanh(pooler_->forward(x.select(1, 0)));
    return classifier_->forward(pooled);
  }

  at::Tensor example_input(int64_t batch, int64_t length) const override {
    return at::randint(0, vocab_, {batch, length}, at::kLong);
  }

 private:
  int64_t vocab_, max_positions_;
  nn::Embedding word_embeddings_{nullptr}, position_embeddings_{nullptr};
  nn::AnyModule *emb_norm_ = nullptr, *emb_drop_ = nullptr;
  nn::ModuleList layer_{nullptr};
  nn::AnyModule *pooler_ = nullptr, *classifier_ = nullptr;
};

class ViTImpl : public ZooModel {
 public:
  ViTImpl(const std::string& name, const ModelOptions& o)
      : ZooModel(name, Task::kClassification), patch_(o.patch_size) {
    num_classes_ = o.num_classes;
    in_channels_ = o.in_channels;
    if (o.image_size % o.patch_size != 0) {
      throw InvalidInput(c10::str("vit: image size ", o.image_size, " is not a multiple of the patch size ",
                                  o.patch_size));
    }
    const int64_t patches = (o.image_size / o.patch_size) * (o.image_size / o.patch_size);
    const BlockConfig c{o.hidden, o.heads, o.dropout, /*causal=*/false, /*pre_norm=*/true, "none", o.intermediate,
                        eps_or(o, 1e-5)};
    conv_proj_ = &add_slot("conv_proj", nn::Conv2d(nn::Conv2dOptions(o.in_channels, o.hidden, o.patch_size)
                                                        .stride(o.patch_size)));
    class_token_ = register_parameter("class_token", at::zeros({1, 1, o.hidden}));
    pos_embedding_ = register_parameter("pos_embedding", at::randn({1, patches + 1, o.hidden}) * 0.02);
    drop_ = &add_slot("dropout", nn::Dropout(o.dropout));
    layers_ = register_module("layers", make_blocks(o.layers, c));
    ln_ = &add_slot("ln", nn::LayerNorm(nn::LayerNormOptions({o.hidden}).eps(eps_or(o, 1e-6))));
    head_ = &add_slot("head", nn::Linear(o.hidden, o.num_classes));
  }

  at::Tensor forward(const at::Tensor& images) override {
    at::Tensor x = conv_proj_->forward(images).flatten(2).transpose(1, 2);  // (N, patches, hidden)
    x = at::cat({class_token_.expand({x.size(0), 1, x.size(2)}), x}, 1) + pos_embedding_;
    x = ln_->forward(run_blocks(layers_, drop_->forward(x)));
    return head_->forward(x.select(1, 0));
  }

 private:
  int64_t patch_;
  nn::AnyModule* conv_proj_ = nullptr;
  at::Tensor class_token_, pos_embedding_;
  nn::AnyModule* drop_ = nullptr;
  nn::ModuleList layers_{nullptr};
  nn::AnyModule *ln_ = nullptr, *head_ = nullptr;
};

}  // namespace

namespace {

enum class Family { kGPT2, kBert, kViT };

// The builder of a transformer of `family`; `base` fixes the 12-layer,
// 768-wide, 12-head shape (gpt2-small, bert-base, vit-b16), otherwise the
// options' shape is used.
std::function<std::shared_ptr<ZooModel>(const std::string&, const ModelOptions&)> transformer(Family family,
                                                                                              bool base) {
  return [=](const std::string& name, const ModelOptions& options) -> std::shared_ptr<ZooModel> {
    ModelOptions o = options;
    if (base) {
      o.layers = 12;
      o.hidden = 768;
      o.heads = 12;
    }
    if (o.hidden <= 0 || o.heads <= 0 || o.hidden % o.heads != 0 || o.layers < 0) {
      throw InvalidInput(c10::str(name, ": hidden (", o.hidden, ") must be a positive multiple of heads (", o.heads,
                                  ")"));
    }
    // Options of llama's attention that these blocks cannot honour.
    if (o.kv_heads != 0 && o.kv_heads != o.heads) {
      throw InvalidInput(c10::str(name, ": kv_heads (", o.kv_heads, ") must be 0 or heads (", o.heads,
                                  "); grouped-query attention is llama's"));
    }
    if (o.head_dim != 0 && o.head_dim != o.hidden / o.heads) {
      throw InvalidInput(c10::str(name, ": head_dim (", o.head_dim, ") must be 0 or hidden / heads (",
                                  o.hidden / o.heads, ")"));
    }
    if (o.intermediate < 0 || !(o.norm_eps >= 0)) {
      throw InvalidInput(c10::str(name, ": intermediate (", o.intermediate, ") and norm_eps (", o.norm_eps,
                                  ") must be >= 0"));
    }
    if (o.intermediate == 0) o.intermediate = 4 * o.hidden;
    switch (family) {
      case Family::kGPT2: return std::make_shared<GPT2Impl>(name, o);
      case Family::kBert:
        // BERT's position table is 512 long unless the caller asked otherwise.
        if (o.max_positions > 512 && options.max_positions == ModelOptions{}.max_positions) o.max_positions = 512;
        return std::make_shared<BertImpl>(name, o);
      case Family::kViT: return std::make_shared<ViTImpl>(name, o);
    }
    return nullptr;
  };
}

}  // namespace

std::vector<ModelEntry> detail::transformer_models() {
  const Task lm = Task::kLanguageModel, c = Task::kClassification;
  const InputKind tokens = InputKind::kTokens, images = InputKind::kImages;
  return {
      {"gpt2", lm, tokens, "GPT-2 decoder, shape from the options", transformer(Family::kGPT2, false)},
      {"gpt2-small", lm, tokens, "GPT-2 small: 12 layers, 768 wide", transformer(Family::kGPT2, true)},
      {"bert", c, tokens, "BERT-style encoder + classifier, shape from the options", transformer(Family::kBert, false)},
      {"bert-base", c, tokens, "BERT-base: 12 layers, 768 wide", transformer(Family::kBert, true)},
      {"vit", c, images, "ViT, shape from the options", transformer(Family::kViT, false)},
      {"vit-b16", c, images, "ViT-B/16: 12 layers, 768 wide", transformer(Family::kViT, true)},
  };
}

}  // namespace actkit
