"""`fleet simulate-faults --one-job`: the simulator core of `maintain simulate` (checkpoints, requeues,
restarts, exponential failures) against Daly's (2006) expected ETTR."""

from __future__ import annotations

import json
import math

import pytest
from support import run_cli

from slurm_gpufleet.faultsim import daly_ettr, one_job


def test_dalys_formula_as_the_reference_writes_it():
    m, t, r = 5 * 3600.0, 3600.0, 600.0
    expected_t = m * math.exp(r / m) * (math.exp(t / m) - 1) / t  # E[T] per unit of work W
    assert daly_ettr(m, t, r) == pytest.approx(1 / expected_t)
    assert daly_ettr(1e12, 3600.0, 0.0) == pytest.approx(1.0)  # no failures: every hour is work


@pytest.mark.parametrize("mtbf_h,every_h,restart_min", [(5.0, 1.0, 5.0), (2.0, 4.0, 20.0), (50.0, 0.25, 10.0)])
def test_the_one_job_mode_is_within_two_hundredths_of_daly(mtbf_h, every_h, restart_min):
    r = run_cli("fleet", "simulate-faults", "--one-job", "8", "--node-mtbf-hours", str(mtbf_h), "--checkpoint-every",
                str(every_h), "--restart-minutes", str(restart_min), "--days", "300", "--strategy", "none",
                "--seed", "3", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert abs(out["strategies"]["none"]["ettr"] - out["daly_ettr"]) <= 0.02, out
    assert out["strategies"]["none"]["failures"] > 0


def test_a_job_on_more_nodes_fails_as_often_as_they_all_do():
    one, eight = one_job(8, 40.0, 1.0, 5.0, 200.0, seed=1), one_job(64, 40.0, 1.0, 5.0, 200.0, seed=1)
    assert eight["assumptions"]["job_mtbf_h"] == 5.0 and eight["assumptions"]["nodes"] == 8
    assert eight["strategies"]["none"]["failures"] > 5 * one["strategies"]["none"]["failures"]
    assert abs(eight["strategies"]["none"]["ettr"] - eight["daly_ettr"]) <= 0.02


@pytest.mark.parametrize("args,said", [
    (["--one-job", "8", "--node-mtbf-hours", "0", "--checkpoint-every", "1"], b"--node-mtbf-hours"),
    (["--node-mtbf-hours", "5", "--checkpoint-every", "1"], b"--one-job"),
    (["--one-job", "8", "--node-mtbf-hours", "5", "--checkpoint-every", "1", "--strategy", "gpufleet"], b"--strategy"),
])
def test_bad_input_is_exit_2(args, said):
    r = run_cli("fleet", "simulate-faults", *args)
    assert r.returncode == 2 and said in r.stderr, r.stderr
