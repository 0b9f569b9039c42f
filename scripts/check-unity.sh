#!/usr/bin/env bash
# Fails when two sources of one target cannot share a translation unit.
#
# The build compiles each target's sources in batches of 8 (unity build,
# CMakeLists.txt); which files share a batch changes with the options (the
# sanitizer build leaves the benchmark tests out, a CUDA build adds files).
# So every name at file scope must be unique within its target, anonymous
# namespaces included. This compiles all of each target's batched sources
# as one translation unit, syntax only, with the target's own flags: if
# that compiles, every batching does.
#   bash scripts/check-unity.sh [BUILD_DIR]   (default: build; configured, built once)
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build}
status=0
for unity in "$b"/*/CMakeFiles/*.dir/Unity; do
  target=$(basename "$(dirname "$unity")" .dir)
  first="$unity/unity_0_cxx.cxx"
  [ -f "$first" ] || continue
  # A target of one batch was compiled as one unit by the build itself.
  [ -f "$unity/unity_1_cxx.cxx" ] || continue
  all=$(mktemp --suffix=.cxx)
  cat "$unity"/unity_*_cxx.cxx >"$all"
  # The target's compile command for its first batch, retargeted.
  command=$(ninja -C "$b" -t commands | grep -F -- "-c $PWD/$first" | tail -n 1 | sed 's/^ccache //')
  if [ -z "$command" ]; then
    echo "check-unity: no compile command for $target" >&2
    status=1
    continue
  fi
  command=$(sed -E "s# -o [^ ]+unity_0_cxx\\.cxx\\.o# -fsyntax-only#; s# -MD -MT [^ ]+ -MF [^ ]+##; s#-c $PWD/$first#-c $all#" <<<"$command")
  if ! (cd "$b" && bash -c "$command") >"$all.log" 2>&1; then
    echo "check-unity: $target's sources do not compile as one unit:" >&2
    grep -E 'error' "$all.log" | head -n 20 >&2
    status=1
  fi
  rm -f "$all" "$all.log"
done
[ $status -eq 0 ] && echo "check-unity: every target's sources share a translation unit"
exit $status
