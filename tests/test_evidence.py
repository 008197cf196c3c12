"""The evidence gate's sequential test: canary against control over the same hours."""

from __future__ import annotations

import random

from slurm_gpufleet.maintain.evidence import CANARY, CONTROL, NOT_WORSE, OPEN, WORSE, Gate
from slurm_gpufleet.simulators.failures import poisson


def run(rng, effect: float, steps: int = 400, canary_nodes: int = 30, control_nodes: int = 270,
        rate_per_node_h: float = 0.02, step_h: float = 0.25) -> str:
    gate = Gate(signals=("xid_soft",))
    for _ in range(steps):
        hc, hk = canary_nodes * step_h, control_nodes * step_h
        gate.add({"xid_soft": {CANARY: poisson(rng, effect * rate_per_node_h * hc),
                               CONTROL: poisson(rng, rate_per_node_h * hk)}}, {CANARY: hc, CONTROL: hk})
        verdict, _ = gate.verdict()
        if verdict != OPEN:
            return verdict
    return OPEN


def test_a_bad_driver_is_found_worse_a_good_one_rarely_and_both_decide():
    rng = random.Random(7)
    bad = [run(rng, 3.0) for _ in range(200)]
    good = [run(rng, 1.0) for _ in range(200)]
    assert bad.count(WORSE) >= 190, bad.count(WORSE)
    assert good.count(WORSE) <= 10, good.count(WORSE)
    assert good.count(NOT_WORSE) >= 180, good.count(NOT_WORSE)


def test_no_events_decide_nothing_and_sparse_signals_do_not_block():
    gate = Gate()
    for _ in range(100):
        gate.add({}, {CANARY: 10.0, CONTROL: 100.0})
    assert gate.verdict() == (OPEN, "too few events on every signal")
    # plenty of soft Xids split as exposure says; one hard Xid on the control side only
    for _ in range(60):
        gate.add({"xid_soft": {CANARY: 1, CONTROL: 10}}, {CANARY: 10.0, CONTROL: 100.0})
    gate.add({"xid_hard": {CONTROL: 1}}, {CANARY: 10.0, CONTROL: 100.0})
    verdict, why = gate.verdict()
    assert verdict == NOT_WORSE and "xid_soft" in why
    report = gate.report()
    assert report["xid_soft"]["canary_events"] == 60 and report["xid_soft"]["control_events"] == 600
    assert report["xid_soft"]["ratio"] == 1.0 and report["xid_soft"]["decision"] == NOT_WORSE
    assert 0.4 < report["xid_soft"]["p_value"] < 0.7


def test_worse_names_the_signal_with_its_counts_and_survives_a_reload():
    gate = Gate()
    for _ in range(20):
        gate.add({"job_fail": {CANARY: 2, CONTROL: 2}}, {CANARY: 10.0, CONTROL: 100.0})
    verdict, why = gate.verdict()
    assert verdict == WORSE
    assert why == "job_fail: canary 40 event(s) in 200.0 node-h against control 40 in 2000.0 node-h"
    again = Gate()
    again.load(gate.to_dict())
    assert again.verdict() == (verdict, why)


def test_tiny_steps_add_up_across_reloads():
    """The engine keeps the totals every step and reloads them: half a second of one node must count."""
    gate = Gate(signals=("xid_soft",))
    for _ in range(7200):
        again = Gate(signals=("xid_soft",))
        again.load(gate.to_dict())
        again.add({}, {CANARY: 0.5 / 3600, CONTROL: 3.5 / 3600})
        gate = again
    assert abs(gate.evidence["xid_soft"].canary_hours - 1.0) < 1e-9
