#!/usr/bin/env bash
# A GPU node's root file system, for real: Debian bookworm with its 6.1 kernel and headers and Debian's
# `nvidia-kernel-dkms` 535.261.03 from non-free, DKMS having built the module for that kernel.  Built
# once by debootstrap and kept (like the Slurm release roots); the upgrade tests copy it and run the
# sample template's package commands in the copy with chroot.  No GPU is needed: DKMS builds modules
# from source against the kernel's headers and never loads them.
#
#   node_image.sh build        build the image unless it is there; prints how long each part took
#   node_image.sh copy DEST    a fresh copy of the image at DEST (a test's own node)
#   node_image.sh path         print where the image is
#   node_image.sh keep-cache ROOT   keep ROOT's new compiler cache entries for the next copies (see below)
#   node_image.sh sh ROOT CMD  run CMD in ROOT (a copy) with /proc and /dev mounted, unmounted after
#
# Heavy builds are cached by their inputs: the image's compiler runs through ccache (its links come first
# on the PATH that maintainer scripts and the upgrade template give: /usr/sbin), so DKMS really builds on
# every install, and a compilation it made before (same source, headers, flags and compiler) comes from
# the cache.  The cache travels with each copy; `keep-cache` merges what a copy added into the host's
# (NODE_IMAGE_CCACHE, default beside the image) and `copy` brings it into the next copy.
#
# The image is kept under the hash of its recipe (the functions below that build it and the driver package
# it starts from): a changed recipe builds a new image beside the cache, and the images of older recipes
# are removed once it is built; an unchanged one is never rebuilt.
#
# Environment: NODE_IMAGE (default /var/tmp/gpufleet-node-image/bookworm-535-<recipe hash>), DEBIAN_MIRROR,
# DEBIAN_SECURITY_MIRROR.  The image's apt sources also name bookworm-security (535.309.01, the upgrade)
# and bookworm-backports (a 6.12 kernel, the drift); the build installs from bookworm only.
set -euo pipefail

IMAGES=/var/tmp/gpufleet-node-image
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
OLD_DRIVER_PKG=535.261.03-1
APT_WAIT="-o DPkg::Lock::Timeout=600"
CCACHE_HOST=${NODE_IMAGE_CCACHE:-$IMAGES/ccache}
CCACHE_IN=var/cache/gpufleet-ccache   # in the image
# DKMS's module builds whole, by their inputs (dkms_build_cache.sh: the `make` of each copy)
BUILDS_HOST=${NODE_IMAGE_BUILD_CACHE_DIR:-$IMAGES/build-cache}
BUILDS_IN=var/cache/gpufleet-build-cache

log() { echo "node-image: $*" >&2; }
die() { log "error: $*"; exit 1; }

mounted_sh() {  # ROOT CMD: CMD in ROOT, as root, /proc and /dev mounted for the maintainer scripts in a
  # mount namespace of the command's own: nothing is left mounted when it ends, however it ends
  local root=$1; shift
  # shellcheck disable=SC2016  # expanded by the inner shell, from its arguments
  unshare --mount --propagation private /bin/sh -ec 'mount -t proc proc "$1/proc"; mount --rbind /dev "$1/dev"
    exec chroot "$1" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
      HOME=/root LANG=C.UTF-8 /bin/sh -c "$2"' mounted_sh "$root" "$*"
}

TIMES=""
timed() {  # NAME CMD...: run, then print "NAME: S s" and keep it for the image's marker (JSON)
  local name=$1 t0 rc=0; shift
  t0=$(date +%s)
  "$@" || rc=$?
  echo "$name: $(( $(date +%s) - t0 )) s"
  TIMES="$TIMES\"${name}_s\": $(( $(date +%s) - t0 )), "
  return $rc
}

