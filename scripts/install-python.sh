#!/usr/bin/env bash
# Builds the Python module (_granary, pybind11) and installs it with the
# `granary` package into Debian's /usr/bin/python3, so that
# `/usr/bin/python3 -c 'import granary'` works from any directory.
#
#   scripts/install-python.sh              # build in ./build (or $GRANARY_BUILD_DIR), install
#   scripts/install-python.sh --prefix DIR # install into DIR instead of site-packages
#   scripts/install-python.sh --uninstall
#
# Needs scripts/install-deps.sh's packages (pybind11-dev, python3-dev, cmake).
# No PyPI: the package is two files of Python beside the built module.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GRANARY_BUILD_DIR:-$repo/build}
python=${GRANARY_PYTHON_EXE:-/usr/bin/python3}
dest=""
uninstall=0
while (($#)); do
  case "$1" in
    --prefix) dest=$2; shift 2 ;;
    --uninstall) uninstall=1; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "install-python: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [[ -z $dest ]]; then
  # The first site directory of the interpreter (/usr/local/lib/python3.X/dist-packages on Debian).
  dest=$("$python" -c 'import site; print(site.getsitepackages()[0])')
fi

if ((uninstall)); then
  rm -rf "$dest/granary"
  echo "install-python: removed $dest/granary"
  exit 0
fi

cmake -S "$repo" -B "$build" -DGRANARY_PYTHON=ON -DPython_EXECUTABLE="$python" >/dev/null
cmake --build "$build" -j"${JOBS:-$(nproc)}" --target _granary
module=$(find "$build/python" -maxdepth 1 -name '_granary*.so' | head -n1)
[[ -n $module ]] || { echo "install-python: no _granary module in $build/python" >&2; exit 1; }

mkdir -p "$dest/granary"
install -m 0644 "$repo"/python/granary/*.py "$dest/granary/"
install -m 0755 "$module" "$dest/granary/"
# The build keeps debug info (~100 MB); the installed copy keeps symbols only.
strip --strip-debug "$dest/granary/$(basename "$module")"
(cd / && PYTHONPATH="$dest${PYTHONPATH:+:$PYTHONPATH}" "$python" -c 'import granary, granary.torch; print("install-python: granary at", granary.__file__)')
