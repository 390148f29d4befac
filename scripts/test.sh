#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what is missing (Debian packages,
# the torch wheel, the Python reference stack), builds, lints, and runs every test with CTest.
#   KVRL_BUILD_DIR  build folder (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${KVRL_BUILD_DIR:-build}"

scripts/setup.sh --test
cmake -S . -B "$build_dir" -DKVRL_BUILD_TESTS=ON -DKVRL_BUILD_BENCH=ON >"$build_dir.configure.log" 2>&1 \
  || { cat "$build_dir.configure.log"; exit 1; }
grep -A14 "kvrl .* configuration" "$build_dir.configure.log" || true
cmake --build "$build_dir" -j2
# clang-format over every file; clang-tidy over the recently changed ones, 5 minutes at most
# (scripts/lint.sh; a full clang-tidy pass is scripts/lint.sh --all, 13 min on 2 cores).
KVRL_BUILD_DIR="$build_dir" KVRL_LINT_BUDGET_S="${KVRL_LINT_BUDGET_S:-300}" scripts/lint.sh
# Two at a time where a test keeps one core busy; alone where it claims both (PROCESSORS).
ctest --test-dir "$build_dir" --output-on-failure -j2
