#!/usr/bin/env bash
# Python reading local ext4 vs Granary's API vs the FUSE mount (issue 21;
# docs/benchmarks.md, "Python and native API"): builds what it needs and runs
# bench/python/pybench.py under Debian's /usr/bin/python3 with the module of
# this build (build/python) and the package source (python/).
#
#   flock /tmp/granary-bench.lock scripts/bench-python.sh   # 10,000 files, every group
#   scripts/bench-python.sh --files 2000         # quick; any pybench.py options
#
# Results: pybench-results/{results.md,results.json} (or --out DIR). Needs
# scripts/install-deps.sh's packages and s3rver (scripts/install-s3rver.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${GRANARY_BUILD_DIR:-build}"

cmake -S . -B "${BUILD_DIR}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRANARY_PYTHON=ON >/dev/null
cmake --build "${BUILD_DIR}" -j"$(nproc)" --target granary_cli s3_delay_proxy gen_imagenet \
  ufs_get _granary >/dev/null
exec /usr/bin/python3 bench/python/pybench.py \
  --build-dir "${BUILD_DIR}" --pythonpath "${BUILD_DIR}/python:python" "$@"
