"""Quiet health-check runs ask slurmctld nothing.  At 12,500 nodes a read of one node costs the controller
as much as a read of all of them (about 10 ms of its CPU), so a run every 300 s on every node is 0.4 of a
core for nothing when nothing changed.

After each run that read Slurm, the node keeps what it saw (`slurm-view-<node>.json` in the state
directory): the verdict, the summary Slurm shows, whether the node was in service with nothing of ours
open, the slurmd that ran the check and the config.  A later run is quiet when that view is younger than
`slurm_read_every_s`, slurmd and the config are the same, and its own verdict and summary are the view's:
it records its run and asks Slurm nothing.  Whether the node runs a job, which decides whether GPU
processes count, is read off the node itself (a slurmstepd in /proc).  Anything else (another verdict,
another summary, a node out of service, a restarted slurmd, a changed config, the view's age) reads Slurm
and acts as any run does.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

IGNORED = ("t", "is", "case", "obs", "err", "lemon")   # moved by others or by time, not by this node's verdict


def path(state_dir: str, node: str) -> str:
    return os.path.join(state_dir, f"slurm-view-{node}.json")


def slurmd_mark() -> str | None:
    """The slurmd that started this check: its pid and start time (a restarted slurmd, a rebooted node
    reads Slurm)."""
    try:
        ppid = os.getppid()
        with open(f"/proc/{ppid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return f"{ppid}:{fields[19]}"
    except (OSError, IndexError):
        return None


def config_mark(config_path: str | None) -> str | None:
    if not config_path:
        return None
    try:
        st = os.stat(config_path)
    except OSError:
        return None
    return f"{st.st_mtime_ns}:{st.st_size}"


def comparable(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if summary is None else {k: v for k, v in summary.items() if k not in IGNORED}


def keep(state_dir: str, node: str, verdict: str, summary: dict[str, Any] | None, in_service: bool,
         config_path: str | None, now: float | None = None) -> None:
    """After a run that read Slurm: what it saw, for the next runs.  Not kept (the next run reads Slurm)
    where the node is not plainly in service or something of ours is open on it."""
    target = path(state_dir, node)
    if not in_service or summary is None:
        forget(state_dir, node)
        return
    view = {"read_at": time.time() if now is None else now, "verdict": verdict, "summary": comparable(summary),
            "slurmd": slurmd_mark(), "config": config_mark(config_path),
            "err": bool(summary.get("err"))}   # the tool's own fault published: a run that meets one reads
    try:
        from ..common.safefile import write_file

        write_file(target, json.dumps(view), mode=0o600)
    except OSError:
        pass  # not kept: the next run reads Slurm


def forget(state_dir: str, node: str) -> None:
    try:
        os.unlink(path(state_dir, node))
    except OSError:
        pass


def read_every(settings: Any, slurm_conf: str | None = None) -> float:
    """How long a quiet node goes without reading Slurm: `slurm_read_every_s`, stretched so that the whole
    fleet's quiet runs make at most `slurm_reads_per_s` reads a second (the fleet: slurm.conf's nodes,
    counted once per change of the file); 0 where every run reads."""
    from ..judging.summary import quiet_read_bound

    if float(settings.slurm_read_every_s) <= 0:
        return 0.0
    nodes = fleet_size(settings.state_dir, slurm_conf or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf")
    return quiet_read_bound(settings, nodes)


def fleet_size(state_dir: str, slurm_conf: str) -> int | None:
    """The number of nodes slurm.conf defines, kept in the state directory beside the file's mtime (a
    12,500-node host list is expanded once, not at every run); None where slurm.conf cannot be read."""
    try:
        mark = str(os.stat(slurm_conf).st_mtime_ns)
    except OSError:
        return None
    kept = os.path.join(state_dir, "slurm-conf-nodes")
    try:
        with open(kept, encoding="utf-8") as fh:
            seen, _, count = fh.read().partition(" ")
        if seen == mark:
            return int(count)
    except (OSError, ValueError):
        pass
    from ..policy import slurm_conf_nodes

    hosts = slurm_conf_nodes(slurm_conf)
    if hosts is None:
        return None
    try:
        from ..common.safefile import write_file

        write_file(kept, f"{mark} {len(hosts)}", mode=0o600)
    except OSError:
        pass
    return len(hosts)


def fresh_view(state_dir: str, node: str, every_s: float, config_path: str | None,
               now: float | None = None) -> dict[str, Any] | None:
    """The kept view, where a run may rely on it instead of reading Slurm; None otherwise."""
    from ..judging.summary import read_fresh

    if every_s <= 0:
        return None
    view = read_fresh(path(state_dir, node), "read_at", every_s, now)
    if view is None:
        return None
    if view.get("slurmd") is None or view.get("slurmd") != slurmd_mark() or view.get("config") != config_mark(config_path):
        return None
    return view


def job_running_here(proc_root: str = "/proc") -> bool | None:
    """A slurmstepd runs on this node (a job's step, its batch script or its extern step); None where /proc
    cannot be read."""
    from ..readers.jobgpus import slurmstepd_here

    return slurmstepd_here(None, proc_root)
