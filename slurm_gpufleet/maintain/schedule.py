"""The one schedule of a rollout: when each node is taken (its slot), and which waiting nodes the rolling
window admits now.  `maintain plan` shows the slots this module computes; `apply` makes its maintenance
reservations from the same numbers (the plan carries them) and admits nodes by the same window.

How nodes are taken, a rolling window instead of batches:
* every node gets a maintenance slot when the rollout is planned: the time its running jobs end by their
  limits, spread so that no more than the budget would be out at once.  The slots are MAINT reservations
  (grouped by start time), so new long jobs cannot land on nodes still waiting; backfill fills the gaps;
* a node is taken as soon as it sits empty and the window has room, so a slot moves earlier when jobs end
  before their limits; a node taken is drained (nothing runs there, nothing is killed) and upgraded;
* the waves of the plan are evidence gates: the canary must validate before anything else starts, and the
  window widens to the next wave's size only once as many nodes as all earlier waves hold have validated;
* failed nodes stay drained and count against the budget and `max_failures`; a budget filled by failures
  halts the rollout, never ends it as done.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from ..common.hostlist import fold
from ..slurm.ownership import ROLLOUT_RESERVATION_PREFIX
from . import states as S

INF = float("inf")
PUSH_LOOKAHEAD_S = 300.0  # a slot about to begin is looked at this far ahead (postpone_slots)
# Slots are whole minutes; a fleet whose slots would need more than MAX_RESERVATIONS reservations (one
# per distinct start: thousands of job end times on 12,500 nodes) is scheduled on a coarser grid, the
# first of QUANTA_S that fits, so that slurmctld's scheduler and the write budget see a few dozen.
MAX_RESERVATIONS = 100
QUANTA_S = (60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0)


def widening(canary: list[str], stages: list[list[str]]) -> set[int]:
    """The boundaries the evidence gate soaks before (counted as `boundary` counts them: 0 is the canary's
    stage, or without a canary the first wave's): the first after it, each whose wave is larger than the
    one before, and each by which the nodes upgraded have doubled since the last soak.  Between those,
    waves the budget cut to one size follow one another as the rolling window does, without a soak (the
    sequential test still halts at any step): a soak before every such wave made a 60-node rollout of a
    good driver take 1.9x as long, while doubling keeps a soak wherever the evidence can have changed
    much (bench/gate_trials.py)."""
    sizes = ([len(canary)] if canary else []) + [len(s) for s in stages]
    out: set[int] = set()
    upgraded = soaked_at = 0  # nodes in the stages before the boundary; and before the last soak
    for b in range(1, len(sizes)):
        upgraded += sizes[b - 1]
        if b == 1 or sizes[b] > sizes[b - 1] or upgraded >= 2 * soaked_at:
            out.add(b)
            soaked_at = upgraded
    return out


def slot_times(free_at: dict[str, float], canary: list[str], stages: list[list[str]], now: float, width: int,
               upgrade_s: float, soak_s: float | Callable[[int], float] = 0.0, order: dict[str, int] | None = None,
               unit_of: dict[str, str] | None = None, quantum_s: float = 60.0,
               soaked: set[int] | None = None, held_until: Iterable[float] = ()) -> dict[str, float]:
    """Each node's slot, on a grid of `quantum_s` (whole minutes by default; every time, the upgrade
    and the soak included, is rounded up to it, so the budget holds exactly), as the engine's window
    (`admit`) takes it: the canary first,
    then each stage of the plan's waves once every node before it is done (and the evidence gate's soak
    `soak_s` has passed: a number, or a function of how many nodes the stages before hold), at most `width` at once, its members soonest free first, then in the plan's
    `order`.  A node whose job has no time limit gets its slot when its turn comes (it empties when that
    job ends).  `unit_of`: node -> its failure domain, for domains that go as one (the unit's slot is its
    last member's free time; `width` then counts units).  `soaked`: the boundaries the soak comes before
    (`widening`; None: every stage but the first).  `held_until`: when each node the rollout holds now
    (under way, or out for another reason) is expected back: the budget's places they fill are free
    only from then (a plan made again mid-rollout)."""
    order = order or {}
    unit_of = unit_of or {}

    def _minute(t: float) -> float:
        return math.ceil(t / quantum_s - 1e-9) * quantum_s

    now = _minute(now)
    upgrade_s = _minute(upgrade_s)
    soak = soak_s if callable(soak_s) else (lambda _before, s=soak_s: s)

    def free(n: str) -> float:
        f = free_at.get(n, now)
        return now if f == INF else _minute(max(f, now))

    def units(members: list[str]) -> list[list[str]]:
        grouped: dict[str, list[str]] = {}
        for n in members:
            grouped.setdefault(unit_of.get(n, "node:" + n), []).append(n)
        return list(grouped.values())

    slots: dict[str, float] = {}
    gate = now
    held_places = sorted(_minute(max(t, now)) for t in held_until)
    for k, members in enumerate([canary, *stages]):
        if not members:
            continue
        b = k if canary else k - 1  # the boundary, as the gate counts it
        if slots and (soaked is None or b in soaked):  # the evidence gate's soak before a widening stage
            gate += _minute(soak(len(slots)))
        batch = sorted(units(members), key=lambda u: (max(free(n) for n in u), min(order.get(n, 0) for n in u)))
        places = [gate] * (len(batch) if k == 0 else max(1, min(width, len(batch))))
        if held_places and k > 0:  # the first stage placed shares the budget with what is held now
            places = sorted([max(gate, t) for t in held_places[:width]]
                            + [gate] * max(0, width - len(held_places)))[:len(places)]
            heapq.heapify(places)
            held_places = []
        end = gate
        for unit in batch:
            start = max(heapq.heappop(places), max(free(n) for n in unit))
            heapq.heappush(places, start + upgrade_s)
            for n in unit:
                slots[n] = start
            end = max(end, start + upgrade_s)
        gate = end
    return slots


def waves_as_stages(waves: list[Any]) -> tuple[list[str], list[list[str]]]:
    """A plan's waves as the engine's gate stages: the canary (the first wave, when it is one), and the
    node lists of the waves after it, in order."""
    if waves and waves[0].kind == "canary":
        return list(waves[0].nodes), [list(w.nodes) for w in waves[1:]]
    return [], [list(w.nodes) for w in waves]


def unit_of(plan: Any) -> dict[str, str]:
    """node -> the unit its slot is shared with: its domain when the plan schedules domains (whole, or
    under a domain budget; canary nodes go alone unless whole)."""
    b = plan.budget
    if not plan.domains or not b.by_domain:
        return {}
    alone = set() if b.whole_domain else set(waves_as_stages(plan.waves)[0])
    return {n: d for d, nodes in plan.domains.items() for n in nodes if n not in alone}


def plan_slots(plan: Any, free_at: dict[str, float], now: float, upgrade_s: float,
               soak_s: float | Callable[[int], float],
               names: set[str] | None = None, held_until: Iterable[float] = ()) -> tuple[dict[str, float], float]:
    """The slots of a plan's nodes (of `names`, when given) from `now`, and the grid they are on: what
    `maintain plan` shows and `apply` reserves, and how a plan applied after its slots began is scheduled
    again (with its stages, its domains and its budget)."""
    canary, stages = waves_as_stages(plan.waves)
    soaked = widening(canary, stages)
    if names is not None:
        canary = [n for n in canary if n in names]
        stages = [[n for n in st if n in names] for st in stages]
        if not canary and waves_as_stages(plan.waves)[0]:
            # the canary is left out: slot_times counts the stages as if there were none, one lower
            soaked = {b - 1 for b in soaked}
    order: dict[str, int] = {}
    for n in (*canary, *(n for st in stages for n in st)):
        order.setdefault(n, len(order))
    units = unit_of(plan)
    width = (plan.budget.domains_at_once or 1) if units else plan.budget.max_unavailable
    slots: dict[str, float] = {}
    for quantum in QUANTA_S:
        slots = slot_times(free_at, canary, stages, now, width, upgrade_s, soak_s, order, units, quantum, soaked,
                           held_until)
        if len(set(slots.values())) <= MAX_RESERVATIONS:
            break
    return slots, quantum


def stage_soak_s(settings: Any, canary_nodes: int) -> float:
    """How long the evidence gate holds the next stage once `canary_nodes` are upgraded and in service (0
    without a gate): the time in which they expect the events the test needs (evidence.exposure_s), at
    least `gate_min_soak_s`, at most `gate_max_soak_s`.  A big canary soaks little, a small one long; a
    verdict ("not worse") before it lets the stage go from `gate_min_soak_s` on.  The plan's slots and
    the engine's gate both read this."""
    if settings.gate != "evidence":
        return 0.0
    from .evidence import exposure_s

    need = exposure_s(tuple(settings.gate_signals), settings.gate_worse_ratio, settings.gate_confidence,
                      canary_nodes)
    if need is None:
        return float(settings.gate_max_soak_s)
    return float(min(settings.gate_max_soak_s, max(settings.gate_min_soak_s, need)))


def soak_of(settings: Any, done: int = 0) -> Callable[[int], float]:
    """The soak before a stage, given how many nodes the stages before it hold (`done` more already
    upgraded): what `slot_times` adds."""
    return lambda before: stage_soak_s(settings, done + before)


def slot_reservations(slots: dict[str, float], already: set[str], rid: str, prefix: str,
                      existing: Iterable[str], remade: bool = False) -> dict[str, tuple[list[str], float, int]]:
    """The MAINT reservations still to create for waiting nodes: one per distinct slot, each lasting until a
    day after the last slot (a node taken early leaves its reservation; the last one is deleted at the end).
    `remade`: for nodes whose begun slot is given up this step: a slot whose name is taken (another
    reservation of this rollout begins then) is made under a name of its own, never skipped (a node out
    of every reservation of ours can take a long job, and a deadline plan stops no job on it)."""
    by_slot: dict[float, list[str]] = defaultdict(list)
    for node, slot in slots.items():
        by_slot[slot].append(node)
    if not by_slot:
        return {}
    last = max(by_slot)
    existing = set(existing)
    out = {}
    for slot, nodes in by_slot.items():
        name = f"{prefix}{rid}_s{int(slot)}"
        k = 0
        while remade and name in existing:
            k += 1
            name = f"{prefix}{rid}_s{int(slot)}_{k}"
        if name not in existing:
            missing = [n for n in nodes if n not in already]
            if missing:
                out[name] = (missing, slot, int(((last - slot) / 3600 + 24) * 60))
    return out


def admit(view: Any, take: Callable[[str], bool], skip: Callable[[str, str], None] | None = None) -> None:
    """The rolling window: offer waiting nodes to `take` (the pending unit) while the current stage and the
    budget have room; `take` says whether it took the node; `skip` leaves a node out, with why (a whole
    domain with a member someone else holds).  `view`: the step's units.StepView."""
    budget = view.plan.budget
    counts: dict[str, int] = defaultdict(int)
    for st in view.state.values():
        counts[st] += 1
    failed = counts[S.FAILED]
    if failed > max_failures(view.plan, view.s) or failed >= budget.max_unavailable:
        return  # the rollout halts at the end of this step
    # out of service as Slurm shows it (held): every node this rollout holds, and every node of the
    # rollout out for another reason (down, drained by the health check or an admin).  A node drained by
    # someone else costs the budget nothing to take; one idle in a begun slot is charged here like any
    # other (taken first), and what the budget has no room for leaves its slot this step (postpone_slots)
    ours, others = held(view)
    firm = firmly_out(view, ours, others)
    already_out = others
    out = len(firm)
    room = budget.max_unavailable - out
    canary = set(view.canary)
    if any(view.state.get(n) not in S.FINAL for n in canary):
        pool = [n for n in view.canary if view.state.get(n) == S.PENDING]
        width = len(canary)
        started = sum(1 for n in canary if view.state.get(n) != S.PENDING)
    else:
        stage = _stage(view)
        if stage + (1 if canary else 0) > view.gate_allowed:
            return  # the evidence gate holds this stage (maintain/gate.py)
        # only the stage's own members: the plan's waves are the nodes taken at each stage, so its
        # slots are the times the window takes them (an empty node of a later wave waits its turn)
        members = [n for n in view.stage_nodes[stage] if n in view.state] if view.stage_nodes else []
        width = len(members)
        started = sum(1 for n in members if view.state[n] != S.PENDING)
        pool = [n for n in members if view.state[n] == S.PENDING]
    # the stage bounds our work under way; the budget bounds what Slurm shows out of service (a node
    # already idle in its slot is out either way, so taking it costs the budget nothing)
    under_way = sum(counts[s] for s in S.IN_FLIGHT)
    stage_room = min(width - under_way, width - started)
    if stage_room <= 0 or not pool:
        return
    per_part = budget.per_partition
    part_out: dict[str, int] = defaultdict(int)
    for n in firm:  # as the budget counts: a waiting node idle in its begun slot costs nothing until taken
        if n in view.world.nodes:
            for p in view.world.nodes[n].partitions:
                part_out[p] += 1
    order = view.order
    takes_busy = view.strategy.takes_busy
    if view.plan.domains and budget.by_domain:
        _admit_domains(view, take, skip, pool, already_out, room, stage_room, under_way, len(ours))
        return  # (domains without rules of their own: nodes are taken as without domains)

    # empty nodes first (they cost nothing to take), then the soonest free, then the plan's order
    # (less critical partitions first)
    def key(n: str) -> tuple:
        return (n not in already_out, 0 if takes_busy or not view.busy(n) else 1, view.world.free_at.get(n, 0.0),
                order.get(n, 0))

    for n in sorted(pool, key=key):
        if stage_room <= 0:
            break
        if not takes_busy and view.busy(n):
            continue  # it is taken when it empties, at its slot at the latest
        if room <= 0 and n not in already_out:
            continue
        info = view.world.nodes.get(n)
        parts = info.partitions if info is not None and n not in already_out else []  # out already: no cost
        if any(p in per_part and part_out[p] >= per_part[p] for p in parts):
            continue
        if take(n):
            stage_room -= 1
            if n not in already_out:
                room -= 1
            for p in parts:
                part_out[p] += 1


def admit_back(view: Any, take: Callable[[str], bool]) -> None:
    """The rollback's window: nodes upgraded and in service (back_pending) go back to their previous
    bundle while the budget has room, as the rollout's window took them (the nodes held and those out
    for other reasons count), the latest upgraded first."""
    ours, others = held(view)
    room = view.plan.budget.max_unavailable - len(ours | others)
    waiting = [n for n, st in view.state.items() if st == S.BACK_PENDING]
    # whole domains go back whole (never a domain on two drivers in service): alone when wider than the room
    groups: dict[str, list[str]] = defaultdict(list)
    for n in waiting:
        groups[view.domain_of.get(n, f"node:{n}") if view.whole_domain else f"node:{n}"].append(n)
    for members in sorted(groups.values(), key=lambda ms: -max(view.order.get(n, 0) for n in ms)):
        if len(members) > room and (ours or room <= 0 or len(members) == 1):
            continue
        taken = sum(1 for n in members if take(n))
        room -= taken
        ours |= set(members)


def firmly_out(view: Any, ours: set[str], others: set[str]) -> set[str]:
    """Of `held`'s nodes, those out whatever this step decides: all but the waiting nodes idle in begun
    slots (those the step takes, or lets go from their slot)."""
    return {n for n in ours if not (view.state.get(n) == S.PENDING and n in view.in_slot)} | others


def held(view: Any) -> tuple[set[str], set[str]]:
    """The rollout's nodes out of service now, as the budget counts them: (held by this rollout, out for
    another reason).  Held: from the moment a reservation of the rollout begins on a node until the node
    is back in service: under way, failed, idle in a begun slot (whatever its stage), done or skipped but
    not yet given back (drained by us).  Another reason: down, or drained by anyone else (the health
    check, an admin, a repair).  The window admits, and slots begin, only within the budget left by both
    (`admit`, `postpone_slots`); Slinky's operator once drained a whole node set because its failed
    nodes did not count."""
    ours: set[str] = set()
    others: set[str] = set()
    in_slot = view.in_slot
    for n, st in view.state.items():
        info = view.world.nodes.get(n)
        if st in S.IN_FLIGHT or st == S.FAILED or n in in_slot or (
                st in S.FINAL and info is not None and view.ours(info)):
            ours.add(n)
        elif info is not None and (info.drained or info.down):
            others.add(n)
    return ours, others


def _stage(view: Any) -> int:
    """The stage of the plan's waves (after the canary) the window is at: the first with a member not yet
    settled.  Failed nodes that max_failures tolerates count as settled, or the window would never widen."""
    for k, members in enumerate(view.stage_nodes):
        if any(view.state.get(n, S.DONE) not in S.FINAL for n in members):
            return k
    return max(0, len(view.stage_nodes) - 1)


def boundary(view: Any) -> int:
    """The stage the window would open now, counting the canary's as 0 (with no canary, the first wave's
    is 0): what the evidence gate must pass before it starts."""
    canary = set(view.canary)
    if any(view.state.get(n) not in S.FINAL for n in canary):
        return 0
    return _stage(view) + (1 if canary else 0)


def _admit_domains(view: Any, take: Callable[[str], bool], skip: Callable[[str, str], None] | None,
                   pool: list[str], in_slot: set[str], room: int, stage_room: int, under_way: int, out: int) -> None:
    """The window over failure domains: at most `max_unavailable_domains` domains with a node out, at least
    `keep_free_domains` domains with every node in service; with `whole_domain`, a domain is taken whole
    (every waiting node of it at once) once all of them sit empty or its slot has begun.  A domain larger
    than the budget's room is taken alone, when the rollout holds nothing else (`out`: the nodes it
    holds; nodes out for other reasons, such as an admin's drain of a member of a domain skipped whole,
    may be out beside it)."""
    whole = view.plan.budget.whole_domain
    takes_busy = view.strategy.takes_busy
    domain_of = view.domain_of
    domains_out = out_domains(view)

    groups: dict[str, list[str]] = defaultdict(list)
    for n in pool:
        groups[domain_of.get(n, f"node:{n}")].append(n)

    def key(d: str) -> tuple:
        members = groups[d]
        return (not all(n in in_slot for n in members), max(view.world.free_at.get(n, 0.0) for n in members),
                min(view.order.get(n, 0) for n in members))

    for d in sorted(groups, key=key):
        members = groups[d]
        new_domain = d in view.plan.domains and d not in domains_out
        slot_begun = all(n in view.in_slot for n in members)
        if new_domain and domain_room(view, domains_out) < 1:
            continue  # even in its slot: that slot is postponed (postpone_slots)
        if whole and not view.s.upgrade_held_nodes:
            held = {n: why for n in members if (why := view.held_by_other(n))}
            if held:  # never a domain on two drivers: all of it waits, or all of it is left out
                if view.s.domain_member_held == "skip" and skip is not None:
                    first = next(iter(held))
                    why = (f"domain {d}: member {fold(sorted(held))} held by someone else ({held[first]}): "
                           "skipped whole (domain_member_held)")
                    for n in members:
                        skip(n, why)
                continue
        if whole:
            if not takes_busy and not slot_begun and any(view.busy(n) for n in members):
                continue  # its early-free nodes keep running jobs until the whole domain can go
            fresh = sum(1 for n in members if n not in in_slot)
            alone = under_way == 0 and out == 0
            if not alone and (len(members) > stage_room or fresh > room):
                continue
            taken = [n for n in members if take(n)]
            stage_room -= len(taken)
            room -= sum(1 for n in taken if n not in in_slot)
            under_way += len(taken)
            out += len(taken)
        else:
            taken = []
            for n in members:
                if stage_room <= 0:
                    break
                if (not takes_busy and view.busy(n)) or (room <= 0 and n not in in_slot):
                    continue
                if take(n):
                    taken.append(n)
                    stage_room -= 1
                    if n not in in_slot:
                        room -= 1
        if taken and new_domain:
            domains_out.add(d)
        if stage_room <= 0:
            return


def out_domains(view: Any, slots_count: bool = True) -> set[str]:
    """Domains with a node out of service: under way, failed, done but not yet given back (drained, or
    still in a reservation of ours), waiting in a slot that has begun (unless `slots_count` is False), or
    drained or down by anyone.  A node this rollout skipped is outside it, as a node it never planned:
    a domain left out whole for an admin's drain of one member does not hold the others' budget (the
    planner does not count it either)."""
    domain_of = view.domain_of
    in_slot = view.in_slot
    out = set()
    for n, st in view.state.items():
        if n not in domain_of:
            continue
        info = view.world.nodes.get(n)
        if st in S.IN_FLIGHT or st == S.FAILED or (n in in_slot and (slots_count or st != S.PENDING)) or (
                st in (S.DONE, S.SKIPPED) and info is not None and view.ours(info)):
            out.add(domain_of[n])
        elif st != S.SKIPPED and info is not None and (info.drained or info.down):
            out.add(domain_of[n])
    return out


def domain_room(view: Any, out: set[str]) -> int | float:
    """How many more domains may go out of service now: `max_unavailable_domains`, and all but
    `keep_free_domains` domains."""
    budget = view.plan.budget
    room: int | float = float("inf")
    if budget.max_unavailable_domains:
        room = budget.max_unavailable_domains - len(out)
    if budget.keep_free_domains:
        room = min(room, len(view.plan.domains) - len(out) - budget.keep_free_domains)
    return room


def postpone_slots(view: Any, lookahead_s: float, push_s: float, upgrade_s: float,
                   soak_s: float | Callable[[int], float] = 0.0, next_look_s: float = 0.0) -> dict[str, float]:
    """Slot reservations of this rollout, begun or about to begin, whose nodes cannot go now: their stage
    has not opened (the one before overran its slots, or the evidence gate holds it), their domains
    cannot (an earlier domain overran its slot), or the budget has no room for them (slots beginning
    before the next look, `next_look_s` from now, counted in start order against what is held now):
    reservation -> a later start.  A slot holds its nodes out of service whether the engine takes them or
    not, so a late stage or domain must not start the next, and no step lets more slots begin than the
    budget has room for.
    The later starts come from the one slot function (plan_slots) over the late slots' nodes, from
    `push_s` on (when the stage or domain that holds them ends is not known): several late slots take
    turns on the plan's grid, with its stages, domains and budget, instead of all moving to one moment and
    being moved again.  A reservation moves as one, to the latest slot of its nodes.
    (Slurm cannot move a reservation that has begun: the caller gives that one up and its nodes a later
    slot of their own.)"""
    open_stage = min(boundary(view), view.gate_allowed)
    now = view.world.now
    committed = out_domains(view, slots_count=False) if view.plan.domains else set()
    room = domain_room(view, committed)
    ours, others = held(view)
    # what is out for certain (not counting idle waiting nodes in begun slots: those are decided here)
    firm = firmly_out(view, ours, others)
    budget = view.plan.budget.max_unavailable
    node_room = budget - len(firm)
    prefix = f"{ROLLOUT_RESERVATION_PREFIX}{view.rid}_s"
    late: dict[str, list[str]] = {}  # reservation -> its waiting nodes
    for name, r in sorted(view.mine.items(), key=lambda kv: kv[1].start or 0.0):
        if not name.startswith(prefix) or r.start is None or r.start > now + max(lookahead_s, next_look_s):
            continue
        waiting = [n for n in r.nodes if view.state.get(n) == S.PENDING]
        if waiting and all(view.stage_index.get(n, 0) > open_stage for n in waiting) and (
                len(waiting) == len(r.nodes) or r.start <= now):
            late[name] = waiting
            continue
        # begun (its waiting nodes idle in it), or beginning before the next look: within the budget's room
        # (a slot alone wider than the budget goes when nothing else is out, as a domain does)
        if waiting and r.start <= now + next_look_s and (r.start <= now or len(waiting) == len(r.nodes)):
            fresh = [n for n in waiting if n not in firm]
            if len(fresh) > node_room and not (not firm and node_room == budget):
                late[name] = waiting
                continue
            node_room -= len(fresh)
        if not view.plan.domains:
            continue
        new = {view.domain_of[n] for n in waiting if n in view.domain_of} - committed
        if not new:
            continue
        if len(new) <= room:
            room -= len(new)
            committed |= new
        else:
            late[name] = waiting
    if not late:
        return {}
    slots, _ = plan_slots(view.plan, view.world.free_at, now + push_s, upgrade_s, soak_s,
                          {n for nodes in late.values() for n in nodes})
    return {name: max(slots[n] for n in nodes) for name, nodes in late.items()}

def max_failures(plan, settings) -> int:
    """The failures a rollout tolerates before it halts: what its plan showed (the config's at planning
    time), never a value the config took since; a plan from before the budget carried it, the config's."""
    value = plan.budget.max_failures
    return value if value is not None else settings.max_failures
