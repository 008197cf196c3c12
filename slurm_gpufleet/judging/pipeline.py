"""From a source to a verdict: gather a snapshot, run the checks, build the report.

This is the path the health check, prolog and epilog use, so it imports nothing heavy: no click,
jinja2 or sqlite-utils (see tests/test_imports.py).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import dataclass, field
from typing import Any

from ..policy import Policy, default_policy
from ..readers.snapshot import NodeSnapshot, known
from .checks import Context, run_checks
from .findings import Finding, verdict


@dataclass
class Source:
    """Where a node's state comes from: a saved report, our JSON snapshot, or (neither) live NVML; its
    kernel log (a file, or a directory of `<host>.kmsg` files); its kernels and modules (`host_root`)."""

    report: str | None = None
    kernel_log: str | None = None
    level: str = "quick"
    nvml: Any = None  # an injected pynvml-shaped module (tests, replay)
    host: str | None = None          # the node's name: which file of a kernel-log directory is its
    host_root: str | None = None     # read the host's kernels and NVIDIA modules under this root
    # a node's own health check: a kernel log or host that cannot be read is noted in `unread`, never
    # allowed to hide the GPUs' own state; the CLI (strict) says so in one line instead
    strict: bool = True
    models: tuple = ()               # the site's [models] (policy), before the shipped table
    systemctl: str | None = None     # the systemctl the config names (else root's own, on a host read at /)
    # a node's own health check: (file, probe_s, window_s) keeping its fabric-manager probes across runs
    probe_memory: tuple[str, float, float] | None = None
    # the node's InfiniBand devices (readers/ib.py), and where a node's own runs keep its port counters
    ib_sysfs: str | None = None
    ib_memory: str | None = None
    ibstat: str | None = None        # a saved `ibstat` output instead of sysfs (no counters)


def kernel_log_path(kernel_log: str | None, host: str | None) -> str | None:
    """A file as given; a directory holds one `<host>.kmsg` per node (absent: no log for this node)."""
    if kernel_log and os.path.isdir(kernel_log):
        path = os.path.join(kernel_log, f"{host}.kmsg")
        return path if os.path.exists(path) else None
    return kernel_log


def gather(source: Source) -> NodeSnapshot:
    """The one read of a node: everything a check needs, each source read once."""
    from ..readers.report import read_report_file

    if source.report:
        snap = read_report_file(source.report)
    else:
        from ..readers.nvml import NvmlReader

        snap = NvmlReader(nvml=source.nvml, level="full" if source.level == "deep" else source.level).read()
        if source.level == "deep" and snap.gpus:
            from ..readers.probe import measure

            snap.performance = measure([g.index for g in snap.gpus if not g.lost])
    if source.host:
        snap.host = source.host
    kernel_log = kernel_log_path(source.kernel_log, source.host)
    if kernel_log:
        from ..readers.kernel_log import read_kernel_log_file

        try:
            log = read_kernel_log_file(kernel_log)
            snap.xid_events, snap.boots_seen, snap.sxid_events = log.events, log.boots, log.sxids
            snap.xid_unparsed = log.unparsed
            snap.nic_events = log.nics
            snap.unread += [f"kernel log {kernel_log}: {note}" for note in log.notes]
            if log.foreign:   # a user's forged line is said, never counted
                snap.unread.append(f"kernel log {kernel_log}: {len(log.foreign)} line(s) not from the kernel, "
                                   f"not counted; the first: {log.foreign[0]}")
        except (OSError, ValueError) as exc:  # unreadable, or binary (a ReportError)
            if source.strict:
                raise
            snap.unread.append(f"kernel log {kernel_log}: {getattr(exc, 'strerror', None) or exc}")
    if source.host_root:
        from ..readers.host import read_host

        try:
            snap.host_facts = read_host(source.host_root)
        except OSError as exc:  # what cannot be read is not judged
            if source.strict:
                raise
            snap.unread.append(f"host facts under {source.host_root}: {exc.strerror or exc}")
        from .checks.fabric import needs_fabric_manager

        if snap.host_facts is not None and (source.host_root == "/" or source.systemctl) \
                and needs_fabric_manager(snap, source.models):
            from ..readers.host import read_fabric_manager

            snap.host_facts.fabric_manager = read_fabric_manager(source.systemctl or None, uptime_s=known(snap.uptime_s))
            if snap.host_facts.fabric_manager is not None and source.probe_memory:
                from ..readers.host import remember_fabric_manager

                path, probe_s, window_s = source.probe_memory
                remember_fabric_manager(snap.host_facts.fabric_manager, path, time.time(), probe_s, window_s)
    if source.ibstat:
        from ..readers.ib import read_ibstat

        with open(source.ibstat, encoding="utf-8", errors="replace") as fh:
            snap.ib = read_ibstat(fh.read(), source.ibstat)
    elif source.ib_sysfs:
        from ..readers.ib import read_ib, remember

        snap.ib = read_ib(source.ib_sysfs)
        if source.ib_memory and snap.ib.ports:
            remember(snap.ib, source.ib_memory)
    return snap


@dataclass
class Report:
    """A node's verdict, its findings and the snapshot they came from."""

    verdict: str
    findings: list[Finding]
    snapshot: NodeSnapshot
    groups: tuple[str, ...] = ()
    duration_s: float = 0.0
    checked_at: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))

    @property
    def judged_in_part(self) -> list[str]:
        """What of the node's input was not read as given (its fault fields, its values): the verdict
        stands on the rest."""
        s = self.snapshot
        return [*s.input_notes, *(f"gpu {g.index}: {note}" for g in s.gpus if not g.lost for note in g.unread)]

    def to_dict(self) -> dict[str, Any]:
        s = self.snapshot
        return {
            "verdict": self.verdict,
            "judged_in_part": self.judged_in_part,
            "host": s.host,
            "source": s.source,
            "driver_version": known(s.driver_version),
            "cuda_driver_version": known(s.cuda_driver_version),
            "gpu_count": len(s.gpus),
            "gpus": [{"index": g.index, "name": known(g.name), "pci_bus_id": known(g.pci_bus_id),
                      "uuid": known(g.uuid), "lost": g.lost} for g in s.gpus],
            "partial": s.partial,
            "groups": list(self.groups),
            "checked_at": self.checked_at,
            "duration_s": round(self.duration_s, 4),
            "findings": [f.to_dict() for f in self.findings],
        }


def evaluate(snap: NodeSnapshot, policy: Policy | None = None, *, host: str | None = None,
             previous: NodeSnapshot | None = None, today: dt.date | None = None,
             expect_idle: bool | None = None, idle_gpus: frozenset[int] | None = None,
             perf_baseline: dict[str, dict[str, float]] | None = None, only: list[str] | None = None) -> Report:
    started = time.perf_counter()
    policy = policy or default_policy()
    node_policy = policy.for_node(host or snap.host)
    if expect_idle is not None:
        from dataclasses import replace

        node_policy = replace(node_policy, expect_idle=expect_idle)
    ctx = Context(snapshot=snap, policy=node_policy, models=policy.models, previous=previous,
                  today=today or dt.date.today(), idle_gpus=idle_gpus, perf_baseline=perf_baseline)
    findings = run_checks(ctx, only)
    return Report(verdict(findings), findings, snap, node_policy.groups, time.perf_counter() - started)


