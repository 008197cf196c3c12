"""A real Slurm mini-cluster for the whole test run (tests/slurm/minicluster.sh), reset between tests."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SCRIPT = HERE / "minicluster.sh"
NODES = 8
HC_INTERVAL = 5
# Every wait is sized for an idle machine, then tripled: CI runs three clusters side by side on 2 cores
# (load average 35-100), where a health check takes 5 s instead of 0.35 s.  A passing wait ends as soon
# as its condition holds, so only a failure takes longer to report.
WAIT_SLACK = 3
# another test run beside this one (another Slurm release, say) takes other ports
PORT_OFFSET = int(os.environ.get("GPUFLEET_TEST_PORT_OFFSET", "0"))
sys.path.insert(0, str(HERE))

import gpustate  # noqa: E402


@dataclass
class Cluster:
    dir: Path
    gpus: Path
    env: dict[str, str]
    nodes: list[str]
    hc_interval: int
    root: Path | None = None  # the release's root the daemons run in (SLURM_RELEASE), or None: this host

    # -- Slurm ---------------------------------------------------------------------------------
    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env, check=check, timeout=timeout)

    def node(self, name: str) -> dict[str, str]:
        out = self.run("scontrol", "show", "node", name).stdout
        values: dict[str, str] = {}
        for line in out.splitlines():
            line = line.strip()
            for key in ("Reason=", "Comment=", "Extra="):
                if line.startswith(key):
                    values[key[:-1]] = line[len(key):]
                    break
            else:
                for tok in line.split():
                    k, _, v = tok.partition("=")
                    values.setdefault(k, v)
        return values

    def state(self, name: str) -> str:
        return self.node(name)["State"]

    @property
    def release(self) -> tuple[int, int]:
        """The Slurm release under test (SLURM_RELEASE, or the host's): (24, 11)."""
        version = self.run("scontrol", "--version").stdout.split()[-1]
        return tuple(int(x) for x in version.split(".")[:2])  # type: ignore[return-value]

    def out_of_service(self, sinfo_line: str) -> bool:
        """A `sinfo -o %N|%T|%E` line of a node a rollout holds: drained with its reason, or in its MAINT
        reservation.  The reason alone does not say it: 24.11 keeps the last reason after a resume."""
        _, state, reason = (sinfo_line.split("|", 2) + ["", ""])[:3]
        return ("drain" in state and reason.startswith("maintain")) or state.startswith("maint")

    def wait(self, predicate, timeout: float, what, step: float = 0.3):
        timeout *= WAIT_SLACK
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(step)
        what = what() if callable(what) else what  # said as it is at the end, not at the start
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; last: {last!r}; "
                             f"nodes: {self.run('sinfo', '-N', '-o', '%N %T %E', check=False).stdout}")

    def sbatch(self, *args: str) -> str:
        out = self.run("sbatch", "--parsable", "-o", "/dev/null", *args).stdout.strip()
        return out.split(";")[0]

    def start_job(self, node: str, gpus: int, seconds: float) -> str:
        """Submit a GPU job and wait until its script runs (RUNNING is reported while the prolog still runs)."""
        marker = self.dir / "jobs-started"
        marker.mkdir(exist_ok=True)
        job = self.sbatch("-w", node, f"--gres=gpu:{gpus}", "--time=2", "--wrap",
                          f"touch {marker}/$SLURM_JOB_ID; sleep {seconds}")
        self.wait(lambda: (marker / job).exists(), 30, f"job {job} script started")
        return job

    def job(self, job_id: str) -> dict[str, str]:
        out = self.run("scontrol", "show", "job", job_id, check=False).stdout
        return dict(tok.partition("=")[::2] for tok in out.split() if "=" in tok)

    def healthcheck(self, node: str, timeout: float = 60, config: Path | None = None) -> subprocess.CompletedProcess:
        """One health-check run on `node`, exactly as slurmd starts it (same wrapper, no PATH); `config`
        in place of the cluster's (a file under the cluster's directory: the release roots see only that)."""
        return subprocess.run([str(self.dir / "sbin" / "slurm-gpufleet-healthcheck"), "--node", node]
                              + (["--config", str(config)] if config else []),
                              capture_output=True, text=True, env={"SLURMD_NODENAME": node}, timeout=timeout)

    # -- GPUs ------------------------------------------------------------------------------------
    def gpu_file(self, node: str) -> str:
        """The node's recorded NVML session, which its pynvml answers from (tests/fake_pynvml/recorded)."""
        return str(self.gpus / f"{node}.json")

    def fault(self, node: str, gpu: int, name: str) -> None:
        gpustate.fault(self.gpu_file(node), gpu, name)

    def driver(self, node: str) -> str | None:
        """The driver version the node's NVML reports."""
        return gpustate.driver_of(self.gpu_file(node))

    def gb300(self, node: str) -> None:
        """The node becomes an 8-GPU GB300 board of the one NVLink domain all such nodes share."""
        gpustate.write_atomic(gpustate.gb_state(node), self.gpu_file(node))

    def fabric_fault(self, node: str, gpu: int, name: str) -> None:
        gpustate.fabric_fault(self.gpu_file(node), gpu, name)

    def heal(self, node: str) -> None:
        path = self.gpu_file(node)
        if os.path.exists(path) and not os.path.isfile(path):
            os.unlink(path)  # a FIFO left by the stuck-reader test
        gpustate.write_atomic(gpustate.healthy_state(8, node), path)

    def gpufleet(self, *args: str, env: dict[str, str] | None = None, timeout: float = 300,
                 cwd: Path | None = None) -> subprocess.CompletedProcess:
        """The slurm-gpufleet command with the cluster's config, as an admin runs it (in `cwd`, or the
        repository)."""
        full = {**self.env, "SLURM_GPUFLEET_CONFIG": str(self.dir / "etc" / "gpufleet.toml"), **(env or {})}
        r = subprocess.run([sys.executable, "-m", "slurm_gpufleet.cli", *args], capture_output=True, text=True,
                           env=full, timeout=timeout, cwd=cwd or REPO)
        assert "internal error" not in r.stderr, r.stderr
        return r

    def story(self, node: str) -> str:
        """What a failed rollout test shows of `node`: the harness's upgrades and slurmd restarts, what
        slurmctld and the node's slurmd logged of it, and the rollout's audit.  A flake seen once in CI
        is then read from its own output."""
        def tail(path: Path, pattern: str | None = None, n: int = 15) -> str:
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                return "(none)"
            return "\n".join([x for x in lines if pattern is None or pattern in x][-n:]) or "(none)"

        log = self.dir / "log"
        audit = self.maintain_db("select ts, event, detail from audit where node = ? order by ts", (node,))
        return "\n".join([
            f"--- {node}: upgrades", tail(log / "upgrades.log", f" {node} "),
            "--- overlaps", tail(log / "upgrade-overlaps.log"),
            "--- slurmd restarts", tail(log / "restarts.log", f" {node} "),
            "--- slurmctld", tail(log / "slurmctld.log", node, 25),
            f"--- slurmd-{node}.log", tail(log / f"slurmd-{node}.log", None, 15),
            "--- scontrol", " ".join(f"{k}={v}" for k, v in self.node(node).items()
                                      if k in ("State", "SlurmdStartTime", "BootTime", "Reason")),
            "--- audit", "\n".join(f"{ts:.3f} {e} {d}" for ts, e, d in audit)])

    def failed_stories(self) -> str:
        """`story` of every node the rollout failed."""
        failed = sorted({n for (n,) in self.maintain_db("select node from audit where event = 'failed'") if n})
        return "".join(f"\n{self.story(n)}" for n in failed)

    def wait_published(self, driver: str = "580.159.04") -> None:
        """Until every node's health check has published its GPU summary with this driver."""
        def missing() -> list[str]:
            return [f"{n}: {self.node(n).get('Extra', '') or 'nothing'}" for n in self.nodes
                    if f'"drv":"{driver}"' not in self.node(n).get("Extra", "")]

        # a wait, not a timing: with two clusters on 2 cores a health check can lag several intervals
        self.wait(lambda: not missing(), max(3 * self.hc_interval, 60),
                  lambda: f"every node publishing driver {driver} (not yet: {'; '.join(missing())[:600]})")

    def explain(self, node: str) -> str:
        """What the node's own history says (its last runs, actions and remedies) and its reservations:
        said with a wait that timed out, so that a failure on a loaded CI machine tells what happened."""
        def rows(sql: str) -> str:
            try:
                return "\n  ".join(map(str, self.history(node, sql)))
            except sqlite3.Error as exc:
                return f"(not read: {exc})"

        resv = self.run("scontrol", "show", "reservation", "-o", check=False).stdout.strip()
        return (f"\n{node} history, runs:\n  " + rows("select time, hook, verdict from runs order by id desc limit 12")
                + "\nactions:\n  " + rows("select time, hook, action, reason, why, ok from actions order by ts")
                + "\nremedies:\n  " + rows("select * from remedies")
                + f"\nreservations: {resv or 'none'}\nnode: {self.node(node)}")

    def maintain_db(self, sql: str, params: tuple = ()) -> list[tuple]:
        return _query(self.dir / "state" / "maintain.db", sql, params)

    def history(self, node: str, sql: str, params: tuple = ()) -> list[tuple]:
        return _query(self.dir / "state" / "gpufleet" / f"{node}.db", sql, params)


