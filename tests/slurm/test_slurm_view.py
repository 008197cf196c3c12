"""Slurm's own view before a node returns (checks/slurm_view.py) on a real cluster: a node the tool held
goes back into service only as slurmd registered it whole."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest


def _restart_slurmd(mc, node: str) -> None:
    subprocess.run([str(mc.dir / "bin" / "restart-slurmd"), node], env=mc.env, check=True, timeout=120,
                   capture_output=True)


def _gres_for(mc, node: str, files: int) -> str:
    """gres.conf with `node` given `files` GPUs and every other node its 8."""
    text = (mc.dir / "etc" / "gres.conf").read_text()
    line = next(x for x in text.splitlines() if x.startswith("NodeName="))
    others = ",".join(n for n in mc.nodes if n != node)
    devices = re.sub(r"nvidia\[0-\d+\]", f"nvidia[0-{files - 1}]", line)
    return text.replace(line, f"{line.replace(line.split()[0], 'NodeName=' + others)}\n"
                              f"{devices.replace(line.split()[0], 'NodeName=' + node)}")


@pytest.mark.release("the Gres slurmd registers after its restart, with config_overrides")
def test_a_node_whose_slurmd_comes_back_short_of_a_gpu_is_held_and_returns_once_whole(mc):
    node = next(n for n in reversed(mc.nodes) if not mc.out_of_service(mc.state(n)))
    conf = mc.dir / "etc" / "gres.conf"
    original = conf.read_text()
    try:
        mc.fault(node, 5, "row_remap_failure")
        mc.wait(lambda: "DRAIN" in mc.state(node), 2 * mc.hc_interval + 3, f"{node} drained")
        conf.write_text(_gres_for(mc, node, 7))
        _restart_slurmd(mc, node)   # as a reboot would: slurmd registers what gres.conf now says
        # 22.05 with config_overrides keeps the configured Gres, marks the registration invalid and leaves our
        # reason on the node; 24.11 on put their own reason in its place ("gres/gpu count reported lower than
        # configured"); a release that took the node's count would show 7
        def short() -> str | None:
            shown = mc.node(node)
            if shown.get("Reason", "").startswith("gres/gpu count reported lower"):
                return "gres/gpu count reported lower"
            if "INVALID_REG" in shown.get("State", ""):
                return "slurm node registered invalid (INVAL)"
            return "slurm node sees gpu:7 of 8" if shown.get("Gres", "").startswith("gpu:h200:7") else None

        said = mc.wait(short, 60, lambda: f"{node} registered short of a GPU: {mc.node(node)}")
        mc.heal(node)   # its GPUs are all good: only Slurm's view holds it now
        ours = said.startswith("slurm node")
        if ours:
            mc.wait(lambda: mc.node(node).get("Reason", "").startswith(said), 3 * mc.hc_interval + 3,
                    lambda: f"{node} held for Slurm's view ({said}): {mc.node(node)}")
            runs = mc.history(node, "select count(*) from runs where hook = 'healthcheck'")[0][0]
            mc.wait(lambda: mc.history(node, "select count(*) from runs where hook = 'healthcheck'")[0][0] >= runs + 2,
                    4 * mc.hc_interval, f"two more runs of {node}")
        else:      # slurmctld sends no health check to a node whose registration it refused
            time.sleep(2 * mc.hc_interval)
        assert "DRAIN" in mc.state(node) and mc.node(node)["Reason"].startswith(said), \
            f"held while Slurm sees it short: {mc.node(node)}"
        if ours:   # and an admin sees it among the cases, as a configuration to fix
            r = mc.gpufleet("fleet", "cases", "--json")
            assert r.returncode == 0, r.stderr
            mine = [c for c in json.loads(r.stdout)["cases"] if c["node"] == node]
            assert [(c["class"], c["status"]) for c in mine] == [("slurm_view", "config")], mine
            assert mine[0]["reason"].startswith(said), mine
        conf.write_text(original)
        _restart_slurmd(mc, node)
        if ours:   # our hold, and Slurm now sees the node whole: it returns
            mc.wait(lambda: mc.state(node) == "IDLE", 4 * mc.hc_interval + 30,
                    lambda: f"{node} returned once Slurm sees it whole: {mc.node(node)}")
            assert mc.node(node).get("Gres", "").startswith("gpu:h200:8")
            # the story in numbers (`fleet report` over the nodes' histories): one incident, closed by the tool
            r = mc.gpufleet("fleet", "report", "--history-dir", str(mc.dir / "state" / "gpufleet"), "--json")
            assert r.returncode == 0, r.stderr
            groups = json.loads(r.stdout)["groups"]
            print("fleet report:", json.dumps(groups))
            assert sum(g["incidents"] for g in groups.values()) >= 1
            assert sum(g["ttr_hours"]["automatic"]["n"] for g in groups.values()) >= 1
            assert all(not g["out_now"] for g in groups.values()), groups
        else:      # Slurm's own drain: never ours to lift, whatever the checks find
            mc.wait(lambda: "INVALID_REG" not in mc.state(node), 60, f"{node} registered whole again")
            time.sleep(2 * mc.hc_interval)
            assert "DRAIN" in mc.state(node) and mc.node(node)["Reason"].startswith(said), mc.node(node)
            mc.run("scontrol", "update", f"nodename={node}", "state=resume")
    finally:
        if conf.read_text() != original:
            conf.write_text(original)
            _restart_slurmd(mc, node)


@pytest.mark.release("slurmctld takes a registration consistent with its own config, setting no reason of its own")
def test_the_tools_own_comparison_holds_a_node_slurm_is_content_with_and_returns_it_whole(mc):
    """A held node whose NVML shows 9 GPUs while slurm.conf and gres.conf give it 8 (a line both lost): Slurm
    registers it content, with no reason of its own, so the tool's own comparison is what holds it
    ("slurm node sees gpu:8 of 9"), on every release; once the GPUs and Slurm agree again, it returns."""
    import gpustate

    node = next(n for n in mc.nodes if not mc.out_of_service(mc.state(n)))
    try:
        mc.fault(node, 3, "row_remap_failure")
        mc.wait(lambda: "DRAIN" in mc.state(node), 2 * mc.hc_interval + 3, f"{node} drained")
        gpustate.write_atomic(gpustate.healthy_state(9, node), mc.gpu_file(node))   # its fault gone, 9 GPUs
        said = "slurm node sees gpu:8 of 9"
        mc.wait(lambda: mc.node(node).get("Reason", "").startswith(said), 4 * mc.hc_interval + 10,
                lambda: f"{node} held by the tool's own comparison: {mc.node(node)}")
        assert not mc.node(node).get("Reason", "").startswith("gres/gpu"), "Slurm's own reason came first"
        runs = mc.history(node, "select count(*) from runs where hook = 'healthcheck'")[0][0]
        mc.wait(lambda: mc.history(node, "select count(*) from runs where hook = 'healthcheck'")[0][0] >= runs + 2,
                4 * mc.hc_interval, f"two more runs of {node}")
        assert "DRAIN" in mc.state(node) and mc.node(node)["Reason"].startswith(said), mc.node(node)
        mc.heal(node)   # 8 GPUs again: Slurm sees them all
        mc.wait(lambda: mc.state(node) == "IDLE", 4 * mc.hc_interval + 30,
                lambda: f"{node} returned once Slurm sees it whole: {mc.node(node)}")
    finally:
        mc.heal(node)
