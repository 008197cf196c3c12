"""HealthCheckNodeState's START_ONLY (Slurm 25.11 on), as `install --node-state` offers it, on the real
cluster: slurmctld takes the line, and slurmd runs the health check when it starts, never every
HealthCheckInterval (what `install` says it changes: the ladder's periodic runs need a timer of the site's
own).  Older releases refuse the word before anything is written (tests/test_install.py).  The cluster's
own slurm.conf is changed for the test and put back: a second cluster of the same release's root beside
the first is not made."""

from __future__ import annotations

import re
import subprocess
import time

import pytest


def _runs(c, node: str) -> int:
    return c.history(node, "select count(*) from runs where hook = 'healthcheck'")[0][0]


def _node_state(c) -> str:
    shown = c.run("scontrol", "show", "config").stdout
    line = next((x for x in shown.splitlines() if x.startswith("HealthCheckNodeState")), "")
    return line.split("=", 1)[-1].strip()


@pytest.mark.release("START_ONLY exists from Slurm 25.11; before it install refuses the word")
def test_start_only_runs_the_health_check_when_slurmd_starts_and_not_every_interval(mc):
    if mc.release < (25, 11):
        pytest.skip(f"HealthCheckNodeState=START_ONLY came with Slurm 25.11; this is {mc.release}")
    conf = mc.dir / "etc" / "slurm.conf"
    original = conf.read_text()
    conf.write_text(re.sub(r"(?m)^HealthCheckNodeState=.*$", "HealthCheckNodeState=START_ONLY", original))
    try:
        mc.run("scontrol", "reconfigure")
        mc.wait(lambda: _node_state(mc) == "START_ONLY", 60, lambda: f"START_ONLY taken: {_node_state(mc)}")
        time.sleep(mc.hc_interval)   # a run slurmd started before the change ends
        before = _runs(mc, "n1")
        time.sleep(3 * mc.hc_interval)
        assert _runs(mc, "n1") == before, "START_ONLY ran the check again within three intervals"
        subprocess.run([str(mc.dir / "bin" / "restart-slurmd"), "n1"], env=mc.env, check=True, timeout=120,
                       capture_output=True)
        mc.wait(lambda: _runs(mc, "n1") > before, 60, "n1's health check when its slurmd starts again")
    finally:
        conf.write_text(original)
        mc.run("scontrol", "reconfigure", check=False)
        mc.wait(lambda: _node_state(mc) != "START_ONLY", 60, "the cluster's own HealthCheckNodeState back")
        subprocess.run([str(mc.dir / "bin" / "restart-slurmd"), "n1"], env=mc.env, check=False, timeout=120,
                       capture_output=True)
