"""Idle sweeps: nodes that sit idle get the deep check as a job that gives way to any user job, so that
a slow or faulty GPU is found before a job meets it.  `slurm-gpufleet fleet sweep` runs one step (from a
systemd timer, like `fleet lemons`).

What gives way is Slurm's own preemption, not ours: the sweep's jobs go to `sweep_partition`, a
partition over the same nodes with a lower PriorityTier and `PreemptMode=CANCEL`, under
`PreemptType=preempt/partition_prio` (docs/slurm.md, "Idle sweeps").  A user job that needs the node cancels
the sweep within one scheduler cycle; no pending job ever waits for a sweep.

A step, in one read of the nodes and one of the sweep jobs:
* a node of a group with `sweep_interval_h` is due when it is idle and in service (no flag: not drained,
  reserved or rebooting), idle for `sweep_idle_min` (Slurm's LastBusyTime), and its last sweep is older
  than the interval;
* at most `sweep_max_nodes` sweep jobs run or wait at once; the longest unswept go first;
* a sweep job still pending after `sweep_minutes` (the node got busy) is cancelled.
The sweep job runs the node's health check at the deep level, acting: its findings take the node's
remediation ladder like any other run's.  When each node was last swept is kept in `sweep_db`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

JOB_NAME = "gpufleet-sweep"


@dataclass
class SweepStep:
    submitted: dict[str, str] = field(default_factory=dict)   # node -> job id
    due: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)          # nodes with a sweep job now
    cancelled: list[str] = field(default_factory=list)        # stale pending job ids
    errors: list[str] = field(default_factory=list)


def due_nodes(nodes, policy, last: dict[str, float], busy_nodes: set[str], now: float) -> list[str]:
    """The nodes due for a sweep, the longest unswept first.  Pure."""
    out = []
    for n in nodes:
        pol = policy.for_node(n.name)
        if pol.sweep_interval_h is None or n.name in busy_nodes:
            continue
        if n.state != "IDLE" or n.flags or n.last_busy is None:
            continue  # busy, drained, reserved, rebooting, or no idle time known
        if now - n.last_busy < pol.sweep_idle_min * 60:
            continue
        if now - last.get(n.name, 0.0) < pol.sweep_interval_h * 3600:
            continue
        out.append(n.name)
    return sorted(out, key=lambda name: (last.get(name, 0.0), name))


def load_last(path: str) -> dict[str, float]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save_last(path: str, last: dict[str, float]) -> None:
    from ..common.safefile import write_file

    write_file(path, json.dumps(last, indent=0, sort_keys=True), mode=0o600, make_dirs=True)


def run_step(backend: Any, policy, now: float | None = None, dry_run: bool = False) -> SweepStep:
    """Raises SlurmError when the nodes or the sweep jobs cannot be read (nothing written then)."""
    from ..slurm import SlurmError
    from ..slurm import effects as E
    from ..slurm.actuator import make_actuator
    from ..slurm.ownership import HEALTH

    settings = policy.slurm
    now = time.time() if now is None else now
    nodes = backend.nodes()
    jobs = backend.jobs_named(JOB_NAME)
    last = load_last(settings.sweep_path)
    step = SweepStep()
    # a sweep job's comment names its node: "gpufleet sweep of n8"
    active: dict[str, tuple[str, str]] = {}
    for job_id, state, comment in jobs:
        if state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            active[comment.rsplit(" ", 1)[-1]] = (job_id, state)
    step.running = sorted(active)
    actuator = make_actuator(backend, HEALTH, settings, modes=policy.mode_of)
    stale = [job_id for node, (job_id, state) in active.items()
             if state == "PENDING" and now - last.get(node, now) > settings.sweep_minutes * 60]
    if stale and not dry_run:
        try:
            actuator.apply(E.Cancel(tuple(stale)))
            step.cancelled = stale
        except SlurmError as exc:
            step.errors.append(f"cancel {','.join(stale)}: {exc}")
    step.due = due_nodes(nodes, policy, last, set(active), now)
    room = max(0, settings.sweep_max_nodes - (len(active) - len(step.cancelled)))
    if dry_run or not settings.sweep_partition:
        return step
    for node in step.due[:room]:
        try:
            (job_id,) = actuator.apply(E.Submit(JOB_NAME, node, "", settings.sweep_partition, settings.sweep_command,
                                                settings.sweep_minutes, f"gpufleet sweep of {node}"))
        except SlurmError as exc:
            step.errors.append(f"{node}: sweep not submitted: {exc}")
            continue
        step.submitted[node] = job_id
        last[node] = now
    if step.submitted:
        save_last(settings.sweep_path, last)
    return step
