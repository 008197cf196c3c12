#!/usr/bin/env bash
# A real Slurm on one machine: one slurmctld and N slurmd (Debian's packages, 22.05 or 24.11), each
# node with Gres=gpu:h200:8 backed by fake device files.  The node's interpreter ($DIR/bin/node-python)
# finds tests/fake_pynvml/recorded first on its path: a pynvml that answers from the node's recorded
# NVML session $GPUFLEET_STATE_DIR/<node>.json, so our code reads "live NVML" as on a real node.
# slurm.conf points at this project's own health check, prolog, epilog, and a fake RebootProgram that
# restarts the node's slurmd.
#
#   minicluster.sh up N     install what is missing, write the configs, start, wait until idle
#   minicluster.sh down     stop every daemon this script started (by pid), remove nothing else
#   minicluster.sh env      print the settings of the running cluster
#
# Environment (all optional):
#   MINICLUSTER_DIR     where everything lives (default /var/lib/gpufleet-minicluster: a directory only
#                       root can write, as the hooks trust no other)
#   GPUFLEET_STATE_DIR  the nodes' recorded NVML sessions (default $MINICLUSTER_DIR/gpus)
#   HC_INTERVAL         HealthCheckInterval seconds (default 10)
#   HC_NODE_STATE       HealthCheckNodeState (default ANY)
#   HC_SLOTS            health checks running at once on the cluster, the rest wait asleep (default 2)
#   GPUS_PER_NODE       default 8
#   MIN_JOB_AGE         MinJobAge seconds (default 300)
#   RECORD_NODES        also this many node records with no slurmd (g00001...), for reads at fleet size
#   BLOCK_SIZE          write topology/block with blocks of that many nodes (b1 = n[1-SIZE], ...); 23.11 on
#   CTLD_PORT / SLURMD_PORT_BASE   default 16817 / 17001
#   PYTHON              interpreter with slurm_gpufleet importable (default: the repo's .venv)
#   AUTH                none | munge (default: none on 22.05, munge on later releases)
#   ACCOUNTING          1: slurmdbd with its own MariaDB (Debian's mariadb-server and slurmdbd, installed when
#                       missing; data, socket and pids under MINICLUSTER_DIR, ports CTLD_PORT+2 and +3),
#                       AccountingStorageType=accounting_storage/slurmdbd; the host's release only
#   SLURM_RELEASE       22.05 | 24.11 | 26.05 (default: the host's own Slurm).  Another release runs in a
#                       Debian root built once by debootstrap (bookworm, trixie, sid) and kept under
#                       MINICLUSTER_ROOTS (default /var/tmp/gpufleet-slurm-roots): the daemons and every
#                       program slurmd starts (our health check, prolog, epilog, RebootProgram) run inside
#                       it on its own python3; `up` prints PATH first, with scontrol, sinfo, squeue, sbatch,
#                       scancel, srun, slurmctld and slurmd of that release (chroot wrappers) in front.
# /etc is left as it is: the wrappers export SLURM_CONF themselves.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
DIR=${MINICLUSTER_DIR:-/var/lib/gpufleet-minicluster}  # not under /tmp: the hooks trust only root-only directories
GPUDIR=${GPUFLEET_STATE_DIR:-$DIR/gpus}
HC_INTERVAL=${HC_INTERVAL:-10}
# ANY: as a site runs it.  (CYCLE did not spread 4 nodes' runs over a 5 s interval here: slurmctld
# started them within a second of each other all the same.)
HC_NODE_STATE=${HC_NODE_STATE:-ANY}
HC_SLOTS=${HC_SLOTS:-2}  # health checks that run at once on this cluster (node-python)
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CTLD_PORT=${CTLD_PORT:-16817}
SLURMD_PORT_BASE=${SLURMD_PORT_BASE:-17001}
CONF=$DIR/etc/slurm.conf
RELEASE=${SLURM_RELEASE:-}
ROOTS=${MINICLUSTER_ROOTS:-/var/tmp/gpufleet-slurm-roots}
ROOT=""        # the release's root, when the release under test is not the host's
SBIN=$DIR/slurm-bin

log() { echo "minicluster: $*" >&2; }
die() { log "error: $*"; exit 1; }

python_bin() {  # an absolute path, not resolved: a venv's python is a symlink that must stay one
  local py=${PYTHON:-}
  if [ -z "$py" ] && [ -x "$REPO/.venv/bin/python" ]; then py=$REPO/.venv/bin/python; fi
  if [ -z "$py" ]; then py=$(command -v python3); fi
  case "$py" in /*) ;; */*) py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py") ;; *) py=$(command -v "$py") ;; esac
  # pyenv shims need PATH, which slurmd does not give: ask the interpreter where it really is
  "$py" -c 'import sys; print(sys.executable)'
}

# the releases' clusters start side by side (make test): the second apt-get waits for the first's lock
APT_WAIT="-o DPkg::Lock::Timeout=600"

install_slurm() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v scontrol >/dev/null; then return; fi
  [ "$(id -u)" = 0 ] || die "Slurm is not installed and installing it needs root"
  log "installing slurmctld slurmd slurm-client"
  export DEBIAN_FRONTEND=noninteractive
  apt-get $APT_WAIT update -qq >/dev/null
  apt-get $APT_WAIT install -y -qq --no-install-recommends slurmctld slurmd slurm-client >/dev/null
}

slurm_major_minor() { SL slurmctld -V | awk '{print $2}' | awk -F. '{printf "%d%02d\n", $1, $2}'; }

# A Slurm command of the release under test: inside its root, or the host's own.
# Inside, PATH is the root's own: the wrappers below are visible there too (through /tmp) and would loop.
ROOT_PATH=/usr/sbin:/usr/bin:/sbin:/bin
SL() { if [ -n "$ROOT" ]; then chroot "$ROOT" /usr/bin/env PATH=$ROOT_PATH "$@"; else "$@"; fi; }

# in a root one at a time, as they share a socket (bin/start-slurmd); on the host all at once, as before
start_slurmd() {
  if [ -n "$ROOT" ]; then "$DIR/bin/start-slurmd" "$1"; else slurmd -f "$CONF" -N "$1" 2>>"$DIR/log/slurmd-start.log"; fi
}

