// The llama zoo model against an independent fp64 implementation written
// here with plain ATen ops from its state dict (transformers' formulas), its
// pipeline pieces, its option checks, and training at the compressed levels.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "actkit/converters/convert.h"
#include "actkit/core/errors.h"
#include "actkit/models/zoo.h"
#include "test_util.h"

using namespace actkit;
using actkit::test::bitwise_equal;

namespace actkit::llama_test {

using Weights = std::map<std::string, at::Tensor>;

struct Variant {
  std::string name;
  ModelOptions options;
};

ModelOptions small_llama() {
  ModelOptions o;
  o.vocab_size = 97;
  o.layers = 2;
  o.hidden = 48;
  o.heads = 4;
  o.kv_heads = 2;
  o.intermediate = 80;
  o.dropout = 0;
  return o;
}

// Grouped and plain attention, biases, tied and untied heads, an explicit
// head_dim and Llama 3.1's rope scaling.
std::vector<Variant> variants() {
  std::vector<Variant> v;
  v.push_back({"gqa_tied", small_llama()});
  ModelOptions qwen = small_llama();
  qwen.attention_bias = true;
  qwen.tie_embeddings = false;
  qwen.rope_theta = 1e6;
  v.push_back({"bias_untied", qwen});
  ModelOptions scaled = small_llama();
  scaled.kv_heads = 1;
  scaled.head_dim = 16;  // 4 heads of 16 from a 48-wide stream
  scaled.rope_theta = 500000;
  scaled.rope_scaling.kind = RopeScaling::Kind::kLlama3;
  scaled.rope_scaling.original_max_positions = 64;  // every band of the rescaling is hit
  scaled.tie_embeddings = false;
  v.push_back({"llama3_rope_head_dim", scaled});
  ModelOptions mha = small_llama();
  mha.kv_heads = 0;
  mha.norm_eps = 1e-5;
  v.push_back({"mha", mha});
  return v;
}

// The model's parameters, with perturbed norms and biases (they start at
// ones and zeros, which would hide a misplaced one), as fp64 copies.
Weights perturbed_fp64_weights(ZooModel& model) {
  Weights w;
  torch::NoGradGuard no_grad;
  for (const auto& p : model.named_parameters()) {
    if (p.value().dim() == 1) p.value().add_(at::randn_like(p.value()) * 0.1);
    w[p.key()] = p.value().detach().to(at::kDouble);
  }
  return w;
}

// Rotary inverse frequencies in fp64, one at a time: the defining formulas
// (and transformers' _compute_llama3_parameters for the rescaling).
at::Tensor reference_inv_freq(int64_t d, double theta, const RopeScaling& s) {
  std::vector<double> f;
  for (int64_t i = 0; i < d; i += 2) {
    double inv = 1.0 / std::pow(theta, double(i) / double(d));
    if (s.kind == RopeScaling::Kind::kLlama3) {
      const double wavelen = 2 * M_PI / inv;
      const double old = double(s.original_max_positions);
      if (wavelen > old / s.low_freq_factor) {
        inv /= s.factor;
      } else if (wavelen >= old / s.high_freq_factor) {
        const double smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        inv = (1 - smooth) * inv / s.factor + smooth * inv;
      }
    }
    f.push_back(inv);
  }
  return at::tensor(f, at::kDouble);
}

// Llama's forward in fp64: embedding, per layer x += attn(rms(x)),
// x += mlp(rms(x)), final rms, projection. Grouped-query attention by
// repeat_interleave of k and v, rotary by rotate_half.
at::Tensor reference_forward(const Weights& w, const ModelOptions& o, const at::Tensor& tokens) {
  const int64_t b = tokens.size(0), t = tokens.size(1), h = o.heads;
  const int64_t kv = o.kv_heads == 0 ? h : o.kv_heads, d = o.head_dim == 0 ? o.hidden / h : o.head_dim;
  const double eps = o.norm_eps > 0 ? o.norm_eps : 1e-6;
  const auto rms = [&](const at::Tensor& x, const at::Tensor& g) {
    return x * (x.pow(2).mean(-1, true) + eps).rsqrt() * g;
  };
  const auto linear = [&](const at::Tensor& x, const std::string& name) {
    at::Tensor y = x.matmul(w.at(name + ".weight").t());
    if (w.count(name + ".bias") != 0) y = y + w.at(name + ".bias");
    return y;
  };
  const at::Tensor inv_freq = reference_inv_freq(d, o.rope_theta, o.rope_scaling);
  const at::Tensor angle = at::arange(t, at::kDouble).unsqueeze(1) * inv_freq;
  const at::Tensor cos = at::cat({angle.cos(), angle.cos()}, -1), sin = at::cat({angle.sin(), angle.sin()}, -1);
  const auto rotate = [&](const at::Tensor& x) {
    const at::Tensor x1 = x.narrow(-1, 0, d / 2), x2 = x.narrow(-1, d / 2, d / 2);
    return x * cos + at::cat({-x2, x1}, -1) * sin;
  };
  const at::Tensor causal = at::ones({t, t}, at::kBool).triu(1);
  at::Tensor x = w.at("embed_tokens.weight").index_select(0, tokens.flatten()).view({b, t, o.hidden});
  for (int64_t l = 0; l < o.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const at::Tensor a = rms(x, w.at(p + "input_layernorm.weight"));
    const auto heads = [&](const at::Tensor& m, int64_t n) { return m.view({b, t, n, d}).transpose(1, 2); };
    const at::Tensor q = rotate(heads(linear(a, p + "self_attn.q_proj"), h));
    const at::Tensor k = rotate(heads(linear(a, p + "self_attn.k_proj"), kv)).repeat_interleave(h / kv, 1);
    const at::Tensor v = heads(linear(a, p + "self_attn.v_proj"), kv).repeat_interleave(h / kv, 1);
    const at::Tensor s = (q.matmul(k.transpose(-1, -2)) / std::sqrt(double(d))).masked_fill(causal, -INFINITY);
    const at::Tensor attn = s.softmax(-1).matmul(v).transpose(1, 2).reshape({b, t, h * d});
    x = x + linear(attn, p + "self_attn.o_proj");
    const at::Tensor m = rms(x, w.at(p + "post_attention_layernorm.weight"));
    x = x + linear(at::silu(linear(m, p + "mlp.gate_proj")) * linear(m, p + "mlp.up_proj"), p + "mlp.down_proj");
  }
  x = rms(x, w.at("norm.weight"));
  return x.matmul((o.tie_embeddings ? w.at("embed_tokens.weight") : w.at("lm_head.weight")).t());
}

// Mean next-token cross entropy, written out.
at::Tensor reference_loss(const at::Tensor& logits, const at::Tensor& tokens) {
  const int64_t t = tokens.size(1), v = logits.size(-1);
  const at::Tensor lp = logits.narrow(1, 0, t - 1).reshape({-1, v}).log_softmax(-1);
  return -lp.gather(1, tokens.narrow(1, 1, t - 1).reshape({-1, 1})).mean();
}

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).norm() / b.to(at::kDouble).norm()).item<double>();
}

