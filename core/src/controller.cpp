#include "actkit/core/controller.h"
#include "actkit/core/gradients.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <numeric>

#include "actkit/core/bit_allocation.h"
#include "actkit/core/errors.h"
#include "actkit/core/pergroup_codec.h"
#include "actkit/swap/activation_swapper.h"

namespace actkit {
namespace {

// Weight of the newest sample in the gradient-norm moving average.
constexpr double kGradMomentum = 0.1;
// Gradient norms kept for step() before they are read anyway.
constexpr size_t kMaxPendingNorms = 4096;
// Dead entries are swept from the sharing cache beyond this size.
constexpr size_t kSharedSweep = 256;

// Per-sample sum over groups of the squared group range, ||R_n||^2.
std::vector<double> range_sq_per_sample(const at::Tensor& x, int64_t n, int64_t d, int64_t g) {
  const at::Tensor x2 = x.detach().reshape({n, d});
  at::Tensor r2 = at::zeros({n}, x.options().dtype(at::kFloat));
  const int64_t full = d / g;
  if (full > 0) {
    const at::Tensor groups = x2.narrow(1, 0, full * g).view({n, full, g});
    r2 += (groups.amax(2) - groups.amin(2)).to(at::kFloat).pow(2).sum(1);
  }
  if (d - full * g > 0) {
    const at::Tensor tail = x2.narrow(1, full * g, d - full * g);
    r2 += (tail.amax(1) - tail.amin(1)).to(at::kFloat).pow(2);
  }
  const at::Tensor host = r2.to(at::kDouble).cpu().contiguous();
  const double* p = host.data_ptr<double>();
  std::vector<double> out(p, p + n);
  for (double& v : out) v = std::isfinite(v) ? v : 0.0;  // NaN groups propagate; give them no say
  return out;
}

}  // namespace

const char* to_string(LayerKind kind) {
  switch (kind) {
    case LayerKind::kConv: return "conv";
    case LayerKind::kLinear: return "linear";
    case LayerKind::kNorm: return "norm";
    case LayerKind::kActivation: return "activation";
  }
  return "unknown";
}

Controller::Controller(LevelConfig config, uint64_t seed) : config_(std::move(config)), seed_(seed) {
  config_ = with_overrides(config_, {});  // validates
  if (config_.swap != SwapTarget::kNone) swapper_ = std::make_unique<ActivationSwapper>(config_);
}

Controller::~Controller() = default;

int Controller::register_layer(const std::string& name, LayerKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  Layer l;
  l.name = name;
  l.kind = kind;
  l.bits = config_.bits;
  layers_.push_back(std::move(l));
  return int(layers_.size()) - 1;
}

Controller::Layer& Controller::layer_at(int layer) {
  if (layer < 0 || layer >= int(layers_.size())) throw InvalidInput(c10::str("unknown layer id ", layer));
  return layers_[size_t(layer)];
}

const Controller::Layer& Controller::layer_at(int layer) const {
  if (layer < 0 || layer >= int(layers_.size())) throw InvalidInput(c10::str("unknown layer id ", layer));
  return layers_[size_t(layer)];
}

const std::string& Controller::layer_name(int layer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return layer_at(layer).name;
}

int Controller::num_layers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int(layers_.size());
}

bool Controller::compresses(LayerKind kind) const {
  switch (kind) {
    case LayerKind::kConv: return config_.compress_conv;
    case LayerKind::kLinear: return config_.compress_linear;
    case LayerKind::kNorm: return config_.compress_norm;
    case LayerKind::kActivation: return config_.compress_activation;
  }
  return false;
}

double Controller::layer_bits(int layer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return layer_at(layer).bits;
}

bool Controller::lookup_shared(const at::Tensor& x, SavedActivation* out) {
  if (!x.has_storage() || x.data_ptr() == nullptr) return false;
  auto it = shared_.find(x.data_ptr());
  if (it == shared_.end()) return false;
  const SharedEntry& e = it->second;
  auto storage = e.storage.lock();
  if (!storage || storage.get() != x.storage().unsafeGetStorageImpl() || e.version != x._version()) {
    shared_.erase(it);
    return false;
  }
  if (e.offset != x.storage_offset() || e.dtype != x.scalar_type() || !x.sizes().equals(e.sizes) ||
      !x.strides().equals(e.strides)) {
    return false;  // another view of the same memory: not the same values
  }
  if (auto swapped = e.swapped.lock()) {
    *out = SavedActivation(std::move(swapped));
    return true;
  }
  auto payload = e.payload.lock();
  if (!payload) {
    shared_.erase(it);
    return false;
  }
  *out = SavedActivation(CompressedTensor(e.meta, at::Tensor(std::move(payload))));
  return true;
}

