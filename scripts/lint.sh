#!/usr/bin/env bash
# The lint check: clang-tidy (Debian 12's, 14) with the repository's
# .clang-tidy over C++ sources, using the compile commands of a configured
# build directory. Any finding fails the run.
#   scripts/lint.sh                  # every tracked .cc file (about 11 min on 2 cores)
#   scripts/lint.sh --changed REV    # the .cc files changed since REV (the test command: HEAD~1)
#   scripts/lint.sh FILE...          # these files
# GRANARY_BUILD_DIR names the build directory (default build/, configured by
# scripts/test.sh; CMAKE_EXPORT_COMPILE_COMMANDS is on).
set -euo pipefail
cd "$(dirname "$0")/.."

build="${GRANARY_BUILD_DIR:-build}"
if ! command -v clang-tidy >/dev/null 2>&1; then
  echo "lint: clang-tidy not found; scripts/install-deps.sh installs it (Debian package clang-tidy)" >&2
  exit 1
fi
if [[ ! -f "$build/compile_commands.json" ]]; then
  echo "lint: $build/compile_commands.json missing: configure the build first (scripts/test.sh does)" >&2
  exit 1
fi

files=()
if [[ "${1:-}" == --changed ]]; then
  rev="${2:?lint: --changed needs a revision}"
  if ! git rev-parse --verify --quiet "$rev^{commit}" >/dev/null; then
    echo "lint: no revision $rev (a shallow clone?); nothing checked"
    exit 0
  fi
  mapfile -t files < <(git diff --name-only --diff-filter=d "$rev" -- '*.cc')
elif (($# > 0)); then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.cc')
fi
# Only files the build compiles (the fuzz targets need GRANARY_FUZZ=ON).
mapfile -t known < <(python3 -c '
import json, os, sys
for e in json.load(open(sys.argv[1])):
    print(os.path.relpath(os.path.join(e["directory"], e["file"])))' "$build/compile_commands.json" | sort -u)
declare -A compiled
for f in "${known[@]}"; do compiled[$f]=1; done
todo=()
for f in "${files[@]}"; do [[ -n "${compiled[$f]:-}" ]] && todo+=("$f"); done
if ((${#todo[@]} == 0)); then
  echo "lint: no compiled C++ file to check"
  exit 0
fi
start=$SECONDS
printf '%s\n' "${todo[@]}" |
  xargs -P "$(nproc)" -n 1 clang-tidy --quiet -p "$build" 2>/dev/null |
  grep -E 'warning:|error:' | sort -u >"$build/lint.out" || true
if [[ -s "$build/lint.out" ]]; then
  cat "$build/lint.out" >&2
  echo "lint: $(wc -l <"$build/lint.out") findings in ${#todo[@]} files (.clang-tidy)" >&2
  exit 1
fi
echo "lint: ${#todo[@]} files clean in $((SECONDS - start)) s"
