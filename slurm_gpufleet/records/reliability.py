"""The fleet's reliability in numbers, from the histories its nodes already keep: incidents per node-day
and the mean time between them, time to repair split into automatic and manual, the share of holds that
found nothing, nodes out by cause and the remedies that worked per fault class.

An incident is a node taken out of service by the tool (a drain, a reboot or reset between jobs, a suspect
hold, a failed prolog) until it is back: by the tool's own resume or release (automatic), or by an admin
(manual: a case closed after a repair, as NVSentinel ADR-044 counts a repair automatic only when every
stage of its own pipeline finished).  An incident that went through the repair rung is manual whoever
resumed the node.  A hold that ended with no remedy tried (no reset, reboot or repair in the history
between its start and its end: the fault cleared, the re-checks passed) found nothing: a false hold.

Pure: `incidents` and `figures` take rows; `read_history` reads them, read-only, from each node's database.
"""

from __future__ import annotations

import glob
import os
import re
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

# what takes a node out of service, and what brings it back, as the remedy carrier records its actions
OUT = frozenset({"drain", "reboot", "reset", "suspect", "fail"})
# (`validated`: its validation run passed and it was resumed; `returned`: in service again after a reboot
# Slurm resumed, the fault gone)
BACK = frozenset({"resume", "release", "validated", "returned"})
_WORDS = re.compile(r"^(?:repair |validate after \w+: |reboot: )*(?P<check>[a-z_]+)")


@dataclass
class Incident:
    node: str
    start: float
    cause: str                       # the failure class (remediation data), or the reason's check word
    end: float | None = None
    how: str | None = None           # automatic | manual, once ended
    remedies: list[tuple[str, str, str]] = field(default_factory=list)   # (class, rung, outcome)

    @property
    def repaired_by_hand(self) -> bool:
        return any(rung == "repair" for _, rung, _ in self.remedies)


def cause_of(reason: str, classes: dict[str, str]) -> str:
    """The failure class a reason names: its check word ("memory gpu5 ..." -> ecc), through the remediation
    data's [class.check]; the word itself where the data has none."""
    m = _WORDS.match(reason or "")
    word = m.group("check") if m else "unknown"
    return classes.get(word, word)


def incidents(actions: list[tuple[float, str, str, str]], remedies: list[tuple[float, str, str, str, str]],
              closes: list[tuple[float, str]], classes: dict[str, str]) -> list[Incident]:
    """Pure: one node's incidents from its `actions` (ts, node, action, reason; successful ones only), its
    `remedies` (ts, node, class, rung, outcome) and its `closes` (ts, node: an admin's return after a
    repair).  A remedy belongs to the incident it is part of: the one open when it was recorded, or, where
    none was, the one its own action opens next (the carrier records a remedy before it acts, so its row
    comes first); a remedy no hold follows belongs to none."""
    # at one instant, a remedy before the action it led to, and the action before an admin's close
    events = sorted([(ts, 0, node, "remedy", (cls, rung, outcome)) for ts, node, cls, rung, outcome in remedies]
                    + [(ts, 1, node, action, reason) for ts, node, action, reason in actions]
                    + [(ts, 2, node, "closed", "") for ts, node in closes], key=lambda e: e[:2])
    out: list[Incident] = []
    current: Incident | None = None
    waiting: list[tuple[str, str, str]] = []     # remedies recorded while no incident was open
    for ts, _, node, action, what in events:
        if action == "remedy":
            (current.remedies if current is not None else waiting).append(what)
        elif action in OUT and current is None:
            current = Incident(node, ts, cause_of(what, classes), remedies=waiting)
            out.append(current)
            waiting = []
        elif action in BACK or action == "closed":
            waiting = []
            if current is not None:
                manual = action == "closed" or current.repaired_by_hand
                current.end, current.how = ts, "manual" if manual else "automatic"
                current = None
    for inc in out:
        if inc.remedies:
            inc.cause = inc.remedies[0][0]   # the ladder's class says it better than the reason's word
    return out


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def figures(found: list[Incident], nodes: list[str], remedies: list[tuple[float, str, str, str, str]],
            group_of, since: float, now: float) -> dict[str, Any]:
    """Pure: per node group, over [since, now]: the figures `fleet report` prints.  `group_of(node)`: the
    node's group name."""
    days = max((now - since) / 86400.0, 1e-9)
    groups: dict[str, dict[str, Any]] = {}
    members: dict[str, list[str]] = defaultdict(list)
    for n in nodes:
        members[group_of(n)].append(n)
    for group, names in sorted(members.items()):
        mine = set(names)
        started = [i for i in found if i.node in mine and since <= i.start <= now]
        ended = [i for i in found if i.node in mine and i.end is not None and since <= i.end <= now]
        node_days = len(names) * days
        ttr = {how: [(i.end - i.start) / 3600.0 for i in ended if i.how == how] for how in ("automatic", "manual")}
        false = [i for i in ended if not i.remedies]
        out_now: dict[str, int] = defaultdict(int)
        for i in found:
            if i.node in mine and i.end is None and i.start <= now:
                out_now[i.cause] += 1
        worked: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: {"tried": 0,
                                                                                               "succeeded": 0}))
        for ts, node, cls, rung, outcome in remedies:
            if node in mine and since <= ts <= now and outcome != "pending":
                worked[cls][rung]["tried"] += 1
                worked[cls][rung]["succeeded"] += int(outcome == "succeeded")
        groups[group] = {
            "nodes": len(names), "days": round(days, 3), "incidents": len(started),
            "incidents_per_node_day": round(len(started) / node_days, 6) if node_days else None,
            "mtbi_hours": round(node_days * 24 / len(started), 2) if started else None,
            "ttr_hours": {how: {"n": len(v), "p50": _round(_quantile(v, 0.5)), "p90": _round(_quantile(v, 0.9))}
                          for how, v in ttr.items()},
            "false_hold_share": round(len(false) / len(ended), 4) if ended else None,
            "out_now": dict(sorted(out_now.items())),
            "remedies": {c: {r: dict(v) for r, v in sorted(rungs.items())} for c, rungs in sorted(worked.items())},
        }
    return {"since": since, "until": now, "groups": groups}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def read_history(history_dir: str, since: float):
    """(nodes, actions, remedies, closes) from every node database under `history_dir`, read-only; a
    database that cannot be read is named in the fifth item, never a reason to stop.  Rows from before
    `since` are read too where an incident open then is still open (the last 30 days before it)."""
    nodes, actions, remedies, closes, unread = [], [], [], [], []
    lookback = since - 30 * 86400.0
    for db in sorted(glob.glob(os.path.join(history_dir, "*.db"))):
        node = os.path.basename(db)[:-3]
        try:
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
            try:
                tables = {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}
                if "actions" not in tables:
                    continue
                nodes.append(node)
                actions += conn.execute("select ts, node, action, reason from actions where ok = 1 and ts >= ?",
                                        [lookback]).fetchall()
                if "remedies" in tables:
                    remedies += conn.execute("select ts, node, class, rung, outcome from remedies where ts >= ?",
                                             [lookback]).fetchall()
                if "case_closes" in tables:
                    closes += conn.execute("select ts, node from case_closes where ts >= ?", [lookback]).fetchall()
            finally:
                conn.close()
        except sqlite3.Error as exc:
            unread.append(f"{db}: {exc}")
    return nodes, actions, remedies, closes, unread


