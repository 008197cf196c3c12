"""Per-node history in SQLite (sqlite-utils): every run, finding, action and reboot request.

WAL mode and a busy timeout make it safe when the prolog, the epilog and the health check of one node
write at the same time.  The file is created 0600.  Imported only when a hook has something to record:
sqlite-utils stays off the prolog's success path.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from typing import Any

import sqlite_utils

from .findings import Finding
from .slurm.actions import NodeHistory
from .sqlitedb import open_db

RETENTION_DAYS = 90


def db_path(state_dir: str, node: str) -> str:
    return os.path.join(state_dir, f"{node}.db")


class History:
    def __init__(self, path: str):
        self.path = path
        self.db = open_db(path, _schema)

    def record_run(self, node: str, hook: str, verdict: str, findings: list[Finding], *, job_id: str | None = None,
                   duration_s: float = 0.0, driver: str | None = None, gpus: int = 0, error: str | None = None,
                   performance: list | None = None, models: dict[int, str] | None = None) -> int:
        now = time.time()
        with self.db.conn:
            run_id = self.db["runs"].insert({
                "ts": now, "time": _iso(now), "node": node, "hook": hook, "job_id": job_id, "verdict": verdict,
                "duration_s": round(duration_s, 4), "driver": driver, "gpus": gpus, "error": error}).last_pk
            self.db["findings"].insert_all(
                {"run_id": run_id, "ts": now, "node": node, "job_id": job_id, "check": f.check,
                 "severity": f.severity, "action": f.action, "gpu": f.gpu, "message": f.message,
                 "detail": f.detail, "xid": f.xid} for f in findings)
            if performance:
                self.db["performance"].insert_all(
                    {"run_id": run_id, "ts": now, "node": node, "gpu": p.gpu, "model": (models or {}).get(p.gpu),
                     "library": p.library, "mem_bw_gbps": p.mem_bw_gbps, "gemm_tflops": p.gemm_tflops,
                     "h2d_gbps": p.h2d_gbps, "sm_clock_mhz": p.sm_clock_mhz, "power_w": p.power_w,
                     "temperature_c": p.temperature_c, "reasons": ",".join(p.clock_event_reasons), "error": p.error}
                    for p in performance)
        return int(run_id)

    def record_action(self, node: str, hook: str, action: str, reason: str, why: str, ok: bool,
                      error: str | None = None) -> None:
        now = time.time()
        self.db["actions"].insert({"ts": now, "time": _iso(now), "node": node, "hook": hook, "action": action,
                                   "reason": reason, "why": why, "ok": int(ok), "error": error})

    def record_reboot(self, node: str, fault: str, boot: str | None) -> None:
        self.db["reboots"].insert({"ts": time.time(), "node": node, "fault": fault, "boot": boot or "unknown"})

    def node_history(self, node: str, window: int = 50) -> NodeHistory:
        # clean health checks since the last bad run of any hook (a failed prolog restarts the count)
        rows = list(self.db.query(
            "select hook, verdict from runs where node = ? order by id desc limit ?", [node, window]))
        clean = 0
        for row in rows:
            if row["verdict"] not in ("ok", "warn"):
                break
            clean += row["hook"] == "healthcheck"
        last_resume = next(self.db.query(
            "select coalesce(max(ts), 0) as ts from actions where node = ? and action = 'resume' and ok = 1",
            [node]))["ts"]
        hook_failure = next(self.db.query(
            "select count(*) as n from runs where node = ? and hook in ('prolog', 'epilog') "
            "and verdict in ('reboot', 'drain') and ts > ?", [node, last_resume]))["n"] > 0
        # reboots count until the node is clean again: a fault that comes back later starts afresh
        last_clean = next(self.db.query(
            "select coalesce(max(ts), 0) as ts from runs where node = ? and hook = 'healthcheck' "
            "and verdict in ('ok', 'warn')", [node]))["ts"]
        reboot_boots: dict[str, list[str]] = {}
        for row in self.db.query("select fault, boot from reboots where node = ? and ts > ? order by ts",
                                 [node, last_clean]):
            reboot_boots.setdefault(row["fault"], []).append(row["boot"])
        return NodeHistory(clean_runs=clean, hook_failure=hook_failure, reboot_boots=reboot_boots)

    def prune(self, days: int = RETENTION_DAYS) -> None:
        cutoff = time.time() - days * 86400
        with self.db.conn:
            for table in ("findings", "actions", "reboots", "performance", "runs"):
                self.db.execute(f"delete from [{table}] where ts < ?", [cutoff])

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        return list(self.db.query("select * from runs order by id desc limit ?", [limit]))

    def close(self) -> None:
        self.db.conn.close()


def _schema(db: sqlite_utils.Database) -> None:
    if "performance" not in db.table_names():
        # always there, so that pruning and the fleet view never meet "no such table"
        db["performance"].create({"run_id": int, "ts": float, "node": str, "gpu": int, "model": str,
                                  "library": str, "mem_bw_gbps": float, "gemm_tflops": float,
                                  "h2d_gbps": float, "sm_clock_mhz": float, "power_w": float,
                                  "temperature_c": float, "reasons": str, "error": str}, if_not_exists=True)
    if "runs" not in db.table_names():
        db["runs"].create({"id": int, "ts": float, "time": str, "node": str, "hook": str, "job_id": str,
                           "verdict": str, "duration_s": float, "driver": str, "gpus": int, "error": str},
                          pk="id", if_not_exists=True)
        db["runs"].create_index(["hook", "id"], if_not_exists=True)
    if "findings" not in db.table_names():
        db["findings"].create({"run_id": int, "ts": float, "node": str, "job_id": str, "check": str,
                               "severity": str, "action": str, "gpu": int, "message": str, "detail": str,
                               "xid": int}, if_not_exists=True)
        db["findings"].create_index(["run_id"], if_not_exists=True)
    if "actions" not in db.table_names():
        db["actions"].create({"ts": float, "time": str, "node": str, "hook": str, "action": str,
                              "reason": str, "why": str, "ok": int, "error": str}, if_not_exists=True)
    if "reboots" not in db.table_names():
        db["reboots"].create({"ts": float, "node": str, "fault": str, "boot": str}, if_not_exists=True)


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds")
