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
from typing import Any

from ..catalogs import compat, find_model
from ..catalogs.bundle import Bundle, at_least, firmware_for, unpublished, wanted
from ..common.amounts import count_of
from ..common.hostlist import fold_short
from ..judging.checks.compatibility import branch_refused
from ..policy import MaintainSettings, Policy
from ..slurm.domains import Domains
from ..slurm.ownership import ROLLOUT_RESERVATION_PREFIX
from .fleet import FleetState
from .plan import INF, Budget, Plan, PlanError, Wave
from .schedule import plan_slots, soak_of, stage_soak_s, waves_as_stages, widening
from .strategy import STRATEGIES


def _partition_caps(fleet: FleetState, pct: str) -> dict[str, int]:
    sizes: dict[str, int] = defaultdict(int)
    for node in fleet.nodes.values():
        for p in node.partitions:
            sizes[p] += 1
    share = float(pct.rstrip("%")) / 100
    return {p: max(1, math.floor(share * n)) for p, n in sizes.items()}


def all_at(current: Bundle, target: Bundle) -> bool:
    """The node already shows every part of the target."""
    have = current.parts()
    return all(have.get(k) == v for k, v in target.parts().items())


def requirement_problems(fleet: FleetState, names: list[str], target_of: Any, policy: Policy,
                         groups: dict[str, str]) -> dict[str, list[str]]:
    """Per node group, the [[requires]] rows the bundle breaks (driver branch -> minimum firmware): each
    node's driver and firmware after the rollout against the rows of that driver's branch.  One line each."""
    out: dict[str, list[str]] = defaultdict(list)
    if not policy.requires:
        return out
    broken: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    for name in names:
        after = wanted(target_of(name), fleet.nodes[name].bundle)
        if not after.driver:
            continue
        for row in policy.requires:
            if not row.applies_to(after.driver):
                continue
            for comp, minimum in row.minimum.items():
                seen = after.firmware.get(comp)
                if seen is None or any(not at_least(v, minimum) for v in seen.split(",")):
                    broken[(groups[name], comp, minimum, f"{row.where}|{after.driver}|{seen or 'unknown'}")].append(name)
    for (group, comp, minimum, key), nodes in broken.items():
        where, driver, seen = key.split("|")
        out[group].append(f"driver {driver} needs {comp} >= {minimum} ({where}); {len(nodes)} node(s) would have "
                          f"{seen}: {fold_short(nodes, 60)}")
    return out


def gate(fleet: FleetState, names: list[str], target: str | None, policy: Policy,
         today) -> tuple[dict, dict[str, str]]:
    """Per node group: can the target driver run every GPU in it and every CUDA it must keep?  (No
    driver in the bundle: each node keeps the driver it runs, which the gate does not judge again.)"""
    groups: dict[str, str] = {}
    members: dict[str, list[str]] = defaultdict(list)
    for name in names:
        node_policy = policy.for_node(name)
        group = node_policy.groups[-1] if node_policy.groups else "(defaults)"
        groups[name] = group
        members[group].append(name)
    result: dict[str, dict[str, Any]] = {}
    for group, nodes in members.items():
        problems: list[str] = []
        notes: list[str] = []
        node_policy = policy.for_node(nodes[0])
        models = sorted({fleet.nodes[n].model for n in nodes if fleet.nodes[n].model})
        drivers = sorted({fleet.nodes[n].driver or "unknown" for n in nodes})
        if target is None:
            result[group] = {"ok": True, "problems": problems, "notes": ["the driver does not change"],
                             "nodes": len(nodes), "models": models, "drivers_now": drivers}
            continue
        branch = compat.branch_info(compat.branch_of(target))
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
        result[group] = {"ok": not problems, "problems": problems, "notes": notes, "nodes": len(nodes),
                         "models": models, "drivers_now": drivers}
    return result, groups


