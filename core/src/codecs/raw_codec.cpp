#include "actkit/core/codecs/raw_codec.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include "actkit/core/errors.h"
#include "dispatch.h"

namespace actkit {

CompressedTensor encode_raw(const at::Tensor& x, at::ScalarType as) {
  detail::check_device(x, "encode_raw");
  detail::float_type_of(x.scalar_type(), "encode_raw");
  detail::float_type_of(as, "encode_raw (stored dtype)");
  CompressedMeta m;
  m.kind = CodecKind::kRaw;
  m.dtype = as;
  m.shape = x.sizes().vec();
  m.bits = 8 * int(c10::elementSize(as));
  m.validate();
  at::Tensor payload = detail::allocate_payload(m, x.device());
  payload.narrow(0, 0, m.payload_bytes()).view(as).view(x.sizes()).copy_(x);
  return CompressedTensor(std::move(m), std::move(payload));
}

}  // namespace actkit
