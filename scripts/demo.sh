#!/usr/bin/env bash
# Granary demo: a local S3-compatible server, a small generated ImageNet-
# shaped data set uploaded to it, the `granary` CLI listing, inspecting and
# reading it back byte-exact, then a Granary mount over a "remote" origin
# (10 ms added per request): cold epoch, `granary load`, warm epoch,
# `granary status`, the comparison table, and a three-node cluster against
# three independent caches.
#
#   scripts/demo.sh                      # installs deps, builds build/, runs the demo
#   GRANARY_BUILD_DIR=build-x scripts/demo.sh
#   DEMO_FILES=5000 scripts/demo.sh      # data set size (JPEG files; default 2000)
#   DEMO_DELAY=0ms scripts/demo.sh       # per-request origin delay (default 10ms)
#
# Steps: install-deps -> build granary and the bench tools -> start moto_server
# on a free loopback port -> bench/gen_imagenet uploads an ImageNet-like set of
# valid JPEGs (train/<wnid>/<name>.JPEG + train_list.txt) and writes the same
# tree locally -> granary ls -r -l / stat / cat | sha256sum, checked against the
# local copy -> mount behind the delay proxy, cold epoch, granary load, warm
# epoch, granary status, umount -> bench/compare/compare.py (over its own
# s3rver origin, the benchmarks' default): the same data set
# side by side with local disk, s3fs and rclone (their epochs capped at a few
# hundred files so the demo stays short) -> bench/cluster/cluster_bench.py:
# three nodes in network namespaces (1 Gbit/s links), independent caches
# against one Granary cluster (origin GETs per object, cold and warm epochs,
# remote-hit MB/s, a node killed mid-epoch). Everything it starts is stopped
# by PID on every exit path.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR="${GRANARY_BUILD_DIR:-build}"
FILES="${DEMO_FILES:-2000}"
DELAY="${DEMO_DELAY:-10ms}"
BUCKET=granary-demo

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() { echo "demo: $*" >&2; exit 1; }

step "Installing dependencies (Debian packages; skipped when present)"
scripts/install-deps.sh

step "Building granary and the bench tools in ${BUILD_DIR}/"
cmake -S . -B "${BUILD_DIR}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "${BUILD_DIR}" -j"$(nproc)" --target granary_cli granary_reader s3_delay_proxy \
  gen_imagenet ufs_get plain_http >/dev/null
GRANARY="$(pwd)/${BUILD_DIR}/src/cli/granary"
READER="$(pwd)/${BUILD_DIR}/bench/reader/granary_reader"
PROXY_BIN="$(pwd)/${BUILD_DIR}/bench/s3_delay_proxy/s3_delay_proxy"
GEN="$(pwd)/${BUILD_DIR}/bench/gen_imagenet/gen_imagenet"
[[ -x "${GRANARY}" ]] || die "the build did not produce ${GRANARY}"
"${GRANARY}" version