def make_plan(fleet: FleetState, target: str | None, names: list[str], policy: Policy, *,
              strategy: str = "reservation", now: float | None = None, force: bool = False, today=None,
              deadline: float | None = None, stop_jobs: str = "earliest", kernel: str | None = None,
              firmware: dict[str, str] | None = None, domains: Domains | None = None,
              firmware_by_model: dict[str, dict[str, str]] | None = None) -> Plan:
    """`target`: the driver (None: each node keeps its own); `kernel`, `firmware`: the rest of the bundle,
    all moved in one drain per node; `firmware_by_model`: GPU model -> its firmware (over `firmware`), a
    node of a model without one left out."""
    import datetime as dt

    if strategy not in STRATEGIES:
        raise PlanError(f"unknown strategy {strategy!r} (one of {', '.join(STRATEGIES)})")
    bundle = Bundle(target, kernel, dict(firmware or {}))
    by_model = {m: dict(fw) for m, fw in (firmware_by_model or {}).items() if fw}
    _check_request(fleet, names, target, bundle, by_model)
    now = time.time() if now is None else now
    today = today or dt.date.fromtimestamp(now)
    s: MaintainSettings = policy.maintain
    gate_result, groups = gate(fleet, names, target, policy, today)
    node_models = {n: fleet.nodes[n].model or "" for n in names} if by_model else {}

    def target_of(name: str) -> Bundle:
        fw = firmware_for(node_models.get(name), by_model) or {}
        return Bundle(target, kernel, {**bundle.firmware, **fw})

    for group, problems in requirement_problems(fleet, names, target_of, policy, groups).items():
        gate_result[group]["problems"] += problems
        gate_result[group]["ok"] = not gate_result[group]["problems"]
    refused = any(not g["ok"] for g in gate_result.values())
    per_model = "|".join(f"{m}:{sorted(fw.items())}" for m, fw in sorted(by_model.items()))
    plan_id = hashlib.sha1(f"{bundle.label()}|{per_model}|{','.join(sorted(names))}|{now}".encode()).hexdigest()[:8]
    plan = Plan(id=plan_id, created=now, target_driver=target, strategy=strategy, node_count=len(names),
                budget=Budget(), gate=gate_result, forced=force and refused, refused=refused and not force,
                groups=groups, previous_drivers={n: fleet.nodes[n].driver for n in names},
                assumptions={"upgrade_minutes": s.upgrade_minutes,
                             "free_at": "running jobs' EndTime (start + time limit); no time limit = never free"},
                target_kernel=kernel, target_firmware=dict(firmware or {}),
                previous={n: fleet.nodes[n].bundle.to_dict() for n in names},
                firmware_by_model=by_model, node_models=node_models)
    not_published = sorted(set(unpublished(bundle)).union(*(unpublished(Bundle(firmware=fw)) for fw in by_model.values())))
    if not_published:
        plan.assumptions["validated_by_exit_status_only"] = not_published
    if plan.refused:
        return plan

    todo = _todo(plan, fleet, names, target_of, by_model, node_models, s.upgrade_held_nodes)

    doms = (domains or Domains()).restricted(names)
    plan.domains, plan.domains_from = doms.to_plan()
    moved = set(bundle.firmware).union(*(set(fw) for fw in by_model.values()))
    whole = bool(doms) and (s.whole_domain or bool(moved & set(s.domain_wide)))
    if whole and not s.upgrade_held_nodes:
        todo = _held_domains(plan, doms, todo, s.domain_member_held)

    budget = min(count_of(s.max_unavailable, len(names), round_up=True), max(1, len(todo)))
    caps = _partition_caps(fleet, s.max_unavailable_per_partition)
    plan.budget = Budget(max_unavailable=budget, per_partition=caps, max_failures=s.max_failures)

    if doms:
        plan.budget.whole_domain = whole
        plan.budget.max_unavailable_domains = s.max_unavailable_domains
        plan.budget.keep_free_domains = s.keep_free_domains
    _waves(plan, fleet, s, doms, todo, whole, budget, caps, now, deadline, stop_jobs)
    _gating_jobs(plan, fleet, todo)
    return plan