def of_history(history, nodes: list[str], since: float, now: float) -> dict[str, Any]:
    """The figures of one History holding several nodes (the fault simulator's, on its own clock), flat:
    what the simulator prints beside its strategies, so a site compares its year with the what-if."""
    from ..catalogs import remediation_data

    classes = remediation_data()["class"]["check"]
    actions = [(r["ts"], r["node"], r["action"], r["reason"]) for r in history._query(
        "select ts, node, action, reason from actions where ok = 1", [])]
    remedies = [(r["ts"], r["node"], r["class"], r["rung"], r["outcome"]) for r in history._query(
        "select ts, node, class, rung, outcome from remedies", [])]
    closes = [(r["ts"], r["node"]) for r in history._query("select ts, node from case_closes", [])]
    found = []
    for node in nodes:
        found += incidents([a for a in actions if a[1] == node], [r for r in remedies if r[1] == node],
                           [c for c in closes if c[1] == node], classes)
    g = figures(found, nodes, remedies, lambda n: "fleet", since, now)["groups"]["fleet"]
    t = g["ttr_hours"]
    return {"incidents_per_node_day": g["incidents_per_node_day"], "mtbi_hours": g["mtbi_hours"],
            "ttr_automatic_p50_h": t["automatic"]["p50"], "ttr_automatic_p90_h": t["automatic"]["p90"],
            "ttr_manual_p50_h": t["manual"]["p50"], "ttr_manual_p90_h": t["manual"]["p90"],
            "false_hold_share": g["false_hold_share"]}


def report(history_dir: str, policy, since: float, now: float) -> dict[str, Any]:
    """The figures of every node group from the histories under `history_dir`."""
    from ..catalogs import remediation_data

    classes = remediation_data()["class"]["check"]
    nodes, actions, remedies, closes, unread = read_history(history_dir, since)
    by_node: dict[str, tuple[list, list, list]] = defaultdict(lambda: ([], [], []))
    for row in actions:
        by_node[row[1]][0].append(row)
    for row in remedies:
        by_node[row[1]][1].append(row)
    for row in closes:
        by_node[row[1]][2].append(row)
    found = [i for n in nodes for i in incidents(*by_node[n], classes)]

    def group_of(node: str) -> str:
        p = policy.for_node(node)
        return p.groups[-1] if p.groups else "(defaults)"

    out = figures(found, nodes, remedies, group_of, since, now)
    out["unread"] = unread
    return out
