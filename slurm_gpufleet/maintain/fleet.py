"""The fleet as the planner sees it: nodes (with what they publish to Slurm), running jobs, reservations.

Read live from Slurm (one `scontrol show nodes`, one `squeue`, one `scontrol show reservation`) or from
a JSON file of the same shape (a saved fleet, the sample fleet, the simulator's fleet).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ..catalogs.bundle import Bundle
from ..common.shapes import check_fields, kind_ok, load_json
from ..judging import summary
from ..slurm.base import JobInfo, NodeInfo, Reservation


def _check_node(i: int, n: dict[str, Any]) -> None:
    check_fields(f"nodes[{i}]", n, FleetNode, "name")


@dataclass
class FleetNode:
    name: str
    partitions: list[str] = field(default_factory=list)
    features: list[str] = field(default_factory=list)
    state: str = "IDLE"
    flags: list[str] = field(default_factory=list)
    reason: str = ""
    reason_user: str | None = None
    # what the node's health check published (Extra/Comment JSON): driver, CUDA, GPUs, firmware, verdict
    driver: str | None = None
    cuda: str | None = None
    gpus: str | None = None
    firmware: str | None = None            # VBIOS version(s)
    verdict: str | None = None
    checked: str | None = None
    kernel: str | None = None              # the running kernel's release
    inforom: str | None = None             # InfoROM image version(s)
    config_refused: bool = False           # its health check refused the config (trust.py): on defaults
    error: str | None = None               # why its checks cannot run as configured (summary "err")
    fabric_domain: str | None = None       # the NVLink domain its GPUs registered in (slurm/domains.py)
    # the remediation ladder's open cases: [class, attempts, first, last, status] (remedy/ladder.py)
    cases: list[list[Any]] = field(default_factory=list)
    observed: str | None = None            # observe mode: what its health check would have done
    network: dict[str, Any] | None = None  # its InfiniBand ports down, slow, counters grew (summary "ib")
    sampled_jobs: list[str] = field(default_factory=list)   # jobs whose in-job sampler published here lately

    @property
    def model(self) -> str | None:
        if not self.gpus or "x" not in self.gpus:
            return self.gpus
        return self.gpus.split("x", 1)[1]

    @property
    def held(self) -> bool:
        """Drained, down or rebooting by anyone: not free to take for a rollout."""
        f = set(self.flags)
        return bool(f & {"DRAIN", "REBOOT_REQUESTED", "REBOOT_ISSUED"}) or self.state in ("DOWN", "FUTURE")

    @classmethod
    def from_info(cls, info: NodeInfo) -> FleetNode:
        node = cls(name=info.name, partitions=list(info.partitions), features=list(info.features),
                   state=info.state, flags=sorted(info.flags), reason=info.reason, reason_user=info.reason_user)
        published = summary.from_node(info)
        if published:
            node.driver, node.cuda = published.get("drv"), published.get("cuda")
            node.gpus, node.firmware = published.get("gpus"), published.get("fw")
            node.verdict, node.checked = published.get("v"), published.get("t")
            node.kernel, node.inforom = published.get("kern"), published.get("ifr")
            node.config_refused = published.get("cfg") == "refused"
            node.error = published.get("err") if isinstance(published.get("err"), str) else None
            node.cases = [list(c) for c in published.get("case") or [] if isinstance(c, list) and len(c) == 5]
            node.observed = published.get("obs")
            node.network = published.get("ib") if isinstance(published.get("ib"), dict) else None
            node.sampled_jobs = sorted(summary.live_digests(published.get("is"), time.time()))
            from ..slurm.domains import fabric_domain

            node.fabric_domain = fabric_domain(published)
        return node

    @property
    def bundle(self) -> Bundle:
        """Driver, kernel and firmware as the node last published them (what a rollback returns to)."""
        firmware = {k: v for k, v in (("vbios", self.firmware), ("inforom", self.inforom)) if v}
        return Bundle(self.driver, self.kernel, firmware)


def free_times(jobs, stop_at: dict[str, float] | None = None) -> dict[str, float]:
    """When each busy node's last running job ends (inf for a job without a time limit); a job in
    `stop_at` (a deadline plan's) ends then at the latest.  The planner and the engine both read it here."""
    out: dict[str, float] = {}
    for job in jobs:
        end = job.end_time if job.end_time is not None else float("inf")
        if stop_at and job.job_id in stop_at:
            end = min(end, stop_at[job.job_id])
        for n in job.nodes:
            if end > out.get(n, 0.0):
                out[n] = end
    return out


@dataclass
class FleetState:
    nodes: dict[str, FleetNode]
    jobs: list[JobInfo] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    taken_at: float = field(default_factory=time.time)

    def free_at(self, stop_at: dict[str, float] | None = None) -> dict[str, float]:
        return free_times(self.jobs, stop_at)

    def reserved_by_others(self, prefix: str) -> dict[str, str]:
        return {n: r.name for r in self.reservations if not r.name.startswith(prefix) for n in r.nodes}

    @classmethod
    def from_backend(cls, backend) -> FleetState:
        return cls({i.name: FleetNode.from_info(i) for i in backend.nodes()}, backend.running_jobs(),
                   backend.reservations())

    def to_dict(self) -> dict[str, Any]:
        return {"taken_at": self.taken_at, "nodes": [asdict(n) for n in self.nodes.values()],
                "jobs": [asdict(j) for j in self.jobs],
                "reservations": [{**asdict(r), "flags": sorted(r.flags)} for r in self.reservations]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FleetState:
        """A saved fleet; ValueError naming the node and field where a value is not of its kind (a list
        where a name belongs), never a crash later."""
        if not isinstance(data, dict) or not isinstance(data.get("nodes", []), list):
            raise ValueError("expected an object with a list of nodes")
        nodes = {}
        for i, n in enumerate(data.get("nodes", [])):
            if not isinstance(n, dict):
                raise ValueError(f"nodes[{i}]: expected an object, got {type(n).__name__}")
            _check_node(i, n)
            node = FleetNode(**n)
            nodes[node.name] = node
        for what in ("jobs", "reservations"):
            if not isinstance(data.get(what, []), list):
                raise ValueError(f"{what}: expected a list, got {type(data[what]).__name__}")
        for i, j in enumerate(data.get("jobs", [])):
            check_fields(f"jobs[{i}]", j, JobInfo, "job_id")
        for i, r in enumerate(data.get("reservations", [])):
            check_fields(f"reservations[{i}]", r, Reservation, "name")
        taken_at = data.get("taken_at", time.time())
        if not kind_ok(taken_at, float):
            raise ValueError(f"taken_at is {json.dumps(taken_at)[:60]}, not a time (epoch seconds)")
        jobs = [JobInfo(**j) for j in data.get("jobs", [])]
        resv = [Reservation(**{**r, "flags": set(r.get("flags", []))}) for r in data.get("reservations", [])]
        return cls(nodes, jobs, resv, float(taken_at))

    @classmethod
    def from_file(cls, path: str) -> FleetState:
        return cls.from_dict(load_json(path))