suite_of() { case "$1" in 22.05) echo bookworm ;; 24.11) echo trixie ;; 26.05) echo sid ;; *) return 1 ;; esac; }

choose_release() {  # sets ROOT when SLURM_RELEASE names a release other than the host's
  [ -n "$RELEASE" ] || return 0
  suite_of "$RELEASE" >/dev/null || die "SLURM_RELEASE=$RELEASE: one of 22.05, 24.11, 26.05"
  if command -v slurmctld >/dev/null && [ "$(slurmctld -V | awk '{print $2}' | cut -d. -f1,2)" = "$RELEASE" ]; then
    return 0
  fi
  ROOT=$ROOTS/$RELEASE
}

build_root() {  # once per release; later runs reuse it
  [ -e "$ROOT/.gpufleet-slurm-root" ] && return 0
  [ "$(id -u)" = 0 ] || die "building the Slurm $RELEASE root needs root"
  command -v debootstrap >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get $APT_WAIT install -y -qq debootstrap \
    >/dev/null || die "debootstrap is not installed and could not be"; }
  local suite
  suite=$(suite_of "$RELEASE")
  log "building the Slurm $RELEASE root ($suite) in $ROOT (once; about a minute)"
  mkdir -p "$ROOTS"
  rm -rf "$ROOT.tmp"
  debootstrap --variant=minbase --include=slurmctld,slurmd,slurm-client,python3,python3-clustershell,python3-click,python3-jinja2,sqlite-utils,procps \
    "$suite" "$ROOT.tmp" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" > "$ROOTS/debootstrap-$RELEASE.log" 2>&1 \
    || die "debootstrap $suite failed (see $ROOTS/debootstrap-$RELEASE.log)"
  touch "$ROOT.tmp/.gpufleet-slurm-root"
  mv "$ROOT.tmp" "$ROOT"
}

mount_root() {  # the root sees this machine's /proc, /dev, /tmp (clusters, tests' files) and the repository
  local m
  # a cluster whose teardown found the root still in use left its mounts; once their source is gone (a
  # finished CI copy, a test's cluster directory) nothing can use them: 52 had piled up over a day here
  awk -v root="$ROOT/" 'index($5, root) == 1 {print $5}' /proc/self/mountinfo | sort -ru | while read -r m; do
    case "$m" in "$ROOT/proc"* | "$ROOT/dev"* | "$ROOT/tmp"*) continue ;; esac
    [ -e "${m#"$ROOT"}" ] || umount -l "$m" 2>/dev/null || true
  done
  mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
  mountpoint -q "$ROOT/dev" || { mount --rbind /dev "$ROOT/dev" && mount --make-rslave "$ROOT/dev"; }
  for m in /tmp "$REPO" "$DIR" "$GPUDIR"; do
    mountpoint -q "$ROOT$m" && continue
    # already visible through a mount made above (the cluster under /tmp)
    [ -e "$ROOT$m" ] && [ "$(stat -c %i "$ROOT$m" 2>/dev/null)" = "$(stat -c %i "$m")" ] && continue
    mkdir -p "$ROOT$m"
    mount --rbind "$m" "$ROOT$m" && mount --make-rslave "$ROOT$m"
  done
  if [ ! -s "$DIR/etc/slurm.key" ]; then  # auth/slurm's shared key, read beside slurm.conf
    mkdir -p "$DIR/etc"
    dd if=/dev/urandom of="$DIR/etc/slurm.key" bs=1024 count=1 2>/dev/null
    chmod 600 "$DIR/etc/slurm.key"
  fi
}

root_in_use() {
  local pid
  for pid in /proc/[0-9]*; do [ "$(readlink "$pid/root" 2>/dev/null)" = "$ROOT" ] && return 0; done
  return 1
}

unmount_root() {  # only once no process runs inside it (another cluster of the same release may)
  local i m
  for i in $(seq 1 75); do root_in_use || break; sleep 0.2; done  # a health check or step finishing
  if root_in_use; then log "root $ROOT still in use (another cluster?): left mounted"; return 0; fi
  for m in "$GPUDIR" "$DIR" "$REPO" /tmp /dev /proc; do
    mountpoint -q "$ROOT$m" && umount -l "$ROOT$m"
  done
  return 0
}

release_wrappers() {  # the release's commands for tests and for `slurm-gpufleet` on this machine
  local cmd path
  rm -rf "$SBIN"
  mkdir -p "$SBIN"
  for cmd in scontrol sinfo squeue sbatch scancel srun sacct slurmctld slurmd; do
    path=/usr/bin/$cmd
    [ -x "$ROOT/usr/sbin/$cmd" ] && path=/usr/sbin/$cmd
    # the same path serves this machine and the programs slurmd runs inside the root (the config names it)
    printf '#!/bin/sh\n# Slurm %s from %s (tests/slurm/minicluster.sh)\n[ -e /.gpufleet-slurm-root ] && exec %s "$@"\nexec /usr/sbin/chroot %s /usr/bin/env PATH=%s %s "$@"\n' \
      "$RELEASE" "$ROOT" "$path" "$ROOT" "$ROOT_PATH" "$path" > "$SBIN/$cmd"
    chmod 755 "$SBIN/$cmd"
  done
}

