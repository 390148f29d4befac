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
# clang-tidy pass takes about 20 s of CPU per file that includes LibTorch (measured on this
# 2-core machine, ~40 min for all), hence the bounded default in the test command.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${KVRL_BUILD_DIR:-build}"
mode="${1:-changed}"
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
if [ "$mode" = --all ]; then
  mapfile -t candidates < <(printf '%s\n' "${cxx_files[@]}" | grep '\.cpp$')
  budget=0
else
  commits="${KVRL_LINT_COMMITS:-10}"
  mapfile -t candidates < <({ git diff --name-only HEAD; git log -n "$commits" --name-only --format= 2>/dev/null; } |
                            grep '\.cpp$' | awk '!seen[$0]++')
  budget="${KVRL_LINT_BUDGET_S:-600}"
fi
checked=0 failed=0 skipped=()
start=$(date +%s)
for file in "${candidates[@]}"; do
  [ -f "$file" ] && in_build "$file" || continue
  if [ "$budget" -gt 0 ] && [ $(( $(date +%s) - start )) -ge "$budget" ]; then skipped+=("$file"); continue; fi
  if ! clang-tidy -p "$build" --quiet "$file" 2>/dev/null; then failed=$((failed + 1)); fi
  checked=$((checked + 1))
done
echo "lint: clang-tidy: $checked file(s) checked in $(( $(date +%s) - start )) s, $failed with findings"
if [ ${#skipped[@]} -gt 0 ]; then
  echo "lint: clang-tidy: ${#skipped[@]} changed file(s) left after the ${budget} s budget (scripts/lint.sh --all checks them):"
  printf '  %s\n' "${skipped[@]}"
fi
[ "$failed" -eq 0 ]