def _query(path: Path, sql: str, params: tuple) -> list[tuple]:
    if not path.exists():
        return []
    try:
        with sqlite3.connect(path, timeout=10) as conn:
            return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # the file exists, its creator is still writing the schema
            return []
        raise


def start_cluster(name: str, nodes: int, ctld_port: int, slurmd_port_base: int, **settings: str):
    """A mini-cluster of `nodes` slurmd under /tmp, its own ports; a generator: stopped by pid at the end."""
    if shutil.which("apt-get") is None and shutil.which("slurmctld") is None:
        pytest.fail("neither Slurm nor apt-get is available: the Slurm tests need Debian's slurm packages")
    # beside the tests' tmp_path (tests/conftest.py): a directory only root can write, as the programs
    # slurmd runs trust no other
    base = Path(os.environ.get("GPUFLEET_TEST_DIR", os.path.join(tempfile.gettempdir(), f"gpufleet-test-{os.getpid()}"))) / name
    # health checks spread over the interval (HealthCheckNodeState CYCLE), not all 8 nodes in one second:
    # the same 12 runs a node a minute, but an 8-node cluster's mean load fell from 1.86 to 0.27 (peak
    # 5.21 to 0.87) over tests/slurm/test_cluster.py, which passed either way; HC_NODE_STATE overrides.
    # CYCLE still starts at least 10 nodes a second (slurmctld's ping_nodes.c), so 32 nodes' checks
    # came in bursts of 28 runnable: minicluster.sh's node-python lets HC_SLOTS (2) run at once
    env = {"HC_NODE_STATE": "ANY,CYCLE", **os.environ, "MINICLUSTER_DIR": str(base), "GPUFLEET_STATE_DIR": str(base / "gpus"),
           "HC_INTERVAL": str(HC_INTERVAL), "PYTHON": sys.executable, "CLEAN_RUNS": "2", "READ_TIMEOUT": "4",
           "CTLD_PORT": str(ctld_port + PORT_OFFSET), "SLURMD_PORT_BASE": str(slurmd_port_base + PORT_OFFSET),
           **settings}
    up = subprocess.run(["bash", str(SCRIPT), "up", str(nodes)], capture_output=True, text=True, env=env,
                        timeout=600)
    if up.returncode != 0:
        subprocess.run(["bash", str(SCRIPT), "down"], env=env, capture_output=True)
        pytest.fail(f"minicluster up failed:\n{up.stdout}\n{up.stderr}")
    values = dict(line.split("=", 1) for line in up.stdout.splitlines() if "=" in line)
    env.update(SLURM_CONF=values["SLURM_CONF"])
    if "PATH" in values:  # another release (SLURM_RELEASE): its commands first
        env["PATH"] = values["PATH"]
    c = Cluster(dir=base, gpus=Path(values["GPUFLEET_STATE_DIR"]), env=env,
                nodes=[f"n{i}" for i in range(1, nodes + 1)], hc_interval=int(env["HC_INTERVAL"]),
                root=Path(values["SLURM_ROOT"]) if values.get("SLURM_ROOT") else None)
    try:
        yield c
    finally:
        subprocess.run(["bash", str(SCRIPT), "down"], env=env, capture_output=True, timeout=120)
        if not os.environ.get("GPUFLEET_KEEP"):
            shutil.rmtree(base, ignore_errors=True)
            try:
                base.parent.rmdir()  # the run's folder, once its last cluster is gone
            except OSError:
                pass


