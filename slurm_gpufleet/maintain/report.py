"""A plan for people: one terminal screen, or an HTML page with a timeline of the waves per node group."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from ..hostlist import fold, fold_short, grouped
from .planner import INF, Plan


def _t(ts: float) -> str:
    if ts == INF:
        return "never (job without time limit)"
    return dt.datetime.fromtimestamp(ts).strftime("%m-%d %H:%M")


def _dur(seconds: float) -> str:
    if seconds == INF:
        return "unbounded"
    h, rem = divmod(int(seconds), 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m"


def text(plan: Plan, width: int = 100) -> str:
    lines = [f"rollout {plan.id}: driver {plan.target_driver} on {plan.node_count} node(s), strategy {plan.strategy}"
             + (" (FORCED past the compatibility gate)" if plan.forced else "")]
    for group, g in plan.gate.items():
        mark = "ok " if g["ok"] else "NO "
        lines.append(f"  gate {mark} {group}: {g['nodes']} node(s), {', '.join(g['models']) or 'models unknown'}; "
                     f"now {', '.join(g['drivers_now'])}")
        lines += [f"        refused: {p}" for p in g["problems"]] + [f"        note: {n}" for n in g["notes"]]
    if plan.refused:
        lines.append("REFUSED: the target fails the compatibility gate (--force overrides)")
        return "\n".join(lines)
    b = plan.budget
    caps = ", ".join(f"{p} {n}" for p, n in sorted(b["per_partition"].items()))
    lines.append(f"  budget: at most {b['max_unavailable']} node(s) out at once; per partition {caps or '-'}; "
                 f"halt after {b['max_failures'] + 1} failure(s)")
    lines.append(f"  {'wave':<8} {'nodes':>5}  {'reserve at':<12} {'start':<12} {'end':<12}  members")
    for w in plan.waves:
        members = fold_short(w.nodes, width - 60)
        label = f"{w.kind} {w.index}" if w.kind == "wave" else f"canary {w.index}"
        lines.append(f"  {label:<8} {len(w.nodes):>5}  {_t(w.reserve_at):<12} {_t(w.start):<12} {_t(w.end):<12}  {members}")
    if plan.skipped:
        for reason, count, nodes in grouped((s["node"], s["why"]) for s in plan.skipped):
            lines.append(f"  skipped {count}: {reason}: {nodes}")
    if plan.waves:
        lines.append(f"  {len(plan.waves)} wave(s); estimated end {_t(plan.waves[-1].end)} "
                     f"(makespan {_dur(plan.makespan_s)})")
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

    from .. import __version__

    env = jinja2.Environment(loader=jinja2.PackageLoader("slurm_gpufleet", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template("plan.html.j2").render(plan=plan, lanes=_timeline(plan), t=_t, dur=_dur, fold=fold,
                                                   version=__version__)


def _timeline(plan: Plan, width: int = 900) -> dict:
    """Bars per node group: x from the plan's start to the last finite wave end."""
    finite = [w for w in plan.waves if w.end != INF]
    t0 = plan.created
    t1 = max((w.end for w in finite), default=t0 + 1)
    scale = (width - 20) / max(t1 - t0, 1)
    lanes: dict[str, list[dict]] = defaultdict(list)
    for w in plan.waves:
        by_group: dict[str, int] = defaultdict(int)
        for n in w.nodes:
            by_group[plan.groups.get(n, "(defaults)")] += 1
        for group, count in by_group.items():
            start = w.start if w.start != INF else t1
            end = w.end if w.end != INF else t1 + 1
            lanes[group].append({"x": 10 + (start - t0) * scale, "w": max(3.0, (end - start) * scale),
                                 "label": f"{w.kind[0].upper()}{w.index}: {count}", "kind": w.kind,
                                 "open": w.end == INF})
    ticks = []
    for i in range(6):
        ts = t0 + (t1 - t0) * i / 5
        ticks.append({"x": 10 + (ts - t0) * scale, "label": _t(ts)})
    return {"width": width, "lanes": dict(lanes), "ticks": ticks}
