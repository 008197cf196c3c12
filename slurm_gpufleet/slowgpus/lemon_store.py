"""The lemon record (SQLite, on the host that runs `fleet lemons`): every in-job flag once per (node,
job), and every case with how it closed.  A node's suspicion is the distinct jobs it was flagged in since
its last case closed."""

from __future__ import annotations

import json
import time

import sqlite_utils

from ..common.sqlitedb import open_db
from .instep import Flag
from .lemon import OPEN, Case


class LemonStore:
    def __init__(self, path: str):
        self.path = path
        self.db = open_db(path, _schema)

    def record_flags(self, flags: list[Flag], now: float | None = None, added: list[Flag] | None = None) -> int:
        """Each (node, job) once, its earliest window kept; returns how many were new (and appends them to
        `added`)."""
        now = time.time() if now is None else now
        new = 0
        with self.db.conn:
            for f in flags:
                # one statement each: two steps running at once cannot both take a flag for new
                cur = self.db.execute(
                    "insert or ignore into flags (node, job, gpu, signature, t_first, recorded, seen, evidence) "
                    "values (?, ?, ?, ?, ?, ?, ?, ?)",
                    [f.node, f.job, f.gpu, f.signature, f.t_first, now, now, json.dumps(f.evidence, sort_keys=True)])
                if cur.rowcount:
                    new += 1
                    if added is not None:
                        added.append(f)
                else:
                    self.db.execute("update flags set seen = ?, t_first = min(t_first, ?) where node = ? and job = ?",
                                    [now, f.t_first, f.node, f.job])
        return new

    def suspects(self) -> dict[str, list[str]]:
        """node -> the distinct jobs it was flagged in after its last case closed."""
        rows = self.db.query(
            "select f.node, f.job from flags f left join (select node, max(closed) as closed from cases "
            "group by node) c on c.node = f.node where c.closed is null or f.recorded > c.closed "
            "order by f.node, f.recorded")
        out: dict[str, list[str]] = {}
        for r in rows:
            out.setdefault(r["node"], []).append(r["job"])
        return out

    def open_cases(self) -> dict[str, Case]:
        marks = ",".join("?" * len(OPEN))
        return {r["node"]: _case(r) for r in self.db.query(f"select * from cases where state in ({marks})",
                                                          sorted(OPEN))}

    def cases(self, limit: int = 100) -> list[Case]:
        return [_case(r) for r in self.db.query("select * from cases order by opened desc limit ?", [limit])]

    def save(self, cases: list[Case]) -> None:
        with self.db.conn:
            self.db["cases"].upsert_all([{"node": c.node, "opened": c.opened, "state": c.state,
                                          "jobs": json.dumps(c.jobs), "check_job": c.check_job,
                                          "attempts": c.attempts, "detail": c.detail, "closed": c.closed}
                                         for c in cases], pk=("node", "opened"))

    def scores(self) -> dict[str, int]:
        return {node: len(jobs) for node, jobs in self.suspects().items()}

    def close(self) -> None:
        self.db.conn.close()


def _case(r: dict) -> Case:
    return Case(r["node"], r["state"], json.loads(r["jobs"] or "[]"), r["opened"], r["check_job"],
                r["attempts"] or 0, r["detail"] or "", r["closed"])


def _schema(db: sqlite_utils.Database) -> None:
    if "flags" not in db.table_names():
        db["flags"].create({"node": str, "job": str, "gpu": int, "signature": str, "t_first": float,
                            "recorded": float, "seen": float, "evidence": str}, pk=("node", "job"),
                           if_not_exists=True)
    if "cases" not in db.table_names():
        db["cases"].create({"node": str, "opened": float, "state": str, "jobs": str, "check_job": str,
                            "attempts": int, "detail": str, "closed": float}, pk=("node", "opened"),
                           if_not_exists=True)
