"""The remedy machine's table (remedy/table.py) holds every move the code makes: every decision over a grid
of nodes, verdicts, histories and modes, and the carrier's own moves (a reset, a validation)."""

from __future__ import annotations

import itertools

import pytest

from slurm_gpufleet.judging.findings import Finding
from slurm_gpufleet.remedy import table as T
from slurm_gpufleet.remedy.decide import Ladder, NodeHistory, decide
from slurm_gpufleet.slurm.base import NodeInfo

KEY = "memory:1:reset_gpu"
RESET = [Finding("memory", "reboot", "reset_gpu", 1, "row remap pending")]
REBOOT = [Finding("inventory", "reboot", "reboot_node", 2, "GPU lost")]
DRAIN = [Finding("memory", "drain", "drain", 0, "row remap failure")]
FABRIC = [Finding("fabric", "drain", "drain", 0, "fabric registration failed")]
PCIE = [Finding("pcie", "drain", "inspect_hardware", 2, "PCIe x4 < x16")]
HEAT = [Finding("thermal", "drain", "cool_off", 2, "HW thermal slowdown active")]
SUSPECT = {"class": "pcie", "fault": "pcie:2:inspect_hardware", "reason": "pcie gpu2 PCIe x4 < x16 [gpufleet]",
           "since": 1000.0, "passes": 0, "last_pass": None}

NODES = {
    "idle": NodeInfo("n1", "IDLE", boot_time="B2"),
    "busy": NodeInfo("n1", "ALLOCATED", boot_time="B2"),
    "drained": NodeInfo("n1", "IDLE", {"DRAIN"}, "memory gpu1 row remap pending [gpufleet]", boot_time="B2"),
    "drained busy": NodeInfo("n1", "MIXED", {"DRAIN"}, "memory gpu1 row remap pending [gpufleet]", boot_time="B2"),
    "returning": NodeInfo("n1", "DOWN", set(), "validate after reboot: memory gpu1 row remap pending [gpufleet] : "
                          "reboot issued : reboot complete", boot_time="B2"),
    "returning drained": NodeInfo("n1", "IDLE", {"DRAIN"}, "validate after reset: memory gpu1 x [gpufleet]",
                                  boot_time="B2"),
    "repair": NodeInfo("n1", "IDLE", {"DRAIN"}, "repair ecc attempt 3 of 3 in 7d: memory gpu1 x [gpufleet]",
                       boot_time="B2"),
    "rack": NodeInfo("n1", "IDLE", {"DRAIN"}, "rack nvl1 switch-side: n2 and 2 more tray(s) fabric [gpufleet]",
                     boot_time="B2"),
    "rebooting": NodeInfo("n1", "IDLE", {"DRAIN", "REBOOT_REQUESTED"}, "memory gpu1 row remap pending [gpufleet]",
                          boot_time="B2"),
    "hook": NodeInfo("n1", "IDLE", {"DRAIN"}, "Prolog error", boot_time="B2"),
    "admin": NodeInfo("n1", "IDLE", {"DRAIN"}, "admin: PSU swap", boot_time="B2"),
    "down": NodeInfo("n1", "DOWN", set(), "Not responding", boot_time="B2"),
}
VERDICTS = {"ok": [], "warn": [], "reboot": RESET, "reboot-node": REBOOT, "drain": DRAIN, "fabric": FABRIC,
            "pcie": PCIE, "heat": HEAT}
HISTORIES = [
    NodeHistory(),
    NodeHistory(clean_runs=3),
    NodeHistory(clean_runs=3, hook_failure=True),
    NodeHistory(resets={KEY: ["B2"]}, attempts={"ecc": 1}, running={"ecc"}),
    NodeHistory(reboot_boots={KEY: ["B1"]}, attempts={"ecc": 1}, running={"ecc"}),
    NodeHistory(reboot_boots={KEY: ["B0", "B1"]}, attempts={"ecc": 1}, running={"ecc"}),
    NodeHistory(reboot_boots={KEY: ["B2"]}, attempts={"ecc": 1}, running={"ecc"}),
    NodeHistory(attempts={"ecc": 2, "fallen_off_bus": 2, "thermal": 2}),
    NodeHistory(suspect=SUSPECT),
    NodeHistory(suspect={**SUSPECT, "passes": 2, "last_pass": 1500.0}),
]
LADDERS = [Ladder(mode=m, suspect_classes=("pcie", "thermal"), suspect_passes=3) for m in ("full", "quarantine", "observe")]
NOWS = (1100.0, 5000.0)   # within the first re-check interval of the suspect hold, and past it


