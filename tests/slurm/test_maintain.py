"""Staged driver rollouts on the real mini-cluster (8 nodes, budget 2, partitions dev n1-4 / prod n5-8)."""

from __future__ import annotations

import datetime
import json
import threading
import time

import gpustate
import pytest
from conftest import BLOCKS

from slurm_gpufleet.slurm.commands import expand_hostlist

TARGET = "595.71.05"
OLD = "580.159.04"


def plan(mc, tmp_path, nodes="n[1-8]", target=TARGET, extra=()):
    out = tmp_path / "plan.json"
    r = mc.gpufleet("maintain", "plan", "--target-driver", target, "--nodes", nodes, "--out", str(out), *extra)
    assert r.returncode == 0, r.stdout + r.stderr
    return out, json.loads(out.read_text())


def intervals(mc) -> list[tuple[str, float, float]]:
    """(node, out-of-service from, until) from the rollout's audit log."""
    rows = mc.maintain_db("select node, event, ts from audit where node is not null order by ts")
    start: dict[str, float] = {}
    spans = []
    for node, event, ts in rows:
        if event == "reserved" and node not in start:
            start[node] = ts
        elif event in ("done", "rolled_back", "skipped") and node in start:
            spans.append((node, start.pop(node), ts))
    spans += [(n, t, float("inf")) for n, t in start.items()]
    return spans


def max_concurrent(spans) -> int:
    points = sorted([(a, 1) for _, a, _ in spans] + [(b, -1) for _, _, b in spans])
    now = best = 0
    for _, d in points:
        now += d
        best = max(best, now)
    return best


def apply_sampling(c, plan_file, sample, every: float) -> tuple:
    """`maintain apply` of the plan, with what `sample()` reads of Slurm meanwhile, every `every` s."""
    samples: list = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            samples.append(sample())
            time.sleep(every)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        return c.gpufleet("maintain", "apply", str(plan_file)), samples
    finally:
        stop.set()
        t.join()


def leftovers(mc) -> tuple[str, list[str]]:
    resv = mc.run("scontrol", "show", "reservation", "-o").stdout
    drained = [n for n in mc.nodes if "DRAIN" in mc.state(n)]
    return ("" if "No reservations" in resv else resv), drained


