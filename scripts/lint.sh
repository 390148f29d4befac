#!/usr/bin/env bash
# Style and static checks.
#   scripts/lint.sh              clang-format over every C++ file (check only), then clang-tidy
#                                (.clang-tidy) over the .cpp files changed in the last
#                                $KVRL_LINT_COMMITS commits (default 10) and the uncommitted
#                                change, newest first, until $KVRL_LINT_BUDGET_S seconds
#                                (default 600) are spent; files left over are listed
#   scripts/lint.sh --all        clang-tidy over every .cpp file, however long it takes
#   scripts/lint.sh --fix        clang-format every C++ file in place, nothing else
# clang-tidy reads BUILD_DIR/compile_commands.json (KVRL_BUILD_DIR, default build). A full
# pass (--all, 85 files) took 13 min wall and 24 min of CPU on this 2-core machine
# (2026-12-05), about 17 s of CPU per file that includes LibTorch: hence the bounded
# default in the test command.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${KVRL_BUILD_DIR:-build}"
mode="${1:-changed}"
rm -f "$build/lint-findings.txt"
case "$mode" in changed|--all|--fix) ;; *) echo "lint.sh: unknown option '$mode' (allowed: --all, --fix)" >&2; exit 2 ;; esac

mapfile -t cxx_files < <(git ls-files --cached --others --exclude-standard '*.cpp' '*.h' | sort -u)
if [ "$mode" = --fix ]; then
  clang-format -i "${cxx_files[@]}"
  exit 0
fi

unformatted=()
for file in "${cxx_files[@]}"; do
  [ -f "$file" ] || continue
  clang-format --dry-run --Werror "$file" >/dev/null 2>&1 || unformatted+=("$file")
done
if [ ${#unformatted[@]} -gt 0 ]; then
  echo "lint: not clang-formatted (scripts/lint.sh --fix):" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  exit 1
fi
echo "lint: clang-format: ${#cxx_files[@]} files formatted"

[ -f "$build/compile_commands.json" ] || { echo "lint: $build/compile_commands.json missing: configure first" >&2; exit 1; }
in_build() { grep -q "\"file\": \"$PWD/$1\"" "$build/compile_commands.json"; }
# The build's compile commands less GCC's precompiled header (tests/CMakeLists.txt
# PRECOMPILE_TORCH), a .gch file clang cannot load: every unit includes what it uses.
tidy_db="$build/clang-tidy-db"
mkdir -p "$tidy_db"
sed -e 's/ -Winvalid-pch//g' -e 's# -include [^ "]*/cmake_pch\.hxx##g' "$build/compile_commands.json" \
  >"$tidy_db/compile_commands.json"
if [ "$mode" = --all ]; then
  mapfile -t candidates < <(printf '%s\n' "${cxx_files[@]}" | grep '\.cpp$')
  budget=0
else
  commits="${KVRL_LINT_COMMITS:-10}"
  mapfile -t candidates < <({ git diff --name-only HEAD; git log -n "$commits" --name-only --format= 2>/dev/null; } |
                            grep '\.cpp$' | awk '!seen[$0]++')
  budget="${KVRL_LINT_BUDGET_S:-600}"
fi
jobs="${KVRL_LINT_JOBS:-$(nproc)}"
start=$(date +%s)
checked=() skipped=()
for file in "${candidates[@]}"; do
  [ -f "$file" ] && in_build "$file" && checked+=("$file")
done
if [ "$budget" -gt 0 ]; then
  # Newest first, one file at a time, until the budget is spent.
  kept=()
  for file in "${checked[@]}"; do
    if [ $(( $(date +%s) - start )) -ge "$budget" ]; then skipped+=("$file"); continue; fi
    kept+=("$file")
    clang-tidy -p "$tidy_db" --quiet "$file" 2>/dev/null || echo "lint: clang-tidy findings in $file" >>"$build/lint-findings.txt"
  done
  checked=("${kept[@]}")
else
  printf '%s\n' "${checked[@]}" | xargs -r -P "$jobs" -I{} sh -c \
    'clang-tidy -p "$0" --quiet "$2" 2>/dev/null || echo "lint: clang-tidy findings in $2" >>"$1/lint-findings.txt"' \
    "$tidy_db" "$build" {}
fi
failed=0
if [ -f "$build/lint-findings.txt" ]; then
  failed=$(wc -l <"$build/lint-findings.txt")
  cat "$build/lint-findings.txt" >&2
  rm -f "$build/lint-findings.txt"
fi
echo "lint: clang-tidy: ${#checked[@]} file(s) checked in $(( $(date +%s) - start )) s, $failed with findings"
if [ ${#skipped[@]} -gt 0 ]; then
  echo "lint: clang-tidy: ${#skipped[@]} changed file(s) left after the ${budget} s budget (scripts/lint.sh --all checks them):"
  printf '  %s\n' "${skipped[@]}"
fi
[ "$failed" -eq 0 ]
