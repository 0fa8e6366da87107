#!/usr/bin/env bash
# The full comparison (docs/benchmarks.md): Granary side by side with local
# disk, s3fs and rclone over a generated ImageNet-like set behind a local
# S3-compatible server (s3rver; --origin moto for moto_server) with 0 and 10 ms
# per request, every path reading every file. Installs what it needs, builds,
# runs bench/compare/compare.py.
#
#   scripts/bench.sh                                # 10,000 files, 0ms and 10ms
#   scripts/bench.sh --files 128660 --delays 10ms   # any compare.py options
#
# Results: compare-results/{results.md,results.json,chart.png} (or --out DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${GRANARY_BUILD_DIR:-build}"

scripts/install-deps.sh
cmake -S . -B "${BUILD_DIR}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "${BUILD_DIR}" -j"$(nproc)" --target granary_cli granary_reader s3_delay_proxy \
  gen_imagenet ufs_get >/dev/null
# s3rver by default (~1,000-1,500 GETs/s here, where moto_server serves ~400);
# a later --origin moto overrides it.
exec python3 bench/compare/compare.py --build-dir "${BUILD_DIR}" --origin s3rver "$@"
