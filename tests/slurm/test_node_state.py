"""HealthCheckNodeState's START_ONLY (Slurm 25.11 on), as `install --node-state` writes it, on a real
cluster of its own: slurmctld takes the line, and slurmd runs the health check when it starts, never every
HealthCheckInterval (what `install` says it changes: the ladder's periodic runs need a timer of the site's
own).  Older releases refuse the word before anything is written (tests/test_install.py)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from conftest import start_cluster


def _release() -> tuple[int, ...]:
    return tuple(int(x) for x in os.environ.get("SLURM_RELEASE", "22.05").split("."))


@pytest.fixture(scope="module")
def only():
    if _release() < (25, 11):
        pytest.skip(f"HealthCheckNodeState=START_ONLY came with Slurm 25.11; this is {_release()}")
    yield from start_cluster("only", 2, 24817, 25001, HC_NODE_STATE="START_ONLY")


def _runs(c, node: str) -> int:
    return c.history(node, "select count(*) from runs where hook = 'healthcheck'")[0][0]


@pytest.mark.release("START_ONLY exists from Slurm 25.11; before it install refuses the word")
def test_start_only_runs_the_health_check_when_slurmd_starts_and_not_every_interval(only):
    shown = only.run("scontrol", "show", "config").stdout
    line = next((x for x in shown.splitlines() if x.startswith("HealthCheckNodeState")), "")
    assert line.split("=", 1)[-1].strip() == "START_ONLY", line
    only.wait(lambda: _runs(only, "n1") >= 1, 60, "n1's health check at slurmd's start")
    before = _runs(only, "n1")
    time.sleep(3 * only.hc_interval)
    assert _runs(only, "n1") == before, "START_ONLY ran the check again within three intervals"
    subprocess.run([str(only.dir / "bin" / "restart-slurmd"), "n1"], env=only.env, check=True, timeout=120,
                   capture_output=True)
    only.wait(lambda: _runs(only, "n1") > before, 60, "n1's health check when its slurmd starts again")