def test_plan_gate_refuses_an_architecture_the_driver_dropped(mc, tmp_path):
    mc.wait_published()
    # our nodes are Hopper: fine on R590; the gate refuses a branch past end of life (R550) per group
    r = mc.gpufleet("maintain", "plan", "--target-driver", "550.163.01", "--nodes", "n[1-8]")
    assert r.returncode == 1 and "REFUSED" in r.stdout and "past end of life" in r.stdout
    r = mc.gpufleet("maintain", "plan", "--target-driver", "550.163.01", "--nodes", "n[1-8]", "--force", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["forced"] is True


@pytest.mark.release("MAINT reservations, their flags and updates")
def test_rollout_between_jobs_within_budget_canary_first(mc, tmp_path):
    mc.wait_published()
    jobs = [mc.start_job(n, 2, secs) for n, secs in (("n2", 12), ("n3", 25), ("n6", 8), ("n7", 18))]
    plan_file, p = plan(mc, tmp_path)
    canary = p["waves"][0]["nodes"]
    assert p["waves"][0]["kind"] == "canary" and len(canary) == 1
    assert all(len(w["nodes"]) <= 2 for w in p["waves"])
    # less critical partition (dev: n1-n4) goes before the critical one (prod: n5-n8)
    order = [n for w in p["waves"] for n in w["nodes"]]
    assert max(order.index(n) for n in ("n1", "n2", "n3", "n4")) < min(order.index(n) for n in ("n5", "n6", "n7", "n8"))

    first_seen: dict[str, tuple[float, list[str]]] = {}  # slot reservation -> its StartTime and nodes

    def sample() -> int:  # what Slurm itself shows: nodes drained by the rollout or inside its reservations
        out = mc.run("sinfo", "-h", "-N", "-o", "%N|%T|%E", check=False).stdout  # a node per partition
        for line in mc.run("scontrol", "show", "reservation", "-o", check=False).stdout.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            name = fields.get("ReservationName", "")
            if name.startswith("gpufleet_") and "_s" in name and name not in first_seen:
                start = datetime.datetime.strptime(fields["StartTime"], "%Y-%m-%dT%H:%M:%S").timestamp()
                first_seen[name] = (start, expand_hostlist(fields["Nodes"]))
        return len({line.split("|")[0] for line in out.splitlines() if mc.out_of_service(line)})

    r, samples = apply_sampling(mc, plan_file, sample, 0.2)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "done (done 8)" in r.stdout
    # each slot's MAINT reservation starts at the node's planned slot_start, to the minute
    slot = {n["node"]: n["slot_start"] for n in p["nodes"]}
    assert first_seen
    for name, (start, nodes) in first_seen.items():
        for node in nodes:
            assert abs(start - slot[node]) <= 60, (name, node, start, slot[node])
    for job in jobs:
        info = mc.job(job)
        assert (info["JobState"], info["Restarts"]) == ("COMPLETED", "0"), info
    spans = intervals(mc)
    assert max_concurrent(spans) <= 2
    assert max(samples) <= 2
    first = min(spans, key=lambda s: s[1])
    assert first[0] == canary[0]
    canary_done = next(b for n, _, b in spans if n == canary[0])
    assert all(a >= canary_done for n, a, _ in spans if n != canary[0])
    assert leftovers(mc) == ("", [])
    # new jobs were steered away from nodes waiting for their turn, and every weight is back
    steer = mc.maintain_db("select detail from audit where event = 'slurm set_weight_nodes'")
    assert any(d.endswith(" 1001") for (d,) in steer) and any(d.endswith(" 1") for (d,) in steer)
    # every step read the fleet three times (four where Slurm has blocks: the topology, while nodes come
    # back, to check each is back in its block) and wrote at most max_slurm_writes_per_step (2) times
    calls = mc.maintain_db("select detail from audit where event = 'slurm calls'")[-1][0]
    assert f"{4 if BLOCKS else 3} reads" in calls and "writes max 2" in calls, calls
    assert {n: mc.node(n)["Weight"] for n in mc.nodes} == {n: "1" for n in mc.nodes}
    upgraded = (mc.dir / "log" / "upgrades.log").read_text().split()
    assert sorted(upgraded[i + 1] for i in range(0, len(upgraded), 4)) == mc.nodes
    status = json.loads(mc.gpufleet("maintain", "status", "--json").stdout)
    assert status["state"] == "done" and status["counts"] == {"done": 8}


def test_bad_driver_fails_validation_halts_and_rollback_restores(mc, tmp_path):
    mc.wait_published()
    plan_file, p = plan(mc, tmp_path, nodes="n[1-4]")
    victim = p["waves"][1]["nodes"][0]  # the first node after the canary
    (mc.gpus / f"{victim}.bad-driver").write_text(TARGET)
    r = mc.gpufleet("maintain", "apply", str(plan_file))
    assert r.returncode == 1
    status = json.loads(mc.gpufleet("maintain", "status", "--json").stdout)
    assert status["state"] == "halted"
    states = {n["node"]: n["state"] for n in status["nodes"]}
    assert states[victim] == "failed" and states[p["waves"][0]["nodes"][0]] == "done"
    assert sum(s == "pending" for s in states.values()) == 2  # halted before the rest
    info = mc.node(victim)
    assert "DRAIN" in info["State"] and info["Reason"].startswith("maintain")
    assert "validation failed" in info["Reason"]

    r = mc.gpufleet("maintain", "rollback")
    assert r.returncode == 0, r.stdout + r.stderr
    status = json.loads(mc.gpufleet("maintain", "status", "--json").stdout)
    assert status["state"] == "rolled_back"
    for n in status["nodes"]:
        assert n["state"] in ("rolled_back", "skipped"), n
    for node in ("n1", "n2", "n3", "n4"):
        assert mc.driver(node) == OLD
    assert leftovers(mc) == ("", [])


def _apply_killed_after(mc, plan_file, state: str, nth: int) -> int:
    """`maintain apply`, killed with SIGKILL from outside once its store holds the nth move into `state`
    (the product has no crash switch: the kill comes as an admin's or the OOM killer's would)."""
    from test_chaos import _apply_in_background

    proc = _apply_in_background(mc, plan_file)
    db = mc.dir / "state" / "maintain.db"
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            seen = mc.maintain_db("select count(*) from audit where event = ?", (state,)) if db.exists() else []
            if seen and seen[0][0] >= nth:  # (no table yet: nothing recorded)
                break
            time.sleep(0.05)
    finally:  # whatever happened here, no apply outlives the test
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=60)
    return proc.returncode


@pytest.mark.parametrize("crash_after", ["reserved", "upgrading", "returning", "validating", "done"])
def test_kill_9_at_each_transition_then_resume_converges(mc, tmp_path, crash_after):
    mc.wait_published()
    plan_file, p = plan(mc, tmp_path, nodes="n[1-3]")
    assert _apply_killed_after(mc, plan_file, crash_after, 2) == -9  # SIGKILL, as kill -9
    r = mc.gpufleet("maintain", "resume")
    assert r.returncode == 0, r.stdout + r.stderr + mc.failed_stories()
    status = json.loads(mc.gpufleet("maintain", "status", "--json").stdout)
    assert status["state"] == "done" and status["counts"] == {"done": 3}, status
    assert leftovers(mc) == ("", [])
    assert {mc.node(n)["Weight"] for n in mc.nodes} == {"1"}  # steering undone after the crash too
    for node in ("n1", "n2", "n3"):
        assert mc.driver(node) == TARGET


