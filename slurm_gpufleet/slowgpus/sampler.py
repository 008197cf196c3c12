"""The in-job sampler: started by the prolog for a job on two nodes or more, stopped by the epilog.

Every `instep_sample_s` it reads, per GPU of the job (SLURM_JOB_GPUS, as the prolog got it; every GPU
of the node where Slurm does not say) through NVML, the SM clock, power, SM utilisation and the
clock-event (throttle) reasons (the detector's inputs), and the temperature, PCIe throughput and NVLink
throughput where NVML gives them (shown beside a flag), and keeps the current window; at each window's end (windows are whole
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

import contextlib
import json
import math
import os
import signal
import sys
import time
import zlib
from typing import Any

NVML_CLOCK_SM = 1
BASELINE_WINDOWS = 2


def pid_path(state_dir: str, job: str, node: str) -> str:
    """Named by node too: a state directory on shared storage holds every node's."""
    return os.path.join(state_dir, f"instep-{job}-{node}.pid")


# nvml.h's field ids: NVLink data throughput counters, cumulative KiB per link (scopeId = the link)
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 138, 139
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS
# a row per GPU: what read_gpus gives, in this order; the digest keeps the first six as window means (the
# NVLink counter becomes a rate) and publishes them in this order; older digests hold only the first four.
# The energy counter is not published: where it answers, the window's power is its rate (instep.py)
ROW = ("sm_clock_mhz", "power_w", "sm_util", "throttle", "temp_c", "pcie_mbps", "nvlink_kib", "energy_mj")


class Links:
    """Which NVLinks of each GPU answer the throughput counters: asked once for all links, then only
    those (one NVML call per GPU and sample either way); a GPU with none (PCIe boards) is asked no more."""

    def __init__(self) -> None:
        self.of: dict[int, list[int] | None] = {}

    def read(self, nvml: Any, index: int, handle: Any) -> float | None:
        links = self.of.get(index, list(range(NVLINK_MAX_LINKS)))
        if links is None or not links:
            return None
        fields = [(f, link) for link in links
                  for f in (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)]
        try:
            values = nvml.nvmlDeviceGetFieldValues(handle, fields)
        except Exception:
            self.of[index] = None
            return None
        total, answered = 0, set()
        try:
            for (_, link), v in zip(fields, values, strict=False):
                if getattr(v, "nvmlReturn", 1) == 0:
                    total += int(getattr(v.value, "ullVal", 0) or getattr(v.value, "uiVal", 0))
                    answered.add(link)
        except (TypeError, ValueError, AttributeError):  # an answer that is not NVML's field values
            self.of[index] = None
            return None
        if index not in self.of:
            self.of[index] = sorted(answered) or None
        return float(total) if answered else None


