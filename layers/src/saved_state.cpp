// Where compressed layers keep their saved activations (autograd_common.h).
#include "autograd_common.h"

namespace actkit::detail {
namespace {

constexpr const char* kPending = "payloads";    // payloads saved so far in forward
constexpr const char* kBase = "payload_base";   // index of the first payload among saved variables

}  // namespace

void save_activation(AutogradContext* ctx, const std::string& key, const SavedActivation& saved) {
  SavedSlot slot;
  if (saved.swapped()) {
    slot.swapped = saved.swapped_payload();
  } else {
    const CompressedTensor ct = saved.load();
    slot.meta = ct.meta();
    auto it = ctx->saved_data.find(kPending);
    c10::List<at::Tensor> pending = it == ctx->saved_data.end() ? c10::List<at::Tensor>() : it->second.toTensorList();
    slot.index = int64_t(pending.size());
    pending.push_back(ct.payload());
    ctx->saved_data[kPending] = pending;
  }
  save_object(ctx, key, std::move(slot));
}

void save_tensors(AutogradContext* ctx, std::vector<at::Tensor> tensors) {
  ctx->saved_data[kBase] = int64_t(tensors.size());
  auto it = ctx->saved_data.find(kPending);
  if (it != ctx->saved_data.end()) {
    for (const at::Tensor& p : it->second.toTensorList().vec()) tensors.push_back(p);
    ctx->saved_data.erase(it);
  }
  ctx->save_for_backward(tensors);
}

CompressedTensor load_saved(AutogradContext* ctx, const std::string& key) {
  const SavedSlot& slot = load_object<SavedSlot>(ctx, key);
  if (slot.swapped) return slot.swapped->load();
  const auto base = ctx->saved_data.find(kBase);
  if (base == ctx->saved_data.end()) throw Error("load_saved: the forward did not call save_tensors()");
  const variable_list vars = ctx->get_saved_variables();
  return CompressedTensor(slot.meta, vars.at(size_t(base->second.toInt() + slot.index)));
}

}  // namespace actkit::detail