WORK="$(mktemp -d /tmp/granary-demo.XXXXXX)"
MOTO_PID=""
PROXY_PID=""
MOUNTED=0
cleanup() {
  if [[ "${MOUNTED}" == 1 ]]; then
    "${GRANARY}" umount "${MNT}" --run-dir "${RUN}" >/dev/null 2>&1 || umount -l "${MNT}" 2>/dev/null || true
  fi
  if [[ -n "${PROXY_PID}" ]]; then kill "${PROXY_PID}" 2>/dev/null || true; fi
  if [[ -n "${MOTO_PID}" ]] && kill -0 "${MOTO_PID}" 2>/dev/null; then
    kill "${MOTO_PID}" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "${MOTO_PID}" 2>/dev/null || break; sleep 0.1; done
    kill -9 "${MOTO_PID}" 2>/dev/null || true
  fi
  rm -rf "${WORK}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "Starting moto_server (S3-compatible) on loopback"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
ENDPOINT="http://127.0.0.1:${PORT}"
moto_server -H 127.0.0.1 -p "${PORT}" >"${WORK}/moto.log" 2>&1 &
MOTO_PID=$!
for _ in $(seq 300); do
  curl -s -o /dev/null "${ENDPOINT}/" && break
  kill -0 "${MOTO_PID}" 2>/dev/null || die "moto_server exited: $(tail -n 3 "${WORK}/moto.log")"
  sleep 0.1
done
curl -s -o /dev/null "${ENDPOINT}/" || die "moto_server did not answer on ${ENDPOINT} in 30 s"
echo "moto_server pid ${MOTO_PID} at ${ENDPOINT}"

# moto accepts any credentials; keep the user's ~/.aws out of the demo.
export AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_REGION=us-east-1
export AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_CONFIG_FILE=/dev/null
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL

step "Generating ${FILES} ImageNet-like JPEGs (bench/gen_imagenet) into s3://${BUCKET}/imagenet/"
SRC="${WORK}/src"
"${GEN}" --count "${FILES}" --seed 7 --quiet --s3-endpoint "${ENDPOINT}" --bucket "${BUCKET}" \
  --prefix imagenet | grep -E 'destination|mean|median|p99|max|elapsed' || true
"${GEN}" --count "${FILES}" --seed 7 --quiet --out "${SRC}" >/dev/null  # the same tree, locally
echo "local copy for checking: ${SRC} ($(du -sh "${SRC}" | cut -f1))"

G=("${GRANARY}" --endpoint "${ENDPOINT}")
DATA="s3://${BUCKET}/imagenet"

step "granary ls ${DATA}/train"
"${G[@]}" ls "${DATA}/train" >"${WORK}/classes.txt"
sed -n 1,5p "${WORK}/classes.txt"
echo "... $(wc -l <"${WORK}/classes.txt") class folders"

step "granary ls -r -l ${DATA}   (first 5 lines)"
"${G[@]}" ls -r -l "${DATA}" >"${WORK}/listing.txt"
head -n 5 "${WORK}/listing.txt"
echo "... $(wc -l <"${WORK}/listing.txt") objects"

# The listing must be exactly the uploaded files.
(cd "${SRC}" && find . -type f | sed 's|^\./|imagenet/|' | LC_ALL=C sort) >"${WORK}/want.txt"
awk '{print $3}' "${WORK}/listing.txt" >"${WORK}/got.txt"
diff -q "${WORK}/want.txt" "${WORK}/got.txt" >/dev/null ||
  die "granary ls -r does not match the uploaded files: $(diff "${WORK}/want.txt" "${WORK}/got.txt" | head -n 5)"
echo "listing matches the $(wc -l <"${WORK}/want.txt") uploaded objects exactly"

FIRST="$(grep -m1 JPEG "${WORK}/want.txt")"
step "granary stat ${DATA%/imagenet}/${FIRST}"
"${G[@]}" stat "s3://${BUCKET}/${FIRST}"

step "granary cat ${DATA%/imagenet}/${FIRST} | sha256sum"
got="$("${G[@]}" cat "s3://${BUCKET}/${FIRST}" | sha256sum | cut -d' ' -f1)"
want="$(sha256sum "${SRC}/${FIRST#imagenet/}" | cut -d' ' -f1)"
echo "granary: ${got}"
echo "source:  ${want}"
[[ "${got}" == "${want}" ]] || die "checksum mismatch for ${FIRST}"

step "granary cat of 50 objects spread over the set, compared with the local copy"
checked=0
while read -r key; do
  "${G[@]}" cat "s3://${BUCKET}/${key}" | cmp -s - "${SRC}/${key#imagenet/}" ||
    die "granary cat s3://${BUCKET}/${key} differs from the source file"
  checked=$((checked + 1))
done < <(awk -v n="$(wc -l <"${WORK}/want.txt")" \
  'BEGIN { step = int(n / 50); if (step < 1) step = 1 } NR % step == 0 && picked < 50 { picked++; print }' \
  "${WORK}/want.txt")
echo "${checked} objects byte-exact"

# ---------------------------------------------------------------------------
# Granary as a dataset cache: mount through a "remote" origin (10 ms per
# request added by bench/s3_delay_proxy), a cold epoch, `granary load`, a warm
# epoch, `granary status`, and the comparison table.

step "Starting the remote-storage emulator: ${DELAY} per request in front of moto_server"
"${PROXY_BIN}" --upstream "127.0.0.1:${PORT}" --port 0 --delay "${DELAY}" >"${WORK}/proxy.out" 2>"${WORK}/proxy.log" &
PROXY_PID=$!
for _ in $(seq 100); do [[ -s "${WORK}/proxy.out" ]] && break; sleep 0.1; done
PROXY_PORT="$(head -n 1 "${WORK}/proxy.out")"
[[ -n "${PROXY_PORT}" ]] || die "s3_delay_proxy did not start: $(tail -n 3 "${WORK}/proxy.log")"
REMOTE="http://127.0.0.1:${PROXY_PORT}"
echo "origin as the cache sees it: ${REMOTE} (pid ${PROXY_PID})"
proxy_gets() { curl -s "${REMOTE}/__proxy_stats" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("get_requests", d.get("requests", 0)))'; }

MNT="${WORK}/mnt"
RUN="${WORK}/run"
mkdir -p "${MNT}" "${RUN}"
step "granary mount ${DATA} ${MNT} --cache-dir ${WORK}/cache:2G"
"${GRANARY}" --endpoint "${REMOTE}" mount "${DATA}" "${MNT}" --cache-dir "${WORK}/cache:2G" --run-dir "${RUN}"
MOUNTED=1
ls "${MNT}/train" | sed -n 1,3p  # sed, not head: no SIGPIPE under pipefail

run_epoch() {  # label json
  local before after
  before="$(proxy_gets)"
  "${READER}" --list "${SRC}/train_list.txt" --root "${MNT}" --threads 16 --epochs 1 --seed "$RANDOM" --json "$2" >"${WORK}/$1.txt" ||
    die "reader failed in the $1 epoch: $(tail -n 3 "${WORK}/$1.txt")"
  after="$(proxy_gets)"
  echo "$((after - before))" >"$2.gets"
  tail -n 1 "${WORK}/$1.txt"
}

step "Cold epoch: 16 readers, shuffled order, every file read whole"
run_epoch cold "${WORK}/cold.json"

step "granary load ${MNT}   (warm-up: fetch everything not cached yet)"
"${GRANARY}" load "${MNT}" --run-dir "${RUN}"

step "Warm epoch (same mount; everything cached, no origin request)"
run_epoch warm "${WORK}/warm.json"

step "granary status ${MNT}"
"${GRANARY}" status "${MNT}" --run-dir "${RUN}"

step "Results (${FILES} files, origin delay ${DELAY})"
python3 - "${WORK}" <<'PY'
import json, sys
w = sys.argv[1]
rows = []
for label, name in (("Granary cold (first epoch)", "cold"), ("Granary warm (after load)", "warm")):
    e = json.load(open(f"{w}/{name}.json"))["epochs"][0]
    gets = int(open(f"{w}/{name}.json.gets").read())
    rows.append((label, e["images_per_s"], e["mb_per_s"], e["p99_us"] / 1000, gets / max(1, e["files"])))
print(f"| {'access path':28} | {'images/s':>9} | {'MB/s':>8} | {'p99 ms':>7} | {'origin GETs/image':>17} |")
print(f"|{'-'*30}|{'-'*11}|{'-'*10}|{'-'*9}|{'-'*19}|")
for r in rows:
    print(f"| {r[0]:28} | {r[1]:9.0f} | {r[2]:8.1f} | {r[3]:7.1f} | {r[4]:17.2f} |")
cold, warm = rows[0][1], rows[1][1]
print(f"\nwarm / cold: {warm / max(cold, 1e-9):.1f}x")
PY

step "granary umount ${MNT}"
"${GRANARY}" umount "${MNT}" --run-dir "${RUN}"
MOUNTED=0

step "An error looks like this"
"${G[@]}" ls "s3://granary-no-such-bucket/x" || echo "(exit code $?)"

step "Comparison: the same kind of data set through every access path (bench/compare/compare.py)"
echo "origin ${DELAY} per request; s3fs and rclone epochs capped at 300 files to keep the demo short"
echo "(the full comparison, every path over every file at 0 and 10 ms: scripts/bench.sh)"
python3 bench/compare/compare.py --build-dir "${BUILD_DIR}" --files "${FILES}" --delays "${DELAY}" \
  --peer-max-files 300 --ceiling-seconds 1 --out "${BUILD_DIR}/demo-compare" |
  sed -n '/^## Origin delay/,$p'
echo "table, JSON and chart: ${BUILD_DIR}/demo-compare/{results.md,results.json,chart.png}"

step "A cluster: three Granary nodes share one cache (bench/cluster/cluster_bench.py)"
echo "each node in its own network namespace, links capped at 1 Gbit/s, origin ${DELAY} per request;"
echo "three independent caches against one cluster (the full run, 10,000 files: scripts/bench-cluster.sh)"
python3 bench/cluster/cluster_bench.py --build-dir "${BUILD_DIR}" --files "${FILES}" \
  --delay-ms "${DELAY%ms}" --out "${BUILD_DIR}/demo-cluster"
echo "table and JSON: ${BUILD_DIR}/demo-cluster/{results.md,results.json}"

step "Done: every mount, proxy and server the demo started is stopped"