def _check_request(fleet: FleetState, names: list[str], target: str | None, bundle: Bundle,
                   by_model: dict[str, dict[str, str]]) -> None:
    """What a plan is asked for, refused before anything is planned: nothing to roll out, a target that is
    no version, nodes not in the fleet, firmware that names no model among several, a model's firmware for
    no node here."""
    if bundle.empty and not by_model:
        raise PlanError("nothing to roll out: give --target-driver, --target-kernel or --target-firmware")
    if target is not None:
        try:
            compat.parse_version(target)
        except ValueError:
            raise PlanError(f"target driver {target!r} is not a version number") from None
    missing = [n for n in names if n not in fleet.nodes]
    if missing:
        raise PlanError(f"{len(missing)} node(s) not in the fleet: {fold_short(missing, 80)}")
    models_here = {fleet.nodes[n].model or "unknown" for n in names}
    known = sorted(m for m in models_here if m != "unknown")
    if bundle.firmware and len(known) > 1:  # one model's VBIOS flashed on another's GPUs: never by default
        counts = ", ".join(f"{m} (x{sum(1 for n in names if fleet.nodes[n].model == m)})" for m in known)
        first = next(iter(bundle.firmware))
        raise PlanError(f"--target-firmware {first}={bundle.firmware[first]} names no GPU model, and the nodes have "
                        f"{len(known)}: {counts}; give it per model, e.g. --target-firmware \"{known[0]}:{first}=...\"")
    for model in by_model:  # a target for no node here is a typo, or the wrong fleet: never silently nothing
        if not any(firmware_for(m, {model: {}}) is not None for m in models_here):
            raise PlanError(f"--target-firmware for {model!r} matches no node's GPU model "
                            f"(here: {', '.join(sorted(models_here))})")


def _todo(plan: Plan, fleet: FleetState, names: list[str], target_of, by_model: dict[str, dict[str, str]],
          node_models: dict[str, str], upgrade_held: bool) -> list[str]:
    """The nodes the rollout takes; the others are in `plan.skipped` with why (no firmware for their model,
    already at the target, held by someone else)."""
    others = fleet.reserved_by_others(ROLLOUT_RESERVATION_PREFIX)
    todo: list[str] = []
    for name in names:
        node = fleet.nodes[name]
        mine = target_of(name)
        if by_model and firmware_for(node_models[name], by_model) is None:
            plan.skipped.append({"node": name, "why": f"no firmware target for its GPU model {node.model or 'unknown'} "
                                                      "(--target-firmware 'MODEL:COMPONENT=VERSION')"})
        elif all_at(node.bundle, mine):
            plan.skipped.append({"node": name, "why": f"already at {mine.label()}"})
        elif (node.held or name in others) and not upgrade_held:
            why = f"reservation {others[name]}" if name in others else \
                f"{node.state}+{'+'.join(node.flags)} ({node.reason or 'no reason'})"
            plan.skipped.append({"node": name, "why": f"held by someone else: {why}"})
        else:
            todo.append(name)
    return todo


