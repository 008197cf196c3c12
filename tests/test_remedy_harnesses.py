"""One carrier, two harnesses: each failure class through the remedy carrier once under the health check's
harness (tests/ladder_harness.py: `hooks.common.act` on the node read through NVML, the site's reset
command a real program) and once under the fault simulator (`fleet simulate-faults`' gpufleet strategy),
the same rungs in the same order."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import REPO

FAKE_NVML = str(REPO / "tests" / "fake_pynvml" / "recorded")

# (the simulator's class, how the harness shows it on the node, the level of remedy that fixes it)
CASES = [
    *[(cls, "memory", level) for cls in ("hbm", "sram") for level in ("reset", "reboot", "repair")],
    # an Xid a reboot does not clear is judged a drain by the Xid check itself after 3 boots ("a reset does
    # not fix it"), which the simulator does not model: its repair level is the memory classes' alone
    *[(cls, "xid", level) for cls in ("gpu", "gsp") for level in ("reset", "reboot")],
]


def _harness(tmp_path, kind: str, level: str, *flags: str) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{FAKE_NVML}:{REPO}"}
    r = subprocess.run([sys.executable, str(REPO / "tests" / "ladder_harness.py"), str(tmp_path / "node"), kind,
                        level, *flags], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "refused" not in r.stderr and "internal error" not in r.stderr, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _simulator(cls: str, level: str) -> list[str]:
    from slurm_gpufleet.simulators.faultmodel import Fault, load_model
    from slurm_gpufleet.simulators.faultsim import _fault_run

    model = load_model()
    c = next(c for c in model.classes if c.name == cls)
    out = _fault_run("gpufleet", model, [], 4, 8, 10 * 86400.0, [Fault(3600.0, 1, c, level, 0.5)], [],
                     hc_interval_s=300.0, checkpoint_every_h=1.0, restart_min=10.0, seed=0, big_jobs=frozenset())
    assert out["resolved"][level] == 1.0
    return [rung for _, rung in out["_rungs"]]


@pytest.mark.parametrize("cls,kind,level", CASES)
def test_each_class_climbs_the_same_rungs_under_the_health_check_and_the_fault_simulator(tmp_path, cls, kind, level):
    expected = {"reset": ["reset"], "reboot": ["reset", "reboot"], "repair": ["reset", "reboot", "reboot", "repair"]}
    seen = _harness(tmp_path, kind, level)
    assert seen["rungs"] == _simulator(cls, level) == expected[level]
    assert seen["reason"] == "", "back in service"
    assert [v[3] for v in seen["validations"]] == ["passed"], "through one validation run"
    # what `fleet cases` shows an admin along the way: a remedy under way, a repair to make, then nothing
    assert seen["statuses"] == {"reset": ["running", "watch"], "reboot": ["running", "watch"],
                                "repair": ["running", "repair", "running"]}[level], seen["statuses"]
    # (after a repair, the admin's `fleet repaired` and the validation run close the case)


def test_a_failed_validation_drains_for_repair_naming_its_remedy_and_job_and_the_case_says_so(tmp_path):
    """The reset fixed the GPU; its validation job fails twice (validation_retries = 1): drained for repair
    with a reason that names the remedy it followed and the job, whose output the node keeps; the case
    the node publishes (what `fleet cases` lists) is `validation_failed`."""
    seen = _harness(tmp_path, "memory", "reset", "--validation-fails")
    assert seen["rungs"] == ["reset"]
    validations = seen["validations"]
    assert [v[1:2] + v[3:4] for v in validations] == [[1, "retried"], [2, "failed"]], validations
    job = validations[-1][2]
    assert seen["reason"] == f"repair validation failed 2x after reset: job {job} FAILED [gpufleet]", seen
    assert [v[0].split(":")[0] for v in validations] == ["reset", "reset"], "the retry keeps its cause"
    assert validations[-1][4].endswith(f"output {tmp_path}/node/state/validation-{job}.out")
    assert [c[0] for c in seen["cases"]] == ["ecc"] and seen["cases"][0][4] == "validation_failed", seen["cases"]


def test_history_shows_the_ladder_s_steps_in_order(tmp_path):
    """`slurm-gpufleet history` on the node's own database: every step the ladder took, with its reason
    and why, each remedy's outcome, the validation run."""
    from support import run_cli

    _harness(tmp_path, "memory", "repair")
    db = tmp_path / "node" / "state" / "node00001.db"
    out = json.loads(run_cli("history", "--db", str(db), "--node", "node00001", "--json").stdout)
    assert [a["action"] for a in reversed(out["actions"])] == ["reset", "reboot", "reboot", "drain", "validate",
                                                              "validated"]
    assert [(r["rung"], r["outcome"]) for r in reversed(out["remedies"])] == [
        ("reset", "permanent"), ("reboot", "permanent"), ("reboot", "permanent"), ("repair", "succeeded")]
    text = run_cli("history", "--db", str(db), "--node", "node00001").stdout.decode()
    ladder = text[text.index("ladder:"):]
    assert ladder.index(" reset ") < ladder.index(" reboot ") < ladder.index("after 2 reboots") < ladder.index(
        " validated ")
    assert "validation runs:" in text and "after repair: passed" in text
    assert "gpu None" not in text and "gpu3  row remap pending" in text


