#include "controller/sharing_cache.h"

namespace actkit::detail {
namespace {

// Dead entries are swept beyond this many: an iteration of a large model
// saves a few hundred tensors, and sweeping is linear in the entries.
constexpr size_t kSweepAbove = 256;

}  // namespace

bool SharingCache::lookup(const at::Tensor& x, SavedActivation* out) {
  if (!x.has_storage() || x.data_ptr() == nullptr) return false;
  auto it = entries_.find(x.data_ptr());
  if (it == entries_.end()) return false;
  const Entry& e = it->second;
  auto storage = e.storage.lock();
  if (!storage || storage.get() != x.storage().unsafeGetStorageImpl() || e.version != x._version()) {
    entries_.erase(it);
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
    entries_.erase(it);
    return false;
  }
  *out = SavedActivation(CompressedTensor(e.meta, at::Tensor(std::move(payload))));
  return true;
}

void SharingCache::sweep() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    const Entry& e = it->second;
    const bool dead = e.storage.expired() || (e.payload.expired() && e.swapped.expired());
    it = dead ? entries_.erase(it) : std::next(it);
  }
}

void SharingCache::remember(const at::Tensor& x, const SavedActivation& saved, const CompressedTensor& ct) {
  if (entries_.size() > kSweepAbove) sweep();
  if (!x.has_storage() || x.data_ptr() == nullptr) return;
  // A swapped payload's in-memory copy dies right after this call; the
  // handle is what lives.
  Entry e{WeakStorage(x.storage().getWeakStorageImpl()), x.storage_offset(), x.sizes().vec(), x.strides().vec(),
          x.scalar_type(), uint32_t(x._version()), ct.meta(), WeakImpl(ct.payload().getIntrusivePtr()),
          saved.swapped_payload()};
  entries_.insert_or_assign(x.data_ptr(), std::move(e));
}

}  // namespace actkit::detail