@pytest.mark.release("the published summary in one scontrol show nodes")
def test_fleet_inventory_reads_what_nodes_publish(mc):
    mc.wait_published()
    gpustate.write_atomic(gpustate.healthy_state(8, "n5", "570.172.08"), mc.gpu_file("n5"))
    mc.wait(lambda: '"drv":"570.172.08"' in mc.node("n5").get("Extra", ""), 3 * mc.hc_interval, "n5 publishing")
    r = mc.gpufleet("fleet", "--json")
    assert r.returncode == 0, r.stderr
    inv = json.loads(r.stdout)
    (group,) = inv["groups"].values()
    assert group["nodes"] == 8 and group["drivers"] == {"580.159.04": 7, "570.172.08": 1}
    assert group["off_standard"] == [{"node": "n5", "why": "driver 570.172.08 != 580.159.04"}]
    text = mc.gpufleet("fleet").stdout
    assert "off standard: 1" in text and "n5" in text


@pytest.mark.release("scontrol reboot ASAP and the states it shows")
def test_reboot_asap_strategy(mc, tmp_path):
    mc.wait_published()
    job = mc.start_job("n2", 2, 6)
    plan_file, p = plan(mc, tmp_path, nodes="n[1-3]", extra=("--strategy", "reboot-asap"))
    assert p["strategy"] == "reboot-asap"
    r = mc.gpufleet("maintain", "apply", str(plan_file))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (mc.job(job)["JobState"], mc.job(job)["Restarts"]) == ("COMPLETED", "0")
    reboots = (mc.dir / "log" / "reboots.log").read_text().split()
    assert sorted(reboots[1::2]) == ["n1", "n2", "n3"]  # each node emptied through `scontrol reboot ASAP`
    status = json.loads(mc.gpufleet("maintain", "status", "--json").stdout)
    assert status["counts"] == {"done": 3}
    assert leftovers(mc) == ("", [])