alive() {  # a pid that exists and is not a zombie
  local pid=$1
  [ -n "$pid" ] && [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null
}

DB_PORT=$((CTLD_PORT + 2))
DBD_PORT=$((CTLD_PORT + 3))

accounting_lines() {
  if [ "${ACCOUNTING:-0}" = 1 ]; then
    printf 'AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\nAccountingStoragePort=%s\n' "$DBD_PORT"
  else
    echo "AccountingStorageType=accounting_storage/none"
  fi
}

start_accounting() {  # MariaDB of its own, then slurmdbd, then the cluster in its database
  local auth=$1 db=$DIR/db i
  [ -z "$ROOT" ] || die "ACCOUNTING=1 runs on the host's Slurm release only"
  if ! command -v mariadbd >/dev/null || ! command -v slurmdbd >/dev/null; then
    log "installing mariadb-server slurmdbd"
    export DEBIAN_FRONTEND=noninteractive
    apt-get $APT_WAIT update -qq >/dev/null
    apt-get $APT_WAIT install -y -qq --no-install-recommends mariadb-server slurmdbd >/dev/null
  fi
  rm -rf "$db"  # a fresh database each time, as slurmctld's state is: job ids start again
  mkdir -p "$db"
  if [ ! -d "$db/data/mysql" ]; then
    mariadb-install-db --user=root --datadir="$db/data" --auth-root-authentication-method=normal --skip-test-db \
      > "$DIR/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed (see $DIR/log/mariadb-install.log)"
  fi
  rm -f "$db/db.sock"
  setsid mariadbd --no-defaults --user=root --datadir="$db/data" --socket="$db/db.sock" --pid-file="$DIR/run/mariadb.pid" \
    --port="$DB_PORT" --bind-address=127.0.0.1 --log-error="$DIR/log/mariadb.log" </dev/null >/dev/null 2>&1 &
  for i in $(seq 1 120); do [ -S "$db/db.sock" ] && break; sleep 0.25; done
  [ -S "$db/db.sock" ] || die "MariaDB did not start (see $DIR/log/mariadb.log)"
  mariadb --no-defaults --socket="$db/db.sock" -u root -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'gpufleet';
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'gpufleet'; GRANT ALL ON *.* TO 'slurm'@'localhost';
    GRANT ALL ON *.* TO 'slurm'@'127.0.0.1';" || die "cannot create MariaDB's slurm user"
  {
    echo "# written by tests/slurm/minicluster.sh"
    echo "AuthType=auth/$auth"
    echo "DbdHost=localhost"
    echo "DbdPort=$DBD_PORT"
    echo "SlurmUser=root"
    echo "StorageType=accounting_storage/mysql"
    echo "StorageHost=127.0.0.1"
    echo "StoragePort=$DB_PORT"
    echo "StorageUser=slurm"
    echo "StoragePass=gpufleet"
    echo "StorageLoc=slurm_acct_db"
    echo "LogFile=$DIR/log/slurmdbd.log"
    echo "PidFile=$DIR/run/slurmdbd.pid"
  } > "$DIR/etc/slurmdbd.conf"
  chmod 600 "$DIR/etc/slurmdbd.conf"
  SLURM_CONF=$CONF slurmdbd
  for i in $(seq 1 120); do
    SLURM_CONF=$CONF timeout 10 sacctmgr -n list cluster >/dev/null 2>&1 && break
    sleep 0.25
  done
  SLURM_CONF=$CONF timeout 10 sacctmgr -i add cluster gpufleet >/dev/null 2>&1 || true
  SLURM_CONF=$CONF timeout 10 sacctmgr -n list cluster format=cluster 2>/dev/null | grep -q gpufleet \
    || die "slurmdbd did not come up with the cluster (see $DIR/log/slurmdbd.log)"
}

stop_accounting() {
  local f
  for f in slurmdbd mariadb; do
    [ -f "$DIR/run/$f.pid" ] && stop_pid "$(cat "$DIR/run/$f.pid")"
  done
  return 0
}

stop_pid() {
  local pid=$1 i
  alive "$pid" || return 0
  kill "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do alive "$pid" || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  for i in $(seq 1 20); do alive "$pid" || return 0; sleep 0.1; done
}

write_configs() {
  local n=$1 py=$2 auth=$3 scontrol
  scontrol=$(command -v scontrol)  # in a release's root: its chroot wrapper, first on PATH
  mkdir -p "$DIR"/{etc,bin,log,run,state/ctld,state/gpufleet,dev,spool/d} "$GPUDIR"
  for i in $(seq 1 "$n"); do mkdir -p "$DIR/spool/d/n$i"; done
  for g in $(seq 0 $((GPUS_PER_NODE - 1))); do
    [ -e "$DIR/dev/nvidia$g" ] || mknod "$DIR/dev/nvidia$g" c 195 "$g" 2>/dev/null || ln -sf /dev/null "$DIR/dev/nvidia$g"
  done

  local cred="CredType=cred/none"
  [ "$auth" = munge ] && cred="CredType=cred/munge"
  [ "$auth" = slurm ] && cred="CredType=cred/slurm"
  if [ -n "$ROOT" ]; then  # 24.11 on: slurmd wants a cgroup plugin unless told there is none
    echo "CgroupPlugin=disabled" > "$DIR/etc/cgroup.conf"
  else  # 22.05 has no "disabled" plugin: a cgroup.conf left by another release's run stops its slurmd
    rm -f "$DIR/etc/cgroup.conf"
  fi
  local topology=""
  rm -f "$DIR/etc/topology.conf"
  if [ -n "${BLOCK_SIZE:-}" ]; then  # NVLink racks as Slurm sees them: jobs ask --segment=N
    topology="TopologyPlugin=topology/block"
    for b in $(seq 1 $(( (n + BLOCK_SIZE - 1) / BLOCK_SIZE ))); do
      echo "BlockName=b$b Nodes=n[$(( (b - 1) * BLOCK_SIZE + 1 ))-$(( b * BLOCK_SIZE > n ? n : b * BLOCK_SIZE ))]"
    done > "$DIR/etc/topology.conf"
    echo "BlockSizes=$BLOCK_SIZE" >> "$DIR/etc/topology.conf"
  fi
  # jobs select on the numbers the summary carries (sbatch --extra), from 23.11
  sched_extra=""
  case "${RELEASE:-$(slurmctld -V 2>/dev/null | awk '{print $2}' | cut -d. -f1,2)}" in
    22.05|23.02) ;;
    *) sched_extra=",extra_constraints" ;;
  esac
  cat > "$CONF" <<EOF
