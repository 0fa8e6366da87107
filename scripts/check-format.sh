#!/usr/bin/env bash
# The format check: every C and C++ file the repository tracks is as
# clang-format (.clang-format: Google base, 100 columns) writes it. Prints the
# files that are not, and fails; `scripts/check-format.sh --fix` rewrites them.
# Uses Debian 12's clang-format (14); another version may format differently.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v clang-format >/dev/null 2>&1; then
  echo "check-format: clang-format not found; scripts/install-deps.sh installs it (Debian package clang-format)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cc' '*.h')
if [[ "${1:-}" == --fix ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if ((${#bad[@]} > 0)); then
  printf 'check-format: not formatted: %s\n' "${bad[@]}" >&2
  echo "check-format: ${#bad[@]} of ${#files[@]} files differ from clang-format; scripts/check-format.sh --fix rewrites them" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
