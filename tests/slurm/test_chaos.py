"""Chaos on the real mini-cluster: no state lost, `resume` converges, nothing left behind (reservation,
drain, raised weight) when slurmctld restarts mid-rollout or another process holds the state DB."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

from conftest import REPO
from test_maintain import TARGET, leftovers, plan


def _apply_in_background(mc, plan_file):
    env = {**mc.env, "SLURM_GPUFLEET_CONFIG": str(mc.dir / "etc" / "gpufleet.toml")}
    return subprocess.Popen([sys.executable, "-m", "slurm_gpufleet.cli", "maintain", "apply", str(plan_file)],
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _restart_slurmctld(mc) -> None:
    pid = int((mc.dir / "run" / "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.1)
    time.sleep(1.0)  # down for a moment, as in a restart or a failover
    subprocess.run(["slurmctld", "-f", mc.env["SLURM_CONF"]], env=mc.env, check=True, timeout=30)
    mc.wait(lambda: mc.run("scontrol", "ping", check=False).returncode == 0, 30, "slurmctld back")


def _done(mc) -> int:
    return (mc.maintain_db("select count(*) from nodes where state = 'done'") or [(0,)])[0][0]


def test_slurmctld_restarts_twice_during_apply(mc, tmp_path):
    mc.wait_published()
    plan_file, _ = plan(mc, tmp_path, nodes="n[1-6]")
    proc = _apply_in_background(mc, plan_file)
    restarts = 0
    for after_done in (1, 3):
        mc.wait(lambda n=after_done: _done(mc) >= n or proc.poll() is not None, 120, f"{after_done} node(s) done")
        if proc.poll() is None:
            _restart_slurmctld(mc)
            restarts += 1
    out, err = proc.communicate(timeout=300)
    if proc.returncode != 0:  # an outage longer than slurm_outage_s ends apply; resume must finish
        r = mc.gpufleet("maintain", "resume")
        assert r.returncode == 0, r.stdout + r.stderr
    status = json.loads(mc.gpufleet("maintain", "status", "--json").stdout)
    assert restarts == 2 and status["state"] == "done" and status["counts"] == {"done": 6}, (status, out, err)
    assert leftovers(mc) == ("", [])
    assert {mc.node(n)["Weight"] for n in mc.nodes} == {"1"}
    for node in ("n1", "n2", "n3", "n4", "n5", "n6"):
        assert mc.driver(node) == TARGET
    retries = mc.maintain_db("select count(*) from audit where event = 'slurm unreachable, retrying'")[0][0]
    print(f"\nslurmctld restarted {restarts} times during apply; {retries} step(s) retried; apply rc "
          f"{proc.returncode}")


def test_another_process_holding_the_state_db(mc, tmp_path):
    mc.wait_published()
    plan_file, _ = plan(mc, tmp_path, nodes="n[1-3]")
    proc = _apply_in_background(mc, plan_file)
    mc.wait(lambda: _done(mc) >= 1, 120, "the canary done")
    held = threading.Event()

    def hold() -> None:  # e.g. an admin's sqlite3 shell in a write transaction
        conn = sqlite3.connect(mc.dir / "state" / "maintain.db", timeout=30)
        conn.execute("begin exclusive")
        held.set()
        time.sleep(8)
        conn.rollback()
        conn.close()

    t = threading.Thread(target=hold)
    t.start()
    held.wait(30)
    t.join()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert "internal error" not in err
    status = json.loads(mc.gpufleet("maintain", "status", "--json").stdout)
    assert status["counts"] == {"done": 3}
    assert leftovers(mc) == ("", [])
