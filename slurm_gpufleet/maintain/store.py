"""The rollout's durable state and audit log (SQLite through sqlite-utils, file mode 0600)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from typing import Any

import sqlite_utils

from . import states as S


class Store:
    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        if not os.path.exists(path):
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        conn = sqlite3.connect(path, timeout=30)
        conn.execute("PRAGMA busy_timeout = 30000")
        self.db = sqlite_utils.Database(conn)
        if self.db.journal_mode != "wal":
            self.db.enable_wal()
        if "rollouts" not in self.db.table_names():
            self.db["rollouts"].create({"id": str, "state": str, "target": str, "strategy": str, "plan": str,
                                        "created": float, "updated": float}, pk="id", if_not_exists=True)
            self.db["nodes"].create({"rollout": str, "node": str, "wave": int, "state": str, "prior": str,
                                     "previous_driver": str, "boot": str, "error": str, "weight": int,
                                     "updated": float},
                                    pk=("rollout", "node"), if_not_exists=True)
            self.db["audit"].create({"ts": float, "rollout": str, "node": str, "event": str, "detail": str},
                                    if_not_exists=True)
        # started: when the node's upgrade command began; slot: when its maintenance slot starts
        for column in ("started", "slot"):
            if column not in self.db["nodes"].columns_dict:
                self.db["nodes"].add_column(column, float)
        if "validated" not in self.db["nodes"].columns_dict:  # what the node published when it validated
            self.db["nodes"].add_column("validated", str)
        if "job" not in self.db["nodes"].columns_dict:  # the validation job's id while it runs (testing)
            self.db["nodes"].add_column("job", str)
        # who is applying the rollout now (host:pid) and when it last stepped: one driver at a time
        if "holder" not in self.db["rollouts"].columns_dict:
            self.db["rollouts"].add_column("holder", str)
            self.db["rollouts"].add_column("heartbeat", float)
        if "preemptions" not in self.db.table_names():  # the jobs a deadline plan stops, and how far each is
            self.db["preemptions"].create({"rollout": str, "job": str, "action": str, "at": float, "stop": float,
                                           "signal": str, "batch": int, "grace": float, "state": str,
                                           "run_start": float, "since": float, "updated": float},
                                          pk=("rollout", "job"), if_not_exists=True)
        self._crash_counts: dict[str, int] = {}

    # -- rollouts --------------------------------------------------------------------------------
    def create_rollout(self, plan: dict[str, Any], at: float | None = None) -> None:
        now = time.time() if at is None else at
        with self.db.conn:
            self.db["rollouts"].insert({"id": plan["id"], "state": S.R_RUNNING, "target": plan["target_driver"],
                                        "strategy": plan["strategy"], "plan": json.dumps(plan), "created": now,
                                        "updated": now})
            rows = [{"rollout": plan["id"], "node": n, "wave": w["index"], "state": S.PENDING, "prior": None,
                     "previous_driver": plan["previous_drivers"].get(n), "boot": None, "error": None,
                     "weight": None, "updated": now} for w in plan["waves"] for n in w["nodes"]]
            rows += [{"rollout": plan["id"], "node": s["node"], "wave": -1, "state": S.SKIPPED, "prior": None,
                      "previous_driver": plan["previous_drivers"].get(s["node"]), "boot": None,
                      "error": s["why"], "weight": None, "updated": now} for s in plan["skipped"]]
            self.db["nodes"].insert_all(rows)
            jobs = [j for j in (plan.get("deadline") or {}).get("jobs", []) if j["action"] != "wait"]
            self.db["preemptions"].insert_all([
                {"rollout": plan["id"], "job": j["job_id"], "action": j["action"], "at": j["at"],
                 "stop": j["at"] + (j["grace_s"] if j["action"] == "checkpoint-requeue" else 0.0),
                 "signal": j.get("signal"), "batch": int(bool(j.get("batch"))), "grace": j.get("grace_s") or 0.0,
                 "state": S.J_PLANNED, "run_start": j.get("start"), "since": None, "updated": now} for j in jobs])
        self.audit(plan["id"], None, "created", f"{len(plan['waves'])} wave(s), target {plan['target_driver']}", now)

    def rollout(self, rollout_id: str | None = None) -> dict[str, Any] | None:
        if rollout_id:
            rows = list(self.db.query("select * from rollouts where id = ?", [rollout_id]))
        else:
            rows = list(self.db.query("select * from rollouts order by created desc limit 1"))
        return rows[0] if rows else None

    def active(self) -> dict[str, Any] | None:
        rows = list(self.db.query("select * from rollouts where state not in (?, ?, ?) order by created desc",
                                  sorted(S.ROLLOUT_FINAL)))
        return rows[0] if rows else None

    def set_rollout_state(self, rollout_id: str, state: str, detail: str = "", at: float | None = None) -> None:
        assert state in S.ROLLOUT_STATES, state
        self.db["rollouts"].update(rollout_id, {"state": state, "updated": time.time() if at is None else at})
        self.audit(rollout_id, None, f"rollout {state}", detail, at)

    # -- one driver at a time ----------------------------------------------------------------------
    def acquire(self, rollout_id: str, holder: str, now: float, stale_s: float) -> str | None:
        """Take the rollout for this process; returns who holds it instead, if someone alive does."""
        with self.db.conn:
            self.db.execute("begin immediate")
            row = self.rollout(rollout_id)
            current = row.get("holder") if row else None
            if current and current != holder and _alive(current, row.get("heartbeat") or 0, now, stale_s):
                since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row.get("heartbeat") or 0))
                return f"{current} (last step {since})"
            self.db["rollouts"].update(rollout_id, {"holder": holder, "heartbeat": now})
        return None

    def heartbeat(self, rollout_id: str, holder: str, now: float) -> None:
        self.db.execute("update rollouts set heartbeat = ? where id = ? and holder = ?", [now, rollout_id, holder])
        self.db.conn.commit()

    def release(self, rollout_id: str, holder: str) -> None:
        self.db.execute("update rollouts set holder = null where id = ? and holder = ?", [rollout_id, holder])
        self.db.conn.commit()

    # -- nodes -----------------------------------------------------------------------------------
    def nodes(self, rollout_id: str) -> list[dict[str, Any]]:
        cur = self.db.conn.execute("select * from nodes where rollout = ? order by wave, node", [rollout_id])
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur]

    def node(self, rollout_id: str, node: str) -> dict[str, Any]:
        return self.db["nodes"].get((rollout_id, node))

    def set_node(self, rollout_id: str, node: str, state: str, detail: str = "", **fields: Any) -> None:
        """Record a transition *before* its work starts: a crash finds the node in the state it was doing."""
        assert state in S.NODE_STATES, state
        with self.db.conn:
            self.db["nodes"].update((rollout_id, node), {"state": state, "updated": time.time(), **fields})
            self.db["audit"].insert({"ts": time.time(), "rollout": rollout_id, "node": node, "event": state,
                                     "detail": detail})
        self._maybe_crash(state)

    COLUMNS = frozenset({"state", "updated", "prior", "boot", "error", "weight", "started", "slot", "validated",
                         "job"})

    def apply(self, rollout_id: str, changes: list[tuple[str, str | None, str, dict[str, Any]]], at: float,
              audits: list[tuple[str | None, str, str]] = ()) -> None:
        """Many nodes' transitions (node, new state or None, detail, fields) in one transaction, written
        before the Slurm calls of the step that makes them: a crash finds each node in its new state.
        Plain executemany per shape of change: a step over 12,500 nodes costs tens of milliseconds."""
        if not changes and not audits:
            return
        by_shape: dict[tuple[str, ...], list[list[Any]]] = {}
        audit = [(at, rollout_id, node, event, detail[:2000]) for node, event, detail in audits]
        for node, state, detail, fields in changes:
            row = dict(fields)
            if state is not None:
                assert state in S.NODE_STATES, state
                row.update(state=state, updated=at)
                audit.append((at, rollout_id, node, state, detail[:2000]))
            if not row:
                continue
            keys = tuple(sorted(row))
            assert set(keys) <= self.COLUMNS, keys
            by_shape.setdefault(keys, []).append([row[k] for k in keys] + [rollout_id, node])
        with self.db.conn as conn:
            for keys, values in by_shape.items():
                conn.executemany(f"update nodes set {', '.join(f'{k} = ?' for k in keys)} "
                                 "where rollout = ? and node = ?", values)
            conn.executemany("insert into audit (ts, rollout, node, event, detail) values (?, ?, ?, ?, ?)", audit)
        for _, state, _, _ in changes:
            if state is not None:
                self._maybe_crash(state)

    def preemptions(self, rollout_id: str) -> list[dict[str, Any]]:
        return list(self.db.query("select * from preemptions where rollout = ? order by at, job", [rollout_id]))

    def set_preemptions(self, rollout_id: str, changes: list[tuple[str, dict[str, Any], str]], at: float) -> None:
        """Each job's next state (job, fields, detail), written with its audit line before the Slurm call
        that makes it."""
        if not changes:
            return
        with self.db.conn as conn:
            for job, fields, detail in changes:
                keys = sorted(fields)
                conn.execute(f"update preemptions set {', '.join(f'{k} = ?' for k in keys)}, updated = ? "
                             "where rollout = ? and job = ?", [fields[k] for k in keys] + [at, rollout_id, job])
                conn.execute("insert into audit (ts, rollout, node, event, detail) values (?, ?, ?, ?, ?)",
                             (at, rollout_id, None, f"job {job} {fields.get('state', '')}".strip(), detail[:2000]))

    def set_weight(self, rollout_id: str, node: str, weight: int | None) -> None:
        """The node's scheduling weight before the rollout steered new jobs away from it (None: restored)."""
        self.db["nodes"].update((rollout_id, node), {"weight": weight})

    def audit(self, rollout_id: str, node: str | None, event: str, detail: str, at: float | None = None) -> None:
        self.db["audit"].insert({"ts": time.time() if at is None else at, "rollout": rollout_id, "node": node,
                                 "event": event, "detail": detail[:2000]})

    def log(self, rollout_id: str, limit: int = 50) -> list[dict[str, Any]]:
        return list(self.db.query("select * from audit where rollout = ? order by ts desc limit ?",
                                  [rollout_id, limit]))

    def counts(self, rollout_id: str) -> dict[str, int]:
        return {r["state"]: r["n"] for r in self.db.query(
            "select state, count(*) as n from nodes where rollout = ? group by state", [rollout_id])}

    def _maybe_crash(self, state: str) -> None:
        """Test seam for crash safety: SLURM_GPUFLEET_CRASH_AFTER=STATE[:N] kills this process (SIGKILL,
        as kill -9 would) right after the N-th transition into STATE has been written."""
        spec = os.environ.get("SLURM_GPUFLEET_CRASH_AFTER")
        if not spec:
            return
        want, _, nth = spec.partition(":")
        if want != state:
            return
        self._crash_counts[state] = self._crash_counts.get(state, 0) + 1
        if self._crash_counts[state] >= int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        self.db.conn.close()


def _alive(holder: str, heartbeat: float, now: float, stale_s: float) -> bool:
    """On this host: is the process there?  Elsewhere: has it stepped recently?"""
    import socket

    host, _, pid = holder.split("#")[0].rpartition(":")
    if host == socket.gethostname() and pid.isdecimal():
        try:
            os.kill(int(pid), 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    return now - heartbeat < stale_s
