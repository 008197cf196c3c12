"""The evidence gate on the real mini-cluster: upgraded nodes' kernel logs get Xid 31 (MMU) events,
published by their own health checks; the rollout judges canary against control over the same seconds."""

from __future__ import annotations

import datetime as dt
import json
import random
import threading
import time

import pytest
from test_maintain import OLD, TARGET, leftovers, plan

GATE = ('gate = "evidence"\ngate_signals = ["xid_soft"]\ngate_min_soak_s = 10\ngate_max_soak_s = 90\n'
        'gate_on_timeout = "proceed"\n')


@pytest.fixture
def gated(mc):
    """The cluster's config with an evidence gate ([maintain] is its last table), restored afterwards."""
    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    config.write_text(original + GATE)
    yield mc
    config.write_text(original)


class Background:
    """`step()` every `tick` seconds in a thread, for the length of a `with` block."""

    def __init__(self, tick: float):
        self.tick = tick
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            self.step()
            self.stop.wait(self.tick)

    def step(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


class Xids(Background):
    """Xid 31 lines in each node's kernel log, Bernoulli per tick: `bad` per second on nodes whose NVML
    reports the target driver, `base` on the others."""

    def __init__(self, mc, base: float, bad: float, tick: float = 0.25):
        super().__init__(tick)
        self.mc, self.base, self.bad = mc, base, bad
        self.rng = random.Random(5)

    def step(self) -> None:
        for node in self.mc.nodes:
            rate = self.bad if self.mc.driver(node) == TARGET else self.base
            if self.rng.random() < rate * self.tick:
                stamp = dt.datetime.now().astimezone().isoformat(timespec="microseconds").replace(".", ",")
                with open(self.mc.gpus / f"{node}.kmsg", "a") as fh:
                    fh.write(f"{stamp} NVRM: Xid (PCI:0000:5d:00): 31, pid=4242, name=python3, "
                             "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted\n")


def test_a_bad_driver_halts_after_the_canary_naming_the_signal_and_a_kill_mid_soak_keeps_the_evidence(gated, tmp_path):
    from test_maintain import _apply_killed_after

    mc = gated
    mc.wait_published()
    plan_file, p = plan(mc, tmp_path)
    canary = p["waves"][0]["nodes"]
    with Xids(mc, base=0.2, bad=2.0):
        assert _apply_killed_after(mc, plan_file, "gate open", 1) == -9  # killed during the canary's soak
        kept = mc.maintain_db("select state from gates")
        assert kept, "the gate's state is in the store"
        r = mc.gpufleet("maintain", "resume")
    assert r.returncode == 1, r.stdout + r.stderr
    status = json.loads(mc.gpufleet("maintain", "status", "--json").stdout)
    assert status["state"] == "halted", status
    assert status["counts"].get("done") == len(canary) and status["counts"].get("pending") == 8 - len(canary)
    g = status["gate"]
    assert g["decision"] == "worse" and g["why"].startswith("xid_soft: canary "), g
    e = g["signals"]["xid_soft"]
    assert e["canary_events"] > 0 and e["control_events"] >= 0 and e["canary_node_hours"] > 0
    before = json.loads(kept[-1][0])["ev"]["xid_soft"]
    assert e["canary_node_hours"] >= before["canary_node_hours"] and e["control_node_hours"] >= before["control_node_hours"]
    text = mc.gpufleet("maintain", "status").stdout
    assert "evidence gate: worse" in text and "xid_soft" in text
    halted = mc.maintain_db("select detail from audit where event = 'rollout halted'")[0][0]
    assert halted.startswith("evidence gate: xid_soft: canary ")
    assert mc.driver(canary[0]) == TARGET and all(mc.driver(n) == OLD for n in mc.nodes if n not in canary)


def test_a_good_driver_passes_the_gate_and_completes(gated, tmp_path):
    mc = gated
    mc.wait_published()
    plan_file, p = plan(mc, tmp_path)
    with Xids(mc, base=1.5, bad=1.5):
        r = mc.gpufleet("maintain", "apply", str(plan_file), timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    status = json.loads(mc.gpufleet("maintain", "status", "--json").stdout)
    assert status["state"] == "done" and status["counts"] == {"done": 8}
    passed = [d for (d,) in mc.maintain_db("select detail from audit where event = 'gate passed'")]
    assert passed and "ruled out on xid_soft" in passed[0], passed  # the first stage, on evidence
    assert leftovers(mc) == ("", [])


def test_a_soak_shorter_than_a_health_check_is_refused(gated, tmp_path):
    mc = gated
    config = mc.dir / "etc" / "gpufleet.toml"
    config.write_text(config.read_text().replace("gate_min_soak_s = 10", "gate_min_soak_s = 2"))
    mc.wait_published()
    plan_file, _ = plan(mc, tmp_path)
    r = mc.gpufleet("maintain", "apply", str(plan_file))
    assert r.returncode == 2
    assert r.stderr.strip().endswith("gate_min_soak_s 2 is shorter than HealthCheckInterval 5: the gate would judge "
                                     "counters no health check has published yet"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


class FailingJobs(Background):
    """A one-node job every `every` seconds on each node: it fails (exit 3) where the node's NVML reports
    the target driver and succeeds elsewhere, as jobs do on a driver that breaks them."""

    def __init__(self, mc, every: float = 1.0):
        super().__init__(every)
        self.mc = mc
        self.submitted = {"fail": 0, "ok": 0}

    def step(self) -> None:
        shown = self.mc.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout.split("\n")
        idle = {line.split()[0] for line in shown if line.strip().endswith(" idle")}
        for node in self.mc.nodes:
            if node not in idle:
                continue
            bad = self.mc.driver(node) == TARGET
            r = self.mc.run("sbatch", "-o", "/dev/null", "-w", node, "--gres=gpu:1", "--time=1", "--wrap",
                            "exit 3" if bad else "true", check=False)
            if r.returncode == 0:
                self.submitted["fail" if bad else "ok"] += 1


def test_jobs_failing_on_upgraded_nodes_halt_the_rollout_on_job_endings(mc, tmp_path):
    """Slurm's own job records: jobs ending FAILED on the canary, none on the control (one squeue a step)."""
    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    # the canary's evidence is as fast as Slurm runs one-node jobs: on 2 cores beside two other clusters
    # and a DKMS build, 90 s of soak once gave too few ended jobs, the gate proceeded on its timeout and a
    # second wave went out before the evidence said worse; the gate decides as soon as it can, so a longer
    # limit costs nothing where jobs are quick
    config.write_text(original + GATE.replace('["xid_soft"]', '["job_fail"]')
                      .replace("gate_max_soak_s = 90", "gate_max_soak_s = 300"))
    try:
        mc.wait_published()
        plan_file, p = plan(mc, tmp_path)
        canary = p["waves"][0]["nodes"]
        with FailingJobs(mc) as jobs:
            r = mc.gpufleet("maintain", "apply", str(plan_file), timeout=600)
        assert r.returncode == 1, r.stdout + r.stderr
        assert jobs.submitted["fail"] > 0
        status = json.loads(mc.gpufleet("maintain", "status", "--json").stdout)
        assert status["state"] == "halted" and status["counts"].get("done") == len(canary), status
        e = status["gate"]["signals"]["job_fail"]
        assert status["gate"]["decision"] == "worse" and e["canary_events"] >= 5 and e["control_events"] == 0, e
        halted = mc.maintain_db("select detail from audit where event = 'rollout halted'")[0][0]
        assert halted.startswith("evidence gate: job_fail: canary "), halted
    finally:
        config.write_text(original)
        mc.run("scancel", "--state=PENDING", check=False)


def test_a_stage_waiting_for_approval_holds_no_node_beyond_those_under_way(mc, tmp_path):
    """Issue #43 on real Slurm: the canary shows soft Xids the control does not (worse at 0.95, short of
    the halt line), so at the soak's bound the next stage waits for `maintain approve`.  While it waits,
    no reservation of the rollout is on any node and every node is in service; `maintain status` says
    what it waits for and that it holds 0 nodes.  Each approval lets the rollout on, and it finishes."""
    from test_chaos import _apply_in_background

    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    # ([maintain] is the config's last table)
    config.write_text(original + 'gate = "evidence"\ngate_signals = ["xid_soft"]\ngate_min_soak_s = 10\n'
                                 'gate_max_soak_s = 40\n')
    proc = None
    try:
        mc.wait_published()
        plan_file, p = plan(mc, tmp_path)
        rid, canary = p["id"], p["waves"][0]["nodes"]
        proc = _apply_in_background(mc, plan_file)
        db = mc.dir / "state" / "maintain.db"
        deadline = time.monotonic() + 480
        xids_written = False
        waits = []
        while time.monotonic() < deadline and proc.poll() is None:
            status = json.loads(mc.gpufleet("maintain", "status", "--json").stdout) if db.exists() else {}
            gate = status.get("gate") or {}
            seen = (gate.get("signals") or {}).get("xid_soft", {}).get("canary_node_hours", 0)
            if not xids_written and seen > 0:  # the canary is in its cohort: three soft Xids, none elsewhere
                stamp = dt.datetime.now().astimezone().isoformat(timespec="microseconds").replace(".", ",")
                with open(mc.gpus / f"{canary[0]}.kmsg", "a") as fh:
                    for _ in range(3):
                        fh.write(f"{stamp} NVRM: Xid (PCI:0000:5d:00): 31, pid=4242, name=python3, Ch 00000008, "
                                 "intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted\n")
                xids_written = True
            waiting = status.get("waiting")
            if waiting and "maintain approve" in waiting["for"] and waiting["in_progress"] == 0:
                # nothing held: no reservation of the rollout, every node in service (idle, not drained)
                resv = mc.run("scontrol", "show", "reservation", "-o").stdout
                assert f"gpufleet_{rid}_" not in resv, resv
                states = {n: mc.state(n) for n in mc.nodes}
                assert not [n for n, st in states.items() if "DRAIN" in st or "MAINT" in st or "RESERVED" in st], states
                assert waiting["holds"] == 0, waiting
                text = mc.gpufleet("maintain", "status").stdout
                assert "waiting for `maintain approve`" in text and "holding 0 node(s)" in text, text
                waits.append((status["counts"], gate["boundary"]))
                r = mc.gpufleet("maintain", "approve", rid, "--why", "the Xid 31s are a known quirk")
                assert r.returncode == 0, r.stdout + r.stderr
            time.sleep(1.0)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
        config.write_text(original)
    assert proc.returncode == 0, out + err
    assert waits, "the gate never waited for an approval"
    assert waits[0][0].get("done") == len(canary) and waits[0][0].get("pending") == 8 - len(canary), waits
    status = json.loads(mc.gpufleet("maintain", "status", "--json").stdout)
    assert status["state"] == "done" and status["counts"] == {"done": 8}, status
    approved = [d for (d,) in mc.maintain_db("select detail from audit where event = 'gate passed'")]
    assert any("approved by" in d for d in approved), approved
    assert leftovers(mc) == ("", [])
