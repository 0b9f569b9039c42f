#!/usr/bin/env bash
# Fuzzes the state-dict and checkpoint loaders (tests/fuzz/fuzz_state_dict.cpp:
# check_archive, ACTkit's state-dict reader, LibTorch's InputArchive and an
# optimizer loaded from it) with libFuzzer under AddressSanitizer and
# UndefinedBehaviorSanitizer, for SECONDS (default 60).
#
# Builds in build-fuzz/ with clang (only the sources the loaders need; a few
# minutes on 2 cores the first time). Replays every input of
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

if [ ! -f "$b/build.ninja" ]; then
  mkdir -p "$b"
  cmake -S tests/fuzz -B "$b" -G Ninja -DCMAKE_CXX_COMPILER=clang++ >"$b/configure.log" 2>&1 ||
    { cat "$b/configure.log" >&2; exit 1; }
fi
ninja -C "$b" fuzz_state_dict
echo "fuzz: built in $((SECONDS - t0)) s"

# LibTorch keeps globals alive at exit: leaks are not reported. A UB report
# stops the run (the target is built with -fno-sanitize-recover).
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:symbolize=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$b/corpus" "$b/artifacts"
fuzzer=("$b/fuzz_state_dict" -rss_limit_mb=4096 -timeout=25 -max_len=65536 -artifact_prefix="$b/artifacts/")

if compgen -G "tests/fuzz/crashes/*" >/dev/null; then
  echo "fuzz: replaying tests/fuzz/crashes"
  "${fuzzer[@]}" tests/fuzz/crashes/* 2>"$b/replay.log" || { cat "$b/replay.log" >&2; exit 1; }
fi
echo "fuzz: $seconds s from tests/fuzz/corpus ($(ls tests/fuzz/corpus | wc -l) seeds) and $b/corpus"
# libFuzzer's progress lines go to its log; its final stats and any report to the terminal.
status=0
"${fuzzer[@]}" -max_total_time="$seconds" -print_final_stats=1 "$b/corpus" tests/fuzz/corpus >"$b/fuzz.log" 2>&1 ||
  status=$?
grep -E '^(stat::|Done |#[0-9]+\s+DONE)' "$b/fuzz.log" || true
if [ "$status" -ne 0 ]; then
  grep -vE '^(#[0-9]+|INFO:|stat::|\s+NEW_FUNC)' "$b/fuzz.log" | tail -n 80 >&2
  echo "fuzz: FAILED (exit $status); the input is under $b/artifacts/; log: $b/fuzz.log" >&2
  exit "$status"
fi
echo "fuzz: no crash in $seconds s; log: $b/fuzz.log"
