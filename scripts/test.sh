#!/usr/bin/env bash
# The test command (what CI runs): installs dependencies, checks the C++
# format (scripts/check-format.sh), builds Granary, runs
# every test with ctest, lints the C++ files the newest commit changed
# (scripts/lint.sh --changed HEAD~1; the whole tree takes about 11 min on 2
# cores: scripts/lint.sh), installs the Python module into a scratch prefix
# (scripts/install-python.sh), runs every libFuzzer target for FUZZ_SECONDS (default
# 20) each, then builds the unit tests (ctest label `unit`) under ASan+UBSan
# and under TSan and runs them; any sanitizer report fails the run.
# Both sanitizer builds compile with Clang (build-address/, build-thread/):
# at -O1 it builds them in well under half the time GCC's ASan+UBSan build at
# -O2 took, and its -Wthread-safety (an error) checks the lock annotations of
# src/common/mutex.h: a member GUARDED_BY a mutex touched without it fails
# the build.
#   scripts/test.sh                          # all of the above
#   GRANARY_SANITIZERS=0 scripts/test.sh     # without the sanitizer runs
#   GRANARY_SANITIZE=address scripts/test.sh # only: every test in an ASan+UBSan build (build-address/)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
# The format check first: seconds, and a misformatted file fails the run.
scripts/check-format.sh

# configure DIR SANITIZER [CMAKE_ARGS...]: the sanitizer builds with Clang,
# the main one with the default compiler. CMake cannot change the compiler of
# a configured directory: a sanitizer build directory configured with another
# compiler is configured afresh.
configure() {
  local dir=$1 s=$2
  shift 2
  if [[ -n "$s" ]]; then
    if [[ -f "$dir/CMakeCache.txt" ]] &&
      ! grep -q '^CMAKE_CXX_COMPILER:FILEPATH=.*clang++' "$dir/CMakeCache.txt"; then
      rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
    fi
    CC=clang CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DGRANARY_SANITIZE="$s" "$@" >/dev/null
  else
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRANARY_SANITIZE="$s" "$@" >/dev/null
  fi
}

jobs=$(nproc)
san="${GRANARY_SANITIZE:-}"
build="build${san:+-$san}"
configure "$build" "$san"
cmake --build "$build" -j"$jobs"
(cd "$build" && ctest --output-on-failure -j"$jobs" "$@")
[[ -n "$san" ]] && exit 0
GRANARY_BUILD_DIR="$build" scripts/lint.sh --changed HEAD~1
# The Python module installs as the README says (here into a scratch prefix;
# the script imports it from / to check).
py_prefix=$(mktemp -d)
GRANARY_BUILD_DIR="$build" scripts/install-python.sh --prefix "$py_prefix"
rm -rf "$py_prefix"
FUZZ_SECONDS="${FUZZ_SECONDS:-20}" scripts/fuzz.sh

[[ "${GRANARY_SANITIZERS:-1}" == 0 ]] && exit 0
# Every report is fatal: the sanitizer builds compile with
# -fno-sanitize-recover, and TSan exits non-zero after any report.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
for s in address thread; do
  b="build-$s"
  start=$SECONDS
  configure "$b" "$s" -DGRANARY_BUILD_BENCHMARKS=OFF
  cmake --build "$b" -j"$jobs" --target unit_tests
  echo "sanitize ($s): unit tests built in $((SECONDS - start)) s"
  (cd "$b" && ctest --output-on-failure -j"$jobs" -L unit)
  echo "sanitize ($s): unit tests ran clean in $((SECONDS - start)) s in all"
done
