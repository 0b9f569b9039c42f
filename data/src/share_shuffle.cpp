#include "actkit/data/share_shuffle.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/StringUtil.h>

#include "actkit/core/errors.h"

namespace actkit {

int64_t ShareShuffle::id_at(int64_t n, int64_t position, uint64_t seed, int share, int shares) const {
  if (position < 0) throw InvalidInput(c10::str("training data: position ", position, " (positions count from 0)"));
  if (shares < 1 || share < 0 || share >= shares || shares > n) {
    throw InvalidInput(c10::str("training data: share ", share, " of ", shares, " of ", n, " examples"));
  }
  const int64_t share_size = n / shares;
  const int64_t epoch = position / share_size;
  if (epoch != epoch_ || n != n_ || seed != seed_ || share != share_ || shares != shares_) {
    at::Generator gen = at::detail::createCPUGenerator(seed * 7919u + uint64_t(epoch) + uint64_t(share) * 104729u);
    const at::Tensor perm = at::randperm(share_size, gen, at::kLong);
    order_.resize(size_t(share_size));
    const int64_t* p = perm.data_ptr<int64_t>();
    for (int64_t i = 0; i < share_size; ++i) order_[size_t(i)] = share + p[i] * shares;
    epoch_ = epoch;
    n_ = n;
    seed_ = seed;
    share_ = share;
    shares_ = shares;
  }
  return order_[size_t(position % share_size)];
}

}  // namespace actkit
