#!/usr/bin/env bash
# N independent Granary caches against one Granary cluster (bench/cluster/
# cluster_bench.py): network namespaces with tbf-capped links (1 Gbit/s), an
# s3rver origin behind the delay proxy (10 ms per request), 10,000 ImageNet-
# like files. Needs root (namespaces, FUSE); without it the nodes share
# loopback and the table says so. Installs what it needs, builds, runs; then
# prints bench/cluster/placement_sim's 100-node placement table.
#
#   scripts/bench-cluster.sh                                  # 3 nodes, 10,000 files
#   scripts/bench-cluster.sh --files 300 --delay-ms 0 --check # smoke
#
# Results: cluster-results/{results.md,results.json} (or --out DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${GRANARY_BUILD_DIR:-build}"

scripts/install-deps.sh
scripts/install-s3rver.sh
cmake -S . -B "${BUILD_DIR}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "${BUILD_DIR}" -j"$(nproc)" --target granary_cli granary_reader s3_delay_proxy \
  gen_imagenet placement_sim plain_http >/dev/null
rc=0
python3 bench/cluster/cluster_bench.py --build-dir "${BUILD_DIR}" "$@" || rc=$?
# Placement balance of 100 nodes (HRW over 1.28 M ImageNet-like objects): no daemons, a few seconds.
"${BUILD_DIR}/bench/cluster/placement_sim"
exit "${rc}"
