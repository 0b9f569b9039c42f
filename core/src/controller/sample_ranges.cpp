#include "actkit/core/sample_ranges.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <cmath>

#include "actkit/core/errors.h"

namespace actkit {

std::vector<double> sample_range_sq(const at::Tensor& x, int64_t group_size) {
  if (x.dim() < 1) throw InvalidInput("sample_range_sq: a tensor of rank >= 1 is needed");
  if (group_size < 1) throw InvalidInput(c10::str("sample_range_sq: group_size must be >= 1, got ", group_size));
  const int64_t n = x.size(0);
  if (n == 0) return {};
  const int64_t d = x.numel() / n;
  const at::Tensor x2 = x.detach().reshape({n, d});
  at::Tensor r2 = at::zeros({n}, x.options().dtype(at::kFloat));
  const int64_t full = d / group_size;
  if (full > 0) {
    const at::Tensor groups = x2.narrow(1, 0, full * group_size).view({n, full, group_size});
    r2 += (groups.amax(2) - groups.amin(2)).to(at::kFloat).pow(2).sum(1);
  }
  if (d - full * group_size > 0) {
    const at::Tensor tail = x2.narrow(1, full * group_size, d - full * group_size);
    r2 += (tail.amax(1) - tail.amin(1)).to(at::kFloat).pow(2);
  }
  const at::Tensor host = r2.to(at::kDouble).cpu().contiguous();
  const double* p = host.data_ptr<double>();
  std::vector<double> out(p, p + n);
  for (double& v : out) v = std::isfinite(v) ? v : 0.0;  // NaN groups propagate; give them no say
  return out;
}

}  // namespace actkit
