#!/bin/sh
# `make` in a copy of the node image (node_image.sh copy puts it at /usr/sbin/make, first on the PATH that
# maintainer scripts and the upgrade template give): the heavy build cached by its inputs, a level above
# ccache.  ccache cannot serve NVIDIA's module build whole: its conftest runs 323 compilations that link or
# fail by design, which ccache never caches, so a DKMS build with every other compilation cached still took
# 3-5 minutes of 2 cores.
#
# DKMS's module build (`make ... modules` in /var/lib/dkms/<module>/<version>/build) is keyed by what it is
# made from: the build tree DKMS copied from /usr/src (every file's content), the kernel's build tree
# (/lib/modules/<kernel>/build, links followed: its headers, kbuild and config), the compiler and binutils
# (their binaries' hashes and versions), the make arguments but -j, and the variables kbuild reads.
# A key built before restores its modules (*.ko, as make left them: DKMS strips, signs with the image's
# own key and installs them as after any build); a new key runs the real make and keeps the modules of a
# build that succeeded.  Everything else DKMS does (the source copy, the checks, signing, depmod, the
# initramfs) runs as always.  Anything else is the real make.
#
# The cache is /var/cache/gpufleet-build-cache in the image (node_image.sh copy brings the host's in and
# keep-cache takes new keys back).  NODE_IMAGE_BUILD_CACHE=off on the host: copies get no shim, every
# DKMS build compiles.
# The roots as a node image has them (tests/test_build_cache.py points them at a tree of its own)
REAL=${GPUFLEET_REAL_MAKE:-/usr/bin/make}
CACHE=${GPUFLEET_BUILD_CACHE:-/var/cache/gpufleet-build-cache}
DKMS_TREE=${GPUFLEET_DKMS_TREE:-/var/lib/dkms}
MODULES=${GPUFLEET_MODULES_DIR:-/lib/modules}

case $PWD in "$DKMS_TREE"/*/build) ;; *) exec "$REAL" "$@" ;; esac
[ -z "${GPUFLEET_BUILD_CACHE_INSIDE:-}" ] || exec "$REAL" "$@"  # kbuild's own recursive makes
kernel=""; modules=""; args=""
for a in "$@"; do
  case $a in
    KERNEL_UNAME=*|KERNELRELEASE=*) kernel=${a#*=} ;;
    modules) modules=1 ;;
  esac
  case $a in -j*) ;; *) args="$args $a" ;; esac
done
if [ -z "$kernel" ] || [ -z "$modules" ] || [ ! -d "$MODULES/$kernel/build/" ]; then exec "$REAL" "$@"; fi

cc=${CC:-gcc}
key=$(
  export LC_ALL=C
  echo "gpufleet build cache 1"  # what an entry holds; a new layout takes a new number
  echo "args:$args"
  env | grep -E '^(CC|LD|ARCH|CROSS_COMPILE|NV_[A-Z_]*|IGNORE_[A-Z_]*|SYSSRC|SYSOUT|KBUILD_[A-Z_]*)=' | sort
  find . -type f ! -name make.log -print0 | sort -z | xargs -0 sha256sum
  (cd "$MODULES/$kernel/build/" && find -L . -type f -print0 2>/dev/null | sort -z | xargs -0 sha256sum)
  "$cc" -v 2>&1 | tail -1
  sha256sum "$(command -v "$cc")" "$("$cc" -print-prog-name=cc1)" "$(command -v ld)" "$(command -v as)" 2>&1
) || exec "$REAL" "$@"
key=$(printf '%s\n' "$key" | sha256sum | cut -c1-24)
entry=$CACHE/$key

if [ -f "$entry/modules.tar" ]; then
  echo "gpufleet build cache: the modules of these inputs (key $key, $(cat "$entry/built")) restored, not compiled"
  exec tar -xf "$entry/modules.tar"
fi
rc=0
GPUFLEET_BUILD_CACHE_INSIDE=1 "$REAL" "$@" || rc=$?
if [ "$rc" = 0 ]; then
  mkdir -p "$CACHE" && tmp=$(mktemp -d "$CACHE/.new.XXXXXX") || exit 0
  if find . -name '*.ko' -print0 | LC_ALL=C sort -z | xargs -0 tar -cf "$tmp/modules.tar" \
      && echo "built $(date -u +%FT%TZ) for $kernel" > "$tmp/built" && [ ! -e "$entry" ]; then
    mv "$tmp" "$entry"
  else
    rm -rf "$tmp"
  fi
fi
exit "$rc"