def _waves(plan: Plan, fleet: FleetState, s: MaintainSettings, doms: Domains, todo: list[str], whole: bool,
           budget: int, caps: dict[str, int], now: float, deadline: float | None, stop_jobs: str) -> None:
    """The canary and the waves, by domain or by node, into `plan`; with a deadline, the jobs stopped
    so that the slots end by it."""
    less_p, less_f, crit_p = set(s.less_critical_partitions), set(s.less_critical_features), set(s.critical_partitions)
    # A deadline plan chooses the jobs that stop by rounds of `budget` nodes back from the deadline; the
    # slots are then made by the one slot function (plan_slots, as apply reserves them), which also
    # holds the canary alone, the stages apart and the gate's soak.  Where those make the last slot end
    # after the deadline, the jobs are chosen again for a deadline earlier by that much, until the slots
    # keep it: the plan shows, and apply reserves, slots that end by the deadline.
    aim, kept = deadline, deadline is None
    for _ in range(DEADLINE_PASSES):
        free_at = fleet.free_at()
        if deadline is not None and aim is not None:
            from .deadline import DeadlineError, plan_deadline

            try:
                dp = plan_deadline(fleet.jobs, todo, now=now, deadline=aim, budget=budget,
                                   upgrade_s=s.upgrade_minutes * 60, stop=stop_jobs)
            except DeadlineError:
                if aim == deadline:
                    raise
                break  # refused below, with the admin's deadline
            free_at = fleet.free_at(dp.stop_at)  # a job the plan stops frees its nodes then
            plan.deadline = dp.to_dict()

        def rank(name: str, free_at: dict[str, float] = free_at) -> tuple:
            node = fleet.nodes[name]
            parts = set(node.partitions)
            tier = 0 if (parts & less_p or set(node.features) & less_f) else (2 if parts & crit_p else 1)
            return (tier, free_at.get(name, now), name)

        if doms and (whole or s.max_unavailable_domains or s.keep_free_domains):
            _domain_waves(plan, fleet, s, doms, todo, rank, free_at, now, budget, whole)
        else:
            _node_waves(plan, fleet, s, todo, rank, free_at, now, budget, caps)
        if deadline is None or aim is None:
            break
        over = _slots_end(plan, now) - deadline
        if over <= 0:
            _deadline_slots(plan, deadline)
            kept = True
            break
        aim -= over
    if not kept:
        from .deadline import DeadlineError, iso_minute

        over = _slots_end(plan, now) - deadline
        late = f"{over:.0f} s" if over < 120 else f"{over / 60:.0f} min"
        raise DeadlineError(f"the plan's slots (a canary alone, stages one after another, a soak between them) end "
                            f"{late} after the deadline {iso_minute(deadline)}, even with more jobs "
                            "stopped: a later deadline, a larger budget or fewer waves")


def _gating_jobs(plan: Plan, fleet: FleetState, todo: list[str]) -> None:
    """The jobs that decide when the last nodes can go: the latest-ending jobs on rollout nodes (a job a
    deadline plan stops ends when it is stopped)."""
    in_rollout = set(todo)
    stop_at = {str(j["job_id"]): j["at"] for j in (plan.deadline or {}).get("jobs", []) if j["action"] != "wait"}

    def ends(j: Any) -> float:
        return min(j.end_time if j.end_time is not None else INF, stop_at.get(str(j.job_id), INF))

    latest = sorted((j for j in fleet.jobs if in_rollout.intersection(j.nodes)), key=lambda j: -ends(j))[:5]
    plan.gating_jobs = [{"job_id": j.job_id, "nodes": sorted(in_rollout.intersection(j.nodes))[:8],
                         "end": None if ends(j) == INF else ends(j),
                         **({"stopped": True} if str(j.job_id) in stop_at else {})} for j in latest]


HELD = "held by someone else: "
DEADLINE_PASSES = 6  # choices of jobs to stop before a deadline the plan's stages cannot keep is refused


def _slots_end(plan: Plan, now: float) -> float:
    """When the plan's last slot ends."""
    return max((end for _, end in plan.slots.values()), default=now)


def _deadline_slots(plan: Plan, deadline: float) -> None:
    """The deadline plan as the slots show it: the admin's deadline, and each job's slot the one its
    nodes were given (the earliest of them), not the round it was chosen by."""
    plan.deadline["at"] = deadline
    for job in plan.deadline["jobs"]:
        slots = [plan.slots[n][0] for n in job["nodes"] if n in plan.slots]
        if slots:
            job["slot"] = min(slots)


def _held_domains(plan: Plan, doms: Domains, todo: list[str], rule: str) -> list[str]:
    """Whole domains with a member someone else holds (an admin's drain, another reservation): left out
    whole ("skip"), or planned whole with that member, to go once it is released ("wait").  Each domain's
    state and why go into the plan (`domain_states`); the nodes `todo` keeps are returned."""
    held = {s["node"]: s["why"][len(HELD):] for s in plan.skipped if s["why"].startswith(HELD)}
    left_out: set[str] = set()
    for d, members in sorted(doms.members.items()):
        mine = [n for n in members if n in held]
        if not mine:
            plan.domain_states[d] = {"state": "planned", "why": "every member goes in one slot"}
            continue
        names = f"member {fold_short(mine, 40)} held by someone else ({held[mine[0]]})"
        if rule == "skip":
            why = f"{names}: skipped whole, or the domain would run two drivers (domain_member_held = skip)"
            plan.domain_states[d] = {"state": "skipped", "why": why}
            left_out.update(members)
            plan.skipped += [{"node": n, "why": f"domain {d} skipped whole: member {fold_short(mine, 40)} held"}
                             for n in members if n in todo]
        else:
            why = f"{names}: the domain waits and goes whole once it is released (domain_member_held = wait)"
            plan.domain_states[d] = {"state": "waits", "why": why}
            plan.skipped = [s for s in plan.skipped if s["node"] not in mine]
            todo = todo + mine
    return [n for n in todo if n not in left_out]


