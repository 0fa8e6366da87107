#!/usr/bin/env bash
# The test command: installs dependencies, builds Granary, runs every test with
# ctest, then runs every libFuzzer target for FUZZ_SECONDS (default 30) each.
#   scripts/test.sh            # release-ish build in build/
#   GRANARY_SANITIZE=address scripts/test.sh   # ASan+UBSan build in build-asan/
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

san="${GRANARY_SANITIZE:-}"
build="build${san:+-$san}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRANARY_SANITIZE="$san" >/dev/null
cmake --build "$build" -j"$(nproc)"
(cd "$build" && ctest --output-on-failure -j"$(nproc)" "$@")
FUZZ_SECONDS="${FUZZ_SECONDS:-30}" scripts/fuzz.sh
