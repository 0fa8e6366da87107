#!/usr/bin/env bash
# Installs s3rver (npm), the optional faster S3-compatible origin of the
# comparison (bench/compare/compare.py --origin s3rver), into
# bench/compare/s3rver/node_modules, and fixes one listing bug of s3rver 3.7.1.
#
# moto_server, the default origin, serves ~400 GETs/s on these 2-core machines;
# s3rver (one Node.js process, objects on disk) serves ~1,300-1,600, so cold
# epochs can show what a cache does when the origin is not the bottleneck.
#
# The fix: s3rver 3.7.1 stops walking a directory that lies below a common
# prefix, so with delimiter "/" a prefix whose folder holds only sub-folders
# (ImageNet's train/, which holds only class folders) is never reported and
# every S3 client lists an empty tree. Walking those folders too makes the
# listing loop (which already folds keys into common prefixes) report it.
# Idempotent; prints the path of s3rver's launcher on success.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)/bench/compare/s3rver"
command -v npm >/dev/null || { echo "install-s3rver: npm not found (Node.js with npm is needed)" >&2; exit 1; }
if [[ ! -f "$here/node_modules/s3rver/package.json" ]]; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
store="$here/node_modules/s3rver/lib/stores/filesystem.js"
python3 - "$store" <<'PY'
import sys
path = sys.argv[1]
src = open(path).read()
marker = "granary: walk folders below a common prefix"
if marker not in src:
    old = ("          // avoid directories occurring beneath a common prefix\n"
           "          return false;\n")
    new = (f"          // {marker} (3.7.1 pruned them and lost\n"
           "          // prefixes whose folder holds only sub-folders)\n"
           "          return true;\n")
    if src.count(old) != 1:
        sys.exit(f"install-s3rver: {path} is not the s3rver 3.7.1 this fix was written for")
    open(path, "w").write(src.replace(old, new))
PY
echo "$here/node_modules/s3rver/bin/s3rver.js"