// Every parameter's gradient, concatenated in the model's order.
at::Tensor all_gradients(ZooModel& m) {
  std::vector<at::Tensor> g;
  for (const auto& p : m.parameters()) g.push_back(p.grad().flatten().to(at::kDouble));
  return at::cat(g);
}

void copy_parameters(ZooModel& from, ZooModel& to) {
  torch::NoGradGuard no_grad;
  const auto src = from.named_parameters();
  for (const auto& p : to.named_parameters()) p.value().copy_(src[p.key()]);
}


class LlamaVariant : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override { at::manual_seed(21); }
};

// (a) fp32 forward against the fp64 reference from the same weights.
TEST_P(LlamaVariant, ForwardIsTheFp64Reference) {
  const ModelOptions& o = GetParam().options;
  auto model = make_model("llama", o);
  const Weights w = perturbed_fp64_weights(*model);
  const at::Tensor tokens = model->example_input(3, 19);
  torch::NoGradGuard no_grad;
  const at::Tensor got = model->forward(tokens);
  const at::Tensor expect = reference_forward(w, o, tokens);
  ASSERT_EQ(got.sizes(), expect.sizes());
  const double error = relative_error(got, expect);
  RecordProperty("relative_error", c10::str(error));
  EXPECT_LT(error, 1e-5);
  EXPECT_LT((got.to(at::kDouble) - expect).abs().max().item<double>(), 1e-5 * expect.abs().max().item<double>());
}

