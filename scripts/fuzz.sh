#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in build-fuzz/ (GRANARY_FUZZ=ON,
# ASan + UBSan) and runs each one on its seed corpus for FUZZ_SECONDS seconds
# (default 60). Fails if a target crashes; the crashing input is left in
# build-fuzz/<target>-crash-*. New inputs found go to a scratch directory,
# not into the checked-in corpus.
#
#   scripts/fuzz.sh                 # every target, 60 s each
#   FUZZ_SECONDS=600 scripts/fuzz.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-2}
# target:seed corpus (relative to the repository root)
TARGETS=(
  frame_fuzz:fuzz/corpus/frame_fuzz
  runtime_config_fuzz:fuzz/corpus/runtime_config_fuzz
  s3_list_fuzz:fuzz/corpus/s3_list_fuzz
  s3_error_fuzz:fuzz/corpus/s3_error_fuzz
  snapshot_fuzz:fuzz/corpus/snapshot_fuzz
  index_format_fuzz:fuzz/corpus/index_format_fuzz
  control_request_fuzz:fuzz/corpus/control_request_fuzz
  config_fuzz:fuzz/corpus/config_fuzz
)

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ not found; scripts/install-deps.sh installs it (Debian package clang)" >&2
  exit 1
fi

CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGRANARY_FUZZ=ON -DGRANARY_BUILD_TESTS=OFF -DGRANARY_BUILD_BENCHMARKS=OFF >/dev/null

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

for entry in "${TARGETS[@]}"; do
  name=${entry%%:*}
  seeds=$ROOT/${entry#*:}
  if ! cmake --build "$BUILD" --target "$name" -j"$JOBS" >"$BUILD/$name.build.log" 2>&1; then
    tail -n 40 "$BUILD/$name.build.log" >&2
    echo "fuzz: building $name failed (log: $BUILD/$name.build.log)" >&2
    exit 1
  fi
  bin=$(find "$BUILD" -type f -name "$name" -perm -u+x | head -n1)
  mkdir -p "$scratch/$name"
  echo "fuzz: $name for ${SECONDS_EACH}s on $(ls "$seeds" | wc -l) seeds"
  if ! "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$BUILD/$name-" "$scratch/$name" "$seeds" \
      >"$BUILD/$name.log" 2>&1; then
    tail -n 40 "$BUILD/$name.log" >&2
    echo "fuzz: $name FAILED (log: $BUILD/$name.log; input: $BUILD/$name-*)" >&2
    exit 1
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$BUILD/$name.log" | sed "s/^/fuzz: $name: /"
done
echo "fuzz: all targets ran clean"
