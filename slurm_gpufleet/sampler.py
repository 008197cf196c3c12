"""The in-job sampler: started by the prolog for a job on two nodes or more, stopped by the epilog.

Every `instep_sample_s` it reads, per GPU of the job (SLURM_JOB_GPUS, as the prolog got it; every GPU
of the node where Slurm does not say) through NVML, the SM clock, power, SM utilisation and the
clock-event (throttle) reasons, and keeps the current window; at each window's end (windows are whole
multiples of `instep_window_s` of wall-clock time, so every node of a job cuts them at the same moments)
it publishes a digest into the node's summary (`"is"`, per job: the mean of the job's first windows per
GPU, the last `instep_windows` + 1 windows per GPU): one Slurm read and one write a window, nothing else.
`fleet stragglers --running` reads every node's digest in one `scontrol show nodes` (instep.py judges).

Bounded: it keeps one window of sums and the last few window means (a few kilobytes); it never outlives
the job: it stops when its pid file is gone (the epilog removes it and kills it), when the job's cgroup
is gone (looked at each window, where Slurm keeps cgroups: an epilog that failed), at SIGTERM, and after
`max_hours` whatever happens.  It runs detached from the prolog (its own session), so the prolog returns
at once.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

NVML_CLOCK_SM = 1
BASELINE_WINDOWS = 2


def pid_path(state_dir: str, job: str, node: str) -> str:
    """Named by node too: a state directory on shared storage holds every node's."""
    return os.path.join(state_dir, f"instep-{job}-{node}.pid")


def read_gpus(nvml: Any, handles: list[Any]) -> list[list[float]]:
    """[sm clock MHz, power W, SM util %, throttle mask] per GPU; a value NVML refuses reads 0."""
    reads = (lambda h: nvml.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM),
             lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
             lambda h: nvml.nvmlDeviceGetUtilizationRates(h).gpu,
             lambda h: nvml.nvmlDeviceGetCurrentClocksEventReasons(h))
    out = []
    for h in handles:
        row: list[float] = []
        for read in reads:
            try:
                row.append(read(h))
            except Exception:
                row.append(0)
        out.append(row)
    return out