def _canary(ordered: list[str], fleet: FleetState, per: int) -> list[str]:
    """The first `per` nodes of each (GPU model, firmware set) combination, in rank order."""
    chosen: list[str] = []
    seen: dict[tuple, int] = defaultdict(int)
    for name in ordered:
        node = fleet.nodes[name]
        combo = (node.model, node.firmware)
        if seen[combo] < per:
            seen[combo] += 1
            chosen.append(name)
    return chosen


def _node_waves(plan: Plan, fleet: FleetState, settings: MaintainSettings, todo: list[str], rank, free_at: dict[str, float], now: float,
                budget: int, caps: dict[str, int]) -> None:
    ordered = sorted(todo, key=rank)
    canary: list[str] = []
    if settings.canary_per_combo:
        canary = _canary(ordered, fleet, settings.canary_per_combo)
    chosen = set(canary)
    rest = deque(n for n in ordered if n not in chosen)

    waves_nodes: list[tuple[str, list[str]]] = []
    pending = deque(canary)
    while pending:  # more combos than the budget allows at once: several canary waves
        waves_nodes.append(("canary", _fill(pending, budget, caps, fleet)))
    specs = list(settings.waves)
    i = 0
    while rest:
        spec = specs[min(i, len(specs) - 1)]
        size = min(count_of(spec, len(todo), round_up=True), budget)
        waves_nodes.append(("wave", _fill(rest, size, caps, fleet)))
        i += 1

    _record(plan, fleet, waves_nodes, free_at, now, settings)


def _record(plan: Plan, fleet: FleetState, waves_nodes: list[tuple[str, list[str]]], free_at: dict[str, float],
            now: float, settings: MaintainSettings) -> None:
    """The waves, each node's slot (schedule.plan_slots: the function `apply` schedules with) and the job
    that decides it, into the plan."""
    plan.waves = [Wave(index, kind, members, now, now, now) for index, (kind, members) in enumerate(waves_nodes)]
    step = settings.upgrade_minutes * 60
    slots, quantum = plan_slots(plan, free_at, now, step, soak_of(settings))
    plan.assumptions["slot_grid_minutes"] = round(quantum / 60)
    if settings.gate == "evidence":
        # before each stage after the canary's: the canary grows by the stages before it, its soak shrinks
        canary, stages = waves_as_stages(plan.waves)
        soaked = widening(canary, stages)
        before, soaks = len(canary), []
        for k, members in enumerate(stages):
            if members:
                b = k + 1 if canary else k
                soaks.append(round(stage_soak_s(settings, before)) if before and b in soaked else None)
                before += len(members)
        plan.assumptions["gate_stage_soak_s"] = soaks
        plan.assumptions["gate_soak_s"] = next((s for s in soaks if s), settings.gate_min_soak_s)
        from .evidence import Gate

        test = Gate(signals=tuple(settings.gate_signals), worse_ratio=settings.gate_worse_ratio,
                    confidence=settings.gate_confidence, margin=settings.gate_margin)
        not_worse, worse = test.boundaries()
        # the sequential test's two lines per signal, and the bound on each soak (gate.step)
        plan.assumptions["gate_boundaries"] = {
            "halt_llr": round(worse, 3), "not_worse_llr": round(not_worse, 3),
            "worse_ratio": settings.gate_worse_ratio, "not_worse_ratio": test.null_ratio,
            "confidence": settings.gate_confidence, "min_soak_s": settings.gate_min_soak_s,
            "max_soak_s": settings.gate_max_soak_s}
    plan.slots = {n: [t, t + step] for n, t in slots.items()}
    # the job that decides each slot, and when it ends: by its limit, or when a deadline plan stops it
    stop_at = {str(j["job_id"]): j["at"] for j in (plan.deadline or {}).get("jobs", []) if j["action"] != "wait"}
    deciding: dict[str, Any] = {}
    for job in fleet.jobs:
        end = job.end_time if job.end_time is not None else INF
        end = min(end, stop_at.get(str(job.job_id), INF))
        for n in job.nodes:
            if n in slots and (n not in deciding or end > deciding[n][1]):
                deciding[n] = (job.job_id, end)
    plan.decided_by = {n: {"job_id": j, "end": None if end == INF else end,
                           **({"stopped": True} if str(j) in stop_at else {})} for n, (j, end) in deciding.items()}
    for wave in plan.waves:
        members = wave.nodes
        wave.start = wave.reserve_at = min((slots[n] for n in members), default=now)
        wave.end = max((INF if free_at.get(n) == INF else slots[n] + step for n in members), default=now)
        parts: dict[str, int] = defaultdict(int)
        for n in members:
            for p in fleet.nodes[n].partitions:
                parts[p] += 1
        wave.partitions = dict(parts)


