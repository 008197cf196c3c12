#!/usr/bin/env bash
# pyslurm for one Slurm release, built from PySlurm's own repository and kept, like the release roots.
# PySlurm keeps a branch per Slurm release (22.5.x, 23.11.x, 24.11.x, ...; PyPI serves 25.11 only); its
# source is never copied into ours: give a checkout of the release's branch.
#
#   pyslurm_build.sh build RELEASE SRC   build unless built (minutes: Cython and a C compiler)
#   pyslurm_build.sh path RELEASE        the directory to put on PYTHONPATH, as the release's python sees
#                                        it; exit 1 when there is none
#   pyslurm_build.sh release-of SRC      the Slurm release a checkout is for, from its version
#                                        (pyslurm/version.py: "22.5.3" is for 22.05, "24.11.0" for 24.11)
#
# RELEASE is the host's (22.05 here: Debian's libslurm-dev, for the tests' interpreter, $PYTHON or the
# repository's .venv) or one of minicluster.sh's release roots (24.11: the root's libslurm-dev, for the
# root's python3, built inside the root).  The tests' backend contract runs pyslurm wherever `path` finds
# a build for the release under test (tests/slurm/test_backends.py).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
ROOTS=${SLURM_ROOTS:-/var/tmp/gpufleet-slurm-roots}
HOST_CACHE=${PYSLURM_CACHE:-/var/tmp/gpufleet-pyslurm}
INROOT=/opt/gpufleet-pyslurm    # inside a release root
APT_WAIT=(-o DPkg::Lock::Timeout=600)

log() { echo "pyslurm-build: $*" >&2; }
die() { log "error: $*"; exit 1; }

host_release() { command -v slurmctld >/dev/null && slurmctld -V | awk '{print $2}' | cut -d. -f1,2; }

in_root() {  # ROOT CMD: CMD in the release root, /proc and /dev mounted in a mount namespace of its own
  # shellcheck disable=SC2016  # expanded by the inner shell, from its arguments
  unshare --mount --propagation private /bin/sh -ec 'mountpoint -q "$1/proc" || mount -t proc proc "$1/proc"
    mountpoint -q "$1/dev" || mount --rbind /dev "$1/dev"
    exec chroot "$1" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
      HOME=/root LANG=C.UTF-8 /bin/sh -ec "$2"' in_root "$1" "$2"
}

site_of() {  # RELEASE: where its build lives, as seen from this host
  if [ "$1" = "$(host_release)" ]; then echo "$HOST_CACHE/$1/site"; else echo "$ROOTS/$1$INROOT/site"; fi
}

path() {
  local release=$1 site
  site=$(site_of "$release")
  [ -e "$site/.gpufleet-pyslurm" ] || return 1
  if [ "$release" = "$(host_release)" ]; then echo "$site"; else echo "$INROOT/site"; fi
}

build() {
  local release=$1 src=$2 site t0
  [ -d "$src" ] || die "no PySlurm checkout at $src (its $release branch: ${release%.*}.${release#*.0}.x)"
  src=$(cd "$src" && pwd)
  site=$(site_of "$release")
  [ -e "$site/.gpufleet-pyslurm" ] && { log "built already: $site"; return 0; }
  [ "$(id -u)" = 0 ] || die "needs root (apt-get, chroot)"
  t0=$(date +%s)
  if [ "$release" = "$(host_release)" ]; then
    local py=${PYTHON:-$REPO/.venv/bin/python} venv=$HOST_CACHE/$release/venv
    dpkg -s libslurm-dev >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get "${APT_WAIT[@]}" install -y -qq \
      libslurm-dev >/dev/null || die "libslurm-dev is not installed and could not be"
    rm -rf "$venv" "$site" && mkdir -p "$HOST_CACHE/$release"
    # the build's own interpreter is the tests' (the extension is built for its ABI); Cython < 3 for the
    # older branches
    "$py" -m venv "$venv"
    "$venv/bin/pip" install -q "cython<3" setuptools wheel packaging
    (cd "$src" && SLURM_LIB_DIR=/usr/lib/x86_64-linux-gnu SLURM_INCLUDE_DIR=/usr/include \
      "$venv/bin/pip" wheel -q --no-build-isolation --no-deps -w "$HOST_CACHE/$release/wheels" .) \
      > "$HOST_CACHE/$release/build.log" 2>&1 || die "the build failed (see $HOST_CACHE/$release/build.log)"
    "$venv/bin/pip" install -q --no-deps --target "$site" "$HOST_CACHE/$release"/wheels/pyslurm-*.whl
  else
    local root=$ROOTS/$release
    [ -e "$root/.gpufleet-slurm-root" ] || die "no Slurm $release root (tests/slurm/minicluster.sh builds it)"
    rm -rf "$root$INROOT" && mkdir -p "$root$INROOT"
    cp -a "$src" "$root$INROOT/src"
    # the root's own Debian packages (Cython 3.0 in trixie): no index is asked for anything else
    in_root "$root" "apt-get ${APT_WAIT[*]} update -qq && apt-get ${APT_WAIT[*]} install -y -qq --no-install-recommends \
        libslurm-dev python3-dev python3-pip python3-setuptools python3-wheel python3-packaging cython3 gcc >/dev/null
      cd $INROOT/src && SLURM_LIB_DIR=/usr/lib/x86_64-linux-gnu SLURM_INCLUDE_DIR=/usr/include \
        python3 -m pip wheel -q --no-build-isolation --no-deps --no-index -w $INROOT/wheels . > $INROOT/build.log 2>&1
      python3 -m zipfile -e $INROOT/wheels/pyslurm-*.whl $INROOT/site" \
      || die "the build failed (see $root$INROOT/build.log)"
    rm -rf "$root$INROOT/src"
  fi
  echo "{\"build_s\": $(( $(date +%s) - t0 ))}" > "$site/.gpufleet-pyslurm"
  log "built pyslurm for Slurm $release in $(( $(date +%s) - t0 )) s: $site"
}

release_of() {  # SRC: PySlurm's version is SLURM_MAJOR.PATCH, its first two numbers the Slurm release
  local src=$1 file version
  for file in "$src/pyslurm/version.py" "$src/pyslurm/__version__.py"; do
    [ -f "$file" ] || continue
    version=$(sed -n 's/^__version__ *= *["'"'"']\([0-9][0-9.]*\)["'"'"'].*/\1/p' "$file" | head -1)
    [ -n "$version" ] && { echo "$version" | awk -F. '{printf "%d.%02d\n", $1, $2}'; return 0; }
  done
  die "no PySlurm version in $src (pyslurm/version.py)"
}

case "${1:-}" in
  release-of) [ $# = 2 ] || die "usage: pyslurm_build.sh release-of SRC"; release_of "$2" ;;
  build) [ $# = 3 ] || die "usage: pyslurm_build.sh build RELEASE SRC"; build "$2" "$3" ;;
  path) [ $# = 2 ] || die "usage: pyslurm_build.sh path RELEASE"; path "$2" ;;
  *) die "usage: pyslurm_build.sh build RELEASE SRC | path RELEASE | release-of SRC" ;;
esac