# written by tests/slurm/minicluster.sh
$topology
ClusterName=gpufleet
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
AuthType=auth/$auth
$cred
AuthInfo=cred_expire=10
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state/ctld
SlurmdSpoolDir=$DIR/spool/d/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$(accounting_lines)
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,batch_sched_delay=0$sched_extra
# idle sweeps (slurm_gpufleet/remedy/sweep.py) give way by partition priority: a test adds a sweep partition of
# a lower PriorityTier at run time; the partitions below share one tier, so nothing preempts among them
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
MailProg=/bin/true
ReturnToService=1
SlurmdTimeout=30
# 26.05 sends a queued reboot to slurmd only on a later background pass (9 to 30 s seen here, longer
# under load): a short ResumeTimeout times the reboot out before it was even asked
ResumeTimeout=120
KillWait=5
MinJobAge=${MIN_JOB_AGE:-300}
# job ids of their own per cluster: clusters side by side on one machine (CI's releases, a bench) would
# otherwise each run a job 1, and a look at /proc for a job's slurmstepd would find another cluster's
FirstJobId=$((CTLD_PORT * 1000))
$(grep -v '^#' "$DIR/etc/slurm.conf.gpufleet")
NodeName=n[1-$n] NodeHostname=localhost NodeAddr=127.0.0.1 Port=$SLURMD_PORT_BASE-$((SLURMD_PORT_BASE + n - 1)) CPUs=16 RealMemory=64000 Gres=gpu:h200:$GPUS_PER_NODE State=UNKNOWN
$(if [ "${RECORD_NODES:-0}" -gt 0 ]; then
  printf 'NodeName=g[%05d-%05d] NodeHostname=localhost NodeAddr=127.0.0.1 Port=1 CPUs=112 RealMemory=2000000 Gres=gpu:h200:8 State=DOWN Reason=record\n' 1 "$RECORD_NODES"
fi)
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE DefaultTime=10 State=UP PriorityTier=10
PartitionName=dev Nodes=n[1-$(( (n + 1) / 2 ))] MaxTime=INFINITE DefaultTime=10 State=UP PriorityTier=10
PartitionName=prod Nodes=n[$(( (n + 1) / 2 + 1 > n ? n : (n + 1) / 2 + 1 ))-$n] MaxTime=INFINITE DefaultTime=10 State=UP PriorityTier=10
EOF
  cat > "$DIR/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=n[1-$n] Name=gpu Type=h200 File=$DIR/dev/nvidia[0-$((GPUS_PER_NODE - 1))]
EOF

  # The nodes' simulated host: the running kernel with the NVIDIA module of the driver the GPUs run
  # (what the kernel check and the look-before-reboot read); tests add a kernel without one.
  rm -rf "$DIR/host"
  mkdir -p "$DIR/host/proc/sys/kernel" "$DIR/host/boot" "$DIR/host/lib/modules/6.1.0-28-amd64/updates/dkms"
  echo 6.1.0-28-amd64 > "$DIR/host/proc/sys/kernel/osrelease"
  mkdir -p "$DIR/host/proc/driver/nvidia"  # the loaded driver's parameters, as an x86 R580 host shows them
  printf 'CoherentGPUMemoryMode: ""\nEnableMSI: 1\n' > "$DIR/host/proc/driver/nvidia/params"
  echo kernel > "$DIR/host/boot/vmlinuz-6.1.0-28-amd64"
  PYTHONPATH=$REPO "$py" "$HERE/gpustate.py" module "$DIR/host/lib/modules/6.1.0-28-amd64/updates/dkms/nvidia.ko" \
    --version 580.159.04

  cat > "$DIR/etc/gpufleet.toml" <<EOF
# written by tests/slurm/minicluster.sh: simulated GPUs, fast hysteresis
[defaults]
expected_gpus = $GPUS_PER_NODE
require_persistence = true
fabric_manager_probe_s = 5   # three probes within a few health-check intervals
fabric_manager_grace_s = 0

[slurm]
clean_runs_to_resume = ${CLEAN_RUNS:-2}
breaker_threshold = ${BREAKER_THRESHOLD:-4}  # nodes drained by us within breaker_window_s
reboots_before_drain = ${REBOOTS_BEFORE_DRAIN:-2}
read_timeout_s = ${READ_TIMEOUT:-5}
scontrol = "$scontrol"
state_dir = "$DIR/state/gpufleet"
host_root = "$DIR/host"
kernel_log = "$GPUDIR"
imex_features = ["imex"]
imex_ctl = "$DIR/bin/nvidia-imex-ctl"
systemctl = "$DIR/bin/fake-systemctl"
reset_command = "$DIR/bin/fake-reset {node} {gpus}"
reset_timeout_s = 10
# quiet runs read Slurm at least this often: a tray its rack's escalation drained (from another tray's check)
# sees it within 20 s here, within the 600 s default on a site
slurm_read_every_s = 20
validation_command = "$DIR/sbin/slurm-gpufleet-healthcheck --level deep --nhc"
validation_timeout_minutes = 2

[maintain]
upgrade_template = "$DIR/etc/upgrade.sh.j2"
db = "$DIR/state/maintain.db"
less_critical_partitions = ["dev"]
critical_partitions = ["prod"]
waves = [1, "25%", "50%", "100%"]
max_unavailable = ${MAX_UNAVAILABLE:-2}
max_parallel_upgrades = ${MAX_PARALLEL_UPGRADES:-0}
max_unavailable_per_partition = "50%"
poll_s = 0.5
upgrade_timeout_s = 60
return_timeout_s = 60
validate_timeout_s = 30
EOF

  # nvidia-imex-ctl as a node's IMEX daemon answers: READY and an UP domain, unless the test wrote the
  # node's $GPUDIR/<node>.imex-q (the daemon's state) or .imex-n (the domain's JSON)
  cat > "$DIR/bin/nvidia-imex-ctl" <<EOF
#!/bin/bash
node=\${SLURMD_NODENAME:-\$(hostname -s)}
if [ "\$1" = -q ]; then
  cat "$GPUDIR/\$node.imex-q" 2>/dev/null || echo READY
else
  cat "$GPUDIR/\$node.imex-n" 2>/dev/null || echo '{"status": "UP", "nodes": {}}'
fi
EOF
  chmod 755 "$DIR/bin/nvidia-imex-ctl"

  # systemctl as a node's systemd answers for nvidia-fabricmanager: loaded and active, unless the test
  # wrote the node's $GPUDIR/<node>.fabricmanager (`systemctl show` lines)
  cat > "$DIR/bin/fake-systemctl" <<EOF
#!/bin/bash
node=\${SLURMD_NODENAME:-\$(hostname -s)}
cat "$GPUDIR/\$node.fabricmanager" 2>/dev/null ||
  printf 'LoadState=loaded\nActiveState=active\nNRestarts=0\nStateChangeTimestampMonotonic=1000000\n'