class Digest:
    """The windows of one job on one node: sums of the current window, the means of the first windows
    (each node's own start), the last `keep` windows' means."""

    def __init__(self, job: str, window_s: float, keep: int, gpus: list[int] | None = None) -> None:
        self.job, self.window_s, self.keep = job, window_s, keep
        self.gpus = gpus  # the NVML indices of the rows, when the job has only some of the node's GPUs
        self.current: int | None = None
        self.sums: list[list[float]] = []
        self.n = 0
        self.first: list[tuple[int, list[list[float]]]] = []
        self.last: list[tuple[int, list[list[float]]]] = []

    def add(self, t: float, rows: list[list[float]]) -> bool:
        """One sample; True when it closed a window (a digest to publish)."""
        w = int(t // self.window_s)
        closed = self.current is not None and w != self.current and self.n > 0
        if closed:
            means = [[round(v / self.n, 1) for v in s[:3]] + [int(s[3])] for s in self.sums]
            if len(self.first) < BASELINE_WINDOWS:
                self.first.append((self.current, means))
            self.last = (self.last + [(self.current, means)])[-self.keep:]
        if self.current != w:
            self.current, self.sums, self.n = w, [[0.0, 0.0, 0.0, 0] for _ in rows], 0
        for s, r in zip(self.sums, rows, strict=False):
            s[0] += r[0]
            s[1] += r[1]
            s[2] += r[2]
            s[3] = int(s[3]) | int(r[3])
        self.n += 1
        return closed

    def to_dict(self) -> dict[str, Any]:
        out = {"j": self.job, "ws": self.window_s, "b": [[i, g] for i, g in self.first],
               "w": [[i, g] for i, g in self.last]}
        if self.gpus is not None:
            out["g"] = list(self.gpus)
        return out


def digest_for(job: str, settings: Any, gpus: list[int] | None = None) -> Digest:
    """The digest a node keeps for `job`: one window more than a flag needs, since the job's nodes
    publish at their own moments, so at any instant their newest windows may differ by one, and
    `instep_windows` shared windows must remain."""
    return Digest(job, settings.instep_window_s, settings.instep_windows + 1, gpus)


def job_gpus(environ: dict[str, str]) -> list[int] | None:
    """The job's GPUs on this node, as Slurm gives them to the prolog (SLURM_JOB_GPUS, "0,1,4"), else
    CUDA_VISIBLE_DEVICES when it holds indices; None: every GPU of the node."""
    for key in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        text = environ.get(key, "").strip()
        if text:
            try:
                return sorted({int(x) for x in text.split(",") if x.strip()})
            except ValueError:
                continue  # UUIDs or MIG names: not indices
    return None


def publish(backend: Any, node: str, field: str, digest: dict[str, Any], settings: Any) -> None:
    """The digest into the node's summary, beside what the health check published (its keys kept)."""
    from . import summary
    from .slurm.actuator import Actuator
    from .slurm.ownership import HEALTH

    info = backend.node(node)
    current = info.extra if field == "extra" else info.comment
    data = summary.parse(current) if current else {"gpufleet": 1}
    if data is None:
        return  # someone else's text: never overwritten
    # one digest per job: two multi-node jobs sharing the node each keep theirs
    data["is"] = {**summary.digests(data.get("is")), str(digest["j"]): digest}
    Actuator(backend, HEALTH, settings).publish(node, {field: json.dumps(data, separators=(",", ":"))})


# Where Slurm's cgroup plugin keeps a job's cgroup: v2 (slurmstepd's scope), v1 (one tree per controller)
CGROUP_JOB_DIRS = ("system.slice/slurmstepd.scope", "freezer/slurm/uid_*", "memory/slurm/uid_*",
                   "cpuset/slurm/uid_*", "devices/slurm/uid_*")


def job_gone(job: str, cgroup_root: str = "/sys/fs/cgroup") -> bool:
    """True when Slurm keeps its jobs' cgroups here and this job has none any more: the job ended and the
    epilog did not stop us (it failed, or never ran).  False where Slurm keeps no cgroups (nothing to tell
    by: the pid file, SIGTERM and `max_hours` still bound the sampler)."""
    import glob

    bases = [b for pattern in CGROUP_JOB_DIRS for b in glob.glob(os.path.join(cgroup_root, pattern))]
    if not bases:
        return False
    return not any(os.path.isdir(os.path.join(b, f"job_{job}")) for b in bases)


def loop(settings: Any, backend: Any, nvml: Any, job: str, node: str, max_hours: float = 240.0,
         cgroup_root: str = "/sys/fs/cgroup", gpus: list[int] | None = None) -> int:
    """Sample until the job ends (the pid file gone or another sampler's, the job's cgroup gone, SIGTERM,
    or `max_hours`)."""
    s = settings
    path = pid_path(s.state_dir, job, node)
    stopping = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stopping.update(now=True))
    nvml.nvmlInit()
    count = nvml.nvmlDeviceGetCount()
    mine = [i for i in gpus if 0 <= i < count] if gpus else None  # only the job's GPUs, where known
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in (mine if mine else range(count))]
    digest = digest_for(job, s, mine or None)
    deadline = time.monotonic() + max_hours * 3600
    while not stopping["now"] and time.monotonic() < deadline:
        try:
            with open(path) as fh:
                if fh.read().strip() != str(os.getpid()):
                    break  # another sampler took over, or the epilog ran
        except OSError:
            break
        now = time.time()
        if digest.add(now, read_gpus(nvml, handles)):
            if job_gone(job, cgroup_root):  # looked at once a window: a stat or two
                break
            try:
                publish(backend, node, s.publish if s.publish != "none" else "extra", digest.to_dict(), s)
            except Exception as exc:  # Slurm unreachable this window: the next one tries again
                print(f"slurm-gpufleet-sampler: could not publish: {exc}", file=sys.stderr)
        time.sleep(max(0.05, s.instep_sample_s - (time.time() - now)))
    return 0


def start(state_dir: str, job: str, node: str) -> int | None:
    """From the prolog: the sampler, detached; its pid file names it.  None when it could not start."""
    import subprocess

    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    code = "import sys; from slurm_gpufleet.hooks import sampler_main; sys.exit(sampler_main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-P", "-c", code, job, node],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)
    with open(pid_path(state_dir, job, node), "w") as fh:
        fh.write(str(proc.pid))
    return proc.pid


def stop(state_dir: str, job: str, node: str, wait_s: float = 2.0) -> bool:
    """From the epilog: remove the pid file (the sampler stops at its next look) and end the process."""
    path = pid_path(state_dir, job, node)
    try:
        with open(path) as fh:
            pid = int(fh.read().strip())
    except (OSError, ValueError):
        return False
    os.unlink(path)
    return _end(pid, wait_s)


def stop_job(job: str, node: str, wait_s: float = 2.0) -> int:
    """From the epilog, before it reads any config (a config it cannot parse must not leave the sampler
    running): every sampler process of this job on this node, found by its command line, ended.
    Returns how many."""
    found = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        argv = [a.decode(errors="replace") for a in argv if a]
        if len(argv) >= 3 and argv[-2:] == [job, node] and any("sampler_main" in a for a in argv[:-2]):
            found += 1
            _end(int(entry), wait_s)
    return found


def _end(pid: int, wait_s: float) -> bool:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            try:
                os.kill(pid, 0)
                if _zombie(pid):
                    return True
            except ProcessLookupError:
                return True
            time.sleep(0.05)
    return True


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False