with_ccache() {  # ROOT: ccache installed, its links for the compiler first on the maintainer scripts' PATH
  local root=$1
  if [ ! -x "$root/usr/bin/ccache" ]; then
    mounted_sh "$root" "apt-get $APT_WAIT install -y -qq --no-install-recommends ccache && apt-get clean" \
      || return 1
  fi
  for cc in gcc cc gcc-12 x86_64-linux-gnu-gcc x86_64-linux-gnu-gcc-12; do ln -sf ../bin/ccache "$root/usr/sbin/$cc"; done
  mkdir -p "$root/$CCACHE_IN"
  # kbuild and DKMS copy sources at build time (new mtimes) and stamp no dates: hash contents, not times
  printf 'cache_dir = /%s\nmax_size = 1G\nsloppiness = include_file_mtime,include_file_ctime,time_macros\n' \
    "$CCACHE_IN" > "$root/etc/ccache.conf"
}

build() {
  if [ -e "$IMAGE/.gpufleet-node-image" ]; then
    log "image is there: $IMAGE"; return 0
  fi
  [ "$(id -u)" = 0 ] || die "building the node image needs root"
  command -v debootstrap >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get $APT_WAIT install -y -qq debootstrap \
    >/dev/null || die "debootstrap is not installed and could not be"; }
  local tmp=$IMAGE.tmp logs
  logs=$(dirname "$IMAGE")
  mkdir -p "$logs"
  rm -rf "$tmp"
  log "building $IMAGE (once; several minutes: a kernel, its headers, a compiler and a DKMS build)"
  local t0
  t0=$(date +%s)
  timed debootstrap debootstrap --variant=minbase --components=main,contrib,non-free,non-free-firmware \
    --include=ca-certificates bookworm "$tmp" "$MIRROR" > "$logs/debootstrap.log" 2>&1 \
    || die "debootstrap bookworm failed (see $logs/debootstrap.log)"
  cat > "$tmp/etc/apt/sources.list" <<EOF