EOF
  chmod 755 "$DIR/bin/fake-systemctl"

  # A node's slurmd stopped and started again, as a reboot does to it (the upgrade's, an image's boot).
  # A reboot does not wait for a slurmd that will not stop: seen on 24.11, a slurmd that caught SIGTERM
  # while its health check ran hung in its shutdown, and the new one waited on it for ever ("killing old
  # slurmd"), the node DOWN; after 5 s it is killed, as the reboot would.
  # One restart of a node at a time, and every slurmd of that node stopped, not only the one its pid file
  # names: a killed apply's upgrade command and the resumed apply's re-run can restart the same node at
  # once, and slurmd writes its pid file only after it has daemonised, so the second restart read a stale
  # pid, left the first's new slurmd running and started another beside it (CI run 5: the node never
  # registered again).  The pattern names this cluster's config, as clusters of other releases run beside.
  # The slurmd of a root all bind one /run/slurm/sack.socket (26.05) as they start: two started in the
  # same instant (a rack's trays restarted together, each waiting for the next second) and one exits,
  # "init_sack_conmgr: ... Unable to bind UNIX socket: Address already in use" (CI, 2026-12-03).  So
  # starts take turns, each until its slurmd logged that it started (or why not).
  cat > "$DIR/bin/start-slurmd" <<EOF
#!/bin/bash
node=\$1
exec 7>"$DIR/run/slurmd-start.lock"
flock -w 60 7 || true
log="$DIR/log/slurmd-\$node.log"
before=\$(stat -c %s "\$log" 2>/dev/null || echo 0)
# what a slurmd prints before its log is open (a bind error, say) goes to slurmd-start.log
$(command -v slurmd) -f $CONF -N "\$node" </dev/null >/dev/null 2>>"$DIR/log/slurmd-start.log" 7>&-
for i in \$(seq 1 100); do
  tail -c +\$((before + 1)) "\$log" 2>/dev/null | grep -q "slurmd started on\\|fatal" && break
  sleep 0.1
done
EOF
  chmod 755 "$DIR/bin/start-slurmd"
  cat > "$DIR/bin/restart-slurmd" <<EOF
#!/bin/bash
node=\$1
renice -n 0 -p \$\$ >/dev/null 2>&1 || true  # see up(): a slurmd at the caller's low priority starves its checks
exec 8>"$DIR/run/restart-slurmd-\$node.lock"
flock -w 120 8 || true
alive() { [ -d /proc/\$1 ] && ! grep -q '^State:.*Z' /proc/\$1/status 2>/dev/null; }
next_second() { local now=\$(date +%s); while [ "\$(date +%s)" -le "\$now" ]; do sleep 0.05; done; }
pidfile="$DIR/run/slurmd-\$node.pid"
pids=\$( { cat "\$pidfile" 2>/dev/null; pgrep -f -- "slurmd(-wlm)? -f $CONF (-b )?-N \$node\\\$"; } | sort -u)
for pid in \$pids; do kill "\$pid" 2>/dev/null || true; done
for pid in \$pids; do
  for i in \$(seq 1 50); do alive "\$pid" || break; sleep 0.1; done
  if alive "\$pid"; then
    kill -9 "\$pid" 2>/dev/null || true
    for i in \$(seq 1 20); do alive "\$pid" || break; sleep 0.1; done
  fi
done
rm -f "\$pidfile"
# a reboot takes more than a second: the new slurmd starts in a later second than the one it replaces
# last registered in, which was before the kill (Slurm shows SlurmdStartTime, set once a slurmd is up,
# in whole seconds, and a new registration in the same second reads as none)
next_second
echo "\$(date +%s.%N) \$node restart (was: \$(echo \$pids))" >> "$DIR/log/restarts.log"
"$DIR/bin/start-slurmd" "\$node" 8>&-  # one start at a time (see start-slurmd)
# the lock is held until the new slurmd has written its pid file, so the next restart finds it
for i in \$(seq 1 100); do
  pid=\$(cat "\$pidfile" 2>/dev/null || true)
  [ -n "\$pid" ] && alive "\$pid" && break
  sleep 0.1
done
EOF
  chmod 755 "$DIR/bin/restart-slurmd"

  # An "upgrade" here: the node's recorded GPU state gets the target driver (or, when a test wrote
  # <node>.bad-driver holding that version, the state a bad driver leaves), then its slurmd restarts
  # like the reboot that loads a new kernel module.
  cat > "$DIR/etc/upgrade.sh.j2" <<EOF
#!/bin/bash
set -euo pipefail
node={{ node }}
driver={{ target_driver }}
kernel={{ target_kernel }}
vbios={{ target_firmware.get("vbios") }}
# two upgrades of one node at once would be a bug (a killed apply's command still running): recorded
exec 9>"$DIR/run/upgrade-\$node.lock"
flock -n 9 || echo "\$(date -Is) \$node" >> "$DIR/log/upgrade-overlaps.log"
echo "\$(date -Is) \$node \$driver {{ action }}" >> "$DIR/log/upgrades.log"
# a package manager that fails half-way (a test wrote hooks/upgrade-fails.<node>: its words, said last)
if [ -e "$DIR/hooks/upgrade-fails.\$node" ]; then cat "$DIR/hooks/upgrade-fails.\$node"; exit 100; fi
# how long the site's install takes (the 32-node test shows upgrades overlapping; a test may write hooks/upgrade-sleep)
sleep "\$(cat "$DIR/hooks/upgrade-sleep" 2>/dev/null || echo ${UPGRADE_SLEEP:-0})"
# look before rebooting, as the sample template does, where a test gave the node its own host tree
if [ -d "$DIR/hosts/\$node" ]; then
  $DIR/bin/node-python -m slurm_gpufleet.cli reboot-check --driver "\$driver" --host-root "$DIR/hosts/\$node"
fi
# the "reboot": the node's NVML reports the new driver (or, a bad one, fails to start), its slurmd restarts
if [ "\$(cat "$GPUDIR/\$node.bad-driver" 2>/dev/null)" = "\$driver" ]; then
  PYTHONPATH=$REPO $py $HERE/gpustate.py mismatch "$GPUDIR/\$node.json" "\$driver"
