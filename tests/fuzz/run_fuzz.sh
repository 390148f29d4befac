#!/usr/bin/env bash
# Builds the wire decoders' fuzz target with clang and runs it:
#   1. every input in tests/fuzz/crashers (inputs that once broke a decoder) must pass;
#   2. then it fuzzes for a bounded time from valid seed messages.
# A finding fails the test and leaves the input in BUILD_DIR/findings; once fixed, copy it
# into tests/fuzz/crashers so it stays fixed.
#   tests/fuzz/run_fuzz.sh BUILD_DIR [SECONDS]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: run_fuzz.sh BUILD_DIR [SECONDS]}"
seconds="${2:-60}"
command -v clang++ >/dev/null || { echo "run_fuzz.sh: clang++ is missing (scripts/setup.sh --test installs it)" >&2; exit 1; }
cmake -S "$here" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j2 >/dev/null
fuzz="$build/wire_decoders_fuzz"
echo "run_fuzz.sh: replaying $(ls "$here/crashers" | grep -vc README) past crashers"
# With file arguments libFuzzer runs each once and fails on the first that breaks.
if ls "$here"/crashers/* 2>/dev/null | grep -v README >/dev/null; then
  "$fuzz" $(ls "$here"/crashers/* | grep -v README)
fi
rm -rf "$build/corpus" "$build/findings"
mkdir -p "$build/corpus" "$build/findings"
"$build/write_fuzz_seeds" "$build/corpus"
echo "run_fuzz.sh: fuzzing for ${seconds}s"
"$fuzz" "$build/corpus" -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$build/findings/" -print_final_stats=1 2>&1 | tail -15
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
  echo "run_fuzz.sh: the fuzzer found an input that breaks a decoder: $(ls "$build/findings")" >&2
  exit 1
fi
