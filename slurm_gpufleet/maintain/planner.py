"""Plan a staged driver rollout: compatibility gate, canary, growing waves within the budget, placed
between jobs.  Pure: a fleet, a target, a policy and a clock in; a Plan out.  The same code plans live
rollouts (`maintain plan`) and simulated ones (`maintain simulate`).

Cost: one pass over the running jobs (when each node frees up), one sort of the nodes, and a greedy fill
of the waves: O(J + N log N).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import defaultdict, deque
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import compat
from ..catalog import find_model
from ..checks.compatibility import branch_refused
from ..policy import MaintainSettings, Policy
from .fleet import FleetState

STRATEGIES = ("reservation", "reboot-asap")
RESERVATION_PREFIX = "gpufleet_"
INF = float("inf")


class PlanError(ValueError):
    """The request cannot be planned (unknown nodes, bad target); one line."""


@dataclass
class Wave:
    index: int
    kind: str                    # "canary" or "wave"
    nodes: list[str]
    reserve_at: float            # when the wave's nodes are reserved / asked to reboot (epoch s; inf: never free)
    start: float                 # estimated start of the upgrade
    end: float                   # estimated end (upgrade + return + validation)
    partitions: dict[str, int] = field(default_factory=dict)


@dataclass
class Plan:
    id: str
    created: float
    target_driver: str
    strategy: str
    node_count: int
    budget: dict[str, Any]
    gate: dict[str, dict[str, Any]]
    forced: bool
    refused: bool
    waves: list[Wave] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    gating_jobs: list[dict[str, Any]] = field(default_factory=list)
    previous_drivers: dict[str, str | None] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)
    assumptions: dict[str, Any] = field(default_factory=dict)
    deadline: dict[str, Any] | None = None   # maintain/deadline.py: the jobs at risk and what is done to each

    @property
    def makespan_s(self) -> float:
        return (self.waves[-1].end - self.created) if self.waves else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for w in data["waves"]:
            for k in ("reserve_at", "start", "end"):
                if w[k] == INF:
                    w[k] = None
        return {"plan_version": 1, **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        if data.get("plan_version") != 1:
            raise PlanError("not a slurm-gpufleet plan (plan_version 1)")
        data = {k: v for k, v in data.items() if k != "plan_version"}
        waves = [Wave(**{**w, **{k: (INF if w[k] is None else w[k]) for k in ("reserve_at", "start", "end")}})
                 for w in data.pop("waves")]
        return cls(**data, waves=waves)


def _amount(spec: int | str, total: int) -> int:
    if isinstance(spec, int):
        return spec
    return max(1, math.ceil(float(spec.rstrip("%")) * total / 100))


def _partition_caps(fleet: FleetState, pct: str) -> dict[str, int]:
    sizes: dict[str, int] = defaultdict(int)
    for node in fleet.nodes.values():
        for p in node.partitions:
            sizes[p] += 1
    share = float(pct.rstrip("%")) / 100
    return {p: max(1, math.floor(share * n)) for p, n in sizes.items()}


def gate(fleet: FleetState, names: list[str], target: str, policy: Policy, today) -> tuple[dict, dict[str, str]]:
    """Per node group: can the target driver run every GPU in it and every CUDA it must keep?"""
    groups: dict[str, str] = {}
    members: dict[str, list[str]] = defaultdict(list)
    for name in names:
        node_policy = policy.for_node(name)
        group = node_policy.groups[-1] if node_policy.groups else "(defaults)"
        groups[name] = group
        members[group].append(name)
    branch = compat.branch_info(compat.branch_of(target))
    result: dict[str, dict[str, Any]] = {}
    for group, nodes in members.items():
        problems: list[str] = []
        notes: list[str] = []
        node_policy = policy.for_node(nodes[0])
        models = sorted({fleet.nodes[n].model for n in nodes if fleet.nodes[n].model})
        archs: dict[str, str] = {}
        for model in models:
            m = find_model(model, policy.models)
            if m is None or not m.architecture:
                notes.append(f"architecture of {model} unknown: add it to [models] to gate it")
            else:
                archs[m.architecture] = model
        for arch, model in sorted(archs.items()):
            res = compat.evaluate(target, arch=arch, today=today)
            problems += [f"{model}: {p}" for p in res.problems]
        if node_policy.min_cuda:
            top = compat.max_cuda_for_driver(target)
            if top is None or compat.parse_version(top) < compat.parse_version(node_policy.min_cuda):
                problems.append(f"the group needs CUDA {node_policy.min_cuda}; {target} supports up to {top}")
        for need in node_policy.require_cuda:
            res = compat.evaluate(target, cuda=need, today=today)
            if not res.compatible:
                problems += res.problems
        refused = branch_refused(branch, node_policy.allowed_branch_types)
        if refused:
            problems.append(refused)
        exposed = compat.cves_for(target)
        if exposed:
            safe = compat.safe_version(target)
            problems.append(f"{target} is itself exposed to {len(exposed)} CVE(s) ("
                            + (f"fixed from {safe})" if safe else f"no fix on R{branch.branch})"))
        if branch.ended(today):
            problems.append(f"R{branch.branch} ({branch.type}) is past end of life ({branch.eol})")
        elif branch.type is None:
            notes.append(f"R{branch.branch} is not in the branch table (type and end of life unknown)")
        drivers = sorted({fleet.nodes[n].driver or "unknown" for n in nodes})
        result[group] = {"ok": not problems, "problems": problems, "notes": notes, "nodes": len(nodes),
                         "models": models, "drivers_now": drivers}
    return result, groups


def make_plan(fleet: FleetState, target: str, names: list[str], policy: Policy, *, strategy: str = "reservation",
              now: float | None = None, force: bool = False, today=None, deadline: float | None = None,
              stop_jobs: str = "earliest") -> Plan:
    import datetime as dt

    if strategy not in STRATEGIES:
        raise PlanError(f"unknown strategy {strategy!r} (one of {', '.join(STRATEGIES)})")
    try:
        compat.parse_version(target)
    except ValueError:
        raise PlanError(f"target driver {target!r} is not a version number") from None
    missing = [n for n in names if n not in fleet.nodes]
    if missing:
        raise PlanError(f"{len(missing)} node(s) not in the fleet: {', '.join(missing[:5])}")
    now = time.time() if now is None else now
    today = today or dt.date.fromtimestamp(now)
    s: MaintainSettings = policy.maintain
    gate_result, groups = gate(fleet, names, target, policy, today)
    refused = any(not g["ok"] for g in gate_result.values())
    plan_id = hashlib.sha1(f"{target}|{','.join(sorted(names))}|{now}".encode()).hexdigest()[:8]
    plan = Plan(id=plan_id, created=now, target_driver=target, strategy=strategy, node_count=len(names),
                budget={}, gate=gate_result, forced=force and refused, refused=refused and not force,
                groups=groups, previous_drivers={n: fleet.nodes[n].driver for n in names},
                assumptions={"upgrade_minutes": s.upgrade_minutes,
                             "free_at": "running jobs' EndTime (start + time limit); no time limit = never free"})
    if plan.refused:
        return plan

    others = fleet.reserved_by_others(RESERVATION_PREFIX)
    todo: list[str] = []
    for name in names:
        node = fleet.nodes[name]
        if node.driver == target:
            plan.skipped.append({"node": name, "why": f"already at {target}"})
        elif (node.held or name in others) and not s.upgrade_held_nodes:
            why = f"reservation {others[name]}" if name in others else \
                f"{node.state}+{'+'.join(node.flags)} ({node.reason or 'no reason'})"
            plan.skipped.append({"node": name, "why": f"held by someone else: {why}"})
        else:
            todo.append(name)

    budget = min(_amount(s.max_unavailable, len(names)), max(1, len(todo)))
    caps = _partition_caps(fleet, s.max_unavailable_per_partition)
    plan.budget = {"max_unavailable": budget, "per_partition": caps, "max_failures": s.max_failures}

    free_at = fleet.free_at()
    if deadline is not None:
        from .deadline import plan_deadline

        dp = plan_deadline(fleet.jobs, todo, now=now, deadline=deadline, budget=budget,
                           upgrade_s=s.upgrade_minutes * 60, stop=stop_jobs)
        plan.deadline = dp.to_dict()
        free_at = fleet.free_at(dp.stop_at)  # a job the plan stops frees its nodes then
    less_p, less_f, crit_p = set(s.less_critical_partitions), set(s.less_critical_features), set(s.critical_partitions)

    def rank(name: str) -> tuple:
        node = fleet.nodes[name]
        parts = set(node.partitions)
        tier = 0 if (parts & less_p or set(node.features) & less_f) else (2 if parts & crit_p else 1)
        return (tier, free_at.get(name, now), name)

    ordered = sorted(todo, key=rank)
    canary: list[str] = []
    if s.canary_per_combo:
        per_combo: dict[tuple, int] = defaultdict(int)
        for name in ordered:
            node = fleet.nodes[name]
            combo = (node.model, node.firmware)
            if per_combo[combo] < s.canary_per_combo:
                per_combo[combo] += 1
                canary.append(name)
    chosen = set(canary)
    rest = deque(n for n in ordered if n not in chosen)

    waves_nodes: list[tuple[str, list[str]]] = []
    pending = deque(canary)
    while pending:  # more combos than the budget allows at once: several canary waves
        waves_nodes.append(("canary", _fill(pending, budget, caps, fleet)))
    specs = list(s.waves)
    i = 0
    while rest:
        spec = specs[min(i, len(specs) - 1)]
        size = min(_amount(spec, len(todo)), budget)
        waves_nodes.append(("wave", _fill(rest, size, caps, fleet)))
        i += 1

    prev_end = now
    step = s.upgrade_minutes * 60
    for index, (kind, members) in enumerate(waves_nodes):
        empty_at = max((free_at.get(n, now) for n in members), default=now)
        reserve_at = max(now, empty_at) if strategy == "reservation" else max(now, prev_end)
        start = max(prev_end, max(now, empty_at))
        end = start + step if start != INF else INF
        parts: dict[str, int] = defaultdict(int)
        for n in members:
            for p in fleet.nodes[n].partitions:
                parts[p] += 1
        plan.waves.append(Wave(index, kind, members, reserve_at, start, end, dict(parts)))
        prev_end = end

    # the jobs that decide when the last nodes can go: the latest-ending jobs on rollout nodes
    in_rollout = set(todo)
    latest = sorted((j for j in fleet.jobs if in_rollout.intersection(j.nodes)),
                    key=lambda j: -(j.end_time if j.end_time is not None else INF))[:5]
    plan.gating_jobs = [{"job_id": j.job_id, "nodes": sorted(in_rollout.intersection(j.nodes))[:8],
                         "end": j.end_time} for j in latest]
    return plan


def _fill(queue: deque, size: int, caps: dict[str, int], fleet: FleetState) -> list[str]:
    """Take up to `size` nodes in order, skipping (for later) any that would exceed a partition's cap."""
    taken: list[str] = []
    used: dict[str, int] = defaultdict(int)
    deferred: list[str] = []
    while queue and len(taken) < size:
        name = queue.popleft()
        parts = fleet.nodes[name].partitions
        if all(used[p] < caps.get(p, size) for p in parts):
            taken.append(name)
            for p in parts:
                used[p] += 1
        else:
            deferred.append(name)
        if deferred and len(deferred) > 4 * size + 64 and taken:
            break  # every remaining node is in a full partition: next wave
    queue.extendleft(reversed(deferred))
    if not taken and queue:  # caps smaller than one node per partition: never stall
        taken.append(queue.popleft())
    return taken
