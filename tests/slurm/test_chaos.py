"""Chaos on the real mini-cluster: no state lost, `resume` converges, nothing left behind (reservation,
drain, raised weight) when slurmctld restarts mid-rollout or another process holds the state DB."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
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


def _resume_in_background(mc, env=None):
    env = {**mc.env, "SLURM_GPUFLEET_CONFIG": str(mc.dir / "etc" / "gpufleet.toml"), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "slurm_gpufleet.cli", "maintain", "resume"],
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _counts(mc) -> dict[str, int]:
    r = mc.gpufleet("maintain", "status", "--json")
    return json.loads(r.stdout)["counts"] if r.returncode == 0 else {}


def test_apply_killed_with_9_at_random_points_20_times_then_resume_converges(mc, tmp_path):
    mc.wait_published()
    (mc.dir / "hooks" / "upgrade-sleep").write_text("2")  # commands long enough to be killed around
    plan_file, _ = plan(mc, tmp_path, nodes="n[1-6]")
    rng = random.Random(20261130)
    kills: list[dict[str, int]] = []
    errors = []
    proc = _apply_in_background(mc, plan_file)
    # killed before it recorded the rollout, an apply leaves nothing to resume (an admin applies again):
    # the kills start once the rollout is in the store, however slowly a loaded machine starts Python
    mc.wait(lambda: bool(_counts(mc)), 60, "the rollout recorded")
    while len(kills) < 22:
        time.sleep(rng.uniform(0.4, 2.5))
        if proc.poll() is not None:
            break  # finished between two kills
        proc.kill()  # SIGKILL: no cleanup runs; its upgrade commands go on without it
        _, err = proc.communicate(timeout=30)
        errors.append(err)
        kills.append(_counts(mc))
        proc = _resume_in_background(mc)
    out, err = proc.communicate(timeout=300)
    errors.append(err)
    if proc.returncode != 0:
        r = mc.gpufleet("maintain", "resume")
        audit = mc.maintain_db("select ts, node, event, detail from audit order by ts")
        logs = "".join(f"\n== {f.name}\n" + "\n".join(f.read_text().splitlines()[-30:])
                       for f in sorted((mc.dir / "log").glob("*")) if f.name in (
                           "upgrades.log", "upgrade-overlaps.log", "slurmd-n1.log", "reboots.log"))
        runs = mc.history("n1", "select * from runs order by rowid desc limit 8")
        ierr = mc.dir / "state" / "gpufleet" / "internal-errors.log"
        logs += f"\nExtra n1: {mc.node('n1').get('Extra')}\nruns: {runs}\n" + (ierr.read_text() if ierr.exists() else "")
        assert r.returncode == 0, r.stdout + r.stderr + "\n".join(map(str, audit[-40:])) + logs
    assert len(kills) >= 20, kills
    assert not any("internal error" in e or "Traceback" in e for e in errors), errors
    status = json.loads(mc.gpufleet("maintain", "status", "--json").stdout)
    assert status["state"] == "done" and status["counts"] == {"done": 6}, status
    assert leftovers(mc) == ("", [])
    assert {n: mc.node(n)["Weight"] for n in mc.nodes} == {n: "1" for n in mc.nodes}
    for node in ("n1", "n2", "n3", "n4", "n5", "n6"):
        assert mc.driver(node) == TARGET
    # a command a killed apply left running was waited for, never run a second time beside itself
    assert not (mc.dir / "log" / "upgrade-overlaps.log").exists()
    caught = {s for k in kills for s, n in k.items() if n and s not in ("pending", "done")}
    runs = len((mc.dir / "log" / "upgrades.log").read_text().splitlines())
    print(f"\n{len(kills)} kill -9s; caught nodes in {sorted(caught)}; {runs} upgrade command runs for 6 nodes")
    assert {"upgrading", "returning"} & caught, kills


def test_slurmd_of_a_node_being_upgraded_killed(mc, tmp_path):
    mc.wait_published()
    (mc.dir / "hooks" / "upgrade-sleep").write_text("4")
    plan_file, p = plan(mc, tmp_path, nodes="n[1-2]")
    canary = p["waves"][0]["nodes"][0]
    proc = _apply_in_background(mc, plan_file)
    log = mc.dir / "log" / "upgrades.log"  # the command writes its line, then installs for 4 s
    mc.wait(lambda: log.exists() and f" {canary} " in log.read_text(), 60, "the canary's upgrade command running")
    pid = int((mc.dir / "run" / f"slurmd-{canary}.pid").read_text())
    os.kill(pid, signal.SIGKILL)  # its slurmd dies in the middle of the install
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    status = json.loads(mc.gpufleet("maintain", "status", "--json").stdout)
    assert status["counts"] == {"done": 2}, status
    assert leftovers(mc) == ("", [])
    new_pid = int((mc.dir / "run" / f"slurmd-{canary}.pid").read_text())
    assert new_pid != pid and os.path.exists(f"/proc/{new_pid}")
    assert mc.driver(canary) == TARGET


def _mount_small_tmpfs(path, size="1m") -> bool:
    path.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def _fill(path) -> None:
    fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass  # ENOSPC: full
    finally:
        os.close(fd)


def test_disk_full_under_the_rollout_state_then_resume_converges(mc, tmp_path):
    small = tmp_path / "small"
    if not _mount_small_tmpfs(small):
        pytest.skip("cannot mount a tmpfs here (needs root, as CI runs)")
    try:
        mc.wait_published()
        config = tmp_path / "gpufleet.toml"
        text = (mc.dir / "etc" / "gpufleet.toml").read_text()
        config.write_text(re.sub(r'(?m)^db = ".*"$', f'db = "{small}/maintain.db"', text))
        env = {"SLURM_GPUFLEET_CONFIG": str(config)}
        out_plan = tmp_path / "plan.json"
        r = mc.gpufleet("maintain", "plan", "--target-driver", TARGET, "--nodes", "n[1-4]", "--out", str(out_plan),
                        env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        proc = subprocess.Popen([sys.executable, "-m", "slurm_gpufleet.cli", "maintain", "apply", str(out_plan)],
                                env={**mc.env, **env}, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        db = small / "maintain.db"
        mc.wait(lambda: _query_done(db) >= 1, 120, "the canary done")
        _fill(small)  # the disk is full from here on
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 1, out + err
        lines = [line for line in err.splitlines() if "error" in line]
        assert "internal error" not in err and "Traceback" not in err, err
        assert any("the rollout's state cannot be written" in line and "full" in line for line in lines), err
        (small / "filler").unlink()  # space again
        r = mc.gpufleet("maintain", "resume", env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        status = json.loads(mc.gpufleet("maintain", "status", "--json", env=env).stdout)
        assert status["state"] == "done" and status["counts"] == {"done": 4}, status
        assert leftovers(mc) == ("", [])
        for node in ("n1", "n2", "n3", "n4"):
            assert mc.driver(node) == TARGET
        print(f"\ndisk full under the rollout state: apply stopped with: {lines[-1]}")
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def _query_done(db) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("select count(*) from nodes where state = 'done'").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_disk_full_under_the_nodes_history_never_stops_a_drain(mc, tmp_path):
    """A real full file system under the node's state (history, breaker, job windows): the health check
    still drains the faulty node with its reason, says why once, and raises no internal error."""
    small = tmp_path / "small"
    if not _mount_small_tmpfs(small, "512k"):
        pytest.skip("cannot mount a tmpfs here (needs root, as CI runs)")
    inside = None
    if mc.root:  # the health check runs in the release's root: the same full file system there
        inside = Path(f"{mc.root}{small}")
        inside.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", str(small), str(inside)], check=True)
    try:
        config = tmp_path / "gpufleet.toml"
        text = (mc.dir / "etc" / "gpufleet.toml").read_text()
        config.write_text(re.sub(r'(?m)^state_dir = ".*"$', f'state_dir = "{small}"', text))
        check = [str(mc.dir / "sbin" / "slurm-gpufleet-healthcheck"), "--config", str(config), "--node", "n6"]
        env = {"SLURMD_NODENAME": "n6"}
        first = subprocess.run(check, capture_output=True, text=True, env=env, timeout=60)
        assert first.returncode == 0 and (small / "n6.db").exists(), first.stderr  # its history, while there is room
        _fill(small)
        mc.fault("n6", 1, "row_remap_failure")
        run = subprocess.run(check, capture_output=True, text=True, env=env, timeout=60)
        assert "internal error" not in run.stderr and "Traceback" not in run.stderr, run.stderr
        info = mc.node("n6")
        assert "DRAIN" in info["State"] and info["Reason"].startswith("memory gpu1"), (info, run.stderr)
        assert "history" in run.stderr and "unavailable" in run.stderr, run.stderr
        print(f"\nfull disk under the node's state: drained; said: {run.stderr.strip().splitlines()[-1]}")
    finally:
        if inside:
            subprocess.run(["umount", "-l", str(inside)], check=False)
        subprocess.run(["umount", "-l", str(small)], check=False)
