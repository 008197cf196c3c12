"""Jobs choose their risk (Slurm 23.11+, SchedulerParameters=extra_constraints): the numbers each node's
summary carries (`suspect`, `lemon`, `fw_ok`) are what `sbatch --extra` selects on."""

from __future__ import annotations

import json
import time

import pytest

from slurm_gpufleet.judging.summary import lemon_news, parse

pytestmark = pytest.mark.release("sbatch --extra on the node's Extra (extra_constraints, 23.11 on)")


def test_a_job_that_asks_for_a_low_lemon_score_never_lands_on_a_lemon_and_one_that_does_not_ask_may(mc):
    if mc.release < (23, 11):
        pytest.skip(f"Slurm {mc.release[0]}.{mc.release[1]} has no --extra node filtering (23.11 on)")
    mc.wait_published()
    lemon, other = [n for n in mc.nodes if not mc.out_of_service(mc.state(n))][:2]
    published = parse(mc.node(lemon)["Extra"])
    assert (published["suspect"], published["lemon"], published["fw_ok"]) == (0, 0, 1), published
    # the score `fleet lemons` writes (lemon_step._publish_scores): the node's own summary, lemon changed
    ((_, text),) = lemon_news([type("Info", (), {"name": lemon, "extra": mc.node(lemon)["Extra"]})], {lemon: 3},
                              "extra")
    mc.run("scontrol", "update", f"nodename={lemon}", f"extra={text}")
    # the node's own checks carry it forward: two more rounds, still 3
    start = len(mc.history(lemon, "select 1 from runs where hook = 'healthcheck'"))
    mc.wait(lambda: len(mc.history(lemon, "select 1 from runs where hook = 'healthcheck'")) >= start + 2,
            4 * mc.hc_interval, f"two more health checks of {lemon}")
    assert parse(mc.node(lemon)["Extra"])["lemon"] == 3
    asks = mc.sbatch(f"--nodelist={lemon}", "--extra", "suspect=0&lemon<2", "--time=1", "--wrap", "sleep 1")
    fine = mc.sbatch(f"--nodelist={other}", "--extra", "suspect=0&lemon<2&fw_ok=1", "--time=1", "--wrap", "sleep 1")
    anyway = mc.sbatch(f"--nodelist={lemon}", "--time=1", "--wrap", "sleep 1")
    ran = ("RUNNING", "COMPLETING", "COMPLETED")
    mc.wait(lambda: mc.job(fine).get("JobState") in ran and mc.job(anyway).get("JobState") in ran,
            60, lambda: f"the jobs that may run: {mc.job(fine)} {mc.job(anyway)}")
    time.sleep(3)   # a few more scheduler passes for the one that must not
    held = mc.job(asks)
    assert held.get("JobState") == "PENDING" and held.get("NodeList") in ("", "(null)", None), held
    mc.run("scancel", asks)
    assert json.loads(mc.node(other)["Extra"])["lemon"] == 0