# topology/block (23.11 on): blocks of 4, n[1-4] and n[5-8], for the failure-domain tests (test_domains.py)
BLOCKS = tuple(int(x) for x in os.environ.get("SLURM_RELEASE", "22.05").split(".")) >= (23, 11)


@pytest.fixture(scope="session")
def cluster():
    yield from start_cluster("main", NODES, 26817, 27001, **({"BLOCK_SIZE": "4"} if BLOCKS else {}))


@pytest.fixture
def mc(cluster):
    """The cluster with every node healthy, idle, undrained and without history.  Any internal error our
    programs kept on a node (slurmd discards what they print) fails the test."""
    _reset(cluster)
    yield cluster
    errors = internal_errors(cluster)
    _reset(cluster)
    if errors:
        pytest.fail(f"our programs printed internal errors during the test:\n{errors}")


def internal_errors(c: Cluster) -> str:
    path = c.dir / "state" / "gpufleet" / "internal-errors.log"
    return path.read_text() if path.exists() else ""


def _empty_history(path: Path) -> None:
    """Every row out, the file kept: deleting a node's database while its health check (every few seconds)
    writes to it gives that check a "disk I/O error", which no real node ever sees."""
    with sqlite3.connect(path, timeout=30) as conn:
        for (table,) in conn.execute("select name from sqlite_master where type = 'table' "
                                     "and name not like 'sqlite_%'").fetchall():
            conn.execute(f"delete from [{table}]")


