"""The rollout's durable state and audit log (SQLite through sqlite-utils, file mode 0600)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import sqlite_utils

from ..common.sqlitedb import open_db
from . import states as S
from .plan import Plan


class Store:
    def __init__(self, path: str):
        self.path = path
        self.db = open_db(path, _schema, timeout_s=30)
        # rollout -> (SQLite's data_version when read, its node rows in table order, node -> row): the
        # engine reads every node row each step, and at 12,500 nodes turning rows into dicts cost more than
        # the rest of the step's reads; this connection's own writes are applied to the mirror as they commit
        self._mirror: dict[str, tuple[int, list[dict[str, Any]], dict[str, dict[str, Any]]]] = {}

    # -- rollouts --------------------------------------------------------------------------------
    def create_rollout(self, plan: dict[str, Any], at: float | None = None) -> None:
        now = time.time() if at is None else at
        target = Plan.from_dict(plan).target.label()
        with self.db.conn:
            self.db["rollouts"].insert({"id": plan["id"], "state": S.R_RUNNING, "target": target,
                                        "strategy": plan["strategy"], "plan": json.dumps(plan), "created": now,
                                        "updated": now})
            rows = [{"rollout": plan["id"], "node": n, "wave": w["index"], "state": S.PENDING, "prior": None,
                     "previous_driver": plan["previous_drivers"].get(n), "boot": None, "error": None,
                     "weight": None, "updated": now} for w in plan["waves"] for n in w["nodes"]]
            rows += [{"rollout": plan["id"], "node": s["node"], "wave": -1, "state": S.SKIPPED, "prior": None,
                      "previous_driver": plan["previous_drivers"].get(s["node"]), "boot": None,
                      "error": s["why"], "weight": None, "updated": now}
                     for s in plan["skipped"]]
            self.db["nodes"].insert_all(rows)
            jobs = [j for j in (plan.get("deadline") or {}).get("jobs", []) if j["action"] != "wait"]
            self.db["preemptions"].insert_all([
                {"rollout": plan["id"], "job": j["job_id"], "action": j["action"], "at": j["at"],
                 "stop": j["at"] + (j["grace_s"] if j["action"] == "checkpoint-requeue" else 0.0),
                 "signal": j.get("signal"), "batch": int(bool(j.get("batch"))), "grace": j.get("grace_s") or 0.0,
                 "state": S.J_PLANNED, "run_start": j.get("start"), "since": None, "updated": now} for j in jobs])
        self._mirror.pop(plan["id"], None)
        self.audit(plan["id"], None, "created", f"{len(plan['waves'])} wave(s), target {target}", now)

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

    def set_waiting(self, rollout_id: str, record: dict[str, Any] | None) -> None:
        """What the rollout waits for an admin for (reconcile._say_waiting), or None: it does not."""
        self.db["rollouts"].update(rollout_id, {"waiting": None if record is None else json.dumps(record)})

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
        """The rollout's node rows (copies: a caller may change its own), by wave and name.  Read from
        the database only when another connection (another `maintain` command) has committed since the
        last read: SQLite's data_version says so, for one cheap pragma."""
        version = self.db.conn.execute("pragma data_version").fetchone()[0]
        mirror = self._mirror.get(rollout_id)
        if mirror is None or mirror[0] != version:
            cur = self.db.conn.execute("select * from nodes where rollout = ? order by wave, node", [rollout_id])
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, row, strict=True)) for row in cur]
            mirror = (version, rows, {r["node"]: r for r in rows})
            self._mirror[rollout_id] = mirror
        return [r.copy() for r in mirror[1]]

    def node(self, rollout_id: str, node: str) -> dict[str, Any]:
        return self.db["nodes"].get((rollout_id, node))


    COLUMNS = frozenset({"state", "updated", "prior", "boot", "error", "weight", "started", "slot", "registered",
                         "validated",
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
        mirror = self._mirror.get(rollout_id)
        if mirror is not None:  # committed: the mirror follows (a failed transaction left both as they were)
            for keys, values in by_shape.items():
                for value in values:
                    row = mirror[2].get(value[-1])
                    if row is not None:
                        row.update(zip(keys, value[:len(keys)], strict=True))

    def gate(self, rollout_id: str) -> dict[str, Any] | None:
        rows = list(self.db.query("select state from gates where rollout = ?", [rollout_id]))
        return json.loads(rows[0]["state"]) if rows else None

    def set_gate(self, rollout_id: str, state: dict[str, Any], at: float,
                 audits: list[tuple[str, str]] = (), recorded: list[tuple[str, str, str, int, float]] = ()) -> None:
        """The gate's state, what it decided and what it adds to the fleet's record, in one transaction
        (a crash cannot count a step's events twice)."""
        with self.db.conn as conn:
            conn.execute("insert or replace into gates (rollout, state, updated) values (?, ?, ?)",
                         [rollout_id, json.dumps(state, separators=(",", ":")), at])
            conn.executemany("insert into event_rates (model, driver, signal, events, node_hours, updated) "
                             "values (?, ?, ?, ?, ?, ?) on conflict (model, driver, signal) do update set "
                             "events = events + excluded.events, node_hours = node_hours + excluded.node_hours, "
                             "updated = excluded.updated",
                             [(m, drv, sig, e, h, at) for m, drv, sig, e, h in recorded if h > 0 or e])
            conn.executemany("insert into audit (ts, rollout, node, event, detail) values (?, ?, null, ?, ?)",
                             [(at, rollout_id, event, detail[:2000]) for event, detail in audits])

    def event_rates(self, except_driver: str | None = None) -> dict[str, dict[str, tuple[int, float]]]:
        """The fleet's record: GPU model -> signal -> (events, node-hours), over every driver but one
        (the rollout's target: its record is what is being judged)."""
        out: dict[str, dict[str, tuple[int, float]]] = {}
        for row in self.db.query("select model, signal, sum(events) e, sum(node_hours) h from event_rates "
                                 "where driver != ? group by model, signal", [except_driver or ""]):
            out.setdefault(row["model"], {})[row["signal"]] = (int(row["e"]), float(row["h"]))
        return out

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


    def audit(self, rollout_id: str, node: str | None, event: str, detail: str, at: float | None = None) -> None:
        self.db["audit"].insert({"ts": time.time() if at is None else at, "rollout": rollout_id, "node": node,
                                 "event": event, "detail": detail[:2000]})

    ABORT_REQUESTED = "abort requested"

    def abort_requested(self, rollout_id: str) -> bool:
        """`maintain abort` asked while Slurm did not answer: whoever steps the rollout next carries it out."""
        rows = list(self.db.query("select 1 from audit where rollout = ? and event = ? limit 1",
                                  [rollout_id, self.ABORT_REQUESTED]))
        return bool(rows)

    def log(self, rollout_id: str, limit: int = 50) -> list[dict[str, Any]]:
        return list(self.db.query("select * from audit where rollout = ? order by ts desc limit ?",
                                  [rollout_id, limit]))

    def counts(self, rollout_id: str) -> dict[str, int]:
        return {r["state"]: r["n"] for r in self.db.query(
            "select state, count(*) as n from nodes where rollout = ? group by state", [rollout_id])}

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


def _schema(db: sqlite_utils.Database) -> None:
    if "rollouts" not in db.table_names():
        db["rollouts"].create({"id": str, "state": str, "target": str, "strategy": str, "plan": str,
                               "created": float, "updated": float}, pk="id", if_not_exists=True)
        db["nodes"].create({"rollout": str, "node": str, "wave": int, "state": str, "prior": str,
                            "previous_driver": str, "boot": str, "error": str, "weight": int, "updated": float},
                           pk=("rollout", "node"), if_not_exists=True)
        db["audit"].create({"ts": float, "rollout": str, "node": str, "event": str, "detail": str},
                           if_not_exists=True)
    # Columns added since the first release, so that an older store opens as it is.
    # started: when the node's upgrade command began; slot: when its maintenance slot starts;
    # registered: when its slurmd had last registered as we took it / started the command (a later
    # registration is its reboot); validated: what the node published when it validated; job: the
    # validation job's id while it runs; holder, heartbeat: who applies the rollout now (host:pid) and
    # when it last stepped (one driver at a time); waiting: what it waits for an admin for (JSON)
    added = {"nodes": {"started": float, "slot": float, "registered": float, "validated": str, "job": str},
             "rollouts": {"holder": str, "heartbeat": float, "waiting": str}}
    for table, columns in added.items():
        have = db[table].columns_dict
        for column, kind in columns.items():
            if column not in have:
                db[table].add_column(column, kind)
    if "gates" not in db.table_names():  # the evidence gate's state (maintain/gate.py), one JSON per rollout
        db["gates"].create({"rollout": str, "state": str, "updated": float}, pk="rollout", if_not_exists=True)
    if "event_rates" not in db.table_names():  # the fleet's record per GPU model and driver (gate.py)
        db["event_rates"].create({"model": str, "driver": str, "signal": str, "events": int,
                                  "node_hours": float, "updated": float},
                                 pk=("model", "driver", "signal"), if_not_exists=True)
    if "preemptions" not in db.table_names():  # the jobs a deadline plan stops, and how far each is
        db["preemptions"].create({"rollout": str, "job": str, "action": str, "at": float, "stop": float,
                                  "signal": str, "batch": int, "grace": float, "state": str,
                                  "run_start": float, "since": float, "updated": float},
                                 pk=("rollout", "job"), if_not_exists=True)
