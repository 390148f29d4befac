#!/usr/bin/env bash
# Builds one of kvrl's fuzz targets with clang (tests/fuzz/CMakeLists.txt) and runs it:
#   1. every input in tests/fuzz/crashers/TARGET (inputs that once broke it) must pass;
#   2. then it fuzzes for a bounded time from its seed corpus, tests/fuzz/corpus/TARGET
#      (and, for the wire decoders, valid messages from write_fuzz_seeds; for the config
#      loader, configs/*.yaml), with tests/fuzz/TARGET.dict where there is one.
# A finding fails the test and leaves the input in BUILD_DIR/findings-TARGET; once fixed,
# copy it into tests/fuzz/crashers/TARGET so it stays fixed.
#   tests/fuzz/run_fuzz.sh BUILD_DIR [SECONDS] [TARGET]
# TARGET: wire_decoders (the default), torch_pickle, weight_announcement, status_request,
# train_config or tcp_frames. Runs for different targets may share BUILD_DIR at the same time.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: run_fuzz.sh BUILD_DIR [SECONDS] [TARGET]}"
seconds="${2:-60}"
target="${3:-wire_decoders}"
case "$target" in
  wire_decoders | torch_pickle | status_request) max_len=8192 ;;
  train_config) max_len=4096 ;;
  weight_announcement) max_len=64 ;;
  tcp_frames) max_len=1024 ;;
  *) echo "run_fuzz.sh: unknown target '$target' (wire_decoders, torch_pickle, weight_announcement, status_request, train_config, tcp_frames)" >&2; exit 2 ;;
esac
command -v clang++ >/dev/null || { echo "run_fuzz.sh: clang++ is missing (scripts/setup.sh --test installs it)" >&2; exit 1; }
mkdir -p "$build"
# One configure and build at a time in BUILD_DIR; the fuzzing itself runs in parallel.
(
  flock 9
  cmake -S "$here" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j2 --target "${target}_fuzz" $([ "$target" = wire_decoders ] && echo write_fuzz_seeds) >/dev/null
) 9>"$build/.build.lock"
fuzz="$build/${target}_fuzz"

crashers=()
if [ -d "$here/crashers/$target" ]; then
  mapfile -t crashers < <(find "$here/crashers/$target" -type f ! -name '*.md' | sort)
fi
echo "run_fuzz.sh: $target: replaying ${#crashers[@]} past crashers"
# With file arguments libFuzzer runs each once and fails on the first that breaks.
if [ ${#crashers[@]} -gt 0 ] && ! "$fuzz" "${crashers[@]}"; then
  echo "run_fuzz.sh: $target: a past crasher breaks it again (above)" >&2
  exit 1
fi

corpus="$build/corpus-$target" findings="$build/findings-$target"
rm -rf "$corpus" "$findings"
mkdir -p "$corpus" "$findings"
if [ -d "$here/corpus/$target" ]; then cp "$here/corpus/$target"/* "$corpus"/; fi
case "$target" in
  wire_decoders) "$build/write_fuzz_seeds" "$corpus" ;;
  train_config) for config in "$here"/../../configs/*.yaml; do cp "$config" "$corpus/$(basename "$config")"; done ;;
esac
dict=()
if [ -f "$here/$target.dict" ]; then dict=(-dict="$here/$target.dict"); fi
echo "run_fuzz.sh: $target: fuzzing for ${seconds}s from $(ls "$corpus" | wc -l) seeds"
set +e  # a finding is reported below, not by set -e
"$fuzz" "$corpus" "${dict[@]}" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$findings/" -print_final_stats=1 2>&1 | tail -15
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
  echo "run_fuzz.sh: $target: the fuzzer found an input that breaks it: $(ls "$findings")" >&2
  exit 1
fi
