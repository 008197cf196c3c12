"""Reasons say what happened first, so that `sinfo -R`'s 20-character column shows it, and end with the mark
that makes them ours (slurm/reasons.py); reasons written before the mark stay ours."""

from __future__ import annotations

from slurm_gpufleet.judging.findings import Finding
from slurm_gpufleet.remedy.decide import NodeHistory, decide
from slurm_gpufleet.slurm import reasons
from slurm_gpufleet.slurm.actions import make_reason
from slurm_gpufleet.slurm.base import NodeInfo
from slurm_gpufleet.slurm.ownership import (
    HEALTH,
    MAINTAIN,
    OTHER,
    STRAGGLER,
    owner,
    owner_of_reason,
    rack_of_reason,
)


def test_a_reason_puts_what_happened_first_and_the_mark_last():
    reason = make_reason(Finding("memory", "drain", "inspect_hardware", 1, "row remapping failed"))
    assert reason == "memory gpu1 row remapping failed [gpufleet]"
    assert reason[:20] == "memory gpu1 row rema"   # what `sinfo -R` shows by default
    assert reasons.words_of(reason) == "memory gpu1 row remapping failed"


def test_a_long_reason_loses_words_before_the_mark_never_the_mark():
    reason = reasons.ours("repair ecc attempt 3 of 3 in 7d: " + "x" * 300)
    assert len(reason) == reasons.MAX_REASON and reason.endswith("... [gpufleet]"), reason
    assert owner_of_reason(reason) == HEALTH and reasons.says(reason, reasons.REPAIR)
    assert reasons.one_line(reason) == reason   # cleaning again changes nothing


def test_whose_a_reason_is_from_its_first_words_also_with_slurms_words_after_the_mark():
    assert owner_of_reason("maintain 0abc upgrading to 580.95.05 [gpufleet]") == MAINTAIN
    assert owner_of_reason("performance gpu1 memory bandwidth 2100 GB/s [gpufleet]") == STRAGGLER
    for other in ("admin: PSU", "memory gpu1 remap pending", "maintenance [gpufleetx]", "gpufleet maintenance"):
        assert owner_of_reason(other) == OTHER, other
    back = NodeInfo("n1", "DOWN", set(), "validate after reboot: xid gpu2 Xid 79 [gpufleet] : reboot issued : "
                    "reboot complete")
    assert owner(back) == HEALTH
    assert rack_of_reason("rack nvl3 switch-side: t1 and 2 more tray(s) fabric route unhealthy [gpufleet]") == "nvl3"
    assert rack_of_reason("memory gpu1 rack [gpufleet]") is None


def test_a_reason_written_before_the_mark_is_still_ours_and_not_rewritten_for_its_form():
    legacy = "gpufleet: memory gpu1 row remapping failed"
    assert owner_of_reason(legacy) == HEALTH
    assert owner_of_reason("gpufleet: maintain 0abc upgrading to 580.95.05") == MAINTAIN
    assert rack_of_reason("gpufleet: rack nvl1 3 trays with fabric/NVLink faults in 600 s, first t1") == "nvl1"
    f = Finding("memory", "drain", "inspect_hardware", 1, "row remapping failed")
    node = NodeInfo("n1", "IDLE", {"DRAIN"}, legacy, boot_time="B1")
    action = decide(node, "drain", [f], NodeHistory(), 3)
    assert action.kind == "none", action
    changed = decide(NodeInfo("n1", "IDLE", {"DRAIN"}, "gpufleet: thermal gpu0 fan error", boot_time="B1"), "drain",
                     [f], NodeHistory(), 3)
    assert changed.kind == "set_reason" and changed.reason == "memory gpu1 row remapping failed [gpufleet]"