def _domain_waves(plan: Plan, fleet: FleetState, settings: MaintainSettings, doms: Domains, todo: list[str],
                  rank, free_at: dict[str, float], now: float, budget: int, whole: bool) -> None:
    """Waves and slots over failure domains.  Each domain's waiting nodes share a slot, placed when its last
    node is free, so that its early-free nodes keep running jobs (backfill) until then, and slots never
    hold more domains at once than the domain budget (`max_unavailable_domains`, and all but
    `keep_free_domains`).  whole_domain: the canary is a whole domain (one per GPU model and firmware
    combination) and waves are whole domains up to their size in nodes (one at least); else the canary
    nodes go alone first."""
    left = set(todo)
    canary = _canary(sorted(todo, key=rank), fleet, settings.canary_per_combo) if settings.canary_per_combo else []
    alone = set() if whole else set(canary)
    units: list[list[str]] = [[n for n in nodes if n in left and n not in alone] for nodes in doms.members.values()]
    units = [u for u in units if u] + [[n] for n in todo if n not in doms.of or n in alone]
    units.sort(key=lambda u: max(rank(n) for n in u))
    first = {n: i for i, u in enumerate(units) for n in u}
    canary_units = list(dict.fromkeys(first[n] for n in canary))
    rest = deque(i for i in range(len(units)) if i not in set(canary_units))
    waves_units: list[tuple[str, list[int]]] = [("canary", canary_units)] if canary_units else []
    specs = list(settings.waves)
    k = 0
    while rest:
        size = min(count_of(specs[min(k, len(specs) - 1)], len(todo), round_up=True), max(budget, 1))
        taken: list[int] = [rest.popleft()]
        while rest and sum(len(units[i]) for i in taken) + len(units[rest[0]]) <= size:
            taken.append(rest.popleft())
        waves_units.append(("wave", taken))
        k += 1
    limits = [len(doms.members) - settings.keep_free_domains]
    if settings.max_unavailable_domains:
        limits.append(settings.max_unavailable_domains)
    if whole:  # as many whole domains as the node budget holds (a larger one goes alone)
        limits.append(max(1, budget // max(len(u) for u in units)))
    width = min(limits)
    if width < 1:
        raise PlanError(f"keep_free_domains {settings.keep_free_domains} leaves none of the "
                        f"{len(doms.members)} domain(s) free to upgrade")
    # what the window applies: domains at once, and no partition cap (a domain goes whole or not at all)
    plan.budget.domains_at_once, plan.budget.per_partition = width, {}
    waves_nodes = [(kind, [n for i in members for n in units[i]]) for kind, members in waves_units]
    _record(plan, fleet, waves_nodes, free_at, now, settings)


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