void Controller::remember_shared(const at::Tensor& x, const SavedActivation& saved, const CompressedTensor& ct) {
  if (shared_.size() > kSharedSweep) {
    for (auto it = shared_.begin(); it != shared_.end();) {
      const SharedEntry& e = it->second;
      const bool dead = e.storage.expired() || (e.payload.expired() && e.swapped.expired());
      it = dead ? shared_.erase(it) : std::next(it);
    }
  }
  // A swapped payload dies right after this call; the handle is what lives.
  if (!x.has_storage() || x.data_ptr() == nullptr) return;
  SharedEntry e{WeakStorage(x.storage().getWeakStorageImpl()), x.storage_offset(), x.sizes().vec(), x.strides().vec(),
                x.scalar_type(), uint32_t(x._version()), ct.meta(), WeakImpl(ct.payload().getIntrusivePtr()),
                saved.swapped_payload()};
  shared_.insert_or_assign(x.data_ptr(), std::move(e));
}

std::vector<uint8_t> Controller::per_sample_bits(Layer& l, const at::Tensor& x, double scale) {
  const int64_t n = x.dim() >= 2 ? x.size(0) : 1;
  const int64_t d = n == 0 ? 0 : x.numel() / n;
  const int64_t g = config_.group_size;
  const std::vector<double> r2 = range_sq_per_sample(x, n, d, g);
  std::vector<BitItem> items(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) items[size_t(i)] = {scale * double(g) / 6.0 * r2[size_t(i)], d};
  // Within a layer the gradient factor is common to all samples; the
  // allocation only needs the ranges. step() applies it across layers.
  std::vector<uint8_t> bits = allocate_bits_greedy(items, l.bits * double(n) * double(d));
  for (const BitItem& it : items) l.sensitivity.push_back(it.sensitivity);
  l.dim = d;
  return bits;
}

SavedActivation Controller::save(int layer, const at::Tensor& x, double sensitivity_scale) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    layer_at(layer);  // validates the id before anything else
    SavedActivation shared;
    if (lookup_shared(x, &shared)) {
      ++stats_.shared_hits;
      return shared;
    }
  }
  CompressedTensor ct = encode(layer, x, sensitivity_scale);
  SavedActivation saved = swapper_ ? SavedActivation(swapper_->stash(ct)) : SavedActivation(ct);
  std::lock_guard<std::mutex> lock(mu_);
  remember_shared(x, saved, ct);
  return saved;
}

SavedActivation Controller::keep(CompressedTensor ct, int64_t input_bytes) {
  note_saved(input_bytes, ct.byte_size());
  if (swapper_) return SavedActivation(swapper_->stash(ct));
  return SavedActivation(std::move(ct));
}

SwapStats Controller::swap_stats() const { return swapper_ ? swapper_->stats() : SwapStats{}; }

CompressedTensor Controller::encode(int layer, const at::Tensor& x, double sensitivity_scale) {
  PerGroupOptions o;
  o.group_size = config_.group_size;
  o.non_finite = NonFinitePolicy::kPropagate;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Layer& l = layer_at(layer);
    o.seed = seed_ ^ (uint64_t(layer) * 0x9e3779b97f4a7c15ull) ^ (uint64_t(l.calls) * 0xd1b54a32d192ed03ull);
    ++l.calls;
    const bool mixed = config_.mixed_precision && x.dim() >= 2 && x.size(0) > 1 && x.numel() > 0;
    if (mixed) {
      o.bits = 0;
      o.sample_bits = per_sample_bits(l, x, sensitivity_scale);
    } else {
      o.bits = int(std::lround(l.bits));
    }
  }
  CompressedTensor ct = encode_per_group(x, o);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.compress_calls;
  stats_.input_bytes += int64_t(x.numel() * x.element_size());
  stats_.compressed_bytes += ct.byte_size();
  return ct;
}