// (b) The pieces, run in order, are forward() bit for bit, and they name
// every parameter; tied, the embedding belongs to the first and last.
TEST_P(LlamaVariant, PiecesInOrderAreTheForward) {
  const ModelOptions& o = GetParam().options;
  auto model = make_model("llama", o);
  const at::Tensor tokens = model->example_input(2, 11);
  torch::NoGradGuard no_grad;
  const std::vector<ModelPiece> pieces = model->pieces();
  ASSERT_EQ(pieces.size(), size_t(o.layers + 2));
  EXPECT_EQ(pieces.front().name, "embeddings");
  EXPECT_EQ(pieces[1].name, "layers.0");
  EXPECT_EQ(pieces.back().name, "head");
  at::Tensor x = tokens;
  for (const auto& piece : pieces) x = piece.forward(x);
  EXPECT_TRUE(bitwise_equal(x, model->forward(tokens)));
  std::set<std::string> named, listed;
  for (const auto& p : model->named_parameters()) named.insert(p.key());
  for (const auto& piece : pieces) {
    for (const auto& n : piece.parameters) {
      EXPECT_EQ(named.count(n), 1u) << piece.name << " lists " << n;
      listed.insert(n);
    }
  }
  EXPECT_EQ(listed, named);
  const auto& head = pieces.back().parameters;
  const bool head_has_embedding = std::find(head.begin(), head.end(), "embed_tokens.weight") != head.end();
  EXPECT_EQ(head_has_embedding, o.tie_embeddings);
}

// (c) At L0 the converted model's gradients are those of fp64 autograd
// through the reference, up to fp32 rounding.
TEST_P(LlamaVariant, LevelZeroGradientsAreTheFp64Gradients) {
  const ModelOptions& o = GetParam().options;
  auto model = make_model("llama", o);
  Weights w = perturbed_fp64_weights(*model);
  convert(*model, "L0");
  const at::Tensor tokens = model->example_input(3, 13);
  const at::Tensor loss = model->loss(tokens, model->forward(tokens), at::Tensor());
  loss.backward();
  for (auto& item : w) item.second.requires_grad_();
  const at::Tensor ref = reference_loss(reference_forward(w, o, tokens), tokens);
  ref.backward();
  EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-6 * ref.item<double>());
  double worst = 0;
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    const double error = relative_error(p.value().grad(), w.at(p.key()).grad());
    EXPECT_LT(error, 1e-5) << p.key();
    worst = std::max(worst, error);
  }
  RecordProperty("worst_relative_gradient_error", c10::str(worst));
}

INSTANTIATE_TEST_SUITE_P(Options, LlamaVariant, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<Variant>& info) { return info.param.name; });

