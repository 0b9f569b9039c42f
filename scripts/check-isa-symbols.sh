#!/usr/bin/env bash
# Fails when an instruction-set variant of the CPU kernels (kernels/cpu/isa/)
# defines a symbol outside its own namespace. Such a symbol (an inline
# function or template instance the compiler kept out of line) is merged at
# link time with its twins from the other variants, and the linker may keep
# the AVX-512 copy for every caller: the scalar path would then crash on a
# processor without AVX-512.
#   bash scripts/check-isa-symbols.sh [BUILD_DIR]   (default: build; built)
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build}
status=0
found=0
for obj in "$b"/kernels/CMakeFiles/actkit_kernels_*.dir/cpu/isa/*.o; do
  [ -f "$obj" ] || continue
  found=1
  isa=$(basename "$(dirname "$(dirname "$(dirname "$obj")")")" .dir)
  isa=${isa#actkit_kernels_}
  # Defined symbols with external or weak linkage (T, W, V, D, B, R, u...).
  # The name is everything after the address and the type letter.
  stray=$(nm -C --defined-only "$obj" | awk '$2 ~ /^[A-Zuvw]$/' |
    grep -v -E "^[0-9a-f]+ [A-Za-z] actkit::kernels::isa_${isa}::" || true)
  if [ -n "$stray" ]; then
    echo "check-isa-symbols: $obj defines symbols outside actkit::kernels::isa_${isa}:" >&2
    echo "$stray" >&2
    status=1
  fi
done
if [ $found = 0 ]; then
  echo "check-isa-symbols: no variant objects under $b (build first)" >&2
  exit 1
fi
[ $status = 0 ] && echo "check-isa-symbols: every variant keeps to its namespace"
exit $status
