"""A hold with an exit (Slurm 23.02 on): heat drains the node with ResumeAfter, so Slurm resumes it by itself
whether or not the tool runs again; the same heat held again is the class's next attempt."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.release("scontrol update state=drain resumeafter=S (ResumeAfter, 23.02 on)")


def test_heat_is_held_with_slurm_s_own_exit_and_comes_back_by_itself(mc):
    if mc.release < (23, 2):
        pytest.skip(f"Slurm {mc.release[0]}.{mc.release[1]} has no ResumeAfter (23.02 on)")
    node = next(n for n in mc.nodes if not mc.out_of_service(mc.state(n)))
    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    config.write_text(original.replace("[slurm]\n", "[slurm]\ncool_off_min = 0.5\n", 1))   # 30 s
    try:
        mc.fault(node, 2, "hw_thermal_slowdown")
        mc.wait(lambda: "DRAIN" in mc.state(node), 3 * mc.hc_interval + 3, f"{node} held for its heat")
        shown = mc.node(node)
        assert shown["Reason"].startswith("thermal gpu2 HW thermal slowdown active"), shown
        assert shown.get("ResumeAfterTime") not in (None, "", "None"), shown   # Slurm's own exit
        # the heat stays: Slurm resumes the node by itself, and the next check holds it again (attempt 2)
        drains = "select count(*) from actions where action = 'drain'"
        mc.wait(lambda: mc.history(node, drains)[0][0] >= 2, 30 + 4 * mc.hc_interval,
                lambda: f"{node} back by itself and held again: {mc.history(node, 'select action, why from actions')}")
        assert mc.history(node, "select count(*) from actions where action = 'resume'") == [(0,)], \
            "resumed by Slurm's ResumeAfter, never by the tool"
        assert mc.history(node, "select rung from remedies order by id")[:2] == [("cool_off",), ("cool_off",)]
    finally:
        config.write_text(original)
        mc.heal(node)
