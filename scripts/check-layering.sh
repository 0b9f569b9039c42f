#!/usr/bin/env bash
# Fails when a module includes a module above it (docs/architecture.md).
# The per-module CMake targets already keep most wrong-way includes from
# compiling; this also covers headers no target compiles on its own, the
# test-only folders and the rules CMake cannot state (kernels without
# LibTorch, c10d only in comm/, each c10d backend in one file, no
# std::filesystem).
set -euo pipefail
cd "$(dirname "$0")/.."

# module: the modules it may include (itself included).
declare -A allowed=(
  [kernels]="kernels"
  [core]="core kernels"
  [text]="text core kernels"
  [layers]="layers core kernels"
  [allocator]="allocator core kernels"
  [swap]="swap core kernels"
  [models]="models layers core kernels"
  [converters]="converters layers swap core kernels"
  [data]="data text core kernels"
  [hf]="hf models converters layers swap text core kernels"
  [process]="process core kernels"
  [measure]="measure models converters layers allocator swap core kernels"
  [comm]="comm core kernels"
  [pipeline]="pipeline comm models converters layers allocator swap core kernels"
  [optim]="optim comm core kernels"
  [app]="app data hf measure process text pipeline optim comm models converters layers allocator swap core kernels"
  [bench]="bench app data hf measure process text pipeline optim comm models converters layers allocator swap core kernels"
  [cli]="cli data hf measure process text pipeline optim comm bench app models converters layers allocator swap core kernels"
  [python]="python data hf measure process text pipeline optim comm bench app models converters layers allocator swap core kernels"
)

status=0
fail() { echo "layering: $*" >&2; status=1; }

for module in "${!allowed[@]}"; do
  [ -d "$module" ] || continue
  while IFS= read -r line; do
    file=${line%%:*}
    used=$(sed -E 's/.*#\s*include ["<]actkit\/([a-z_]+)\/.*/\1/' <<<"$line")
    [[ " ${allowed[$module]} " == *" $used "* ]] || fail "$file includes actkit/$used/ (${module}/ may use: ${allowed[$module]})"
  done < <(git ls-files "$module" | grep -E '\.(h|hpp|cpp|cu|cuh)$' | xargs -r grep -nHE '^\s*#\s*include ["<]actkit/[a-z_]+/' || true)
done

# The kernels are arithmetic over raw pointers: no LibTorch.
if git ls-files kernels | xargs -r grep -nE '^\s*#\s*include [<"](torch|ATen|c10)/'; then fail "kernels/ includes LibTorch (above)"; fi
# Only comm/ talks to c10d.
if git ls-files | grep -E '\.(h|hpp|cpp|cu|cuh)$' | grep -v '^comm/' |
   xargs -r grep -nE '^\s*#\s*include [<"](torch/csrc/distributed|c10d)/'; then
  fail "c10d included outside comm/ (above)"
fi
# No std::filesystem anywhere: PyTorch's wheels export their own copy of it,
# which every program linked against them binds to (core/include/actkit/core/files.h).
if git ls-files | grep -E '\.(h|hpp|cpp|cu|cuh)$' | xargs -r grep -nE '<filesystem>|std::filesystem::'; then
  fail "std::filesystem used (above): use actkit/core/files.h"
fi
# Gloo's and NCCL's c10d groups each in one file (comm/src/process_group.h).
if git ls-files comm | grep -vE '^comm/src/(gloo|nccl)_group\.cpp$' |
   xargs -r grep -nE '^\s*#\s*include [<"]torch/csrc/distributed/c10d/ProcessGroup(Gloo|NCCL)\.hpp'; then
  fail "a backend's c10d group included outside its own file (above)"
fi
[ $status -eq 0 ] && echo "layering: every include goes down"
exit $status