else
  # a flash that did not take (a test wrote hooks/vbios-stuck.<node>) leaves the node's VBIOS as it was
  if [ -n "\$vbios" ] && [ -e "$DIR/hooks/vbios-stuck.\$node" ]; then
    vbios=\$(PYTHONPATH=$REPO $py $HERE/gpustate.py vbios "$GPUDIR/\$node.json")
  fi
  PYTHONPATH=$REPO $py $HERE/gpustate.py seed "$GPUDIR" "\$node" --gpus $GPUS_PER_NODE --driver "\$driver" \
    \${vbios:+--vbios "\$vbios"}
fi
# the package's DKMS build: the kernel that boots next gets the new driver's module, in the node's own
# host tree where it has one, else in the tree the nodes share (where a node not yet upgraded then sees a
# module newer than its driver, and warns, as a real node does between an install and its reboot)
if [ -z "\$kernel" ]; then
  h="$DIR/nodehosts/\$node"; [ -d "\$h" ] || h="$DIR/host"
  PYTHONPATH=$REPO $py $HERE/gpustate.py module \
    "\$h/lib/modules/\$(cat "\$h/proc/sys/kernel/osrelease")/updates/dkms/nvidia.ko" --version "\$driver"
fi
# a bundle's kernel: the node's own host tree (host_root = .../nodehosts/%n) boots it from now on
if [ -n "\$kernel" ] && [ -d "$DIR/nodehosts/\$node" ]; then
  h="$DIR/nodehosts/\$node"
  mkdir -p "\$h/lib/modules/\$kernel/updates/dkms"
  echo kernel > "\$h/boot/vmlinuz-\$kernel"
  PYTHONPATH=$REPO $py $HERE/gpustate.py module "\$h/lib/modules/\$kernel/updates/dkms/nvidia.ko" --version "\$driver"
  echo "\$kernel" > "\$h/proc/sys/kernel/osrelease"
  # the bootloader keeps it (grub-set-default): a rollback to an older kernel boots that one, not the newest
  mkdir -p "\$h/boot/grub" "\$h/etc/default"
  echo "GRUB_DEFAULT=saved" > "\$h/etc/default/grub"
  printf '# GRUB Environment Block\nsaved_entry=Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux %s\n' \
    "\$kernel" > "\$h/boot/grub/grubenv"
fi
"$DIR/bin/restart-slurmd" "\$node" 9>&-
EOF

  # The boot of a node whose host root is a real node image (tests/slurm/node_image.sh; the real upgrade
  # path of issue 21): the kernel that boots next, the newest in the image's /boot as Debian's grub
  # orders them, runs from now on; the node's simulated GPUs report the version of the nvidia module that
  # kernel loads, read by the image's own modinfo (what apt and DKMS really installed, not a value a test
  # wrote); its slurmd restarts.  A template appends `boot-image NODE ROOT` after the sample's commands.
  cat > "$DIR/bin/boot-image" <<EOF
#!/bin/bash
set -euo pipefail
node=\$1 root=\$2
kernel=\$(ls "\$root/boot" | sed -n 's/^vmlinuz-//p' | sort -V | tail -1)
[ -n "\$kernel" ] || { echo "no kernel in \$root/boot" >&2; exit 1; }
version=""
for name in nvidia-current nvidia; do
  version=\$(/usr/sbin/chroot "\$root" /sbin/modinfo -k "\$kernel" -F version "\$name" 2>/dev/null) && break
done
[ -n "\$version" ] || { echo "the image boots \$kernel with no nvidia module: the GPUs would not come up" >&2; exit 1; }
mkdir -p "\$root/proc/sys/kernel"
echo "\$kernel" > "\$root/proc/sys/kernel/osrelease"
PYTHONPATH=$REPO $py $HERE/gpustate.py seed "$GPUDIR" "\$node" --gpus $GPUS_PER_NODE --driver "\$version"
echo "\$(date -Is) \$node booted \$kernel, nvidia \$version" >> "$DIR/log/boots.log"
"$DIR/bin/restart-slurmd" "\$node" 9>&-
EOF
  chmod 755 "$DIR/bin/boot-image"

  # The site's GPU reset (reset_command): logged; it applies what a reset of a GPU would where a test wrote
  # <node>.after-reset.json (a pending row remap applied), and otherwise leaves the fault, as a reset that
  # does not fix it does.
  cat > "$DIR/bin/fake-reset" <<EOF
#!/bin/bash
node=\$1 gpus=\$2
echo "\$(date -Is) \$node \$gpus" >> "$DIR/log/resets.log"
[ -f "$GPUDIR/\$node.after-reset.json" ] && mv -f "$GPUDIR/\$node.after-reset.json" "$GPUDIR/\$node.json"
exit 0
EOF
  chmod 755 "$DIR/bin/fake-reset"

  # RebootProgram runs as `sh -c PROG` with slurmd's env and no node name: find our slurmd by walking
  # up the parents (named slurmd-wlm on 26.05, Debian's binary) and ask the reboot agent, a process of
  # this script outside every slurmd, to reboot it.  The reboot is not done from here: 26.05 runs
  # RebootProgram as a "power action" and kills whatever it started, even in a session of its own.
  cat > "$DIR/bin/fake-reboot" <<EOF
#!/bin/bash
pid=\$\$ node=
while [ "\$pid" -gt 1 ]; do
  case "\$(cat /proc/\$pid/comm 2>/dev/null)" in slurmd|slurmd-wlm) true ;; *) false ;; esac
  if [ \$? = 0 ]; then
    node=\$(tr '\\0' '\\n' < /proc/\$pid/cmdline | sed -n '/^-N\$/{n;p}'); break
  fi
  pid=\$(awk '/^PPid:/{print \$2}' /proc/\$pid/status)
