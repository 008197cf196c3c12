"""A plan for people: one terminal screen, or an HTML page with a timeline of the waves per node group."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from ..common.hostlist import fold, fold_short, grouped
from .planner import INF, Plan
from .schedule import unit_of


def _t(ts: float) -> str:
    if ts == INF:
        return "never (job without time limit)"
    return dt.datetime.fromtimestamp(ts).strftime("%m-%d %H:%M")


def _full(ts: float) -> str:
    """A time with its date and UTC offset, for what is read away from the terminal (the HTML)."""
    if ts == INF:
        return "never (job without time limit)"
    return dt.datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M UTC%z")


def _zone(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).astimezone().strftime("year %Y, UTC%z")


def gate_sentences(plan: Plan) -> list[str]:
    """The evidence gate as the plan shows it, in text and HTML alike: the sequential test's two lines,
    the soak's bounds, and each stage's soak (none where schedule.widening has none)."""
    bounds = plan.assumptions.get("gate_boundaries")
    per_stage = plan.assumptions.get("gate_stage_soak_s") or []
    if not bounds or not any(per_stage):
        return []
    first = 1 if plan.waves and plan.waves[0].kind == "canary" else 0
    shown = [(k + first, t) for k, t in enumerate(per_stage) if t]
    plain = [k + first for k, t in enumerate(per_stage) if not t and k + first > 0]
    return [f"evidence gate, per signal: halts at log likelihood ratio >= {bounds['halt_llr']:g} (the canary "
            f"{bounds['worse_ratio']:g}x the control's rate), opens at <= {bounds['not_worse_llr']:g} (at most "
            f"{bounds['not_worse_ratio']:g}x); soaks at least {_dur(bounds['min_soak_s'])} with a verdict, at most "
            f"{_dur(bounds['max_soak_s'])}: then it opens unless the canary is worse at confidence "
            f"{bounds['confidence']:g} (then it waits for `maintain approve`)",
            "soak before stage " + ", ".join(f"{b}: {_dur(t)}" for b, t in shown)
            + (f"; stages {_stages(plain)}: none (no wider than the one before, the nodes upgraded not yet doubled)" if plain else "")]


def _stages(numbers) -> str:
    """1, 2, 3, 5 as "1-3, 5"."""
    out: list[list[int]] = []
    for n in sorted(numbers):
        if out and n == out[-1][-1] + 1:
            out[-1].append(n)
        else:
            out.append([n])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in out)


def _dur(seconds: float) -> str:
    if seconds == INF:
        return "unbounded"
    h, rem = divmod(int(seconds), 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m"


def text(plan: Plan, width: int = 100) -> str:
    lines = [f"rollout {plan.id}: {plan.headline()}, strategy {plan.strategy}"
             + (" (FORCED past the compatibility gate)" if plan.forced else "")]
    for model, fw in sorted(plan.firmware_by_model.items()):
        lines.append(f"  firmware for {model}: " + ", ".join(f"{c} {v}" for c, v in sorted(fw.items())))
    for group, g in plan.gate.items():
        mark = "ok " if g["ok"] else "NO "
        lines.append(f"  gate {mark} {group}: {g['nodes']} node(s), {', '.join(g['models']) or 'models unknown'}; "
                     f"now {', '.join(g['drivers_now'])}")
        lines += [f"        refused: {p}" for p in g["problems"]] + [f"        note: {n}" for n in g["notes"]]
    if plan.refused:
        lines.append("REFUSED: the target fails the compatibility gate (--force overrides)")
        return "\n".join(lines)
    b = plan.budget
    caps = ", ".join(f"{p} {n}" for p, n in sorted(b.per_partition.items()))
    per_domain = (f"; {b.domains_at_once} domain(s) at once, no partition cap (a domain goes whole)"
                  if b.domains_at_once else f"; per partition {caps or '-'}")
    lines.append(f"  budget: at most {b.max_unavailable} node(s) out at once{per_domain}; "
                 f"halt after {(b.max_failures or 0) + 1} failure(s)")
    soak = plan.assumptions.get("gate_soak_s")
    stage_soaks = [s for s in plan.assumptions.get("gate_stage_soak_s") or [] if s]
    gate = gate_sentences(plan)
    if gate:
        lines += [f"  {line}" for line in gate]
    elif stage_soaks:
        lines.append(f"  evidence gate: each wave after the first starts after a soak of {', '.join(map(_dur, stage_soaks))}"
                     " (the upgraded nodes' exposure for the events the test needs at the fleet's base rates, "
                     "between gate_min_soak_s and gate_max_soak_s; a \"not worse\" verdict lets it go sooner, "
                     "a canary leaning worse holds it)")
    elif soak:
        lines.append(f"  evidence gate: each wave after the first starts {_dur(soak)} after the one before "
                     "it ends, at the earliest (gate_min_soak_s; it waits longer without a verdict)")
    if plan.domains:
        sizes = sorted({len(n) for n in plan.domains.values()})
        rules = [r for r in (("whole domains" if b.whole_domain else "nodes, not whole domains"),
                             b.max_unavailable_domains and f"at most {b.max_unavailable_domains} domain(s) out",
                             b.keep_free_domains and f"{b.keep_free_domains} kept whole") if r]
        lines.append(f"  domains: {len(plan.domains)} from {plan.domains_from} "
                     f"({'-'.join(map(str, sizes[::max(1, len(sizes) - 1)]))} nodes each); {', '.join(rules)}")
        for state, count, names in grouped((d, (st["state"], st["why"])) for d, st in plan.domain_states.items()
                                           if st["state"] != "planned"):
            lines.append(f"  {count} domain(s) {state[0]}: {names}: {state[1]}")
    grid = plan.assumptions.get("slot_grid_minutes", 1)
    lines.append(f"  times local ({_zone(plan.created)}); each slot is its MAINT reservation's start"
                 + (f", on a {grid}-minute grid" if grid > 1 else ""))
    lines.append(f"  {'wave':<8} {'nodes':>5}  {'reserve at':<12} {'start':<12} {'end':<12}  members")
    for w in plan.waves:
        members = fold_short(w.nodes, width - 60)
        label = f"{w.kind} {w.index}" if w.kind == "wave" else f"canary {w.index}"
        lines.append(f"  {label:<8} {len(w.nodes):>5}  {_t(w.reserve_at):<12} {_t(w.start):<12} {_t(w.end):<12}  {members}")
    if plan.skipped:
        for reason, count, nodes in grouped((s["node"], s["why"]) for s in plan.skipped):
            lines.append(f"  skipped {count}: {reason}: {nodes}")
    if plan.waves:
        per_node = plan.assumptions.get("upgrade_minutes")
        lines.append(f"  {len(plan.waves)} wave(s); estimated end {_t(plan.waves[-1].end)} "
                     f"(makespan {_dur(plan.makespan_s)}" + (f", at most {per_node:g} min an upgrade" if per_node else "")
                     + ")")
    if plan.deadline:
        d = plan.deadline
        stop = [j for j in d["jobs"] if j["action"] != "wait"]
        lines.append(f"  deadline {_t(d['at'])}: {len(stop)} job(s) stopped early, "
                     f"{d['gpu_h_at_risk']:.1f} GPU-h of work at risk; the other jobs are waited for")
        for j in stop[:40]:
            lines.append(f"    job {j['job_id']:<10} {j['action']:<18} at {_t(j['at']):<12} {j['gpus']:>4} GPUs "
                         f"{j['gpu_h_at_risk']:>8.1f} GPU-h  {fold_short(j['nodes'], 24)}  {j['why']}")
        if len(stop) > 40:
            lines.append(f"    ... and {len(stop) - 40} more (--json)")
        if plan.waves and plan.waves[-1].end > d["at"]:
            lines.append(f"  WARNING: the waves' estimated end {_t(plan.waves[-1].end)} is after the deadline")
    stopped = {j["job_id"] for j in (plan.deadline or {}).get("jobs", []) if j["action"] != "wait"}
    for j in [g for g in plan.gating_jobs if g["job_id"] not in stopped][:3]:
        lines.append(f"  gated by job {j['job_id']} on {fold(j['nodes'])} until "
                     f"{_t(j['end'] if j['end'] is not None else INF)}")
    return "\n".join(lines)


def html(plan: Plan) -> str:
    import jinja2

    from ..common.version import __version__

    env = jinja2.Environment(loader=jinja2.PackageLoader("slurm_gpufleet", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    stopped = [j for j in (plan.deadline or {}).get("jobs", []) if j["action"] != "wait"]
    unit = unit_of(plan)
    domains = [{"name": d, "nodes": fold(nodes), "count": len(nodes),
                "slot": _full(min(plan.slots[n][0] for n in nodes if n in plan.slots))
                if any(n in plan.slots for n in nodes) else "not upgraded",
                "together": any(n in unit for n in nodes),
                **plan.domain_states.get(d, {"state": "planned", "why": ""})} for d, nodes in sorted(plan.domains.items())]
    return env.get_template("plan.html.j2").render(plan=plan, lanes=_timeline(plan), t=_full, dur=_dur, fold=fold,
                                                   version=__version__, stopped=stopped, domains=domains,
                                                   zone=_zone(plan.created), gate=gate_sentences(plan))


PER_NODE_ROWS = 40  # up to this many nodes, one row each; beyond, one row per slot (nodes folded)
LABEL_CHARS = 30    # a row's label, folded and cut to this with its count (the lane column is 250 px)


def _timeline(plan: Plan, width: int = 900) -> dict:
    """What an admin asks of a plan: when is each node taken, and which job decides it.  One row per node
    (or, for larger plans, per folded set of nodes sharing a slot): its running jobs until they end by
    their limits, then its slot, as `apply` will reserve it."""
    t0 = plan.created
    if not plan.slots:
        return {"width": width, "rows": [], "ticks": [], "folded": False}
    busy_until = {n: (d["end"] if d["end"] is not None else INF) for n, d in plan.decided_by.items()}
    t1 = max(max(end for _, end in plan.slots.values()),
             max((e for e in busy_until.values() if e != INF), default=t0)) + 1
    scale = (width - 20) / max(t1 - t0, 1)
    groups: dict[tuple, list[str]] = defaultdict(list)
    for node, (start, _) in plan.slots.items():
        groups[(start, node) if len(plan.slots) <= PER_NODE_ROWS else (start,)].append(node)
    wave_of = {n: w for w in plan.waves for n in w.nodes}
    rows = []
    x = lambda t: 10 + (min(t, t1) - t0) * scale  # noqa: E731
    for key in sorted(groups):
        nodes = groups[key]
        start, end = plan.slots[nodes[0]]
        decider = max(nodes, key=lambda n: busy_until.get(n, t0))
        until = busy_until.get(decider)
        job = plan.decided_by.get(decider)
        slot_x, slot_w = x(start), max(4.0, (end - start) * scale)
        why = (f"job {job['job_id']} {'stopped at' if job.get('stopped') else 'until'} {_t(until)}"
               if job and until != INF else f"job {job['job_id']}: no time limit, taken when it ends" if job
               else "empty now")
        # the note goes where there is room: after the slot, or before it when the slot is near the right
        # edge (a label past the edge is cut off)
        right = slot_x + slot_w + 6 + 6.5 * len(why) <= width
        rows.append({
            "label": fold_short(nodes, LABEL_CHARS), "count": len(nodes),
            "kind": wave_of[nodes[0]].kind if nodes[0] in wave_of else "wave",
            "busy_w": max(0.0, x(until) - x(t0)) if until is not None else 0.0, "open": until == INF,
            "slot_x": slot_x, "slot_w": slot_w, "why": why,
            "why_x": slot_x + slot_w + 6 if right else slot_x - 6, "why_anchor": "start" if right else "end",
            "slot": f"{_full(start)} - {_full(end)}"})
    ticks = [{"x": 10 + (t1 - t0) * i / 5 * scale, "label": _t(t0 + (t1 - t0) * i / 5),
              "anchor": "start" if i == 0 else "end" if i == 5 else "middle"} for i in range(6)]
    return {"width": width, "rows": rows, "ticks": ticks, "folded": len(plan.slots) > PER_NODE_ROWS}
