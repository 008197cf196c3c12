#!/usr/bin/env bash
# A small real Slurm cluster (tests/slurm/minicluster.sh): one node gets a GPU fault, slurm-gpufleet's
# health check drains it with a clear reason, the fault is fixed, the node is resumed after the
# hysteresis.  Needs root (installs Debian's slurm packages when missing).  Leaves nothing running.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
export MINICLUSTER_DIR=${MINICLUSTER_DIR:-/var/lib/gpufleet-demo} HC_INTERVAL=${HC_INTERVAL:-3} CLEAN_RUNS=2
export CTLD_PORT=10817 SLURMD_PORT_BASE=11001
PY=${PYTHON:-$REPO/.venv/bin/python}
MC="$REPO/tests/slurm/minicluster.sh"
trap 'bash "$MC" down >/dev/null 2>&1 || true' EXIT
eval "$(bash "$MC" up 3 | sed 's/^/export /')"
show() { echo "\$ $*"; "$@"; echo; }
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local t=$1 what=$2; shift 2
  for _ in $(seq 1 $((t * 5))); do "$@" && return 0; sleep 0.2; done
  echo "timed out waiting for $what" >&2; return 1
}
echo "== 3 nodes, 8 simulated H200 each (from the real capture); health check every ${HC_INTERVAL}s"
show sinfo -N -p gpu -o '%N %T %E'
echo "== GPU 5 of n2 reports a row-remapping failure (an RMA criterion)"
show "$PY" "$REPO/tests/slurm/gpustate.py" fault "$GPUFLEET_STATE_DIR/n2.json" 5 row_remap_failure
t0=$(date +%s.%N)
wait_for 30 "n2 drained" bash -c 'scontrol show node n2 | grep -q "State=.*DRAIN"'
awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "drained %.1f s after the fault\n\n", b - a }'
show sinfo -R -o '%N %30E %H'
echo "\$ scontrol show node n2"; scontrol show node n2 | grep -E 'State=|Reason=|Extra='; echo
echo "== an admin drains n3 for their own reason; slurm-gpufleet leaves it alone"
show scontrol update nodename=n3 state=drain reason="admin: PSU swap"
echo "== the GPU is replaced: n2 reports healthy again"
"$PY" "$REPO/tests/slurm/gpustate.py" seed "$GPUFLEET_STATE_DIR" n2
t0=$(date +%s.%N)
wait_for 40 "n2 resumed" bash -c 'scontrol show node n2 | grep -q "State=IDLE "'
awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "resumed %.1f s after the fix (2 clean health checks in a row)\n\n", b - a }'
show sinfo -N -p gpu -o '%N %T %E'
echo "== n2's own history (SQLite, $MINICLUSTER_DIR/state/gpufleet/n2.db)"
"$PY" - "$MINICLUSTER_DIR/state/gpufleet/n2.db" <<'PYEOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for row in db.execute("select time, hook, action, reason, why from actions order by ts"):
    print(" | ".join(str(x) for x in row))
print(db.execute("select count(*), sum(verdict='ok'), sum(verdict='drain') from runs").fetchone(), "(runs, ok, drain)")
PYEOF