void Controller::record_gradient(int layer, const at::Tensor& grad_output) {
  if (!config_.mixed_precision || !grad_output.defined() || grad_output.numel() == 0) return;
  const int64_t n = grad_output.dim() >= 2 ? grad_output.size(0) : 1;
  // A reduction kernel: no temporary the size of the gradient (pow(2) would
  // allocate one at the widest layer, where backward's memory peaks). The
  // norm stays where it was computed until step(): reading it here would
  // wait for the device once per layer of backward.
  at::Tensor norm = at::linalg_vector_norm(grad_output.detach(), 2, c10::nullopt, false, at::kFloat);
  std::lock_guard<std::mutex> lock(mu_);
  layer_at(layer);  // validates
  pending_norms_.push_back({layer, n, std::move(norm)});
  // Without step() calls (evaluation, a memory probe) they must not pile up.
  if (pending_norms_.size() >= kMaxPendingNorms) apply_pending_norms_locked();
}

void Controller::apply_pending_norms_locked() {
  if (pending_norms_.empty()) return;
  std::vector<at::Tensor> norms;
  norms.reserve(pending_norms_.size());
  bool one_device = true;
  for (const PendingNorm& p : pending_norms_) {
    norms.push_back(p.norm);
    one_device = one_device && p.norm.device() == pending_norms_.front().norm.device();
  }
  if (!one_device) {
    for (at::Tensor& t : norms) t = t.cpu();
  }
  // One copy, so one wait for the device, per iteration.
  const at::Tensor host = at::stack(norms).to(at::kCPU, at::kDouble).contiguous();
  const double* values = host.data_ptr<double>();
  for (size_t i = 0; i < pending_norms_.size(); ++i) {  // in the order backward recorded them
    const double sq = values[i] * values[i] / double(pending_norms_[i].samples);
    if (!std::isfinite(sq)) continue;
    Layer& l = layer_at(pending_norms_[i].layer);
    l.grad_sq = l.has_grad ? (1 - kGradMomentum) * l.grad_sq + kGradMomentum * sq : sq;
    l.has_grad = true;
  }
  pending_norms_.clear();
}

void Controller::step() {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.iterations;
  last_step_compressed_ = stats_.compressed_bytes - compressed_before_step_;
  compressed_before_step_ = stats_.compressed_bytes;
  if (!config_.mixed_precision) return;
  apply_pending_norms_locked();
  std::vector<BitItem> items;
  std::vector<size_t> owner;
  double budget = 0;
  for (size_t li = 0; li < layers_.size(); ++li) {
    Layer& l = layers_[li];
    for (double s : l.sensitivity) {
      items.push_back({s * l.grad_sq, l.dim});
      owner.push_back(li);
      budget += config_.bits * double(l.dim);
    }
  }
  if (items.empty()) return;
  const std::vector<uint8_t> bits = allocate_bits_greedy(items, budget);
  std::vector<double> sum(layers_.size(), 0), count(layers_.size(), 0);
  for (size_t i = 0; i < bits.size(); ++i) {
    sum[owner[i]] += bits[i];
    count[owner[i]] += 1;
  }
  for (size_t li = 0; li < layers_.size(); ++li) {
    if (count[li] > 0) layers_[li].bits = sum[li] / count[li];
    layers_[li].sensitivity.clear();
  }
}

bool Controller::reset_gradients(const std::vector<at::Tensor>& params) {
  const bool automatic = config_.gradients == GradientMemory::kAuto && config_.compresses_anything();
  const int64_t needed = automatic ? gradient_bytes(params) : 0;
  bool keep = config_.gradients == GradientMemory::kKeep, regroup;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (automatic) keep = stats_.iterations == 0 || last_step_compressed_ >= needed;
    regroup = keep && !gradients_kept_;
    gradients_kept_ = keep;
  }
  // Gradients that backward allocated while they were dropped sit wherever
  // that backward found room: kept from now on, they move into one buffer.
  // (If the allocation below throws, the next call finds them dropped or
  // already in place, so nothing is left to regroup.)
  if (regroup) actkit::reset_gradients(params, false);
  actkit::reset_gradients(params, keep);
  return keep;
}

void Controller::note_saved(int64_t input_bytes, int64_t compressed_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.input_bytes += input_bytes;
  stats_.compressed_bytes += compressed_bytes;
}

ControllerStats Controller::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace actkit
