"""One read of the fleet per reconcile step: nodes, running jobs, reservations, and (only while a node is
in `testing`) the validation jobs.  Every read goes through `CountedReads`, so a step reports the reads it
really made, whatever asked for them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..slurm.base import JobInfo, NodeInfo, Reservation
from ..slurm.ownership import ROLLOUT_RESERVATION_PREFIX
from .fleet import free_times

INF = float("inf")
READS = frozenset({"nodes", "running_jobs", "reservations", "jobs_named", "node", "topology", "ended_jobs"})


class CountedReads:
    """The backend, with its fleet reads counted (the actuator writes to what it wraps)."""

    def __init__(self, backend: Any):
        self.backend = backend
        self.__wrapped__ = backend
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.backend, name)
        if name in READS:
            def counted(*args: Any, **kwargs: Any) -> Any:
                self.reads += 1
                return attr(*args, **kwargs)
            return counted
        return attr


@dataclass
class World:
    now: float
    nodes: dict[str, NodeInfo]
    free_at: dict[str, float]               # node -> when its running jobs end by their limits (inf: no limit)
    reservations: dict[str, Reservation]
    # node -> (job id, state) of its newest validation job; read only while a node is in `testing`
    validation: dict[str, tuple[str, str]] = field(default_factory=dict)
    jobs: dict[str, JobInfo] = field(default_factory=dict)   # running jobs by id
    # Slurm's blocks (name -> nodes); read only while a node validates and the plan's domains are blocks
    blocks: dict[str, list[str]] | None = None
    # (job id, state, nodes) of jobs Slurm shows ended badly; read only while an evidence gate runs
    ended: list[tuple[str, str, list[str]]] = field(default_factory=list)

    @property
    def ours(self) -> dict[str, Reservation]:
        return {k: r for k, r in self.reservations.items() if k.startswith(ROLLOUT_RESERVATION_PREFIX)}

    def of_rollout(self, rid: str) -> dict[str, Reservation]:
        prefix = f"{ROLLOUT_RESERVATION_PREFIX}{rid}_"
        return {k: r for k, r in self.reservations.items() if k.startswith(prefix)}


def read_world(slurm: Any, now: float, validation_job: str | None = None,
               stops: dict[str, tuple[float, float | None]] | None = None, blocks: bool = False,
               ended: bool = False) -> World:
    """Three reads whatever the fleet size, and a fourth (the validation jobs) while any run.  `stops`:
    job id -> (when a deadline plan stops it, the start of the run it stops); that run frees its nodes then."""
    nodes = {n.name: n for n in slurm.nodes()}
    jobs = {j.job_id: j for j in slurm.running_jobs()}
    stop_at = {jid: max(now, stop) for jid, (stop, run_start) in (stops or {}).items()
               if jid in jobs and same_run(jobs[jid], run_start)}
    world = World(now, nodes, free_times(jobs.values(), stop_at), {r.name: r for r in slurm.reservations()},
                  jobs=jobs)
    if ended:
        world.ended = slurm.ended_jobs()
    if blocks:
        from ..slurm.domains import parse_topology

        world.blocks = parse_topology(slurm.topology()).members
    if validation_job:
        for job_id, state, comment in slurm.jobs_named(validation_job):
            node = comment.rsplit(" ", 1)[-1]
            if node not in world.validation or int(job_id) > int(world.validation[node][0]):
                world.validation[node] = (job_id, state)
    return world


def same_run(job: JobInfo, run_start: float | None) -> bool:
    """The run a plan named (a requeued job that started again is a new run, not ours to stop again)."""
    return run_start is None or job.start_time is None or abs(job.start_time - run_start) < 1.0


def validation_job_name(rid: str) -> str:
    return f"gpufleet-validate-{rid}"