done
[ -n "\$node" ] || exit 1
[ -e "$DIR/hooks/reboot_noop" ] && exit 0
echo "\$pid" > "$DIR/run/reboot-request.\$node.tmp" && mv -f "$DIR/run/reboot-request.\$node.tmp" "$DIR/run/reboot-request.\$node"
EOF
  # The agent: a real reboot takes minutes; this one waits past the second the reboot was asked in (or
  # slurmctld sees a boot time no newer than its request and times the reboot out), stops that slurmd,
  # applies what a GPU reset would and starts it again with -b, in a clean environment (24.11 on, slurmd
  # leaves SACK_RECONFIG_FD in its own, which a new slurmd takes for a reconfigure hand-over) but for
  # SLURM_CONF, which 26.05's power actions read instead of -f.
  cat > "$DIR/bin/reboot-agent" <<EOF
#!/bin/bash
echo \$\$ > "$DIR/run/reboot-agent.pid"
reboot_one() {
  local node=\$1 pid=\$2 i
  sleep 1.2
  kill "\$pid" 2>/dev/null
  for i in \$(seq 1 50); do [ -d /proc/\$pid ] && ! grep -q '^State:.*Z' /proc/\$pid/status 2>/dev/null || break; sleep 0.1; done
  # a slurmd hung in its shutdown (see restart-slurmd): the reboot kills it
  if [ -d /proc/\$pid ] && ! grep -q '^State:.*Z' /proc/\$pid/status 2>/dev/null; then
    kill -9 "\$pid" 2>/dev/null; sleep 0.5
  fi
  [ -f "$GPUDIR/\$node.after-reboot.json" ] && mv -f "$GPUDIR/\$node.after-reboot.json" "$GPUDIR/\$node.json"
  [ -f "$GPUDIR/\$node.kmsg" ] && echo "-- Boot \$(date +%s%N) --" >> "$GPUDIR/\$node.kmsg"
  echo "\$(date -Is) \$node" >> "$DIR/log/reboots.log"
  local now=\$(date +%s)  # a later second than the old slurmd's start, as in restart-slurmd
  while [ "\$(date +%s)" -le "\$now" ]; do sleep 0.05; done
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SLURM_CONF=$CONF $(command -v slurmd) -f $CONF -b -N "\$node" </dev/null
}
while [ -f "$DIR/run/reboot-agent.pid" ]; do
  for req in "$DIR"/run/reboot-request.*; do
    [ -f "\$req" ] || continue
    case "\$req" in *.tmp) continue ;; esac
    pid=\$(cat "\$req"); rm -f "\$req"
    reboot_one "\${req##*.}" "\$pid" &
  done
  sleep 0.1
done
EOF
  chmod 755 "$DIR/bin/reboot-agent" "$DIR/bin/fake-reboot"
}

up() {
  local n=${1:-4}
  # The daemons run at normal priority whatever ran this: `make test` starts the node-image tier at nice
  # 19 so its DKMS builds yield, and slurmd's health checks inheriting that missed their 5 s read limit
  # under CI's load (drained "NVML timeout").  Root only, as the cluster is.
  renice -n 0 -p $$ >/dev/null 2>&1 || true
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "usage: minicluster.sh up N"
  choose_release
  if [ -n "$ROOT" ]; then
    build_root
    mkdir -p "$DIR" "$GPUDIR"
    mount_root
    release_wrappers
    export PATH=$SBIN:$PATH
  else
    install_slurm
  fi
  if [ -f "$DIR/run/slurmctld.pid" ] && alive "$(cat "$DIR/run/slurmctld.pid")"; then
    die "a mini-cluster is already running in $DIR (minicluster.sh down first)"
  fi
  local py auth
  py=$(python_bin)
  "$py" -c "import slurm_gpufleet" 2>/dev/null || PYTHONPATH=$REPO "$py" -c "import slurm_gpufleet" \
    || die "$py cannot import slurm_gpufleet (make setup, or set PYTHON)"
  auth=${AUTH:-}
  if [ -n "$ROOT" ]; then
    auth=${AUTH:-slurm}  # no munged inside the root: Slurm's own auth, with the root's key
  elif [ -z "$auth" ]; then
    if [ "$(slurm_major_minor)" -le 2205 ]; then auth=none; else auth=munge; fi
  fi
  if [ "$auth" = munge ]; then
    mkdir -p /run/munge && chown munge: /run/munge
    pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
  fi
  rm -rf "$DIR/state/ctld" "$DIR/run" "$DIR/spool" "$DIR/state/gpufleet" "$DIR/hooks"
  mkdir -p "$DIR/etc" "$DIR/hooks"
  # The node is wired as a site would wire it: `slurm-gpufleet install` writes the three wrappers slurmd
  # runs (absolute interpreter, SLURM_CONF and the config exported) and the slurm.conf lines for them;
  # write_configs then puts this cluster's own config and upgrade template in place.
  mkdir -p "$DIR/log" "$DIR/bin"
  # The node's interpreter: the project's, with the recorded-NVML pynvml in front of nvidia-ml-py.
  local node_py=$py
  [ -n "$ROOT" ] && node_py=/usr/bin/python3  # the root's own: a node of that release runs ours on it
  cat > "$DIR/bin/node-python" <<EOF
#!/bin/sh
# written by tests/slurm/minicluster.sh: this machine has no GPUs; pynvml answers from $GPUDIR/<node>.json
export PYTHONPATH=$REPO/tests/fake_pynvml/recorded:$REPO GPUFLEET_FAKE_NVML_DIR=$GPUDIR
EOF
  if [ -n "$ROOT" ]; then  # slurmd runs it inside the root; a test on this machine enters the root first
    printf '[ -e /.gpufleet-slurm-root ] || exec /usr/sbin/chroot %s %s/bin/node-python "$@"\n' "$ROOT" "$DIR" \
      >> "$DIR/bin/node-python"
  fi
  # slurmctld starts the health checks of 10 nodes or more within a second (HealthCheckNodeState CYCLE
  # spreads them by at least 10 a call), and here every node shares this machine's 2 cores: 32 nodes
  # queued 28 runnable checks at once.  A real node runs one.  So a check waits, asleep, for one of
  # HC_SLOTS places on this cluster, as a queue of real nodes' checks would wait for their own CPUs.
  mkdir -p "$DIR/hc-slots"
  cat >> "$DIR/bin/node-python" <<EOF
case "\$*" in *healthcheck_main*)
  slot=0
  while [ \$slot -lt $HC_SLOTS ]; do
    exec 9>"$DIR/hc-slots/\$slot"; flock -n 9 && break; slot=\$((slot + 1))
  done
  [ \$slot -lt $HC_SLOTS ] || { exec 9>"$DIR/hc-slots/\$((\$\$ % $HC_SLOTS))"; flock 9; } ;;
