// The controller's sharing cache: a tensor that two layers save in one
// iteration (attention's Q/K/V projections read one input; a residual
// block's first convolution and its downsample read another) is compressed
// once, and the second layer gets the first one's payload.
//
// Entries are keyed by the tensor's memory and hold only weak references:
// an entry answers while both the source tensor's storage and the payload
// (in memory or swapped out) live, and only for the same layout, dtype and
// version -- another view of the same memory is other values.
//
// Not thread-safe: the Controller serialises every call.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/UndefinedTensorImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <memory>
#include <unordered_map>
#include <vector>

#include "actkit/core/compressed_tensor.h"
#include "actkit/core/saved_activation.h"

namespace actkit::detail {

class SharingCache {
 public:
  // The payload saved for a tensor with x's memory, layout, dtype and
  // version, if it still lives; stale entries met on the way are dropped.
  bool lookup(const at::Tensor& x, SavedActivation* out);

  // Remembers that `saved` (compressed as `ct`) holds x's values. Tensors
  // without storage are not remembered.
  void remember(const at::Tensor& x, const SavedActivation& saved, const CompressedTensor& ct);

 private:
  using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  using WeakStorage = c10::weak_intrusive_ptr<c10::StorageImpl>;
  // The source is its memory, not its TensorImpl: aliases of one tensor
  // (branch_point) are the same values and share one payload.
  struct Entry {
    WeakStorage storage;
    int64_t offset;
    std::vector<int64_t> sizes, strides;
    c10::ScalarType dtype;
    uint32_t version;
    CompressedMeta meta;
    WeakImpl payload;                       // in memory
    std::weak_ptr<SwappedPayload> swapped;  // or swapped out
  };
  // Drops entries whose source or payload is gone.
  void sweep();

  std::unordered_map<const void*, Entry> entries_;  // keyed by data pointer
};

}  // namespace actkit::detail
