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


def _rows_by_sql(path, rid):
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute("select * from nodes where rollout = ? order by wave, node", [rid])]
    conn.close()
    return rows


def test_node_rows_follow_this_store_s_writes_and_another_process_s(tmp_path):
    """The node rows come from a mirror kept in memory; what this store writes and what another
    connection commits (an admin's `maintain abort` in another process) are both seen at the next read,
    equal to what SQL reads from the file."""
    from slurm_gpufleet.maintain.planner import make_plan
    from slurm_gpufleet.policy import parse_policy
    from slurm_gpufleet.simulators.rollout import SimFleet

    fleet = SimFleet(3)
    plan = make_plan(fleet.fleet_state(), "580.95.05", [n.name for n in fleet.sim.nodes],
                     parse_policy("[maintain]\nmax_unavailable = 1\n"), now=fleet.sim.now, force=True).to_dict()
    plan["id"] = "r1"
    path = str(tmp_path / "maintain.db")
    store = Store(path)
    store.create_rollout(plan, at=1.0)
    first = store.nodes("r1")
    assert len(first) == 3 and first == _rows_by_sql(path, "r1")
    a, b, c = (r["node"] for r in first)
    first[0]["state"] = "scribbled"  # a caller's copy: the store's rows stay as they are
    store.apply("r1", [(a, "reserved", "taken", {"started": 5.0}), (c, None, "", {"slot": 9.0})], at=5.0)
    mine = store.nodes("r1")
    assert mine == _rows_by_sql(path, "r1")
    by_node = {r["node"]: r for r in mine}
    assert (by_node[a]["state"], by_node[a]["started"], by_node[a]["updated"], by_node[c]["slot"]) \
        == ("reserved", 5.0, 5.0, 9.0)
    other = Store(path)  # another process's connection
    other.apply("r1", [(b, "failed", "by the other", {"error": "stopped by an admin"})], at=6.0)
    seen = store.nodes("r1")
    assert seen == _rows_by_sql(path, "r1") and {r["node"]: r for r in seen}[b]["state"] == "failed", seen
    store.apply("r1", [(c, "reserved", "", {})], at=7.0)
    assert store.nodes("r1") == _rows_by_sql(path, "r1")
