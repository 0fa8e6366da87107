#!/usr/bin/env bash
# cold_floor with a local origin: CPU per cold object of one HTTP GET and one
# cache-file write (see bench/cold_floor/cold_floor.cc for the modes and the
# columns). Generates --objects random files of --object-size bytes under a
# temp dir, serves them with its own nginx (Debian's nginx-light) on a free
# loopback port, runs granary_cold_floor against it with every other flag
# passed on, then stops nginx and removes the temp dir.
#
#   cmake -S . -B build -DGRANARY_BUILD_EXPERIMENTS=ON   # an experiment: not built by default
#   cmake --build build --target granary_cold_floor
#   bench/cold_floor/run.sh --dir /var/tmp/cold-floor                  # all modes, 5 s each
#   bench/cold_floor/run.sh --objects 300 --seconds 1 --dir /var/tmp/cf --modes curl-multi
#   bench/cold_floor/run.sh --origin-cpus 0 --client-cpus 1 --dir /var/tmp/cold-floor
#
# Own flags (space-separated values): --objects N (default 2000) and
# --object-size BYTES (default 112640) size the origin and are passed on;
# --origin-cpus / --client-cpus LIST pin nginx / the client with taskset -c.
# GRANARY_BUILD_DIR (default build) is where the binary was built.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${GRANARY_BUILD_DIR:-build}"
BIN="${BUILD_DIR}/bench/cold_floor/granary_cold_floor"
NGINX=/usr/sbin/nginx

objects=2000
object_size=112640
origin_pin=()
client_pin=()
pass=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --objects) objects="$2"; shift 2 ;;
    --object-size) object_size="$2"; shift 2 ;;
    --origin-cpus) origin_pin=(taskset -c "$2"); shift 2 ;;
    --client-cpus) client_pin=(taskset -c "$2"); shift 2 ;;
    *) pass+=("$1"); shift ;;
  esac
done

[[ -x "${BIN}" ]] || { echo "run.sh: ${BIN} not built (cmake -S . -B ${BUILD_DIR} -DGRANARY_BUILD_EXPERIMENTS=ON && cmake --build ${BUILD_DIR} --target granary_cold_floor)" >&2; exit 2; }
[[ -x "${NGINX}" ]] || { echo "run.sh: ${NGINX} missing (apt-get install nginx-light)" >&2; exit 2; }

tmp="$(mktemp -d /tmp/cold-floor.XXXXXX)"
nginx_pid=""
cleanup() {
  if [[ -n "${nginx_pid}" ]]; then
    kill -TERM "${nginx_pid}" 2>/dev/null || true
    wait "${nginx_pid}" 2>/dev/null || true
  fi
  rm -rf "${tmp}"
}
trap cleanup EXIT

mkdir -p "${tmp}/www/obj"
echo "generating ${objects} objects of ${object_size} bytes ..." >&2
python3 - "${tmp}/www/obj" "${objects}" "${object_size}" <<'EOF'
import os, sys
root, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(count):
    with open(os.path.join(root, str(i)), "wb") as f:
        f.write(os.urandom(size))
EOF

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
user_line=""
[[ "$(id -u)" == 0 ]] && user_line="user root;"  # workers must read the 0700 temp dir
cat >"${tmp}/nginx.conf" <<EOF
${user_line}
daemon off;
worker_processes 1;
pid ${tmp}/nginx.pid;
error_log ${tmp}/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  keepalive_requests 100000;
  client_body_temp_path ${tmp}/body;
  proxy_temp_path ${tmp}/proxy;
  fastcgi_temp_path ${tmp}/fastcgi;
  uwsgi_temp_path ${tmp}/uwsgi;
  scgi_temp_path ${tmp}/scgi;
  types { application/octet-stream bin; }
  server {
    listen 127.0.0.1:${port};
    root ${tmp}/www;
  }
}
EOF
"${origin_pin[@]}" "${NGINX}" -p "${tmp}" -e "${tmp}/error.log" -c "${tmp}/nginx.conf" &
nginx_pid=$!

url_base="http://127.0.0.1:${port}/obj/"
for _ in $(seq 100); do
  curl -sf -o /dev/null "${url_base}0" && break
  if ! kill -0 "${nginx_pid}" 2>/dev/null; then
    echo "run.sh: nginx exited: $(tail -n 3 "${tmp}/error.log" 2>/dev/null)" >&2
    exit 1
  fi
  sleep 0.1
done
curl -sf -o /dev/null "${url_base}0" || { echo "run.sh: nginx does not answer on ${url_base}" >&2; exit 1; }

"${client_pin[@]}" "${BIN}" --url-base "${url_base}" --objects "${objects}" \
  --object-size "${object_size}" "${pass[@]}"
