#!/usr/bin/env bash
# Fuzzes the file readers with libFuzzer under AddressSanitizer and
# UndefinedBehaviorSanitizer, SECONDS of fuzzing in all (default 60, two
# thirds to the first; the two run at once): the state-dict and checkpoint
# loaders (tests/fuzz/fuzz_state_dict.cpp: check_archive, ACTkit's
# state-dict reader, LibTorch's InputArchive and an optimizer loaded from it)
# from tests/fuzz/corpus, and the safetensors reader
# (tests/fuzz/fuzz_safetensors.cpp) from tests/fuzz/corpus-safetensors.
#
# Builds in build-fuzz/ with clang (only the sources the loaders need, each
# program as one unit). Replays every input of
# tests/fuzz/crashes (each once crashed or was let through: now a
# regression), then fuzzes from tests/fuzz/corpus; what it finds new goes to
# build-fuzz/corpus, never into the committed corpus. Prints libFuzzer's final
# stats. Exits nonzero on a crash, a sanitizer report, an input slower than
# 25 s or one that takes more than 4 GB: the input is saved as
# build-fuzz/artifacts/crash-* (or timeout-*, oom-*) and named.
#   bash scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
b=build-fuzz
t0=$SECONDS

if [ ! -f "$b/build.ninja" ] || ! grep -q fuzz_safetensors "$b/build.ninja"; then
  mkdir -p "$b"
  cmake -S tests/fuzz -B "$b" -G Ninja -DCMAKE_CXX_COMPILER=clang++ >"$b/configure.log" 2>&1 ||
    { cat "$b/configure.log" >&2; exit 1; }
fi
ninja -C "$b" fuzz_state_dict fuzz_safetensors
echo "fuzz: built in $((SECONDS - t0)) s"

export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:symbolize=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# fuzz TARGET SECONDS COMMITTED_CORPUS: replays the target's committed
# crashes, then fuzzes from its corpus; exits the script on a finding.
fuzz() {
  local target=$1 time=$2 seeds=$3
  local crashes=tests/fuzz/crashes
  [ "$target" = fuzz_state_dict ] || crashes=tests/fuzz/crashes-${target#fuzz_}
  mkdir -p "$b/corpus-$target" "$b/artifacts"
  local fuzzer=("$b/$target" -rss_limit_mb=4096 -timeout=25 -max_len=65536 -artifact_prefix="$b/artifacts/")
  if compgen -G "$crashes/*" >/dev/null; then
    echo "fuzz: $target: replaying $crashes"
    "${fuzzer[@]}" "$crashes"/* 2>"$b/replay-$target.log" || { cat "$b/replay-$target.log" >&2; exit 1; }
  fi
  echo "fuzz: $target: $time s from $seeds ($(ls "$seeds" | wc -l) seeds) and $b/corpus-$target"
  local status=0
  "${fuzzer[@]}" -max_total_time="$time" -print_final_stats=1 "$b/corpus-$target" "$seeds" >"$b/fuzz-$target.log" 2>&1 ||
    status=$?
  grep -E '^(stat::|Done |#[0-9]+\s+DONE)' "$b/fuzz-$target.log" || true
  if [ "$status" -ne 0 ]; then
    grep -vE '^(#[0-9]+|INFO:|stat::|\s+NEW_FUNC)' "$b/fuzz-$target.log" | tail -n 80 >&2
    echo "fuzz: $target: FAILED (exit $status); the input is under $b/artifacts/; log: $b/fuzz-$target.log" >&2
    exit "$status"
  fi
  echo "fuzz: $target: no crash in $time s; log: $b/fuzz-$target.log"
}

# The two targets fuzz side by side: libFuzzer runs one thread, so each has
# a core of its own on a 2-core machine, and the run takes two thirds of
# SECONDS.
first=$((seconds * 2 / 3))
fuzz fuzz_state_dict "$((first > 0 ? first : 1))" tests/fuzz/corpus &
state_dict=$!
fuzz fuzz_safetensors "$((seconds - first > 0 ? seconds - first : 1))" tests/fuzz/corpus-safetensors &
safetensors=$!
status=0
wait $state_dict || status=$?
wait $safetensors || status=$?
exit $status