def _reset(c: Cluster) -> None:
    c.run("scancel", "--user=root", check=False)
    c.wait(lambda: c.run("squeue", "-h", "-t", "all", "-o", "%T", check=False).stdout.strip() in ("",)
           or all(s in ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "PREEMPTED", "NODE_FAIL") for s in
                  c.run("squeue", "-h", "-t", "all", "-o", "%T", check=False).stdout.split()), 60, "jobs to end")
    for node in c.nodes:
        c.heal(node)
        Path(c.gpus / f"{node}.kmsg").write_text("")
        for leftover in (c.gpus / f"{node}.after-reboot.json", c.gpus / f"{node}.after-reset.json"):
            leftover.unlink(missing_ok=True)
    (c.dir / "log" / "reboots.log").unlink(missing_ok=True)
    (c.dir / "log" / "resets.log").unlink(missing_ok=True)
    (c.dir / "log" / "upgrades.log").unlink(missing_ok=True)
    (c.dir / "log" / "upgrade-overlaps.log").unlink(missing_ok=True)
    for marker in [*c.gpus.glob("*.bad-driver"), *c.gpus.glob("*.imex-*"), *c.gpus.glob("*.fabricmanager"),
                   *(c.dir / "state" / "gpufleet").glob("fabric-manager-*.json"),
                   *(c.dir / "state" / "gpufleet").glob("slurm-view-*.json"), *(c.dir / "hooks").glob("*")]:
        marker.unlink()
    shutil.rmtree(c.dir / "hosts", ignore_errors=True)  # per-node host trees a test gave its nodes
    # the shared host's module, as a rollout's "DKMS build" left it: back to the driver the nodes run
    module = c.dir / "host" / "lib" / "modules" / "6.1.0-28-amd64" / "updates" / "dkms" / "nvidia.ko"
    healthy_module = gpustate.nvidia_module("580.159.04")
    if module.parent.is_dir() and (not module.exists() or module.read_bytes() != healthy_module):
        module.write_bytes(healthy_module)
    for line in c.run("scontrol", "show", "reservation", "-o", check=False).stdout.splitlines():
        if line.startswith("ReservationName="):
            c.run("scontrol", "delete", "reservation=" + line.split()[0].split("=", 1)[1], check=False)
    for db in (c.dir / "state").glob("maintain.db*"):
        db.unlink(missing_ok=True)
    (c.dir / "state" / "gpufleet" / "internal-errors.log").unlink(missing_ok=True)
    (c.dir / "state" / "gpufleet" / "breaker.json").unlink(missing_ok=True)
    (c.dir / "state" / "gpufleet" / "sweeps.json").unlink(missing_ok=True)
    c.run("scontrol", "delete", "partitionname=gpufleet-sweep", check=False)  # an idle-sweep test's
    for node in c.nodes:
        state = c.state(node)
        if "REBOOT" in state:
            c.run("scontrol", "reboot", "cancel", node, check=False)
        if "DRAIN" in state or "DOWN" in state or "REBOOT" in state:
            c.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
        c.run("scontrol", "update", f"nodename={node}", "comment=", check=False)
    # a test that ends with its rollout halted keeps its waiting nodes steered away (Weight 1001), as a
    # halted rollout should; the next test starts from the configured weight
    c.run("scontrol", "update", f"nodename=n[1-{len(c.nodes)}]", "weight=1", check=False)

    def settled() -> bool:
        # a fake reboot still under way when the test ended restarts slurmd with -b a moment later, and
        # slurmctld marks that node DOWN ("Node unexpectedly rebooted"): resume it again
        states = {n: c.state(n) for n in c.nodes}
        for n, state in states.items():
            if "DOWN" in state or "DRAIN" in state:
                c.run("scontrol", "update", f"nodename={n}", "state=resume", check=False)
        return all(s == "IDLE" for s in states.values())

    c.wait(settled, 60, "all nodes IDLE", step=1.0)
    # the history is emptied only now, once the nodes settled: a health check that read a test's fault
    # before the heal above can record its remedy a few seconds later, and its attempt would then count
    # in the next test's ladder
    for db in (c.dir / "state" / "gpufleet").glob("*.db"):
        _empty_history(db)


@pytest.fixture(autouse=True)
def _timeline(request):
    """GPUFLEET_TEST_TIMELINE=FILE: each test's start and end (epoch s) and the 1-minute load average then,
    one line each, so that a tier's load peaks can be laid beside the tests that ran."""
    path = os.environ.get("GPUFLEET_TEST_TIMELINE")
    if not path:
        yield
        return

    def line(what: str) -> None:
        with open(path, "a") as fh:
            fh.write(f"{time.time():.0f} {os.getloadavg()[0]:.2f} {what} {os.environ.get('GPUFLEET_TEST_STREAM') or os.environ.get('SLURM_RELEASE') or 'host'} "
                     f"{request.node.nodeid}\n")

    line("start")
    yield
    line("end")
