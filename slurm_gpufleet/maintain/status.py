"""`maintain status`: the latest rollout as an admin reads it, from the store alone (no Slurm call).
`rollout_status` is the JSON (`--json`) and `status_text` the lines printed from the same figures."""

from __future__ import annotations

import json
import time
from typing import Any

from ..hostlist import grouped
from .bundle import Bundle
from .gate import report as gate_report
from .plan import Plan
from .states import ROLLOUT_FINAL
from .store import Store


def rollout_status(store: Store, settings: Any, events: int = 20) -> dict[str, Any] | None:
    """The latest rollout: its state and target, counts per node state, every node with what it returns
    to, the last `events` events (newest first) and the evidence gate's report; None: no rollout yet."""
    r = store.rollout()
    if r is None:
        return None
    plan = Plan.from_dict(json.loads(r["plan"]))
    return {"rollout": r["id"], "state": r["state"], "target_driver": plan.target_driver,
            "target": plan.target.to_dict(), "strategy": r["strategy"], "counts": store.counts(r["id"]),
            "nodes": [{**{k: n[k] for k in ("node", "wave", "state", "previous_driver", "error")},
                       "previous": plan.previous_bundle(n["node"]).to_dict()} for n in store.nodes(r["id"])],
            "events": [{k: e[k] for k in ("ts", "node", "event", "detail")} for e in store.log(r["id"], events)],
            "gate": gate_report(store.gate(r["id"]), settings),
            # what it waits for an admin for, since when, how many nodes it holds meanwhile (those under way)
            "waiting": json.loads(r["waiting"]) if r.get("waiting") and r["state"] not in ROLLOUT_FINAL else None}


# the audit log names each Slurm write by the call it made (`slurm create_reservation`): said in words here
EVENT_WORDS = {
    "slurm create_reservation": "reservation made", "slurm update_reservation": "reservation changed",
    "slurm postpone_reservation": "reservation moved later", "slurm delete_reservation": "reservation deleted",
    "slurm drain_nodes": "drained", "slurm resume_nodes": "resumed", "slurm set_reason_nodes": "reason set",
    "slurm reboot_asap_nodes": "reboot asked", "slurm set_weight_nodes": "weight set",
    "slurm set_job_comment": "job told", "slurm signal_job": "job signalled", "slurm requeue_jobs": "jobs requeued",
    "slurm cancel_jobs": "jobs cancelled", "slurm submit_job": "job submitted", "slurm submit_array": "array submitted",
}


def status_text(data: dict[str, Any]) -> list[str]:
    """The lines `maintain status` prints: nodes folded per wave, state and error; the gate's signals;
    the last ten events."""
    out = [f"rollout {data['rollout']}: {data['state']}, {Bundle.from_dict(data['target']).named()} ({data['strategy']}); "
           + ", ".join(f"{k} {v}" for k, v in data["counts"].items())]
    for (wave, state, error), count, folded in sorted(
            grouped((n["node"], (n["wave"], n["state"], n["error"] or "")) for n in data["nodes"]),
            key=lambda r: r[0][:2]):
        out.append(f"  wave {wave:>2}  {state:<12} {count:>5}  {folded}{'  ' + error if error else ''}")
    w = data.get("waiting")
    if w:
        since = time.strftime("%Y-%m-%d %H:%M:%S%z", time.localtime(w["since"]))
        out.append(f"  waiting for {w['for']} since {since}; holding {w['holds']} node(s) "
                   f"({w['in_progress']} under way), every other node in service")
    g = data["gate"]
    if g.get("signals"):
        out.append(f"  evidence gate: {g['decision']} ({g['why']}); worse = {g['worse_ratio']:g}x the control, "
                   f"confidence {g['confidence']:g}")
        for name, e in g["signals"].items():
            out.append(f"    {name:<9} canary {e['canary_events']:>4} / {e['canary_node_hours']:>8.1f} node-h  "
                       f"control {e['control_events']:>4} / {e['control_node_hours']:>8.1f} node-h  ratio "
                       f"{'-' if e['ratio'] is None else format(e['ratio'], '.2f'):>5}  p "
                       f"{'-' if e['p_value'] is None else format(e['p_value'], '.3f'):>5}  {e['decision']}")
        for model, m in g.get("models", {}).items():
            if m["basis"] != "control":
                out.append(f"    {model}: {m['canary']} canary node(s), no control peers: " + (
                    f"judged against the fleet's record ({m['history_node_hours']:g} node-h)"
                    if m["basis"] == "history" else "too little fleet record to judge by"))
    if data["events"]:  # what it did last, newest first: the same events as --json
        out.append("  last events:")
        for e in data["events"][:10]:
            at = time.strftime("%Y-%m-%d %H:%M:%S%z", time.localtime(e["ts"])) if e["ts"] else "-"
            event = EVENT_WORDS.get(e["event"], e["event"])
            out.append(f"    {at}  {e['node'] or '-':<12} {event:<20} {e['detail'] or ''}"[:160])
    return out
