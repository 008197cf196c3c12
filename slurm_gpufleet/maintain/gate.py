"""The evidence gate in a rollout step (`[maintain] gate = "evidence"`): from this step's read, each
cohort's new events and node-hours go into the sequential test (maintain/evidence.py); a wave widens
past a boundary only once the test rules "worse" out after `gate_min_soak_s`; or once the canary in
service has been exposed long enough to expect the events that would show a `gate_worse_ratio` times
worse driver (at the fleet's base rates, data/base_rates.toml: schedule.stage_soak_s) with no signal
leaning worse; or at the soak's bound (`gate_max_soak_s`, `gate_max_soak_h`) when no signal is worse
at `gate_confidence`; or an admin approves the one case left, a canary worse at that confidence yet
short of the halt line (or `gate_on_timeout = "proceed"` lets it on).  A "worse" verdict halts the
rollout.  Only boundaries where the window widens soak (schedule.widening); the others pass at once.
While the gate waits for an admin, the step gives up the rollout's slots of waiting nodes
(reconcile._release_slots): waiting holds nothing.

Cohorts, as Slurm shows them this step: the canary cohort is the rollout's nodes that are done and in
service; the control is its nodes still waiting, in service.  The two are compared within each GPU
model (base rates differ by model); a model with no control peers in service is judged against the
fleet's recorded rate for it, which every step's control nodes add to (the store's `event_rates`), and
`maintain status` says which basis each model had.  Events
are the increase of the counters each node's health check publishes since its boot (`xs`, `xh`, `ecc`;
a counter that went down was reset by a reboot), a verdict turning worse than warn, and the jobs Slurm
shows ended FAILED or NODE_FAIL (one bulk `squeue` per step).  A node counts from its second sighting in
a cohort, so the reboot that brought it there is not an event; a node that leaves its cohort drained or
down still counts the events it published with its drain and its jobs' NODE_FAIL, once, with no hours.

The state (totals, each node's last counters, the boundary and its soak) is kept in the store after every
step: an `apply` killed mid-soak resumes with its evidence.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..judging import summary
from . import states as S
from .evidence import (
    CANARY,
    CONTROL,
    MIN_HISTORY_NODE_HOURS,
    NOT_WORSE,
    SIGNALS,
    WORSE,
    Gate,
    expected_events_needed,
    exposure_s,
    recorded_rate,
)
from .schedule import stage_soak_s, widening

COUNTERS = {"xid_soft": "xs", "xid_hard": "xh", "ecc": "ecc", "row_remap": "rr"}
JOB_FAILED = frozenset({"FAILED", "NODE_FAIL"})


@dataclass
class GateOutcome:
    state: dict[str, Any]
    allowed: float                       # the highest boundary the window may open
    halt: str | None = None              # why the rollout halts
    waiting: tuple[str, float] | None = None  # what the gate waits for an admin for, and since when
    audits: list[tuple[str, str]] = field(default_factory=list)
    # what this step adds to the fleet's record: (GPU model, driver, signal, events, node-hours)
    recorded: list[tuple[str, str, str, int, float]] = field(default_factory=list)


def new_state() -> dict[str, Any]:
    return {"t": None, "ev": {}, "last": {}, "jobs": [], "boundary": None, "since": None, "passed": 0,
            "approved": {}, "decision": "open", "why": "no evidence yet"}


def cohorts(v: Any) -> dict[str, str]:
    """node -> canary | control, as Slurm shows the nodes this step."""
    out: dict[str, str] = {}
    for n, st in v.state.items():
        info = v.world.nodes.get(n)
        if st == S.DONE and info is not None and not (info.drained or info.down) and n not in v.members:
            out[n] = CANARY
    for n, st in v.state.items():
        info = v.world.nodes.get(n)
        if st == S.PENDING and info is not None and not (info.drained or info.down) and n not in v.in_slot:
            out[n] = CONTROL  # of every model: those with no canary yet add to the fleet's record
    return out


def step(v: Any, saved: dict[str, Any] | None, s: Any, boundary: int, ended: list[tuple[str, str, list[str]]],
         history: dict[str, dict[str, tuple[int, float]]] | None = None) -> GateOutcome:
    """One step of the gate.  `boundary`: the stage the window would open now (0: the canary's, never
    gated); `ended`: (job id, state, nodes) of the jobs Slurm shows ended; `history`: the fleet's recorded
    events and node-hours per GPU model and signal on the drivers being replaced (the store's)."""
    state = saved or new_state()
    now = v.world.now
    gate = _gate(s, state)
    c = _count(v, state, gate, ended)
    out = GateOutcome(state, float(state["passed"]))
    strata = _strata(gate, c, state, history, out)
    out.recorded = [(m, drv, sig, int(e), h) for (m, drv, sig), (e, h) in c.recorded.items()]
    verdict, why = gate.verdict()
    state.update(t=now, ev=gate.to_dict(), last=c.seen, jobs=c.current_jobs, decision=verdict, why=why, strata=strata)
    if verdict == WORSE:
        out.halt = f"evidence gate: {why}"
        out.audits.append(("gate worse", why))
        return out
    if boundary <= state["passed"] or boundary < 1:
        return out
    if boundary not in widening(v.canary, v.stage_nodes):
        # a wave no wider than the one before, the nodes upgraded not doubled since the last soak: none
        state.update(passed=boundary, boundary=None, since=None, waiting=None, waiting_since=None)
        out.allowed = float(boundary)
        out.audits.append(("gate passed", f"stage {boundary}: no soak (no wider than the one before, the nodes "
                                          "upgraded not yet doubled); the test goes "
                                          "on at every step"))
        return out
    return _soak(v, s, state, gate, c.who, boundary, verdict, why, now, out)


@dataclass
class _Counts:
    """What one step counted: per GPU model, the cohorts' events per signal and node-hours; the old
    drivers' record; the counters as seen now (the next step's baseline)."""

    who: dict[str, str]
    leaving: dict[str, str]
    model: dict[str, str]
    events: dict[str, dict[str, dict[str, int]]]
    hours: dict[str, dict[str, float]]
    recorded: dict[tuple[str, str, str], list[float]]
    seen: dict[str, list[Any]]
    current_jobs: list[str]


def _count(v: Any, state: dict[str, Any], gate: Gate, ended: list[tuple[str, str, list[str]]]) -> _Counts:
    now = v.world.now
    who = cohorts(v)
    last: dict[str, list[Any]] = state["last"]
    # a node of a cohort that left service since the last step (drained, down) still counts what it did:
    # the health check publishes a hard Xid or a bad verdict in the same write that drains the node, and
    # its jobs end NODE_FAIL; without this the most severe events would count 0.  No hours: it is out.
    leaving = {n: before[0] for n, before in last.items() if n not in who and n in v.world.nodes
               and (v.world.nodes[n].drained or v.world.nodes[n].down) and v.state.get(n) in (S.DONE, S.PENDING)}
    published = {n: summary.from_node(v.world.nodes[n]) or {} for n in (*who, *leaving)}  # parsed once
    model = {n: str(published[n].get("gpus") or "?") for n in published}
    driver = {n: str(published[n].get("drv") or "?") for n in published}
    dt_h = 0.0 if state["t"] is None else max(0.0, now - state["t"]) / 3600
    # per GPU model: the cohorts are compared within a model, never across (base rates differ by model)
    hours: dict[str, dict[str, float]] = defaultdict(lambda: {CANARY: 0.0, CONTROL: 0.0})
    events: dict[str, dict[str, dict[str, int]]] = defaultdict(
        lambda: {sig: {CANARY: 0, CONTROL: 0} for sig in gate.signals})
    recorded: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    seen: dict[str, list[Any]] = {}
    counted: set[str] = set()
    for n, cohort in (*who.items(), *leaving.items()):
        data = published[n]
        values = [data.get(key, 0) for key in COUNTERS.values()] + [int(data.get("v") not in ("ok", "warn", None))]
        before = last.get(n)
        if n in who:
            seen[n] = [cohort, *values]
        if before is None or before[0] != cohort or len(before) != len(values) + 1:
            continue  # first sighting in this cohort (or kept by a version with other counters): the baseline
        counted.add(n)
        m = model[n]
        if n in who:
            hours[m][cohort] += dt_h
        new_events = {sig: (new - old if new >= old else new)
                      for (sig, _), old, new in zip(COUNTERS.items(), before[1:-1], values[:-1], strict=True)}
        new_events["verdict"] = int(bool(values[-1] and not before[-1]))
        for sig in gate.signals:
            events[m][sig][cohort] += new_events.get(sig, 0)
        if cohort == CONTROL:  # the old drivers' record, for a later canary of this model without peers
            for sig in SIGNALS:
                row = recorded[(m, driver[n], sig)]
                row[0] += new_events.get(sig, 0)
                row[1] += dt_h
    known_jobs = set(state["jobs"])
    current_jobs = []
    for job_id, job_state, nodes in ended:
        if job_state not in JOB_FAILED:
            continue
        current_jobs.append(job_id)
        if job_id in known_jobs:
            continue
        for n in nodes:
            if n in counted:
                cohort = who.get(n) or leaving[n]
                if "job_fail" in gate.signals:
                    events[model[n]]["job_fail"][cohort] += 1
                if cohort == CONTROL:
                    recorded[(model[n], driver[n], "job_fail")][0] += 1
    return _Counts(who, leaving, model, events, hours, recorded, seen, current_jobs)


def _strata(gate: Gate, c: _Counts, state: dict[str, Any], history, out: GateOutcome) -> dict[str, Any]:
    """Each GPU model's canary judged against its control peers in service, else against the fleet's
    recorded rate on the drivers being replaced (said once in the audit when the basis changes)."""
    who, model, events, hours = c.who, c.model, c.events, c.hours
    strata = {}
    strata = {}
    for m in sorted({model[n] for n, c in (*who.items(), *c.leaving.items()) if c == CANARY}):
        canary = sum(1 for n, c in who.items() if c == CANARY and model[n] == m)
        control = sum(1 for n, c in who.items() if c == CONTROL and model[n] == m)
        if control:
            gate.add(events[m], hours[m])
            strata[m] = {"canary": canary, "control": control, "basis": "control"}
            continue
        kept = (history or {}).get(m, {})
        rates = {sig: recorded_rate(*kept.get(sig, (0, 0.0))) for sig in gate.signals}
        gate.add_against_history({sig: events[m][sig][CANARY] for sig in gate.signals}, hours[m][CANARY], rates)
        judged = [sig for sig, r in rates.items() if r is not None]
        strata[m] = {"canary": canary, "control": 0, "basis": "history" if judged else "none",
                     "history_node_hours": round(max((kept.get(sig, (0, 0.0))[1] for sig in gate.signals),
                                                     default=0.0), 1)}
        if state.get("strata", {}).get(m, {}).get("basis") != strata[m]["basis"]:
            out.audits.append(("gate history", f"{m}: no control peers of its model in service; " + (
                f"judged against the fleet's recorded rate on {', '.join(judged)} "
                f"({strata[m]['history_node_hours']} node-h)" if judged else
                f"the fleet's record holds under {MIN_HISTORY_NODE_HOURS:g} node-h of it: not judged, "
                "the soak limits and `maintain approve` decide")))
    return strata


def _soak(v: Any, s: Any, state: dict[str, Any], gate: Gate, who: dict[str, str], boundary: int, verdict: str,
          why: str, now: float, out: GateOutcome) -> GateOutcome:
    """A stage boundary's soak: passed (approved, not worse, exposed enough, or the soak's bound), or
    waiting (for more exposure, or for an admin's approval)."""
    # the exposure the test needs: how long the canary in service takes to expect the events that show a
    # `gate_worse_ratio` times worse driver (schedule.stage_soak_s, as the plan's slots have it)
    canary_nodes = sum(1 for c in who.values() if c == CANARY)
    need = stage_soak_s(s, canary_nodes)
    raw = exposure_s(tuple(s.gate_signals), s.gate_worse_ratio, s.gate_confidence, canary_nodes)
    exposed = raw is not None and raw <= s.gate_max_soak_s  # beyond it the timeout rules decide
    leaning = [sig for sig in gate.signals if gate.evidence[sig].llr > 0]
    if state["boundary"] != boundary:
        state.update(boundary=boundary, since=now)
        out.audits.append(("gate open", f"before stage {boundary}: soak {s.gate_min_soak_s} s at least with a "
                                        f"verdict, {need:.0f} s without ({canary_nodes} canary node(s) in service)"))
    state["need_s"] = round(need)
    soak = now - state["since"]
    approved = state["approved"].get(str(boundary))
    worse_now = gate.worse_at_confidence() if soak >= s.gate_max_soak_s else []
    if approved:
        why = f"approved by {approved}"
    elif verdict == NOT_WORSE and soak >= s.gate_min_soak_s:
        pass
    elif exposed and soak >= need and not leaning:
        why = (f"no signal worse or leaning worse after {soak:.0f} s, the {canary_nodes} canary node(s)' exposure "
               f"for {expected_events_needed(s.gate_worse_ratio, s.gate_confidence, len(gate.signals)):.1f} "
               "expected events at the fleet's base rates (data/base_rates.toml)")
    elif soak >= s.gate_max_soak_s and not worse_now:
        # the bounded soak: at its end a canary not worse at gate_confidence goes on; only one that is
        # worse (yet short of the sequential test's halt line) waits for an admin
        why = (f"not worse at confidence {s.gate_confidence:g} after the soak's bound "
               f"({s.gate_max_soak_s / 3600:g} h): {why}")
    elif soak >= s.gate_max_soak_s and s.gate_on_timeout == "proceed":
        why = (f"worse at confidence {s.gate_confidence:g} on {', '.join(worse_now)} after "
               f"{s.gate_max_soak_s / 3600:g} h, short of the halt line: proceeding (gate_on_timeout)")
    else:
        if soak >= s.gate_max_soak_s:
            if state.get("waiting") != boundary:
                state["waiting"] = boundary
                state["waiting_since"] = now
                out.audits.append(("gate waiting", f"worse at confidence {s.gate_confidence:g} on "
                                   f"{', '.join(worse_now)} after {s.gate_max_soak_s / 3600:g} h, short of the halt "
                                   f"line: `slurm-gpufleet maintain approve {v.rid} --why ...` lets stage "
                                   f"{boundary} start (the test goes on meanwhile: it may still halt or pass)"))
            out.waiting = (f"`maintain approve` of stage {boundary} (worse at confidence {s.gate_confidence:g} on "
                           f"{', '.join(worse_now)})", state.get("waiting_since") or now)
        return out
    state.update(passed=boundary, boundary=None, since=None, waiting=None, waiting_since=None)
    out.allowed = float(boundary)
    out.audits.append(("gate passed", f"stage {boundary}: {why}"))
    return out


def _gate(s: Any, state: dict[str, Any]) -> Gate:
    """The settings' test, with the evidence kept so far."""
    gate = Gate(signals=tuple(s.gate_signals), worse_ratio=s.gate_worse_ratio, confidence=s.gate_confidence,
                min_events=s.gate_min_events, margin=s.gate_margin)
    gate.load(state["ev"])
    return gate


def report(state: dict[str, Any] | None, s: Any) -> dict[str, Any]:
    """What `maintain status` shows under `gate`."""
    if state is None:
        return {"mode": s.gate}
    gate = _gate(s, state)
    return {"mode": s.gate, "decision": state["decision"], "why": state["why"], "boundary": state["boundary"],
            "soak_since": state["since"], "soak_needed_s": state.get("need_s"), "passed": state["passed"],
            "approved": state["approved"],
            "worse_ratio": s.gate_worse_ratio, "confidence": s.gate_confidence, "signals": gate.report(),
            "models": state.get("strata", {})}
