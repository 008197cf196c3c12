"""The rollout store opened by several processes at once: an apply and an admin's status, or two status
calls, on a fresh file or on one written by an older release."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

from slurm_gpufleet.maintain.store import Store

OPEN_AND_READ = ("import sys; from slurm_gpufleet.maintain.store import Store; s = Store(sys.argv[1]); "
                 "s.active(); print(sorted(s.db['nodes'].columns_dict))")


def _open_at_once(path, count: int = 6) -> list[str]:
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_AND_READ, str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(count)]
    results = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    return [out for out, _ in results]


def test_a_fresh_store_opened_by_six_processes_at_once_gets_one_schema(tmp_path):
    for attempt in range(2):
        path = tmp_path / f"fresh{attempt}.db"
        outs = _open_at_once(path)
        assert len(set(outs)) == 1, outs
        assert {"slot", "started", "registered", "validated", "job"} <= set(Store(str(path)).db["nodes"].columns_dict)


def test_a_store_from_the_first_release_is_migrated_once_while_opened_concurrently(tmp_path):
    for attempt in range(2):
        path = tmp_path / f"old{attempt}.db"
        conn = sqlite3.connect(path)
        conn.executescript(
            "create table rollouts (id text primary key, state text, target text, strategy text, plan text, "
            "created float, updated float);"
            "create table nodes (rollout text, node text, wave integer, state text, prior text, "
            "previous_driver text, boot text, error text, weight integer, updated float, primary key (rollout, node));"
            "create table audit (ts float, rollout text, node text, event text, detail text);"
            "insert into rollouts values ('r1', 'done', '535.1', 'rolling', '{}', 1.0, 2.0);"
            "insert into nodes values ('r1', 'n1', 0, 'done', null, '525.1', null, null, null, 2.0);")
        conn.close()
        _open_at_once(path)
        store = Store(str(path))
        assert {"slot", "holder"} <= set(store.db["nodes"].columns_dict) | set(store.db["rollouts"].columns_dict)
        assert {"gates", "event_rates", "preemptions"} <= set(store.db.table_names())
        assert store.rollout("r1")["state"] == "done"  # nothing lost
        assert [r["node"] for r in store.db.query("select node from nodes")] == ["n1"]
