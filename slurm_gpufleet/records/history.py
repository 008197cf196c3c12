"""Per-node history in SQLite: every run, finding, action and reboot request.

WAL mode and a busy timeout make it safe when the prolog, the epilog and the health check of one node
write at the same time.  The file is created 0600.  The hooks write it through the standard library's
sqlite3 (slurmd runs them every interval on every node: sqlite-utils and the click it imports cost about
as much as the rest of a health check); readers (`history`, `fleet`, the tests) get the same file as a
sqlite-utils Database from `History.db`.
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
import time
from typing import TYPE_CHECKING, Any

from ..common.sqlitedb import open_conn

if TYPE_CHECKING:
    import sqlite_utils

    from ..judging.findings import Finding
    from ..remedy.decide import NodeHistory

RETENTION_DAYS = 90

# The tables as sqlite-utils made them before (the same columns, types and index names): old files open as they are.
_TABLES = {
    "performance": "[run_id] INTEGER, [ts] REAL, [node] TEXT, [gpu] INTEGER, [model] TEXT, [library] TEXT, "
                   "[mem_bw_gbps] REAL, [gemm_tflops] REAL, [h2d_gbps] REAL, [sm_clock_mhz] REAL, "
                   "[power_w] REAL, [temperature_c] REAL, [reasons] TEXT, [error] TEXT",
    "runs": "[id] INTEGER PRIMARY KEY, [ts] REAL, [time] TEXT, [node] TEXT, [hook] TEXT, [job_id] TEXT, "
            "[verdict] TEXT, [duration_s] REAL, [driver] TEXT, [gpus] INTEGER, [error] TEXT",
    "findings": "[run_id] INTEGER, [ts] REAL, [node] TEXT, [job_id] TEXT, [check] TEXT, [severity] TEXT, "
                "[action] TEXT, [gpu] INTEGER, [message] TEXT, [detail] TEXT, [xid] INTEGER",
    "actions": "[ts] REAL, [time] TEXT, [node] TEXT, [hook] TEXT, [action] TEXT, [reason] TEXT, [why] TEXT, "
               "[ok] INTEGER, [error] TEXT",
    "reboots": "[ts] REAL, [node] TEXT, [fault] TEXT, [boot] TEXT",
    # the remediation ladder (remedy/ladder.py): one row per remedy tried; `episode` is when the node was
    # last clean before it, so one fault's reset and reboots are one attempt
    "remedies": "[id] INTEGER PRIMARY KEY, [ts] REAL, [node] TEXT, [class] TEXT, [fault] TEXT, [rung] TEXT, "
                "[boot] TEXT, [episode] REAL, [outcome] TEXT, [detail] TEXT",
    # a case closed: an admin resumed a node drained for repair; attempts before it no longer count
    "case_closes": "[ts] REAL, [node] TEXT, [class] TEXT",
    # validation before return (returning.py): one row per validation job; state open, passed or failed
    "validations": "[id] INTEGER PRIMARY KEY, [ts] REAL, [node] TEXT, [cause] TEXT, [attempt] INTEGER, [job] TEXT, "
                   "[state] TEXT, [detail] TEXT, [ended] REAL",
    # the suspect rung (remedy/decide.py): one row per hold; state open, released, repair or ended
    "suspects": "[id] INTEGER PRIMARY KEY, [ts] REAL, [node] TEXT, [class] TEXT, [fault] TEXT, [reason] TEXT, "
                "[state] TEXT, [passes] INTEGER, [last_pass] REAL, [ended] REAL",
    # the NVLink domain the node's GPUs last registered in (clique, cluster UUID): a tray none of whose GPUs
    # joins its fabric still counts for its rack when its published summary is gone
    "domains": "[ts] REAL, [node] TEXT, [clq] INTEGER, [cuid] TEXT",
}
_INDEXES = {"idx_runs_hook_id": "runs (hook, id)", "idx_findings_run_id": "findings (run_id)"}


def db_path(state_dir: str, node: str) -> str:
    return os.path.join(state_dir, f"{node}.db")


_INT_MAX = 2**63 - 1


def _storable(value: Any) -> Any:
    """What SQLite can hold: an integer past its 64 bits (from a corrupted kernel-log line, a counter
    gone wild) is refused, that one value stored as NULL, never the whole run lost."""
    if isinstance(value, int) and not isinstance(value, bool) and not -_INT_MAX - 1 <= value <= _INT_MAX:
        return None
    return value


class History:
    def __init__(self, path: str, clock=time.time):
        """clock: the time every row is stamped with and the attempt window is read at (the fault
        simulator's is its simulated time)."""
        self.path = path
        self.clock = clock
        self.conn = open_conn(path, _schema)
        self._db: sqlite_utils.Database | None = None
        # a run reads the node's cases for its decision and again for its summary: once, until it writes
        self._cases: dict[tuple[str, float], list[dict[str, Any]]] = {}

    @property
    def db(self) -> sqlite_utils.Database:
        """The same connection as a sqlite-utils Database, for readers and reports."""
        if self._db is None:
            import sqlite_utils

            self._db = sqlite_utils.Database(self.conn)
        return self._db

    def _insert(self, table: str, row: dict[str, Any]) -> int:
        cols = ", ".join(f"[{c}]" for c in row)
        cur = self.conn.execute(f"insert into [{table}] ({cols}) values ({', '.join('?' * len(row))})",
                                [_storable(v) for v in row.values()])
        return int(cur.lastrowid or 0)

    def _insert_all(self, table: str, rows) -> None:
        for row in rows:
            self._insert(table, row)

    def _query(self, sql: str, params: list) -> list[dict[str, Any]]:
        cur = self.conn.execute(sql, params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def _changed(self) -> None:
        self._cases.clear()

    def record_run(self, node: str, hook: str, verdict: str, findings: list[Finding], *, job_id: str | None = None,
                   duration_s: float = 0.0, driver: str | None = None, gpus: int = 0, error: str | None = None,
                   performance: list | None = None, models: dict[int, str] | None = None) -> int:
        now = self.clock()
        self._changed()  # a clean run ends an episode
        with self.conn:
            run_id = self._insert("runs", {
                "ts": now, "time": _iso(now), "node": node, "hook": hook, "job_id": job_id, "verdict": verdict,
                "duration_s": round(duration_s, 4), "driver": driver, "gpus": gpus, "error": error})
            self._insert_all("findings", (
                {"run_id": run_id, "ts": now, "node": node, "job_id": job_id, "check": f.check,
                 "severity": f.severity, "action": f.action, "gpu": f.gpu, "message": f.message,
                 "detail": f.detail, "xid": f.xid} for f in findings))
            if performance:
                self._insert_all("performance", (
                    {"run_id": run_id, "ts": now, "node": node, "gpu": p.gpu, "model": (models or {}).get(p.gpu),
                     "library": p.library, "mem_bw_gbps": p.mem_bw_gbps, "gemm_tflops": p.gemm_tflops,
                     "h2d_gbps": p.h2d_gbps, "sm_clock_mhz": p.sm_clock_mhz, "power_w": p.power_w,
                     "temperature_c": p.temperature_c, "reasons": ",".join(p.clock_event_reasons), "error": p.error}
                    for p in performance))
        return run_id

    def record_action(self, node: str, hook: str, action: str, reason: str, why: str, ok: bool,
                      error: str | None = None) -> None:
        now = self.clock()
        with self.conn:
            self._insert("actions", {"ts": now, "time": _iso(now), "node": node, "hook": hook, "action": action,
                                     "reason": reason, "why": why, "ok": int(ok), "error": error})

    def remember_domain(self, node: str, clique: int, cluster_uuid: str) -> None:
        """A row only when the domain changed: a run that registered in the same domain writes nothing."""
        if self.last_domain(node) != (clique, cluster_uuid):
            with self.conn:
                self._insert("domains", {"ts": self.clock(), "node": node, "clq": clique, "cuid": cluster_uuid})

    def last_domain(self, node: str) -> tuple[int, str] | None:
        row = self.conn.execute("select clq, cuid from domains where node = ? order by rowid desc limit 1",
                                [node]).fetchone()
        return (int(row[0]), str(row[1])) if row and row[0] is not None and row[1] else None

    def record_reboot(self, node: str, fault: str, boot: str | None) -> None:
        with self.conn:
            self._insert("reboots", {"ts": self.clock(), "node": node, "fault": fault, "boot": boot or "unknown"})

    def _last_clean(self, node: str) -> float:
        return self._query(
            "select coalesce(max(ts), 0) as ts from runs where node = ? and hook = 'healthcheck' "
            "and verdict in ('ok', 'warn')", [node])[0]["ts"]

    def record_remedy(self, node: str, cls: str, fault: str, rung: str, boot: str | None,
                      outcome: str = "pending", detail: str = "") -> int:
        self._changed()
        with self.conn:
            return self._insert("remedies", {
                "ts": self.clock(), "node": node, "class": cls, "fault": fault, "rung": rung,
                "boot": boot or "unknown", "episode": self._last_clean(node), "outcome": outcome, "detail": detail})

    def pending_remedies(self, node: str) -> list[dict[str, Any]]:
        return self._query("select id, class, fault, rung, boot from remedies where node = ? and outcome = 'pending' "
                           "order by id", [node])

    def settle_remedy(self, remedy_id: int, outcome: str, detail: str = "") -> None:
        self._changed()
        with self.conn:
            self.conn.execute("update remedies set outcome = ?, detail = trim(coalesce(detail, '') || ' ' || ?) "
                              "where id = ?", [outcome, detail, remedy_id])

    def open_validation(self, node: str):
        from ..remedy.returning import Open

        rows = self._query("select attempt, job, cause, ts from validations where node = ? and state = 'open' "
                           "order by id desc limit 1", [node])
        return Open(rows[0]["attempt"], rows[0]["job"], rows[0]["cause"], rows[0]["ts"]) if rows else None

    def last_validation(self, node: str) -> str | None:
        """The state of the node's latest validation (open, passed, failed, retried, unverified), or None."""
        rows = self._query("select state from validations where node = ? order by id desc limit 1", [node])
        return rows[0]["state"] if rows else None

    def start_validation(self, node: str, cause: str, attempt: int, job: str) -> None:
        with self.conn:
            self.conn.execute("update validations set state = 'retried', ended = ? where node = ? and state = 'open'",
                              [self.clock(), node])
            self._insert("validations", {"ts": self.clock(), "node": node, "cause": cause, "attempt": attempt,
                                         "job": job, "state": "open", "detail": "", "ended": None})

    def end_validation(self, node: str, state: str, detail: str = "") -> None:
        with self.conn:
            self.conn.execute("update validations set state = ?, detail = ?, ended = ? where node = ? and state = 'open'",
                              [state, detail, self.clock(), node])

    def open_suspect(self, node: str) -> dict[str, Any] | None:
        rows = self._query("select class, fault, reason, ts as since, passes, last_pass from suspects where node = ? "
                           "and state = 'open' order by id desc limit 1", [node])
        return rows[0] if rows else None

    def start_suspect(self, node: str, cls: str, fault: str, reason: str) -> None:
        with self.conn:
            self._insert("suspects", {"ts": self.clock(), "node": node, "class": cls, "fault": fault, "reason": reason,
                                      "state": "open", "passes": 0, "last_pass": None, "ended": None})

    def pass_suspect(self, node: str) -> None:
        with self.conn:
            self.conn.execute("update suspects set passes = passes + 1, last_pass = ? where node = ? and state = 'open'",
                              [self.clock(), node])

    def end_suspect(self, node: str, state: str) -> None:
        with self.conn:
            self.conn.execute("update suspects set state = ?, ended = ? where node = ? and state = 'open'",
                              [state, self.clock(), node])

    def close_case(self, node: str, cls: str) -> None:
        self._changed()
        with self.conn:
            self._insert("case_closes", {"ts": self.clock(), "node": node, "class": cls})

    def cases(self, node: str, window_s: float, now: float | None = None) -> list[dict[str, Any]]:
        """The node's open cases: per class, the attempts within the window since its last close, the
        first and last remedy, the latest outcome, and whether the current episode is still running."""
        if now is None and (node, window_s) in self._cases:
            return self._cases[(node, window_s)]
        cached = now is None
        now = self.clock() if now is None else now
        last_clean = self._last_clean(node)
        rows = self._query(
            "select r.class as class, count(distinct r.episode) as attempts, min(r.ts) as first, max(r.ts) as last, "
            "max(r.episode) as episode from remedies r where r.node = ? and r.ts > ? and r.ts > "
            "(select coalesce(max(c.ts), 0) from case_closes c where c.node = r.node and c.class = r.class) "
            "group by r.class order by max(r.ts)", [node, now - window_s])
        for row in rows:
            row["running"] = row.pop("episode") == last_clean
            latest = self._query("select outcome, rung from remedies where node = ? and class = ? "
                                 "order by id desc limit 1", [node, row["class"]])[0]
            row["outcome"], row["rung"] = latest["outcome"], latest["rung"]
        if cached:
            self._cases[(node, window_s)] = rows
        return rows

    def jobs_left_behind(self, node: str, since: float) -> list[str]:
        """Jobs a prolog of this node started since `since` that no epilog here ended and that were not yet
        sent away (a `requeue` action saying `job N:`), oldest first: jobs the node or its slurmd died under."""
        started = [str(r["job_id"]) for r in self._query(
            "select job_id from runs where hook = 'prolog' and node = ? and ts > ? and job_id is not null "
            "order by id", [node, since]) if r["job_id"]]
        ended = {str(r["job_id"]) for r in self._query(
            "select job_id from runs where hook = 'epilog' and node = ? and ts > ? and job_id is not null",
            [node, since])}
        sent = {str(r["why"]).split(":", 1)[0][4:] for r in self._query(
            "select why from actions where action = 'requeue' and node = ? and ts > ? and why like 'job %:%'",
            [node, since])}
        return list(dict.fromkeys(j for j in started if j not in ended and j not in sent))

    def node_history(self, node: str, window: int = 50, attempt_window_s: float = 7 * 86400) -> NodeHistory:
        from ..remedy.decide import NodeHistory

        # clean health checks since the last bad run of any hook (a failed prolog restarts the count)
        rows = self._query("select hook, verdict from runs where node = ? order by id desc limit ?", [node, window])
        clean = 0
        for row in rows:
            if row["verdict"] not in ("ok", "warn"):
                break
            clean += row["hook"] == "healthcheck"
        last_resume = self._query(
            "select coalesce(max(ts), 0) as ts from actions where node = ? and action = 'resume' and ok = 1",
            [node])[0]["ts"]
        hook_failure = self._query(
            "select count(*) as n from runs where node = ? and hook in ('prolog', 'epilog') "
            "and verdict in ('reboot', 'drain') and ts > ?", [node, last_resume])[0]["n"] > 0
        # reboots count until the node is clean again: a fault that comes back later starts afresh
        last_clean = self._last_clean(node)
        reboot_boots: dict[str, list[str]] = {}
        for row in self._query("select fault, boot from reboots where node = ? and ts > ? order by ts",
                               [node, last_clean]):
            reboot_boots.setdefault(row["fault"], []).append(row["boot"])
        resets: dict[str, list[str]] = {}
        for row in self._query("select fault, boot from remedies where node = ? and rung = 'reset' and episode = ? "
                               "order by id", [node, last_clean]):
            resets.setdefault(row["fault"], []).append(row["boot"])
        cases = self.cases(node, attempt_window_s)
        return NodeHistory(clean_runs=clean, hook_failure=hook_failure, reboot_boots=reboot_boots, resets=resets,
                           attempts={c["class"]: c["attempts"] for c in cases},
                           running={c["class"] for c in cases if c["running"]}, suspect=self.open_suspect(node))

    def prune(self, days: int = RETENTION_DAYS) -> None:
        cutoff = self.clock() - days * 86400
        with self.conn:
            for table in ("findings", "actions", "reboots", "performance", "runs", "remedies", "case_closes",
                          "validations"):
                self.conn.execute(f"delete from [{table}] where ts < ?", [cutoff])

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        return self._query("select * from runs order by id desc limit ?", [limit])

    def close(self) -> None:
        self.conn.close()


class HistoryError(Exception):
    """A history that cannot be read as asked: one line, for the `history` command."""


def parse_since(text: str, now: float) -> float:
    """`--since`: an age (90s, 30m, 2h, 7d) before `now`, or an ISO time; the epoch seconds it means."""
    import re

    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text.strip())
    if m:
        return now - float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise HistoryError(f"--since {text!r}: an ISO time or an age like 2h") from None


def read_recent(path: str, since: float = 0.0, gpu: int | None = None, limit: int = 50) -> dict[str, list[dict]]:
    """The newest `limit` runs, findings and performance results since `since` (findings and results of
    one `gpu` where given), read-only: what `slurm-gpufleet history` shows."""
    if not os.path.exists(path):
        raise HistoryError(f"{path}: no history")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error as exc:   # a directory, a device
        raise HistoryError(f"{path}: {exc}") from None
    conn.row_factory = sqlite3.Row
    gpu_clause = " and gpu = ?" if gpu is not None else ""
    args: list[Any] = [since] + ([gpu] if gpu is not None else [])
    try:
        runs = [dict(r) for r in conn.execute("select id, time, hook, job_id, verdict, duration_s, driver from runs "
                                              "where ts >= ? order by id desc limit ?", [since, limit])]
        finds = [dict(r) for r in conn.execute(f"select run_id, job_id, [check], severity, action, gpu, message, xid "
                                               f"from findings where ts >= ?{gpu_clause} order by ts desc limit ?",
                                               args + [limit])]
        tables = {r[0] for r in conn.execute("select name from sqlite_master")}
        perf = [dict(r) for r in conn.execute(f"select ts, gpu, model, mem_bw_gbps, gemm_tflops, h2d_gbps, sm_clock_mhz, "
                                              f"power_w, temperature_c, reasons from performance where ts >= ?"
                                              f"{gpu_clause} order by ts desc limit ?", args + [limit])] \
            if "performance" in tables else []
        # the ladder's steps: every action (observe mode's "would" ones included), every remedy with its
        # outcome, every validation run
        steps = [dict(r) for r in conn.execute("select time, hook, action, reason, why, ok, error from actions "
                                               "where ts >= ? order by ts desc, rowid desc limit ?", [since, limit])] \
            if "actions" in tables else []
        remedies = [dict(r) for r in conn.execute("select ts, class, fault, rung, boot, outcome, detail from remedies "
                                                  "where ts >= ? order by id desc limit ?", [since, limit])] \
            if "remedies" in tables else []
        validations = [dict(r) for r in conn.execute("select ts, cause, attempt, job, state, detail, ended from "
                                                     "validations where ts >= ? order by id desc limit ?",
                                                     [since, limit])] if "validations" in tables else []
    except sqlite3.Error as exc:
        raise HistoryError(f"{path}: {exc}") from None
    finally:
        conn.close()
    for row in remedies + validations:
        row["time"] = _iso(row.pop("ts"))
    return {"runs": runs, "findings": finds, "performance": perf, "actions": steps, "remedies": remedies,
            "validations": validations}


def _schema(conn: sqlite3.Connection) -> None:
    # "performance" is always there, so that pruning and the fleet view never meet "no such table"
    for table, columns in _TABLES.items():
        conn.execute(f"create table if not exists [{table}] ({columns})")
    for name, on in _INDEXES.items():
        conn.execute(f"create index if not exists [{name}] on {on}")


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds")