@pytest.mark.release("reservation deletes and weights")
def test_abort_gives_everything_back(mc, tmp_path):
    mc.wait_published()
    plan_file, p = plan(mc, tmp_path, nodes="n[1-4]")
    assert _apply_killed_after(mc, plan_file, "reserved", 3) == -9
    r = mc.gpufleet("maintain", "abort", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["state"] == "aborted"
    assert leftovers(mc) == ("", [])
    assert {mc.node(n)["Weight"] for n in mc.nodes} == {"1"}
    states = {n["node"]: n["state"] for n in json.loads(mc.gpufleet("maintain", "status", "--json").stdout)["nodes"]}
    assert sorted(states.values()).count("done") == 2 and set(states.values()) <= {"done", "skipped"}
    # the aborted plan applied again: its own rollout named, aborted, nothing done, and not exit 0 (apply's
    # 0 is "every node done")
    again = mc.gpufleet("maintain", "apply", "--json", str(plan_file))
    said = json.loads(again.stdout)
    assert again.returncode == 1 and said["rollout"] == p["id"] and said["state"] == "aborted", again.stdout
    assert said["note"] == "this plan's rollout had ended already (aborted): nothing was done now"
    # a new rollout may start once this one is aborted
    plan_file2, _ = plan(mc, tmp_path, nodes="n[5-6]")
    assert mc.gpufleet("maintain", "apply", str(plan_file2)).returncode == 0


@pytest.mark.release("sbatch --reservation and sacct")
def test_validation_job_runs_in_the_nodes_reservation_and_gates_release(mc, tmp_path):
    """validation_job: each upgraded node leaves the drain inside its maintenance reservation, and a real
    batch job (our own full check, through the node's NVML) runs there; a failing job fails the node."""
    mc.wait_published()
    config = tmp_path / "gpufleet.toml"
    failing = mc.dir / "hooks" / "validation-fails"
    job = (f"[ ! -e {failing}.$SLURMD_NODENAME ] && exec {mc.dir}/bin/node-python -m slurm_gpufleet.cli "
           f"check --level full --config {mc.dir}/etc/gpufleet.toml")
    text = (mc.dir / "etc" / "gpufleet.toml").read_text()
    config.write_text(text.replace("[maintain]\n", f"[maintain]\nvalidation_job = {json.dumps(job)}\n"
                                   "validation_job_timeout_s = 120\nmax_failures = 1\n", 1))
    env = {"SLURM_GPUFLEET_CONFIG": str(config)}
    plan_file = tmp_path / "plan.json"
    r = mc.gpufleet("maintain", "plan", "--target-driver", TARGET, "--nodes", "n[1-3]", "--out", str(plan_file),
                    env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    order = [n for w in json.loads(plan_file.read_text())["waves"] for n in w["nodes"]]
    victim = order[-1]
    (failing.parent / f"{failing.name}.{victim}").touch()
    r = mc.gpufleet("maintain", "apply", str(plan_file), env=env)
    assert r.returncode == 1 and "done (done 2, failed 1)" in r.stdout, r.stdout + r.stderr  # 1: a node failed
    rows = {node: (state, job, error) for node, state, job, error in
            mc.maintain_db("select node, state, job, error from nodes")}
    assert {n: s for n, (s, _, _) in rows.items()} == {order[0]: "done", order[1]: "done", victim: "failed"}
    submitted = dict(mc.maintain_db("select node, detail from audit where event = 'validation job submitted'"))
    for node, (state, job_id, _) in rows.items():
        # sbatch took it into a reservation of the rollout (Slurm refuses a reservation that does not hold
        # the node), and Slurm ran it there, on that node: a drained node starts no job
        assert submitted[node].startswith(f"job {job_id} in gpufleet_"), submitted
        info = mc.job(job_id)
        assert info["NodeList"] == node and info["JobName"].startswith("gpufleet-validate-"), info
        assert info["JobState"] == ("COMPLETED" if state == "done" else "FAILED"), info
    assert rows[victim][2] == f"validation job {rows[victim][1]} ended FAILED"
    reason = mc.node(victim)["Reason"]
    assert "DRAIN" in mc.state(victim) and "validation job" in reason, reason
    assert leftovers(mc) == ("", [victim])
    mc.run("scontrol", "update", f"nodename={victim}", "state=resume")


def _host_tree(root, kernels: dict[str, str | None], running: str) -> None:
    """A node's /boot, /lib/modules and /proc: each kernel with an nvidia module of that version (None: none)."""
    (root / "proc" / "sys" / "kernel").mkdir(parents=True)
    (root / "proc" / "sys" / "kernel" / "osrelease").write_text(running + "\n")
    (root / "boot").mkdir()
    for release, version in kernels.items():
        (root / "boot" / f"vmlinuz-{release}").write_text("kernel")
        mod = root / "lib" / "modules" / release / "updates" / "dkms"
        mod.mkdir(parents=True)
        if version:
            (mod / "nvidia.ko").write_bytes(gpustate.nvidia_module(version, signed=False))


def test_a_rollout_node_whose_next_kernel_lacks_the_module_fails_before_its_reboot(mc, tmp_path):
    """The install left the target's module for the running kernel, but the kernel that boots next (newer,
    from automatic updates) has none: the template's `slurm-gpufleet reboot-check` stops it before the
    reboot, and the node fails with that line, drained, never rebooted.  The other node passes the same look."""
    mc.wait_published()
    plan_file, p = plan(mc, tmp_path, nodes="n[1-2]")
    canary, victim = p["waves"][0]["nodes"][0], p["waves"][1]["nodes"][0]
    _host_tree(mc.dir / "hosts" / canary, {"6.1.0-28-amd64": TARGET}, "6.1.0-28-amd64")
    _host_tree(mc.dir / "hosts" / victim, {"6.1.0-28-amd64": TARGET, "6.1.0-31-amd64": None}, "6.1.0-28-amd64")
    slurmd_before = int((mc.dir / "run" / f"slurmd-{victim}.pid").read_text())
    r = mc.gpufleet("maintain", "apply", str(plan_file))
    assert r.returncode == 1, r.stdout + r.stderr
    states = dict(mc.maintain_db("select node, state from nodes"))
    assert states == {canary: "done", victim: "failed"}, states
    why = f"next boot kernel 6.1.0-31-amd64 has no nvidia {TARGET} module"
    error = mc.maintain_db("select error from nodes where node = ?", (victim,))[0][0]
    assert error == why, error
    assert mc.maintain_db("select count(*) from audit where node = ? and detail = ?",
                          (victim, f"upgrade command failed (rc 1): {why}")) == [(1,)]
    info = mc.node(victim)
    assert "DRAIN" in info["State"] and why in info["Reason"], info
    # never rebooted: the same slurmd, and its NVML still reports the old driver
    assert int((mc.dir / "run" / f"slurmd-{victim}.pid").read_text()) == slurmd_before
    assert mc.driver(victim) == OLD and mc.driver(canary) == TARGET
    mc.run("scontrol", "update", f"nodename={victim}", "state=resume")
