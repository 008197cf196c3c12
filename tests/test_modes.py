"""One mode rule for every write (slurm/actuator.py): observe changes no node's state in Slurm, quarantine
never reboots, full does all.  First the rule on every typed effect against a recording backend, then every
program Slurm runs (health check, prolog, epilog) under each mode against the recording scontrol, with a
GPU fault and with an NVML whose every call hangs."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from support import REPO

from slurm_gpufleet.slurm import effects as E
from slurm_gpufleet.slurm.actuator import NotPermitted, make_actuator
from slurm_gpufleet.slurm.base import NodeInfo

sys.path.insert(0, str(REPO / "tests"))
from fake_slurm.node import fault, healthcheck, setup  # noqa: E402

HUNG_NVML = str(REPO / "tests" / "fake_pynvml" / "hung")
# what a recording scontrol may see from observe mode: reads, and the node's published summary/features
PUBLISHED = ("extra", "comment", "availablefeatures", "activefeatures")


class Recorder:
    """A backend that records every write by its name (the actuator's writer) and reads one fleet."""

    def __init__(self, fleet):
        self.fleet, self.writes = fleet, []

    def nodes(self):
        return list(self.fleet)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        def write(*args):
            self.writes.append(name)
            return "77" if name.startswith("submit") else None
        return write


def _every_effect(node: NodeInfo):
    return [E.Drain((node,), "x [gpufleet]"), E.SetReason((node,), "y [gpufleet]"), E.Resume((node,)),
            E.Reboot((node,), "z [gpufleet]"), E.Reserve("gpufleet-suspect-n1", ("n1",), None, 60),
            E.Release("gpufleet-suspect-n1"), E.Submit("j", "n1", "", "p", "true", 5, "c"),
            E.Cancel(("1",)), E.Requeue(("1",)), E.Exclude("1", ("n1",)), E.HoldJobs(("1",)),
            E.ReleaseJobs(("1",)), E.Signal("1", "USR1", True), E.Weight(("n1",), 5),
            E.Publish("n1", {"extra": "{}"}), E.AdminComment("1", "gpufleet=x"), E.JobComment("1", "c")]


def _apply_each(actuator, effects):
    refused = []
    for e in effects:
        try:
            actuator.apply(e)
        except NotPermitted:
            refused.append(type(e).__name__)
    return refused


@pytest.mark.parametrize("mode", ["observe", "quarantine", "full", "a-typo"])
def test_every_effect_is_held_to_the_node_groups_mode(tmp_path, mode):
    from slurm_gpufleet.policy import SlurmSettings

    free = NodeInfo("n1", "IDLE", frozenset())
    ours = NodeInfo("n1", "IDLE", frozenset({"DRAIN"}), reason="x [gpufleet]")
    settings = SlurmSettings(state_dir=str(tmp_path), breaker_threshold="100%")
    writes = []
    for node in (free, ours):
        rec = Recorder([node, NodeInfo("n2", "IDLE", frozenset())])
        refused = _apply_each(make_actuator(rec, "health", settings, modes=mode), _every_effect(node))
        writes += rec.writes
    records = {"set_fields", "set_admin_comment", "set_job_comment"}
    if mode in ("observe", "a-typo"):  # an unknown mode never widens what may be written
        assert set(writes) == records, writes
        assert set(refused) == {"Reserve", "Release", "Submit", "Cancel", "Requeue", "Exclude", "HoldJobs",
                                "ReleaseJobs", "Signal", "Weight"}
    elif mode == "quarantine":
        assert "reboot_asap_nodes" not in writes and "drain_nodes" in writes and refused == []
        assert {"set_reason_nodes", "resume_nodes", "create_reservation", "submit_job"} <= set(writes)
    else:
        assert "reboot_asap_nodes" in writes and "drain_nodes" in writes and refused == []


def test_a_node_left_by_its_mode_is_said_so_and_a_fleet_actor_holds_each_node_to_its_own_group(tmp_path):
    from slurm_gpufleet.policy import SlurmSettings, parse_policy

    policy = parse_policy('[[group]]\nname = "new"\nnodes = "n[1-2]"\nmode = "observe"\n')
    fleet = [NodeInfo(f"n{i}", "IDLE", frozenset()) for i in range(1, 5)]
    rec = Recorder(fleet)
    actuator = make_actuator(rec, "straggler", SlurmSettings(state_dir=str(tmp_path), breaker_threshold="100%"),
                        fleet=fleet, modes=policy.mode_of)
    done = actuator.drain_each([(n, "slow [gpufleet]") for n in fleet])
    assert done.done == ["n3", "n4"]
    assert done.left == {"n1": "observe mode: would drain", "n2": "observe mode: would drain"}


# ----------------------------------------------------------------------------- the programs Slurm runs
def _node(tmp_path, mode: str, hung: bool = False):
    bin_dir, gpus, env = setup(tmp_path)
    with open(env["SLURM_GPUFLEET_CONFIG"], "a") as fh:
        fh.write(f'read_timeout_s = 3\nvalidation_command = ""\nkernel_log = "{tmp_path}/kmsg"\n'
                 f'[defaults]\nmode = "{mode}"\n')
    (tmp_path / "kmsg").mkdir()
    if hung:
        env["PYTHONPATH"] = f"{HUNG_NVML}:{REPO}"
    return bin_dir, gpus, env


def _hook(bin_dir, env, name: str):
    log = bin_dir / "calls.jsonl"
    log.unlink(missing_ok=True)
    t = time.monotonic()
    r = subprocess.run([sys.executable, str(REPO / "prolog_epilog" / f"slurm-gpufleet-{name}")], capture_output=True,
                       text=True, timeout=60, env={**env, "SLURM_JOB_ID": "42", "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7"})
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return calls, time.monotonic() - t, r


def _state_changes(calls) -> list:
    """Every call that changes Slurm's state: any verb but a read, and any update beyond the published fields."""
    out = []
    for c in calls:
        if c[:1] in (["show"], ["--version"]):
            continue
        if c[:1] == ["update"] and all(a.split("=", 1)[0].lower() in PUBLISHED for a in c[2:]):
            continue
        out.append(c)
    return out


def _run_all(bin_dir, env):
    """The health check, the prolog, the epilog: (name, Slurm calls, seconds, process) each."""
    calls, wall, r = healthcheck(bin_dir, env)
    out = [("healthcheck", calls, wall, r)]
    for name in ("prolog", "epilog"):
        out.append((name, *_hook(bin_dir, env, name)))
    return out


# the hung case waits out three programs' read timeouts (about 9 s): the slow tier's
@pytest.mark.parametrize("hung", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["gpu-fault", "nvml-hung"])
def test_observe_mode_changes_no_node_state_from_any_program(tmp_path, hung):
    bin_dir, gpus, env = _node(tmp_path, "observe", hung)
    if not hung:
        healthcheck(bin_dir, env)
        fault(gpus, 5, "row_remap_failure")
    for name, calls, wall, r in _run_all(bin_dir, env):
        assert "internal error" not in r.stderr, (name, r.stderr)
        assert _state_changes(calls) == [], (name, calls)
        # slurmd drains a node whose prolog or epilog fails: observe mode's never do
        assert name == "healthcheck" or r.returncode == 0, (name, r.returncode, r.stderr)
        assert wall < 45, (name, wall)
    if not hung:  # what it would do is published
        extra = json.loads(json.loads((bin_dir / "node.json").read_text())["extra"])
        assert extra["v"] == "drain" and extra["obs"].startswith("drain: memory gpu5 row remapping failed")


@pytest.mark.slow   # waits out the read timeout (about 3 s)
def test_full_mode_drains_a_hung_nvml_within_its_bound(tmp_path):
    bin_dir, gpus, env = _node(tmp_path, "full", hung=True)
    calls, wall, r = healthcheck(bin_dir, env)
    assert wall < 45
    drains = [c for c in _state_changes(calls) if "state=drain" in c]
    assert drains and "reason=NVML timeout [gpufleet]" in drains[0], calls
    assert "timed out" in r.stderr


def test_quarantine_mode_drains_from_every_program_but_never_reboots(tmp_path):
    bin_dir, gpus, env = _node(tmp_path, "quarantine")
    healthcheck(bin_dir, env)
    fault(gpus, 1, "row_remap_pending")   # reset-fixable: full mode would reset or reboot
    seen = _run_all(bin_dir, env)
    every = [c for _, calls, _, _ in seen for c in calls]
    assert not [c for c in every if c[:1] == ["reboot"]], every
    assert json.loads((bin_dir / "node.json").read_text())["drain"]


def test_fleet_repaired_is_the_tables_admin_move_held_to_ownership_and_mode(tmp_path):
    """remedy.handback, which `fleet repaired`, the fault simulator and the ladder harness call: a node drained
    for repair or by our checks is handed back (validate after repair); an admin's drain, a rack's tray (the
    domain returns whole) and an observe node are left, each said why; a node in service has nothing to do."""
    from slurm_gpufleet.policy import SlurmSettings, parse_policy
    from slurm_gpufleet.remedy.handback import hand_back

    policy = parse_policy('[[group]]\nname = "new"\nnodes = "n5"\nmode = "observe"\n')

    def held(name, reason):
        return NodeInfo(name, "IDLE", frozenset({"DRAIN"}), reason=reason)

    nodes = [held("n1", "repair ecc attempt 3 of 3 in 7d: memory gpu1 row remap pending [gpufleet]"),
             held("n2", "memory gpu5 row remapping failed [gpufleet]"), held("n3", "fan broken"),
             held("n4", "rack nvl72-a: 3 trays with fabric faults in 600 s [gpufleet]"),
             held("n5", "memory gpu5 row remapping failed [gpufleet]"), NodeInfo("n6", "IDLE")]
    rec = Recorder(nodes)
    actuator = make_actuator(rec, "health", SlurmSettings(state_dir=str(tmp_path)), modes=policy.mode_of)
    dry = hand_back(actuator, nodes, dry_run=True)
    assert rec.writes == [] and dry.marked == ["n1", "n2", "n5"]
    done = hand_back(actuator, nodes)
    assert done.marked == ["n1", "n2"] and rec.writes == ["set_reason_nodes"]
    assert done.free == ["n6"] and set(done.left) == {"n3", "n4", "n5"}
    assert done.left["n5"] == "observe mode: would set reason" and "returns whole" in done.left["n4"]