@pytest.mark.parametrize("level", ["reset", "repair"])
def test_a_suspect_is_held_in_its_own_reservation_then_released_or_drained_for_repair(tmp_path, level):
    """A PCIe link trained x4 (a suspect class): held in gpufleet-suspect-<node> (no drain: its running job
    would finish), re-checked each run here (suspect_recheck_min = 0); two clean re-checks release it,
    a re-check that still finds it drains it for repair; `fleet cases` shows the hold."""
    seen = _harness(tmp_path, "pcie", level)
    assert seen["reservations"][0] == "gpufleet-suspect-node00001"
    acts = [a for a, _, _ in seen["actions"]]
    assert acts[0] == "suspect" and "drain" not in acts[:1]
    # the number a job selects on (`sbatch --extra "suspect=0"`): 1 while held, 0 once released or drained
    assert seen["suspects"][0] == 1 and seen["suspects"][-1] == 0, seen["suspects"]
    if level == "reset":   # clean from the third run on: two clean re-checks, then released
        assert seen["suspects"] == [1, 1, 0], seen["suspects"]
        assert acts == ["suspect", "suspect_pass", "release"], acts
        assert seen["reason"] == "" and seen["reservations"][-1] == ""
        assert seen["rungs"] == ["suspect"] and seen["statuses"] == ["suspect", "watch"]
    else:
        assert acts[:2] == ["suspect", "drain"], acts
        assert seen["actions"][1][1] == "repair pcie suspect re-check failed: pcie gpu2 PCIe x4 < x16 [gpufleet]"
        assert seen["reservations"][1] == "", "the hold's reservation deleted with the drain"
        assert seen["rungs"][:2] == ["suspect", "repair"] and seen["statuses"][0] == "repair"


