#!/usr/bin/env bash
# Granary demo: a local S3-compatible server, a small generated ImageNet-
# shaped data set uploaded to it, the `granary` CLI listing, inspecting and
# reading it back byte-exact, then a Granary mount over a "remote" origin
# (10 ms added per request): cold epoch, `granary load`, warm epoch,
# `granary status`, and the comparison table.
#
#   scripts/demo.sh                      # installs deps, builds build/, runs the demo
#   GRANARY_BUILD_DIR=build-x scripts/demo.sh
#   DEMO_FILES=600 scripts/demo.sh       # data set size (files; default 300)
#
# Steps: install-deps -> build the granary binary -> start moto_server on a free
# loopback port -> create a bucket -> upload train/<class>/<n>.JPEG (random
# bytes) with awscli -> granary ls -r -l / stat / cat | sha256sum, checked
# against the source files. moto_server is stopped by PID on every exit path.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR="${GRANARY_BUILD_DIR:-build}"
FILES="${DEMO_FILES:-300}"
CLASSES=10
BUCKET=granary-demo

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() { echo "demo: $*" >&2; exit 1; }

step "Installing dependencies (Debian packages; skipped when present)"
scripts/install-deps.sh

step "Building the granary binary in ${BUILD_DIR}/"
cmake -S . -B "${BUILD_DIR}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "${BUILD_DIR}" -j"$(nproc)" --target granary_cli >/dev/null
GRANARY="$(pwd)/${BUILD_DIR}/src/cli/granary"
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

step "Generating ${FILES} files under train/<class>/<n>.JPEG (random bytes, 10-200 KB)"
SRC="${WORK}/src"
python3 - "${SRC}" "${FILES}" "${CLASSES}" <<'EOF'
import os, random, sys
root, files, classes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(2024)
for i in range(files):
    d = os.path.join(root, "train", "n%08d" % (1440764 + i % classes))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "%d.JPEG" % i), "wb") as f:
        f.write(rng.randbytes(rng.randint(10_000, 200_000)))
EOF
du -sh "${SRC}/train" | cut -f1 | xargs echo "total:"

step "Uploading to s3://${BUCKET}/imagenet/ with awscli"
aws --endpoint-url "${ENDPOINT}" s3 mb "s3://${BUCKET}" >/dev/null
aws --endpoint-url "${ENDPOINT}" s3 cp --recursive --only-show-errors "${SRC}" "s3://${BUCKET}/imagenet/"

G=("${GRANARY}" --endpoint "${ENDPOINT}")
DATA="s3://${BUCKET}/imagenet"

step "granary ls ${DATA}/train"
"${G[@]}" ls "${DATA}/train"

step "granary ls -r -l ${DATA}   (first 5 lines)"
"${G[@]}" ls -r -l "${DATA}" >"${WORK}/listing.txt"
head -n 5 "${WORK}/listing.txt"
echo "... $(wc -l <"${WORK}/listing.txt") objects"

# The listing must be exactly the uploaded files.
(cd "${SRC}" && find train -type f | sed 's|^|imagenet/|' | LC_ALL=C sort) >"${WORK}/want.txt"
awk '{print $3}' "${WORK}/listing.txt" >"${WORK}/got.txt"
diff -q "${WORK}/want.txt" "${WORK}/got.txt" >/dev/null ||
  die "granary ls -r does not match the uploaded files: $(diff "${WORK}/want.txt" "${WORK}/got.txt" | head -n 5)"
echo "listing matches the ${FILES} uploaded files exactly"

FIRST="$(head -n 1 "${WORK}/want.txt")"
step "granary stat ${DATA%/imagenet}/${FIRST}"
"${G[@]}" stat "s3://${BUCKET}/${FIRST}"

step "granary cat ${DATA%/imagenet}/${FIRST} | sha256sum"
got="$("${G[@]}" cat "s3://${BUCKET}/${FIRST}" | sha256sum | cut -d' ' -f1)"
want="$(sha256sum "${SRC}/${FIRST#imagenet/}" | cut -d' ' -f1)"
echo "granary: ${got}"
echo "source:  ${want}"
[[ "${got}" == "${want}" ]] || die "checksum mismatch for ${FIRST}"

step "granary cat of every object, compared with its source file"
checked=0
while read -r key; do
  "${G[@]}" cat "s3://${BUCKET}/${key}" | cmp -s - "${SRC}/${key#imagenet/}" ||
    die "granary cat s3://${BUCKET}/${key} differs from the source file"
  checked=$((checked + 1))
done <"${WORK}/want.txt"
echo "${checked}/${FILES} objects byte-exact"

# ---------------------------------------------------------------------------
# Granary as a dataset cache: mount through a "remote" origin (10 ms per
# request added by bench/s3_delay_proxy), a cold epoch, `granary load`, a warm
# epoch, `granary status`, and the comparison table.
step "Building the benchmark tools (reader, delay proxy)"
cmake --build "${BUILD_DIR}" -j"$(nproc)" --target granary_reader s3_delay_proxy >/dev/null
READER="$(pwd)/${BUILD_DIR}/bench/reader/granary_reader"
PROXY_BIN="$(pwd)/${BUILD_DIR}/bench/s3_delay_proxy/s3_delay_proxy"
DELAY="${DEMO_DELAY:-10ms}"

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
ls "${MNT}/train" | head -n 3

run_epoch() {  # label json
  local before after
  before="$(proxy_gets)"
  "${READER}" "${MNT}/train" --threads 16 --epochs 1 --seed "$RANDOM" --json "$2" >"${WORK}/$1.txt" ||
    die "reader failed in the $1 epoch: $(tail -n 3 "${WORK}/$1.txt")"
  after="$(proxy_gets)"
  echo "$((after - before))" >"$2.gets"
  tail -n 1 "${WORK}/$1.txt"
}

step "Cold epoch: 16 readers, shuffled order, every file read whole"
run_epoch cold "${WORK}/cold.json"

step "granary load ${MNT}   (warm-up: fetch everything not cached yet)"
"${GRANARY}" load "${MNT}" --run-dir "${RUN}"

step "Warm epoch (same mount; cached files are served by kernel passthrough)"
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

step "Done: the mount, the proxy and moto_server (pid ${MOTO_PID}) are stopped on exit"