deb $MIRROR bookworm main contrib non-free non-free-firmware
EOF
  # a node image carries no documentation; the kernel's postinst runs no bootloader here
  printf 'path-exclude /usr/share/doc/*\npath-exclude /usr/share/man/*\npath-exclude /usr/share/locale/*\n' \
    > "$tmp/etc/dpkg/dpkg.cfg.d/01-nodoc"
  printf 'do_symlinks = no\n' > "$tmp/etc/kernel-img.conf"
  timed kernel mounted_sh "$tmp" "apt-get $APT_WAIT update -qq && apt-get $APT_WAIT install -y -qq --no-install-recommends \
    linux-image-amd64 linux-headers-amd64 initramfs-tools" > "$logs/kernel.log" 2>&1 \
    || die "installing the kernel failed (see $logs/kernel.log)"
  timed ccache with_ccache "$tmp" > "$logs/ccache.log" 2>&1 || die "installing ccache failed (see $logs/ccache.log)"
  # a new recipe's DKMS build starts from what the older images' builds compiled (the host's cache)
  if [ -d "$CCACHE_HOST" ]; then mkdir -p "$tmp/$CCACHE_IN" && cp -a "$CCACHE_HOST/." "$tmp/$CCACHE_IN/"; fi
  timed dkms_build mounted_sh "$tmp" "apt-get $APT_WAIT install -y -qq --no-install-recommends \
    nvidia-kernel-dkms=$OLD_DRIVER_PKG nvidia-kernel-support=$OLD_DRIVER_PKG" > "$logs/dkms.log" 2>&1 \
    || die "installing nvidia-kernel-dkms $OLD_DRIVER_PKG failed (see $logs/dkms.log)"
  ls "$tmp"/lib/modules/*/updates/dkms/nvidia*.ko* >/dev/null 2>&1 \
    || die "DKMS built no nvidia module (see $logs/dkms.log)"
  # the archives that hold the upgrade (security) and the drift (backports), for the tests
  cat >> "$tmp/etc/apt/sources.list" <<EOF
deb $SECURITY bookworm-security main contrib non-free non-free-firmware
deb $MIRROR bookworm-backports main contrib non-free non-free-firmware
EOF
  mounted_sh "$tmp" "apt-get $APT_WAIT update -qq && apt-get clean" > "$logs/update.log" 2>&1 \
    || die "apt-get update with security and backports failed (see $logs/update.log)"
  echo "{$TIMES\"image_build_s\": $(( $(date +%s) - t0 ))}" > "$tmp/.gpufleet-node-image"
  mv "$tmp" "$IMAGE"
  echo "image_build: $(( $(date +%s) - t0 )) s"
  log "built $IMAGE ($(du -sh "$IMAGE" | cut -f1))"
  if [ -z "${NODE_IMAGE:-}" ]; then  # the images of older recipes: never used again
    for old in "$IMAGES"/bookworm-535 "$IMAGES"/bookworm-535-*; do
      case $old in "$IMAGE"|*.tmp) ;; *) [ -e "$old/.gpufleet-node-image" ] && { log "removing $old (an older recipe)"; rm -rf "$old"; } ;; esac
    done
  fi
}

recipe_hash() {  # what the image is made of: the build's functions as bash reads them, the starting driver
  { declare -f build with_ccache mounted_sh timed; echo "$OLD_DRIVER_PKG"; } | sha256sum | cut -c1-12
}
IMAGE=${NODE_IMAGE:-$IMAGES/bookworm-535-$(recipe_hash)}

case "${1:-}" in
  build) build ;;
  copy)
    [ -n "${2:-}" ] || die "usage: node_image.sh copy DEST"
    [ -e "$IMAGE/.gpufleet-node-image" ] || die "no image at $IMAGE: run node_image.sh build"
    rm -rf "$2"; mkdir -p "$(dirname "$2")"
    cp -a --reflink=auto "$IMAGE" "$2"
    if [ -d "$CCACHE_HOST" ]; then cp -a "$CCACHE_HOST/." "$2/$CCACHE_IN/"; fi
    if [ "${NODE_IMAGE_BUILD_CACHE:-on}" != off ]; then
      install -m 755 "$(dirname "$0")/dkms_build_cache.sh" "$2/usr/sbin/make"
      mkdir -p "$2/$BUILDS_IN"
      # linked, not copied, where one file system holds both (135 MB an entry; the shim only reads them)
      if [ -d "$BUILDS_HOST" ]; then
        cp -al "$BUILDS_HOST/." "$2/$BUILDS_IN/" 2>/dev/null || cp -a "$BUILDS_HOST/." "$2/$BUILDS_IN/"
      fi
    fi ;;
  keep-cache)
    [ -n "${2:-}" ] || die "usage: node_image.sh keep-cache ROOT"
    if [ -d "$2/$CCACHE_IN" ]; then mkdir -p "$CCACHE_HOST" && cp -a -n "$2/$CCACHE_IN/." "$CCACHE_HOST/"; fi
    if [ -d "$2/$BUILDS_IN" ]; then  # whole entries only (an entry is renamed into place when complete)
      mkdir -p "$BUILDS_HOST"
      for entry in "$2/$BUILDS_IN"/*; do
        [ -f "$entry/modules.tar" ] && [ ! -e "$BUILDS_HOST/${entry##*/}" ] && cp -a "$entry" "$BUILDS_HOST/"
      done
      # the newest 8 builds (~135 MB each, unstripped): older drivers and kernels are not built again
      find "$BUILDS_HOST" -mindepth 1 -maxdepth 1 -type d -printf '%T@ %p\n' | sort -rn | tail -n +9 \
        | cut -d' ' -f2- | while read -r old; do rm -rf "$old"; done
    fi
    exit 0 ;;
  path) echo "$IMAGE" ;;
  sh)
    [ -n "${2:-}" ] && [ -n "${3:-}" ] || die "usage: node_image.sh sh ROOT CMD"
    root=$2; shift 2
    mounted_sh "$root" "$*" ;;
  *) die "usage: node_image.sh build | copy DEST | keep-cache ROOT | path | sh ROOT CMD" ;;
esac