// transformers' state-dict names (LlamaForCausalLM / Qwen2ForCausalLM
// without "model."), in its order: biases on q/k/v only with
// attention_bias, on o_proj only with output_bias (Llama's attention_bias
// sets both), lm_head only untied.
TEST(Llama, ParameterNamesAreTransformers) {
  ModelOptions o = small_llama();
  o.layers = 1;
  o.attention_bias = true;
  o.output_bias = true;
  o.tie_embeddings = false;
  std::vector<std::string> names;
  for (const auto& p : make_model("llama", o)->named_parameters()) names.push_back(p.key());
  const std::vector<std::string> expect{"embed_tokens.weight",
                                        "layers.0.self_attn.q_proj.weight",
                                        "layers.0.self_attn.q_proj.bias",
                                        "layers.0.self_attn.k_proj.weight",
                                        "layers.0.self_attn.k_proj.bias",
                                        "layers.0.self_attn.v_proj.weight",
                                        "layers.0.self_attn.v_proj.bias",
                                        "layers.0.self_attn.o_proj.weight",
                                        "layers.0.self_attn.o_proj.bias",
                                        "layers.0.mlp.gate_proj.weight",
                                        "layers.0.mlp.up_proj.weight",
                                        "layers.0.mlp.down_proj.weight",
                                        "layers.0.input_layernorm.weight",
                                        "layers.0.post_attention_layernorm.weight",
                                        "norm.weight",
                                        "lm_head.weight"};
  EXPECT_EQ(names, expect);
  o.attention_bias = false;
  o.output_bias = false;
  o.tie_embeddings = true;
  names.clear();
  for (const auto& p : make_model("llama", o)->named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names.size(), 11u);
  EXPECT_EQ(std::count(names.begin(), names.end(), "lm_head.weight"), 0);
  const auto params = make_model("llama", o)->named_parameters();
  EXPECT_EQ(params["layers.0.self_attn.k_proj.weight"].sizes(), at::IntArrayRef({24, 48}));  // 2 of 4 heads
  EXPECT_EQ(params["layers.0.mlp.gate_proj.weight"].sizes(), at::IntArrayRef({80, 48}));
}

// Llama 1/2's SwiGLU width when intermediate is 0; norm_eps and
// intermediate now reach gpt2/bert/vit, whose defaults are unchanged.
TEST(Llama, FamilyDefaultsAndTheSharedOptions) {
  const auto width = [](const std::string& model, ModelOptions o) {
    return make_model(model, o)->named_parameters()[model == "llama" ? "layers.0.mlp.gate_proj.weight"
                                                                     : "h.0.mlp.c_fc.weight"]
        .size(0);
  };
  ModelOptions o = small_llama();
  o.layers = 1;
  o.intermediate = 0;
  o.hidden = 96;  // 8 * 96 / 3 = 256
  EXPECT_EQ(width("llama", o), 256);
  o.hidden = 104;  // 277, rounded up to 512
  EXPECT_EQ(width("llama", o), 512);
  ModelOptions g;
  g.vocab_size = 50;
  g.layers = 1;
  g.hidden = 32;
  g.heads = 4;
  EXPECT_EQ(width("gpt2", g), 128);
  g.intermediate = 72;
  EXPECT_EQ(width("gpt2", g), 72);
  const auto eps_of = [](const std::string& model, const ModelOptions& opt) {
    std::multiset<double> eps;
    for (const auto& m : make_model(model, opt)->modules()) {
      if (auto ln = std::dynamic_pointer_cast<torch::nn::LayerNormImpl>(m)) eps.insert(ln->options.eps());
    }
    return eps;
  };
  ModelOptions b = g;
  b.num_classes = 3;
  EXPECT_EQ(eps_of("bert", b), (std::multiset<double>{1e-12, 1e-5, 1e-5}));
  EXPECT_EQ(eps_of("gpt2", g), (std::multiset<double>{1e-5, 1e-5, 1e-5}));
  b.norm_eps = 1e-3;
  EXPECT_EQ(eps_of("bert", b), (std::multiset<double>{1e-3, 1e-3, 1e-3}));
}

