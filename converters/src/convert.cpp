#include "actkit/converters/convert.h"

#include <torch/torch.h>

#include <functional>
#include <sstream>

#include "actkit/layers/replaceable_module.h"
#include "actkit/layers/modules.h"

namespace actkit {
namespace {

namespace nn = torch::nn;

struct Replacement {
  nn::AnyModule module;
  LayerKind kind;
  std::string type;
  bool supported = true;
};

template <typename Q>
Replacement wrap(const std::shared_ptr<typename Q::InnerType>& inner, const std::shared_ptr<Controller>& ctrl,
                 const std::string& path, LayerKind kind, const char* type) {
  auto q = std::make_shared<Q>(inner, ctrl, path, kind);
  q->train(inner->is_training());  // a wrapper starts in training mode; an eval-mode model stays in eval
  const bool supported = q->supported();
  return Replacement{nn::AnyModule(q), kind, type, supported};
}

// The compressed counterpart of `child`, if there is one.
c10::optional<Replacement> replacement_for(const std::shared_ptr<nn::Module>& child,
                                           const std::shared_ptr<Controller>& ctrl, const std::string& path) {
  using K = LayerKind;
#define ACTKIT_TRY(Plain, Q, kind)                                      \
  if (auto m = std::dynamic_pointer_cast<nn::Plain>(child)) {           \
    return wrap<Q>(m, ctrl, path, kind, "actkit::" #Q);                 \
  }
  ACTKIT_TRY(Conv1dImpl, QConv1dImpl, K::kConv)
  ACTKIT_TRY(Conv2dImpl, QConv2dImpl, K::kConv)
  ACTKIT_TRY(Conv3dImpl, QConv3dImpl, K::kConv)
  ACTKIT_TRY(ConvTranspose2dImpl, QConvTranspose2dImpl, K::kConv)
  ACTKIT_TRY(LinearImpl, QLinearImpl, K::kLinear)
  ACTKIT_TRY(BatchNorm1dImpl, QBatchNorm1dImpl, K::kNorm)
  ACTKIT_TRY(BatchNorm2dImpl, QBatchNorm2dImpl, K::kNorm)
  ACTKIT_TRY(LayerNormImpl, QLayerNormImpl, K::kNorm)
  ACTKIT_TRY(ReLUImpl, QReLUImpl, K::kActivation)
  ACTKIT_TRY(ReLU6Impl, QReLU6Impl, K::kActivation)
  ACTKIT_TRY(GELUImpl, QGELUImpl, K::kActivation)
  ACTKIT_TRY(SiLUImpl, QSiLUImpl, K::kActivation)
  ACTKIT_TRY(DropoutImpl, QDropoutImpl, K::kActivation)
  ACTKIT_TRY(SoftmaxImpl, QSoftmaxImpl, K::kActivation)
  ACTKIT_TRY(MaxPool2dImpl, QMaxPool2dImpl, K::kActivation)
  ACTKIT_TRY(AvgPool2dImpl, QAvgPool2dImpl, K::kActivation)
  if (auto m = std::dynamic_pointer_cast<MatMulImpl>(child)) {
    return wrap<QMatMulImpl>(m, ctrl, path, K::kLinear, "actkit::QMatMulImpl");
  }
  // ACTkit's own modules for what LibTorch has none of (Llama's norm and
  // SwiGLU's gating product).
  if (auto m = std::dynamic_pointer_cast<RMSNormImpl>(child)) {
    return wrap<QRMSNormImpl>(m, ctrl, path, K::kNorm, "actkit::QRMSNormImpl");
  }
  if (auto m = std::dynamic_pointer_cast<MulImpl>(child)) {
    return wrap<QMulImpl>(m, ctrl, path, K::kActivation, "actkit::QMulImpl");
  }
#undef ACTKIT_TRY
  return c10::nullopt;
}

bool is_compressed_module(const nn::Module& m) { return m.name().rfind("actkit::Q", 0) == 0; }

// Puts `replacement` where `parent` calls child `name` (AnyModule copies
// share the module); false if the parent holds it in a fixed member.
bool place(nn::Module& parent, const std::string& name, const std::shared_ptr<nn::Module>& child,
           const nn::AnyModule& replacement) {
  if (auto* swappable = dynamic_cast<ReplaceableModule*>(&parent)) {
    if (!swappable->has_slot(name)) return false;
    swappable->replace_child(name, replacement);
    return true;
  }
  bool found = false;
  if (auto* seq = dynamic_cast<nn::SequentialImpl*>(&parent)) {
    for (nn::AnyModule& m : *seq) {
      if (m.ptr() == child) {
        m = replacement;
        found = true;
      }
    }
  } else if (auto* list = dynamic_cast<nn::ModuleListImpl*>(&parent)) {
    for (std::shared_ptr<nn::Module>& m : *list) {
      if (m == child) {
        m = replacement.ptr();
        found = true;
      }
    }
  } else if (auto* dict = dynamic_cast<nn::ModuleDictImpl*>(&parent)) {
    for (auto& item : *dict) {
      if (item.value() == child) {
        item.value() = replacement.ptr();
        found = true;
      }
    }
  }
  if (found) parent.replace_module(name, replacement.ptr());
  return found;
}

std::string type_name(const nn::Module& m) { return m.name(); }

void visit(nn::Module& parent, const std::string& prefix, const std::shared_ptr<Controller>& ctrl,
           ConvertReport& report) {
  // Copy the children first: placing a replacement edits the registry.
  const auto children = parent.named_children();
  for (const auto& item : children) {
    const std::string& name = item.key();
    const std::shared_ptr<nn::Module>& child = item.value();
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    if (is_compressed_module(*child)) continue;  // converted before
    if (auto r = replacement_for(child, ctrl, path)) {
      if (!place(parent, name, child, r->module)) {
        report.kept.push_back({path, type_name(*child), "",
                               "its parent " + type_name(parent) +
                                   " calls it through a fixed member (use Sequential, ModuleList, "
                                   "ModuleDict or ReplaceableModule)"});
        continue;
      }
      std::string note;
      if (!r->supported) {
        note = "runs fp32: option not supported by the compressed path";
      } else if (!ctrl->compresses(r->kind)) {
        note = std::string("fp32 at ") + ctrl->config().level + " (" + to_string(r->kind) + " layers off)";
      }
      report.converted.push_back({path, type_name(*child), r->type, note});
      continue;
    }
    if (!child->children().empty()) {
      visit(*child, path, ctrl, report);
    } else {
      report.kept.push_back({path, type_name(*child), "", "no compressed counterpart"});
    }
  }
}

}  // namespace

std::string ConvertReport::to_string() const {
  std::ostringstream os;
  os << "converted " << converted.size() << " layers";
  os << ", kept " << kept.size() << " fp32\n";
  for (const auto& e : converted) {
    os << "  " << e.path << ": " << e.from << " -> " << e.to;
    if (!e.reason.empty()) os << "  [" << e.reason << "]";
    os << "\n";
  }
  if (!kept.empty()) os << "kept fp32:\n";
  for (const auto& e : kept) os << "  " << e.path << ": " << e.from << "  (" << e.reason << ")\n";
  return os.str();
}

ConvertResult convert(nn::Module& module, const LevelConfig& level, uint64_t seed) {
  ConvertResult result;
  if (level.swap != SwapTarget::kNone) result.swapper = std::make_shared<ActivationSwapper>(level);
  result.controller = std::make_shared<Controller>(level, seed, result.swapper);
  visit(module, "", result.controller, result.report);
  return result;
}

ConvertResult convert(nn::Module& module, const std::string& level_spec, uint64_t seed) {
  return convert(module, parse_level(level_spec), seed);
}

}  // namespace actkit
