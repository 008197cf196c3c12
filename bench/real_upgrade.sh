#!/usr/bin/env bash
# The upgrade step for real (issue 21): Debian's NVIDIA driver packages, DKMS builds, kernel drift and the
# rollback, in a copy of the node image that tests/slurm/node_image.sh builds once.  Needs root and
# Debian's archive.  `--json` prints one object; see bench/real_upgrade.py for its keys.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$REPO/.venv/bin/python}
[ "$(id -u)" = 0 ] || { echo "real_upgrade: needs root (debootstrap, chroot)" >&2; exit 2; }
exec "$PY" "$REPO/bench/real_upgrade.py" "$@"
