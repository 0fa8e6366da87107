#!/usr/bin/env bash
# Writing a checkpoint to S3 (issue 22; docs/benchmarks.md, "Writes through the
# mount"): Granary's --writable mount vs `aws s3 cp`, s3fs and rclone mounts,
# same s3rver origin behind bench/s3_delay_proxy at 0 and 10 ms per request.
# Builds what it needs and runs bench/write/write_bench.py.
#
#   flock /tmp/granary-bench.lock scripts/bench-write.sh           # 2 GiB, 0ms and 10ms
#   scripts/bench-write.sh --size 256MiB --delays 0ms              # quick; any write_bench.py options
#
# Results: write-results/{results.md,results.json} (or --out DIR). Needs
# scripts/install-deps.sh's packages (s3fs, rclone), awscli on PATH and s3rver
# (scripts/install-s3rver.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${GRANARY_BUILD_DIR:-build}"

scripts/install-s3rver.sh >/dev/null
cmake -S . -B "${BUILD_DIR}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "${BUILD_DIR}" -j"$(nproc)" --target granary_cli s3_delay_proxy >/dev/null
exec python3 bench/write/write_bench.py --build-dir "${BUILD_DIR}" "$@"
