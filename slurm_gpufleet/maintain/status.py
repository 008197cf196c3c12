"""`maintain status`: the latest rollout as an admin reads it, from the store alone (no Slurm call).
`rollout_status` is the JSON (`--json`) and `status_text` the lines printed from the same figures."""

from __future__ import annotations

import json
from typing import Any

from .gate import report as gate_report
from .plan import Plan
from .states import ROLLOUT_FINAL
from .store import Store
from .units import UNVERIFIED


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
                       "previous": plan.previous_bundle(n["node"]).to_dict(), UNVERIFIED: _unverified(n)}
                      for n in store.nodes(r["id"])],
            "events": [{k: e[k] for k in ("ts", "node", "event", "detail")} for e in store.log(r["id"], events)],
            "gate": gate_report(store.gate(r["id"]), settings),
            # what it waits for an admin for, since when, how many nodes it holds meanwhile (those under way)
            "waiting": json.loads(r["waiting"]) if r.get("waiting") and r["state"] not in ROLLOUT_FINAL else None}




def _unverified(row: dict[str, Any]) -> list[str]:
    """The parts a returned node never showed readably (maintain/units.py: validated, said so): [] when none."""
    try:
        kept = json.loads(row.get("validated") or "{}")
    except (TypeError, ValueError):
        return []
    parts = kept.get(UNVERIFIED) if isinstance(kept, dict) else None
    return [str(p) for p in parts] if isinstance(parts, list) else []