def test_a_suspect_reservation_left_by_a_run_that_stopped_half_way_is_taken_as_it_is(tmp_path):
    """The reservation was made, the run stopped before the history said so: the next run's create is
    refused (as slurmctld refuses a name in use), and the node is held in the one there."""
    from slurm_gpufleet.judging.findings import Finding
    from slurm_gpufleet.judging.pipeline import Report
    from slurm_gpufleet.policy import Policy, SlurmSettings
    from slurm_gpufleet.readers.snapshot import Gpu, NodeSnapshot
    from slurm_gpufleet.records.history import History
    from slurm_gpufleet.remedy.carrier import Carrier
    from slurm_gpufleet.remedy.decide import Ladder
    from slurm_gpufleet.simulators.rollout import Simulator
    from slurm_gpufleet.simulators.simslurm import SimSlurm
    from slurm_gpufleet.slurm.actuator import make_actuator
    from slurm_gpufleet.slurm.base import SlurmError
    from slurm_gpufleet.slurm.ownership import HEALTH

    class Slurm(SimSlurm):
        def create_reservation(self, name, nodes, start, minutes):
            if name in self.reservations_:
                raise SlurmError(f"scontrol create reservation: {name}: Duplicate reservation name")
            super().create_reservation(name, nodes, start, minutes)

    sim = Simulator([], 2, 8)
    slurm = Slurm(sim)
    slurm.create_reservation("gpufleet-suspect-node00001", ["node00001"], None, 60)
    settings = SlurmSettings(state_dir=str(tmp_path))
    history = History(str(tmp_path / "h.db"), clock=lambda: sim.now)
    carrier = Carrier("node00001", Policy(slurm=settings), history, slurm,
                      make_actuator(slurm, HEALTH, settings, clock=lambda: sim.now), Ladder(suspect_classes=("pcie",)))
    finding = Finding("pcie", "drain", "inspect_hardware", 2, "PCIe x4 < x16")
    report = Report("drain", [finding], NodeSnapshot(host="node00001", gpus=[Gpu(k, processes=[]) for k in range(8)]))
    done = carrier.carry(carrier.step("healthcheck", slurm.node("node00001"), report), "healthcheck")
    assert done.ok and done.action.kind == "suspect", done
    assert history.open_suspect("node00001")["class"] == "pcie"


@pytest.mark.parametrize("mode", ["full", "observe", "breaker"])
def test_the_prolog_decides_on_the_carrier_with_the_ladder_s_reason(tmp_path, mode):
    """The prolog runs the carrier (hooks/prolog._carried): a fault fails the job with the ladder's reason,
    here a repair (the class's attempts capped), and the breaker and the mode are asked as for a drain;
    slurmd makes the drain itself, so the carrier writes none."""
    from slurm_gpufleet.judging.findings import Finding
    from slurm_gpufleet.judging.pipeline import Report
    from slurm_gpufleet.policy import Policy, SlurmSettings
    from slurm_gpufleet.readers.snapshot import Gpu, NodeSnapshot
    from slurm_gpufleet.records.history import History
    from slurm_gpufleet.remedy.carrier import Carrier
    from slurm_gpufleet.remedy.decide import Ladder
    from slurm_gpufleet.simulators.rollout import Simulator
    from slurm_gpufleet.simulators.simslurm import SimSlurm
    from slurm_gpufleet.slurm import breaker
    from slurm_gpufleet.slurm.actuator import make_actuator
    from slurm_gpufleet.slurm.ownership import HEALTH

    sim = Simulator([], 2, 8)
    slurm = SimSlurm(sim)
    settings = SlurmSettings(state_dir=str(tmp_path), breaker_file=str(tmp_path / "breaker.json"))
    if mode == "breaker":
        breaker.open_(settings.breaker_path, "node00002", "2 of 2 nodes drained in 300 s")
    group = "observe" if mode == "observe" else "full"
    history = History(str(tmp_path / "h.db"), clock=lambda: sim.now)
    carrier = Carrier("node00001", Policy(slurm=settings), history, slurm,
                      make_actuator(slurm, HEALTH, settings, clock=lambda: sim.now, modes=group),
                      Ladder(max_attempts=1, mode=group))
    finding = Finding("memory", "reboot", "reset_gpu", 1, "row remap pending")
    report = Report("reboot", [finding], NodeSnapshot(host="node00001", gpus=[Gpu(k, processes=[]) for k in range(8)]))
    step = carrier.step("prolog", slurm.node("node00001"), report)
    done = carrier.carry(step, "prolog")
    carrier.close()
    assert not slurm.node("node00001").drained   # slurmd's drain, for the failed prolog, is not the carrier's
    if mode == "full":
        assert done.action.kind == "fail" and done.action.reason.startswith("repair ecc attempt 1 of 1"), done
        assert carrier.moves == [("in_service", "repair", "fail")], carrier.moves
    elif mode == "observe":
        assert done.action.kind == "none" and step.observed.kind == "fail", (done, step)
        said = history.db.execute("select action, why from actions").fetchall()
        assert said == [("observe", f"would fail: {step.observed.why}")], said
    else:
        assert done.action.kind == "none" and done.blocked, done