// (d) Compression changes what backward reads, never what forward computes:
// at every level the loss is L0's, and with 8 bits the gradient is L0's up to
// rounding noise (at most R/(2*255) per value for a group of range R; the
// relative error of the whole gradient grows with depth, and 10% stays far
// below what a wrong backward gives, of the order of the gradient itself:
// the bound test_converter.cpp's zoo test uses). At L3's 2 bits the
// training still converges on a batch it sees again.
TEST(Llama, CompressedLevelsTrainNearLevelZero) {
  at::manual_seed(5);
  ModelOptions o = small_llama();
  o.attention_bias = true;
  auto plain = make_model("llama", o);
  perturbed_fp64_weights(*plain);
  const at::Tensor tokens = plain->example_input(4, 24);
  const auto loss_of = [&](ZooModel& m) { return m.loss(tokens, m.forward(tokens), at::Tensor()); };
  const at::Tensor l0 = loss_of(*plain);
  l0.backward();
  const at::Tensor g0 = all_gradients(*plain);
  std::map<std::string, at::Tensor> gradients;
  for (const std::string level : {"L1", "L2", "L3:bits=8", "L3", "L4", "L5"}) {
    auto model = make_model("llama", o);
    copy_parameters(*plain, *model);
    const ConvertResult converted = convert(*model, level, 3);
    for (const auto& e : converted.report.kept) EXPECT_EQ(e.path, "embed_tokens") << level;
    const at::Tensor l = loss_of(*model);
    EXPECT_NEAR(l.item<double>(), l0.item<double>(), 1e-6 * l0.item<double>()) << level;
    l.backward();
    gradients[level] = all_gradients(*model);
    if (level == "L1") {  // compresses only convolutions: llama runs as at L0
      EXPECT_EQ(converted.controller->stats().compress_calls, 0);
      EXPECT_TRUE(bitwise_equal(gradients[level], g0));
      continue;
    }
    EXPECT_GT(converted.controller->stats().compress_calls, 0) << level;
    const double error = relative_error(gradients[level], g0);
    EXPECT_TRUE(std::isfinite(error)) << level;
    RecordProperty("relative_gradient_error_" + level, c10::str(error));
    if (level == "L3:bits=8") EXPECT_LT(error, 0.10);
  }
  // L4 and L5 move the same payloads out and back: L3's gradients, bit for bit.
  EXPECT_TRUE(bitwise_equal(gradients["L4"], gradients["L3"]));
  EXPECT_TRUE(bitwise_equal(gradients["L5"], gradients["L3"]));
  auto model = make_model("llama", o);
  copy_parameters(*plain, *model);
  const ConvertResult converted = convert(*model, "L3", 3);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3));
  double first = 0, last = 0;
  for (int step = 0; step < 8; ++step) {
    converted.controller->reset_gradients(model->parameters());
    const at::Tensor l = loss_of(*model);
    ASSERT_TRUE(std::isfinite(l.item<double>())) << "step " << step;
    (step == 0 ? first : last) = l.item<double>();
    l.backward();
    opt.step();
    converted.controller->step();
  }
  RecordProperty("first_loss", c10::str(first));
  RecordProperty("last_loss", c10::str(last));
  EXPECT_LT(last, first - 0.1);
}

// (e) Inconsistent options are InvalidInput naming the option.
TEST(Llama, BadOptionsNameTheOption) {
  const auto message = [](const std::string& model, const ModelOptions& o) -> std::string {
    try {
      make_model(model, o);
    } catch (const InvalidInput& e) {
      return e.what();
    }
    return "no error";
  };
  ModelOptions o = small_llama();
  o.kv_heads = 3;  // 4 heads
  EXPECT_NE(message("llama", o).find("kv_heads"), std::string::npos) << message("llama", o);
  o = small_llama();
  o.hidden = 50;  // not a multiple of 4 heads
  EXPECT_NE(message("llama", o).find("head_dim"), std::string::npos) << message("llama", o);
  o.head_dim = 12;  // explicit: fine
  EXPECT_EQ(message("llama", o), "no error");
  o.head_dim = 7;  // rotary needs halves
  EXPECT_NE(message("llama", o).find("head_dim"), std::string::npos);
  o = small_llama();
  o.rope_scaling.kind = RopeScaling::Kind::kLlama3;
  o.rope_scaling.high_freq_factor = o.rope_scaling.low_freq_factor;
  EXPECT_NE(message("llama", o).find("rope_scaling"), std::string::npos);
  o = small_llama();
  o.intermediate = -1;
  EXPECT_NE(message("llama", o).find("intermediate"), std::string::npos);
  // The other transformers refuse llama's attention shapes.
  ModelOptions g;
  g.hidden = 32;
  g.heads = 4;
  g.layers = 1;
  g.kv_heads = 2;
  EXPECT_NE(message("gpt2", g).find("kv_heads"), std::string::npos);
  g.kv_heads = 4;
  EXPECT_EQ(message("gpt2", g), "no error");
  g.head_dim = 16;
  EXPECT_NE(message("gpt2", g).find("head_dim"), std::string::npos);
}

}  // namespace actkit::llama_test
