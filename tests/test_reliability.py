"""The fleet's reliability in numbers (reliability.py, `fleet report`): incidents, time between them, time
to repair split automatic and manual, holds that found nothing, nodes out by cause, remedies that worked."""

from __future__ import annotations

import json

from support import run_cli
from test_remedy_harnesses import _harness

from slurm_gpufleet.records.reliability import cause_of, figures, incidents

CLASSES = {"memory": "ecc", "pcie": "pcie", "xid": "xid"}
DAY = 86400.0


def test_incidents_are_told_apart_by_who_closed_them_and_what_was_tried():
    actions = [(100.0, "n1", "drain", "memory gpu5 row remapping failed [gpufleet]"),
               (3700.0, "n1", "resume", ""),                                  # the fault cleared: nothing tried
               (10_000.0, "n1", "reset", "memory gpu2 row remap pending [gpufleet]"),
               (10_900.0, "n1", "validated", ""),                             # the reset fixed it
               (20_000.0, "n1", "drain", "repair pcie suspect re-check failed: pcie gpu2 PCIe x4 < x16 [gpufleet]"),
               (30_000.0, "n1", "suspect", "pcie gpu1 PCIe x8 < x16 [gpufleet]")]   # still out: no second open
    remedies = [(10_001.0, "n1", "ecc", "reset", "succeeded"), (20_001.0, "n1", "pcie", "repair", "succeeded")]
    closes = [(20_000.0 + 2 * DAY, "n1")]
    found = incidents(actions, remedies, closes, CLASSES)
    assert [(i.start, i.end, i.how, i.cause) for i in found] == [
        (100.0, 3700.0, "automatic", "ecc"), (10_000.0, 10_900.0, "automatic", "ecc"),
        (20_000.0, 20_000.0 + 2 * DAY, "manual", "pcie")]
    assert [bool(i.remedies) for i in found] == [False, True, True]
    # the suspect hold after the admin's close opens the fourth, still out
    actions.append((20_000.0 + 3 * DAY, "n1", "suspect", "pcie gpu1 PCIe x8 < x16 [gpufleet]"))
    found = incidents(actions, remedies, closes, CLASSES)
    assert found[-1].end is None and found[-1].cause == "pcie"
    rel = figures(found, ["n1", "n2"], remedies, lambda n: "h200", 0.0, 10 * DAY)
    g = rel["groups"]["h200"]
    assert (g["nodes"], g["incidents"], g["mtbi_hours"]) == (2, 4, 120.0)
    assert g["incidents_per_node_day"] == 0.2
    assert g["ttr_hours"]["automatic"] == {"n": 2, "p50": 0.62, "p90": 0.93}   # 1 h and 0.25 h
    assert g["ttr_hours"]["manual"] == {"n": 1, "p50": 48.0, "p90": 48.0}
    assert g["false_hold_share"] == round(1 / 3, 4) and g["out_now"] == {"pcie": 1}
    assert g["remedies"] == {"ecc": {"reset": {"tried": 1, "succeeded": 1}},
                             "pcie": {"repair": {"tried": 1, "succeeded": 1}}}


def test_a_reason_names_its_class_through_the_remediation_data():
    assert cause_of("memory gpu5 row remapping failed [gpufleet]", CLASSES) == "ecc"
    assert cause_of("validate after reboot: xid gpu0 Xid 79 [gpufleet]", CLASSES) == "xid"
    assert cause_of("slurm node sees gpu:7 of 8 [gpufleet]", {"slurm": "slurm_view"}) == "slurm_view"
    assert cause_of("", CLASSES) == "unknown"


def test_fleet_report_reads_the_ladder_s_own_history(tmp_path):
    """The ladder's run of a pending row remap (reset, reboots, repair, an admin's repair and the validation
    run) read back by `fleet report --json` and as text and metrics."""
    _harness(tmp_path, "memory", "repair")
    state = tmp_path / "node" / "state"
    prom = tmp_path / "rel.prom"
    r = run_cli("fleet", "report", "--history-dir", str(state), "--json", "--textfile", str(prom),
                "--out", str(tmp_path / "r.html"))
    assert r.returncode == 0, r.stderr
    g = json.loads(r.stdout)["groups"]["(defaults)"]
    assert g["nodes"] == 1 and g["incidents"] >= 1 and g["out_now"] == {}
    assert g["ttr_hours"]["manual"]["n"] == 1, g   # through the repair rung: manual, whoever resumed it
    assert g["remedies"]["ecc"]["repair"] == {"tried": 1, "succeeded": 1}, g["remedies"]
    assert 'gpufleet_fleet_ttr_hours{group="(defaults)",how="manual",quantile="0.5"}' in prom.read_text()
    assert "Reliability" in (tmp_path / "r.html").read_text()
    text = run_cli("fleet", "report", "--history-dir", str(state)).stdout.decode()
    assert "(defaults): 1 node(s)" in text and "time to repair, automatic" in text
    bad = run_cli("fleet", "report", "--history-dir", str(tmp_path / "none"))
    assert bad.returncode == 2 and b"not a directory of node histories" in bad.stderr


def test_a_remedy_recorded_just_before_the_hold_it_opens_is_that_incidents_and_no_false_hold():
    """The carrier records a remedy, then acts: its row comes ~3 ms before its drain.  The remedy is the
    incident's (`cool_off 1/1 worked` and `holds that found nothing: 0`), however close the clocks; a remedy
    that took the node out of nothing (a reset of idle GPUs) is the incident's that its fault opens next."""
    actions = [(1000.003, "n1", "drain", "thermal gpu3 HW thermal slowdown [gpufleet]"),
               (1900.0, "n1", "resume", ""),
               (5000.0, "n1", "drain", "repair memory gpu5 row remapping failed [gpufleet]"),
               (5600.0, "n1", "resume", ""),
               (8000.0, "n1", "drain", "pcie gpu1 PCIe x8 < x16 [gpufleet]"),   # nothing tried: a false hold
               (8600.0, "n1", "resume", "")]
    remedies = [(1000.0, "n1", "thermal", "cool_off", "succeeded"),
                (3000.0, "n1", "ecc", "reset", "failed"), (4999.998, "n1", "ecc", "repair", "succeeded")]
    found = incidents(actions, remedies, [], CLASSES)
    assert [(i.start, i.cause, i.how, i.remedies) for i in found] == [
        (1000.003, "thermal", "automatic", [("thermal", "cool_off", "succeeded")]),
        (5000.0, "ecc", "manual", [("ecc", "reset", "failed"), ("ecc", "repair", "succeeded")]),
        (8000.0, "pcie", "automatic", [])]
    g = figures(found, ["n1"], remedies, lambda n: "g", 0.0, DAY)["groups"]["g"]
    assert g["false_hold_share"] == round(1 / 3, 4)
    assert g["remedies"]["thermal"] == {"cool_off": {"tried": 1, "succeeded": 1}}