esac
EOF
  echo "exec $node_py \"\$@\"" >> "$DIR/bin/node-python"
  chmod 755 "$DIR/bin/node-python"
  "$py" -m slurm_gpufleet.cli install --prefix "$DIR" --python "$DIR/bin/node-python" --config "$DIR/etc/gpufleet.toml" \
    --slurm-conf "$CONF" --interval "$HC_INTERVAL" --node-state "$HC_NODE_STATE" --reboot-program "$DIR/bin/fake-reboot" \
    --slurm-version "$(SL slurmctld -V | awk '{print $2}')" > "$DIR/log/install.log" \
    || die "slurm-gpufleet install failed (see $DIR/log/install.log)"
  write_configs "$n" "$py" "$auth"
  local nodes=() i
  for i in $(seq 1 "$n"); do nodes+=("n$i"); done
  PYTHONPATH=$REPO "$py" "$HERE/gpustate.py" seed "$GPUDIR" "${nodes[@]}" --gpus "$GPUS_PER_NODE"
  for i in "${nodes[@]}"; do : > "$GPUDIR/$i.kmsg"; done

  if [ "${ACCOUNTING:-0}" = 1 ]; then start_accounting "$auth"; fi
  SL slurmctld -f "$CONF" -i
  # what a slurmd prints before its log is open (a bind error, say) goes to slurmd-start.log
  for i in "${nodes[@]}"; do start_slurmd "$i"; done
  setsid bash "$DIR/bin/reboot-agent" </dev/null >>"$DIR/log/reboot-agent.log" 2>&1 &
  export SLURM_CONF=$CONF
  local idle=0 try missing=()
  for try in 1 2; do
    for _ in $(seq 1 150); do
      # sinfo -N lists a node once per partition: count names, not lines
      idle=$(SL sinfo -h -N -o '%N %T' 2>/dev/null | awk '$2 ~ /^idle/ {print $1}' | sort -u | wc -l)
      [ "$idle" -ge "$n" ] && break
      sleep 0.2
    done
    [ "$idle" -ge "$n" ] && break
    missing=()
    for i in "${nodes[@]}"; do
      SL sinfo -h -n "$i" -o '%T' 2>/dev/null | grep -q '^idle' || missing+=("$i")
    done
    for i in "${missing[@]}"; do  # the slurmd that did not come up says why in its logs
      echo "--- $i: $DIR/log/slurmd-$i.log, slurmd-start.log" >&2
      tail -5 "$DIR/log/slurmd-$i.log" >&2 2>/dev/null || true
    done
    tail -5 "$DIR/log/slurmd-start.log" >&2 2>/dev/null || true
    [ "$try" = 2 ] && break
    # seen twice in CI (24.11, a different node each time, nothing in its log): start it once more
    log "slurmd of ${missing[*]} did not register; starting it again"
    for i in "${missing[@]}"; do
      [ -f "$DIR/run/slurmd-$i.pid" ] && stop_pid "$(cat "$DIR/run/slurmd-$i.pid")"
      start_slurmd "$i"
    done
  done
  if [ "$idle" -lt "$n" ]; then
    SL sinfo -N >&2 || true
    die "$((n - idle)) of $n nodes did not become idle; see $DIR/log"
  fi
  log "up: $n nodes idle (slurm $(SL slurmctld -V | awk '{print $2}'), auth/$auth${ROOT:+, in $ROOT})"
  print_env
}

print_env() {
  [ -n "$ROOT" ] && echo "PATH=$SBIN:${PATH#"$SBIN:"}" && echo "SLURM_ROOT=$ROOT"
  echo "MINICLUSTER_DIR=$DIR"
  echo "SLURM_CONF=$CONF"
  echo "GPUFLEET_STATE_DIR=$GPUDIR"
  echo "SLURM_GPUFLEET_CONFIG=$DIR/etc/gpufleet.toml"
}

down() {
  local f
  # the cluster's jobs end with it: a step's slurmstepd outlives its slurmd otherwise
  if [ -f "$DIR/run/slurmctld.pid" ] && alive "$(cat "$DIR/run/slurmctld.pid")"; then
    choose_release
    SLURM_CONF="$CONF" SL scancel -u root >/dev/null 2>&1 || true
    sleep 1
  fi
  if [ -f "$DIR/run/reboot-agent.pid" ]; then  # first, or it could start a slurmd again
    f=$(cat "$DIR/run/reboot-agent.pid")
    rm -f "$DIR/run/reboot-agent.pid"
    stop_pid "$f"
  fi
  for f in "$DIR"/run/slurmd-*.pid; do
    [ -f "$f" ] && stop_pid "$(cat "$f")"
  done
  [ -f "$DIR/run/slurmctld.pid" ] && stop_pid "$(cat "$DIR/run/slurmctld.pid")"
  stop_accounting
  # a fake reboot may have restarted a slurmd after its pid file was read
  for f in "$DIR"/run/slurmd-*.pid; do
    [ -f "$f" ] && stop_pid "$(cat "$f")"
  done
  rm -f "$DIR"/run/*.pid
  # a daemon this cluster started that its pid file no longer names: from 25.11 on, `scontrol
  # reconfigure` restarts slurmctld as a new process, and the one left after it outlived `down` (found
  # by the config it was started with, its pid stopped like the others)
  for f in /proc/[0-9]*/cmdline; do
    f=${f%/cmdline}; f=${f#/proc/}
    tr '\0' ' ' < "/proc/$f/cmdline" 2>/dev/null | grep -qE "^[^ ]*slurm(ctld|d) .*-f $CONF( |$)" && stop_pid "$f"
  done
  choose_release
  [ -n "$ROOT" ] && [ -d "$ROOT" ] && unmount_root
  log "down"
}

case "${1:-}" in
  up) up "${2:-4}" ;;
  down) down ;;
  env) print_env ;;
  *) echo "usage: $0 up N | down | env" >&2; exit 2 ;;
esac