def read_gpus(nvml: Any, handles: list[Any], links: Links | None = None) -> list[list[float | None]]:
    """Per GPU, ROW: [SM clock MHz, power W, SM util %, throttle mask, temperature C, PCIe TX+RX MB/s,
    NVLink TX+RX counter KiB, total energy mJ].  The first four read 0 when NVML refuses them (the
    detector's inputs); the others None where NVML does not give them (no NVLink on PCIe boards, no PCIe
    counters in a VM, no energy counter before Volta)."""
    reads = (lambda h: nvml.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM),
             lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
             lambda h: nvml.nvmlDeviceGetUtilizationRates(h).gpu,
             lambda h: nvml.nvmlDeviceGetCurrentClocksEventReasons(h))
    extra = (lambda h: nvml.nvmlDeviceGetTemperature(h, 0),  # NVML_TEMPERATURE_GPU
             # KB/s over the driver's last 20 ms sample, TX (0) and RX (1)
             lambda h: (nvml.nvmlDeviceGetPcieThroughput(h, 0) + nvml.nvmlDeviceGetPcieThroughput(h, 1)) / 1000.0)
    out = []
    for index, h in enumerate(handles):
        row: list[float | None] = []
        for read in reads:
            try:
                row.append(read(h))
            except Exception:
                row.append(0)
        for read in extra:
            try:
                row.append(float(read(h)))
            except Exception:
                row.append(None)
        row.append(links.read(nvml, index, h) if links is not None else None)
        try:
            row.append(float(nvml.nvmlDeviceGetTotalEnergyConsumption(h)))
        except Exception:
            row.append(None)
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
        self.first: list[tuple[int, list[list[Any]]]] = []
        self.last: list[tuple[int, list[list[Any]]]] = []
        # per GPU: [count of temperature reads, of PCIe reads]; NVLink KiB moved and seconds seen within
        # the window, from one counter reading to the next (a counter that went back, reset, is skipped)
        self.seen: list[list[float]] = []
        self.link: list[list[float]] = []
        self.prev: list[tuple[float, float] | None] = []
        # per GPU, the same for the energy counter (mJ and seconds within the window, the last reading)
        self.energy: list[list[float]] = []
        self.prev_energy: list[tuple[float, float] | None] = []
        # the whole job's tally for its record (jobrecord.py): windows closed, and per GPU those with a
        # slowdown reason (power cap, HW slowdown, thermal, power brake)
        self.windows = 0
        self.throttled: list[int] = []

    def _means(self) -> list[list[Any]]:
        out = []
        for g, (s, seen, link) in enumerate(zip(self.sums, self.seen, self.link, strict=False)):
            row: list[Any] = [round(v / self.n, 1) for v in s[:3]] + [int(s[3])]
            used = self.energy[g] if g < len(self.energy) else None
            # the power the GPU drew over the window, from its energy (a counter that did not move is stuck:
            # a GPU with power on uses energy)
            if used is not None and used[1] > 0 and used[0] > 0:
                row[1] = round(used[0] / 1000.0 / used[1], 1)
            row.append(round(s[4] / seen[0], 1) if seen[0] else None)
            row.append(round(s[5] / seen[1], 1) if seen[1] else None)
            row.append(round(link[0] * 1.024 / 1000 / link[1], 1) if link[1] > 0 else None)  # KiB/s -> MB/s
            out.append(row)
        # rows with nothing beyond the four detector inputs publish as before: four values
        if all(r[4] is None and r[5] is None and r[6] is None for r in out):
            return [r[:4] for r in out]
        return out

    def add(self, t: float, rows: list[list[Any]]) -> bool:
        """One sample; True when it closed a window (a digest to publish)."""
        w = int(t // self.window_s)
        closed = self.current is not None and w != self.current and self.n > 0
        if closed:
            means = self._means()
            from .instep import SLOWDOWN_MASK

            self.windows += 1
            self.throttled = [(self.throttled[g] if g < len(self.throttled) else 0) + bool(int(row[3]) & SLOWDOWN_MASK)
                              for g, row in enumerate(means)]
            if len(self.first) < BASELINE_WINDOWS:
                self.first.append((self.current, means))
            self.last = (self.last + [(self.current, means)])[-self.keep:]
        if self.current != w:
            self.current, self.n = w, 0
            self.sums = [[0.0, 0.0, 0.0, 0, 0.0, 0.0] for _ in rows]
            self.seen, self.link = [[0, 0] for _ in rows], [[0.0, 0.0] for _ in rows]
            self.energy = [[0.0, 0.0] for _ in rows]
        if len(self.prev) != len(rows):
            self.prev = [None] * len(rows)
        if len(self.prev_energy) != len(rows):
            self.prev_energy = [None] * len(rows)
        for g, (s, r) in enumerate(zip(self.sums, rows, strict=False)):
            s[0] += r[0]
            s[1] += r[1]
            s[2] += r[2]
            s[3] = int(s[3]) | int(r[3])
            for k in (4, 5):
                if len(r) > k and r[k] is not None:
                    s[k] += r[k]
                    self.seen[g][k - 4] += 1
            if len(r) > 6 and r[6] is not None:
                self.prev[g] = _grown(self.link[g], self.prev[g], t, r[6])
            if len(r) > 7 and r[7] is not None:
                self.prev_energy[g] = _grown(self.energy[g], self.prev_energy[g], t, r[7])
        self.n += 1
        return closed

    def to_dict(self) -> dict[str, Any]:
        out = {"j": self.job, "ws": self.window_s, "b": [[i, g] for i, g in self.first],
               "w": [[i, g] for i, g in self.last]}
        if self.gpus is not None:
            out["g"] = list(self.gpus)
        return out


def _grown(total: list[float], before: tuple[float, float] | None, t: float, value: float) -> tuple[float, float]:
    """A cumulative counter's growth since its last reading, and the seconds it took, added to `total` (a
    counter that went back, reset, is skipped); returns this reading, the next one's `before`."""
    if before is not None and value >= before[1] and t > before[0]:
        total[0] += value - before[1]
        total[1] += t - before[0]
    return (t, value)


def digest_for(job: str, settings: Any, gpus: list[int] | None = None) -> Digest:
    """The digest a node keeps for `job`: one window more than a flag needs, since the job's nodes
    publish at their own moments, so at any instant their newest windows may differ by one, and
    `instep_windows` shared windows must remain."""
    return Digest(job, settings.instep_window_s, settings.instep_windows + 1, gpus)




def publish(backend: Any, node: str, field: str, digest: dict[str, Any], settings: Any,
            kept_for_s: float = 0.0) -> None:
    """The digest into the node's summary, beside what the health check published (its keys kept): merged
    into the copy the node's last writer kept (summary.kept_published, younger than `kept_for_s`), so that
    slurmctld is only written to; read from Slurm where there is no such copy."""
    from ..judging import summary
    from ..slurm.actuator import make_actuator
    from ..slurm.ownership import HEALTH

    data = summary.kept_published(settings.state_dir, node, field, kept_for_s) if kept_for_s > 0 else None
    if data is None:
        info = backend.node(node)
        current = info.extra if field == "extra" else info.comment
        data = summary.parse(current) if current else {"gpufleet": 1}
        if data is None:
            return  # someone else's text: never overwritten
    # one digest per job: two multi-node jobs sharing the node each keep theirs
    data["is"] = {**summary.digests(data.get("is")), str(digest["j"]): digest}
    make_actuator(backend, HEALTH, settings).publish(node, {field: json.dumps(data, separators=(",", ":"))})
    summary.keep_published(settings.state_dir, node, field, data)


def publish_every(settings: Any, fleet_nodes: int | None) -> int:
    """Windows from one publication of a sampler's digest to Slurm to the next: 1 on a small fleet,
    stretched so that the samplers of a fleet whose every node runs a multi-node job write at most
    `instep_writes_per_s` a second together (12,500 nodes, 60 s windows, 10 a second: every 21st window)."""
    if not fleet_nodes:
        return 1
    return max(1, math.ceil(fleet_nodes / (settings.instep_writes_per_s * settings.instep_window_s)))


def publishes_in(job: str, window: int, every: int) -> bool:
    """Whether a job's samplers publish the window that ended as `window` (its index from the epoch): every
    node of the job in the same window, so their newest windows agree, and the jobs of a fleet spread over
    the `every` windows (by the job's id), so that the writes come evenly, not in one burst."""
    return every <= 1 or (window + zlib.crc32(job.encode())) % every == 0


def tally_path(state_dir: str, job: str, node: str) -> str:
    """The job's throttling tally on this node (Digest.windows, .throttled), for the epilog's job record."""
    return os.path.join(state_dir, f"instep-{job}-{node}.tally.json")


def write_tally(state_dir: str, node: str, digest: Digest) -> None:
    path = tally_path(state_dir, digest.job, node)
    try:
        from ..common.safefile import write_file

        write_file(path, json.dumps({"windows": digest.windows, "throttled": digest.throttled, "gpus": digest.gpus}),
                   mode=0o600)
    except OSError:
        pass  # the record goes without it


def throttle_shares(state_dir: str, job: str, node: str, least: float = 0.1) -> dict[str, int]:
    """Per GPU (NVML index), the percent of the job's windows it ran with a slowdown reason, where at least
    `least` of them; the tally is removed once read (the epilog's)."""
    path = tally_path(state_dir, job, node)
    try:
        with open(path) as fh:
            tally = json.load(fh)
        os.unlink(path)
        windows, counts = int(tally["windows"]), list(tally["throttled"])
        index = tally.get("gpus") or list(range(len(counts)))
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if windows <= 0:
        return {}
    return {str(i): round(100 * c / windows) for i, c in zip(index, counts, strict=False) if c / windows >= least}


def shared_path(share_dir: str, job: str, node: str) -> str:
    """<share_dir>/<job>/<node>.json: one file per node of a job, written by that node's sampler alone."""
    for part in (job, node):
        if not part or "/" in part or part.startswith("."):
            raise ValueError(f"not a job or node name: {part!r}")
    return os.path.join(share_dir, job, f"{node}.json")


def write_shared(share_dir: str, node: str, digest: dict[str, Any], model: str = "") -> None:
    """The digest into the job's folder of the shared directory, replaced whole (a reader never sees half
    of it).  Slurm is asked nothing: at 12,500 nodes, a write a window each would be 208 a second."""
    path = shared_path(share_dir, str(digest["j"]), node)
    from ..common.safefile import write_file

    write_file(path, json.dumps({"gpufleet": 1, "gpus": model, "is": {str(digest["j"]): digest}},
                                separators=(",", ":")), make_dirs=True, dir_mode=0o755)


def drop_shared(share_dir: str, job: str, node: str) -> None:
    """From the epilog: this node's digest of the job goes, and the job's folder with its last one."""
    try:
        path = shared_path(share_dir, job, node)
        os.unlink(path)
        os.rmdir(os.path.dirname(path))
    except (OSError, ValueError):
        pass  # never written, or other nodes' digests still there


def flags_of_published(nodes, slurm_settings) -> tuple[list, list[str], dict[str, dict]]:
    """The detector over what the running jobs' samplers published, in the nodes' summaries (Slurm's node
    records, `nodes`) and in `instep_share_dir` when the site set one: (flags, the jobs sampled, node -> its
    summary with a digest).  What `fleet stragglers --running` and `fleet lemons` judge."""
    from ..judging import summary
    from ..slurm.base import job_order
    from .instep import Settings, detect, samples_from_digests

    published = {n.name: d for n in nodes if (d := summary.from_node(n)) and "is" in d}
    if slurm_settings.instep_share_dir:  # the samplers wrote their digests there, not to Slurm
        for node, data in read_shared(slurm_settings.instep_share_dir).items():
            mine = published.setdefault(node, {"gpus": data["gpus"], "is": {}})
            mine["is"] = {**summary.digests(mine.get("is")), **data["is"]}
    samples, window_s = samples_from_digests(published)
    flags = detect(samples, Settings(window_s=window_s or slurm_settings.instep_window_s,
                                     windows=slurm_settings.instep_windows)) if samples else []
    jobs = sorted({job for d in published.values() for job in summary.digests(d["is"])}, key=job_order)
    return flags, jobs, published


def read_shared(share_dir: str, now: float | None = None, stale_s: float = 3600.0) -> dict[str, dict[str, Any]]:
    """node -> {"gpus", "is": {job: digest}} from the shared directory, as `fleet stragglers --running`
    reads the nodes' summaries; a file not written for `stale_s` (a node whose epilog never ran), or one
    that is not a digest, is left out."""
    from ..judging import summary

    now = time.time() if now is None else now
    out: dict[str, dict[str, Any]] = {}
    try:
        jobs = os.listdir(share_dir)
    except OSError:
        return out
    for job in jobs:
        try:
            names = os.listdir(os.path.join(share_dir, job))
        except OSError:
            continue
        for name in names:
            if not name.endswith(".json"):
                continue
            path = os.path.join(share_dir, job, name)
            try:
                if now - os.stat(path).st_mtime > stale_s:
                    continue
                with open(path) as fh:
                    data = json.load(fh)
            except (OSError, ValueError):
                continue
            kept = summary.digests(data.get("is")) if isinstance(data, dict) else {}
            if job not in kept:
                continue
            node = out.setdefault(name[:-5], {"gpus": str(data.get("gpus") or ""), "is": {}})
            node["is"][job] = kept[job]
    return out


@contextlib.contextmanager
def publish_lock(state_dir: str, node: str, wait_s: float = 10.0):
    """One sampler at a time reads, merges and writes the node's summary: two jobs' samplers on one node
    would otherwise each write back what they read, and one job's window would be lost."""
    import fcntl

    fd = os.open(os.path.join(state_dir, f"instep-{node}.lock"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"another sampler of {node} held the summary for {wait_s:g} s") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


# Where Slurm's cgroup plugin keeps a job's cgroup: v2 (slurmstepd's scope), v1 (one tree per controller)
CGROUP_JOB_DIRS = ("system.slice/slurmstepd.scope", "freezer/slurm/uid_*", "memory/slurm/uid_*",
                   "cpuset/slurm/uid_*", "devices/slurm/uid_*")


def job_gone(job: str, cgroup_root: str = "/sys/fs/cgroup", backend: Any = None, proc_root: str = "/proc") -> bool:
    """True when the job has ended and the epilog did not stop us (it failed, or never ran).  Where Slurm
    keeps its jobs' cgroups here, by the job's cgroup.  Without them, by the node itself first: a
    slurmstepd of the job running here means it runs (a look at /proc, no Slurm call); only where none
    does (between two steps, or after the end) is Slurm asked, one squeue, and a job it no longer shows
    running is gone."""
    import glob

    bases = [b for pattern in CGROUP_JOB_DIRS for b in glob.glob(os.path.join(cgroup_root, pattern))]
    if bases:
        return not any(os.path.isdir(os.path.join(b, f"job_{job}")) for b in bases)
    if stepd_running(job, proc_root) is not False or backend is None:
        return False
    try:
        state = backend.job_state(job)
    except Exception:  # Slurm unreachable: not known to be gone (the pid file, SIGTERM, max_hours still bound us)
        return False
    return state is None or state.split()[0] not in RUNNING_STATES


RUNNING_STATES = ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "RESIZING", "SIGNALING",
                  "STAGE_OUT", "REQUEUED", "PENDING")


def stepd_running(job: str, proc_root: str = "/proc") -> bool | None:
    """Whether a slurmstepd of the job runs on this node; None where /proc cannot be read."""
    from ..readers.jobgpus import slurmstepd_here

    return slurmstepd_here(job, proc_root)


def loop(settings: Any, backend: Any, nvml: Any, job: str, node: str, max_hours: float = 240.0,
         cgroup_root: str = "/sys/fs/cgroup", gpus: frozenset[int] | None = None, fleet_nodes: int | None = None,
         kept_for_s: float = 0.0) -> int:
    """Sample until the job ends (the pid file gone or another sampler's, the job's cgroup gone, SIGTERM,
    or `max_hours`).  `gpus`: the job's GPUs as Slurm names them (minor numbers, jobgpus.py); `fleet_nodes`:
    slurm.conf's node count, which spaces the publications to Slurm (publish_every); `kept_for_s`: how long
    the node's last published summary may stand in for a read of it (publish)."""
    from ..readers.jobgpus import handles_of

    s = settings
    path = pid_path(s.state_dir, job, node)
    stopping = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stopping.update(now=True))
    nvml.nvmlInit()
    found = handles_of(nvml, gpus)  # the job's own GPUs, by minor number
    if not found and gpus:
        found = handles_of(nvml, None)  # none of them on this node's NVML: judge every GPU rather than none
    handles = [h for _, h in found]
    digest = digest_for(job, s, [i for i, _ in found] if gpus else None)
    model = _model(nvml, handles)
    links = Links()
    deadline = time.monotonic() + max_hours * 3600
    every = 1 if s.instep_share_dir else publish_every(s, fleet_nodes)
    while not stopping["now"] and time.monotonic() < deadline:
        try:
            with open(path) as fh:
                if fh.read().strip() != str(os.getpid()):
                    break  # another sampler took over, or the epilog ran
        except OSError:
            break
        now = time.time()
        if digest.add(now, read_gpus(nvml, handles, links)):
            if job_gone(job, cgroup_root, backend):  # looked at once a window: a stat or two, rarely a squeue
                break
            write_tally(s.state_dir, node, digest)
            try:
                if s.instep_share_dir:
                    write_shared(s.instep_share_dir, node, digest.to_dict(), model)
                elif publishes_in(job, int(now // s.instep_window_s) - 1, every):
                    data = digest.to_dict()
                    if every > 1:
                        data["pe"] = every  # windows to the next publication: the digest is live that long
                    with publish_lock(s.state_dir, node):
                        publish(backend, node, s.publish if s.publish != "none" else "extra", data, s, kept_for_s)
            except Exception as exc:  # Slurm unreachable, the share full: the next window tries again
                print(f"slurm-gpufleet-sampler: could not publish: {exc}", file=sys.stderr)
        time.sleep(max(0.05, s.instep_sample_s - (time.time() - now)))
    return 0


def _model(nvml: Any, handles: list[Any]) -> str:
    """"8xNVIDIA H200", as the health check's summary names the node's GPUs (peers are compared by model)."""
    names = []
    for h in handles:
        try:
            name = nvml.nvmlDeviceGetName(h)
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        except Exception:
            continue
    return f"{len(handles)}x{'/'.join(sorted(set(names)))}" if names else ""


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
