// This variant's table.
#include "isa_functions.h"

namespace actkit::kernels::ACTKIT_CPU_ISA {

const cpu::IsaKernels& table() {
  static const cpu::IsaKernels kTable = {
      pergroup_encode,     pergroup_decode,          directq_max_abs, directq_channel_max, directq_quantize,
      directq_decode,      tah_entropy,              tah_encode,      tah_decode,          bitfield_encode,
      bitfield_encode_positive, bitfield_decode,     onebit_block_sum, onebit_signs,       onebit_decode,
  };
  return kTable;
}

}  // namespace actkit::kernels::ACTKIT_CPU_ISA