def _grid():
    for (name, info), (v, findings), history, ladder, idle, now in itertools.product(
            NODES.items(), VERDICTS.items(), HISTORIES, LADDERS, (True, False), NOWS):
        verdict = v.split("-")[0] if v not in ("fabric", "pcie", "heat") else "drain"
        yield name, info, verdict, findings, history, ladder, idle, now


def test_every_decision_over_the_grid_is_a_move_of_the_table():
    seen: set[tuple[str, str]] = set()
    for name, info, verdict, findings, history, ladder, idle, now in _grid():
        action = decide(info, verdict, findings, history, 3, ladder=ladder, gpus_idle=idle, now=now)
        before = T.state_of(info, suspect=history.suspect is not None)
        after = T.target_of(action.kind, action.reason, action.rung, before)
        assert T.legal(before, after), (name, verdict, history, ladder.mode, action)
        seen.add((before, after))
    # every move the ladder makes from a state decide reads off Slurm is reached by some decision
    # (from resetting and validating, the escalation, and a validation turned off since it was asked are
    # the carrier's own moves: the harness tests reach them)
    from_slurm = {(a, b) for (a, b), (by, _) in T.MOVES.items()
                  if by == T.LADDER and a not in (T.RESETTING, T.VALIDATING) and b != T.RACK} - {(T.RETURNING, T.IN_SERVICE)}
    assert from_slurm - seen == set()


@pytest.mark.parametrize("name,state", [
    ("idle", T.IN_SERVICE), ("drained", T.DRAINED), ("returning", T.RETURNING), ("returning drained", T.RETURNING),
    ("repair", T.REPAIR), ("rack", T.RACK), ("rebooting", T.REBOOTING), ("hook", T.DRAINED),
    ("admin", T.OTHERS), ("down", T.OTHERS),
])
def test_the_state_is_read_off_what_slurm_shows(name, state):
    assert T.state_of(NODES[name]) == state


def test_a_validation_open_in_the_history_is_validating():
    assert T.state_of(NODES["idle"], validating=True) == T.VALIDATING


def test_every_state_is_reached_and_left_except_the_held_ones():
    into = {b for (_, b) in T.MOVES}
    out_of = {a for (a, _) in T.MOVES}
    assert set(T.STATES) - into == {T.OTHERS}       # someone else's node: never made by us
    assert set(T.STATES) - out_of == {T.OTHERS}
    assert all(by in (T.LADDER, T.SLURM, T.ADMIN) and why for by, why in T.MOVES.values())


def test_the_carrier_refuses_a_move_the_table_does_not_have():
    from slurm_gpufleet.remedy.carrier import Carrier

    c = Carrier("n1", None, None, None, None, Ladder())
    with pytest.raises(T.IllegalMove, match="repair -> in_service"):
        c._move(T.REPAIR, T.IN_SERVICE, "resume")   # an admin's move, never the ladder's
    c._move(T.DRAINED, T.RESETTING, "reset")
    assert c.moves == [("drained", "resetting", "reset")]


def test_heat_is_a_cool_off_drain_with_slurm_s_exit_until_its_attempts_are_capped():
    """A transient (heat): drained with ResumeAfter, each hold an attempt of its class; the capped one is a
    drain for repair with no exit of Slurm's; quarantine mode and hardware (a fan error) never have one."""
    from dataclasses import replace

    ladder = Ladder(max_attempts=3, cool_off_s=1800.0)
    idle = NODES["idle"]
    held = decide(idle, "drain", HEAT, NodeHistory(), 3, ladder=ladder)
    assert (held.kind, held.rung, held.resume_after_s) == ("drain", "cool_off", 1800)
    assert held.reason == "thermal gpu2 HW thermal slowdown active [gpufleet]"
    capped = decide(idle, "drain", HEAT, NodeHistory(attempts={"thermal": 2}), 3, ladder=ladder)
    assert (capped.kind, capped.rung, capped.resume_after_s) == ("drain", "repair", None)
    assert capped.reason.startswith("repair thermal"), capped.reason
    quarantine = decide(idle, "drain", HEAT, NodeHistory(), 3, ladder=replace(ladder, mode="quarantine"))
    assert quarantine.kind == "drain" and quarantine.resume_after_s is None
    fan = [Finding("thermal", "drain", "inspect_hardware", 2, "fan error")]
    assert decide(idle, "drain", fan, NodeHistory(), 3, ladder=ladder).resume_after_s is None


def test_every_kind_of_action_has_its_handler_in_the_carrier_and_no_other_word_is_an_action():
    from slurm_gpufleet.remedy.carrier import CARRY
    from slurm_gpufleet.remedy.decide import Action, Kind

    assert set(CARRY) == set(Kind)
    assert Action("drain").kind is Kind.DRAIN and Action("drain").kind == "drain"
    with pytest.raises(ValueError):
        Action("drian")