@pytest.mark.parametrize("said", ["nothing", "exit 0", "exit 3", "exit 75"])
def test_a_validation_job_slurm_forgot_is_read_from_its_output_or_left_unverified(tmp_path, said):
    """The validation job left Slurm (MinJobAge) before a health check read it: its output on the node says
    how it ended (the submitted script's last line); where it says nothing, past the job's time limit, or
    where the validation's own tools could not run (exit 75: dcgmi hung, its host engine unreachable), the
    outcome is `unverified`: the node back in service, never drained, and `fleet cases` says so."""
    from slurm_gpufleet.judging.findings import Finding
    from slurm_gpufleet.judging.pipeline import Report
    from slurm_gpufleet.policy import Policy, SlurmSettings
    from slurm_gpufleet.readers.snapshot import Gpu, NodeSnapshot
    from slurm_gpufleet.records.history import History
    from slurm_gpufleet.remedy.carrier import Carrier
    from slurm_gpufleet.remedy.decide import Ladder
    from slurm_gpufleet.remedy.returning import EXIT_MARK, reservation_name
    from slurm_gpufleet.remedy.validation import validation_output
    from slurm_gpufleet.simulators.rollout import Simulator
    from slurm_gpufleet.simulators.simslurm import SimSlurm
    from slurm_gpufleet.slurm.actuator import make_actuator
    from slurm_gpufleet.slurm.ownership import HEALTH

    sim = Simulator([], 2, 8)
    slurm = SimSlurm(sim)
    settings = SlurmSettings(state_dir=str(tmp_path), validation_command="dcgmi diag -r 3",
                             validation_timeout_minutes=30, validation_retries=0)
    history = History(str(tmp_path / "h.db"), clock=lambda: sim.now)
    node = "node00001"
    # the node was reset for a fault, then put in its reservation with its validation job: the job is gone now
    sim.now = 60.0
    history.record_remedy(node, "hbm", "memory:1:row remap pending", "reset", None, "succeeded")
    slurm.create_reservation(reservation_name(node), [node], None, 60)
    history.start_validation(node, "reset: memory gpu1 row remap pending", 1, "4242")
    if said != "nothing":
        with open(validation_output(str(tmp_path), "4242"), "w") as fh:
            fh.write(f"host engine unreachable\n{EXIT_MARK}{said.split()[1]}\n")
    sim.now = 31 * 60 + 121.0   # past its time limit and the grace
    carrier = Carrier(node, Policy(slurm=settings), history, slurm, make_actuator(slurm, HEALTH, settings,
                      clock=lambda: sim.now), Ladder())
    ok = Report("ok", [Finding("memory", "ok", "none", None, "fine")],
                NodeSnapshot(host=node, gpus=[Gpu(k, processes=[]) for k in range(8)]))
    step = carrier.step("healthcheck", slurm.node(node), ok)
    done = carrier.carry(step, "healthcheck")
    carrier.close()
    shown = slurm.node(node)
    if said == "exit 0":
        assert history.last_validation(node) == "passed" and not shown.drained
    elif said == "exit 3":   # failed, no retry left: drained for repair, naming the job
        assert history.last_validation(node) == "failed" and shown.drained, shown
        assert shown.reason.startswith("repair validation failed 1x after reset: job 4242"), shown.reason
    else:
        assert history.last_validation(node) == "unverified" and not shown.drained and not shown.down, shown
        detail = history.db.execute("select detail from validations").fetchall()[-1][0]
        assert ("could not judge the GPUs (exit 75): host engine unreachable" in detail) == (said == "exit 75"), detail
        assert reservation_name(node) not in slurm.reservations_
        assert [c[4] for c in carrier.cases(shown, step)] == ["unverified"], carrier.cases(shown, step)
    assert done.ok
