#!/usr/bin/env bash
# Builds Granary's container image from deploy/docker/Dockerfile as
#   docker build -f deploy/docker/Dockerfile -t granary:<version> .
# does, with podman (Debian 12: no Docker engine needed), then checks it:
# prints its size, fails if the binary misses a shared library in the image,
# and runs `granary version` and `granary fluid --help` in it.
#
#   scripts/build-image.sh                 # tags granary:<project version>
#   scripts/build-image.sh granary:dev     # another tag
#
# On a fresh Debian 12 machine (as root) it installs podman and runc and
# configures podman for this kind of host (/etc/containers/containers.conf.d/
# 50-granary.conf: runc and cgroupfs, since crun refuses hybrid cgroup v1
# hosts; no default ulimits). The base images the Dockerfile's FROM lines name
# (debian:bookworm, debian:bookworm-slim) are made locally with mmdebstrap from
# deb.debian.org when they are not in podman's store, shaped like Docker's
# official ones (bookworm: minbase; slim: minbase without docs, man pages and
# locales; apt keeps no .deb after an install), so no registry is needed.
# GRANARY_BASE_IMAGES=pull pulls the official images instead.
#
# The build context is the repository root with
# deploy/docker/Dockerfile.dockerignore (BuildKit reads it beside the
# Dockerfile, and so does podman 4.3; it is also passed explicitly, for older
# podman). RUN steps use the host's network (apt inside a rootful podman build).
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^project(granary VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
tag="${1:-granary:${version}}"
dockerfile=deploy/docker/Dockerfile

log() { echo "build-image: $*" >&2; }
die() { log "$*"; exit 1; }

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  log "installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

configure_podman() {
  apt_install podman runc
  local conf=/etc/containers/containers.conf.d/50-granary.conf
  [[ -f "$conf" ]] && return 0
  log "writing $conf (runc, cgroupfs, no default ulimits)"
  as_root mkdir -p "$(dirname "$conf")"
  as_root tee "$conf" >/dev/null <<'EOF'
# Written by Granary's scripts/build-image.sh. crun (podman's default) refuses
# hosts with hybrid cgroups (v1 controllers, a v2 unified mount); runc with the
# cgroupfs manager runs there and on systemd-less machines.
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
}

# Makes docker.io/library/debian:<suite> locally (what `FROM debian:<suite>`
# resolves to) with mmdebstrap.
make_base_image() {
  local name="$1" suite="${1#debian:}" variant_opts=()
  apt_install mmdebstrap
  case "$suite" in
    bookworm) ;;
    bookworm-slim)
      suite=bookworm
      # As Docker's -slim images: no documentation, man pages or locales (the
      # dpkg filter stays in the image, so later installs skip them too).
      for d in doc man info locale groff lintian linda; do
        variant_opts+=(--dpkgopt="path-exclude=/usr/share/$d/*")
      done
      variant_opts+=(--dpkgopt='path-include=/usr/share/doc/*/copyright')
      variant_opts+=(--dpkgopt='path-include=/usr/share/locale/locale.alias')
      ;;
    *) die "no registry configured and no local recipe for base image $name: pull or import it first" ;;
  esac
  local tar
  tar=$(mktemp --suffix=.tar)
  log "making base image $name with mmdebstrap (minbase, deb.debian.org)"
  # Docker's Debian images drop downloaded .debs and the package caches after
  # every apt run (their docker-clean apt config); so do these.
  # merged-usr hook: a merged /usr without the usrmerge package, which would
  # pull perl (45 MB) into every image.
  mmdebstrap --quiet --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    "${variant_opts[@]}" \
    --aptopt='DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; }' \
    --aptopt='APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; }' \
    --aptopt='Dir::Cache::pkgcache ""' --aptopt='Dir::Cache::srcpkgcache ""' \
    --aptopt='Acquire::Languages "none"' \
    "$suite" "$tar" \
    "deb http://deb.debian.org/debian $suite main" \
    "deb http://deb.debian.org/debian $suite-updates main" \
    "deb http://deb.debian.org/debian-security $suite-security main" ||
    { rm -f "$tar"; die "mmdebstrap failed for $name"; }
  podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' "$tar" "docker.io/library/$name" >/dev/null
  rm -f "$tar"
}

ensure_base_images() {
  local image
  while read -r image; do
    podman image exists "$image" && continue
    if [[ "${GRANARY_BASE_IMAGES:-local}" == pull ]]; then
      podman pull --quiet "docker.io/library/$image" </dev/null >/dev/null
    else
      make_base_image "$image" </dev/null
    fi
  done < <(awk 'toupper($1) == "FROM" { print $2 }' "$dockerfile" | sort -u)
}

[[ $(id -u) -eq 0 ]] || command -v sudo >/dev/null ||
  die "run as root (podman is rootful here: FUSE and network tests need it)"
configure_podman
ensure_base_images

log "building $tag from $dockerfile (the build stage compiles granary: minutes)"
start=$SECONDS
podman build --network host --layers \
  -f "$dockerfile" --ignorefile deploy/docker/Dockerfile.dockerignore -t "$tag" .
log "built $tag in $((SECONDS - start)) s"

# The Dockerfile's own check fails the build on a missing library; this one
# guards an image built from an older Dockerfile too.
unresolved=$(podman run --rm --entrypoint sh "$tag" -c 'ldd /usr/local/bin/granary' | grep 'not found' || true)
[[ -z "$unresolved" ]] || die "$tag: granary misses shared libraries: $unresolved"

size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "image $tag: $((size / 1024 / 1024)) MiB ($size bytes)"
podman run --rm "$tag" version
podman run --rm "$tag" fluid --help >/dev/null || die "$tag: granary fluid --help failed"
echo "granary fluid --help: ok"
