"""Right on every board, on real Slurm (issue #45): an H200 NVL server has no NVSwitch and needs no fabric
manager; an HGX board without one is drained once its probes confirm it; a rack none of whose trays'
GPUs registered is drained once, as a rack; an Xid line with a 20-digit number blinds no health check."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpustate  # noqa: E402

NOT_FOUND = "LoadState=not-found\nActiveState=inactive\nNRestarts=0\nStateChangeTimestampMonotonic=0\n"
RACK = ["n5", "n6", "n7", "n8"]


def _runs(mc, node: str) -> int:
    return mc.history(node, "select count(*) from runs where hook = 'healthcheck'")[0][0]


def test_an_h200_nvl_server_without_the_fabric_manager_stays_in_service_an_hgx_board_is_drained_after_its_probes(mc):
    mc.wait_published()
    for gpu in range(8):  # n3: eight PCIe H200 NVL cards, no NVSwitch on the board
        gpustate.set_value(mc.gpu_file("n3"), gpu, "name", "NVIDIA H200 NVL")
    for node in ("n3", "n4"):  # neither has nvidia-fabricmanager
        (mc.gpus / f"{node}.fabricmanager").write_text(NOT_FOUND)
    start = {n: mc.history(n, "select coalesce(max(id), 0) from runs")[0][0] for n in ("n3", "n4")}
    mc.wait(lambda: "DRAIN" in mc.state("n4"), 8 * mc.hc_interval + 15, "n4 (an HGX H200 board) drained")
    assert mc.node("n4")["Reason"].startswith("fabric node nvidia-fabricmanager not installed")
    # confirmed first: three failed probes, 5 s apart (fabric_manager_probe_s), the first ones warnings
    verdicts = [v for (v,) in mc.history("n4", "select verdict from runs where hook = 'healthcheck' and id > ? "
                                                "order by id", (start["n4"],))]
    assert verdicts[0] == "warn" and "drain" in verdicts, verdicts
    assert verdicts.index("drain") >= 2, verdicts
    # n3 ran as many checks, each asking systemd, and stays in service with no fabric finding
    mc.wait(lambda: mc.history("n3", "select count(*) from runs where hook = 'healthcheck' and id > ?",
                               (start["n3"],))[0][0] >= 4, 6 * mc.hc_interval, "n3's health checks")
    assert mc.state("n3") == "IDLE"
    assert mc.history("n3", "select count(*) from findings where [check] = 'fabric'") == [(0,)]
    assert json.loads(mc.node("n3")["Extra"])["gpus"] == "8xNVIDIA H200 NVL"


def test_a_rack_none_of_whose_trays_registered_is_drained_once_as_a_rack(mc):
    """The switch-side case on 22.05 (no topology blocks): the domain is only what the trays published,
    and this boot none of their GPUs joined it.  Each tray keeps its last published domain."""
    for n in RACK:
        mc.gb300(n)
    mc.wait(lambda: all('"cuid":"9a8b7c6d-' in mc.node(n).get("Extra", "") for n in RACK), 4 * mc.hc_interval,
            "n5-n8 publishing their NVLink fabric")
    for n in RACK:
        for gpu in range(8):
            mc.fabric_fault(n, gpu, "completed_insufficient_resources")
    mc.wait(lambda: all("DRAIN" in mc.state(n) for n in RACK), 8 * mc.hc_interval, "the whole rack drained")
    reasons = {n: mc.node(n)["Reason"].rsplit(" [", 1)[0] for n in RACK}
    assert len(set(reasons.values())) == 1, reasons
    domain = "b2" if mc.release >= (23, 11) else "nvl-9a8b7c6d-32766"
    assert reasons["n8"].startswith(f"rack {domain} switch-side: "), reasons
    # each tray's own next check still names the domain it last published, marked as such (a tray the rack's
    # drain took before its own check saw the fault publishes at that check)
    def marked(n: str) -> bool:
        summary = json.loads(mc.node(n).get("Extra") or "{}")
        return summary.get("cuid", "").startswith("9a8b7c6d-") and summary.get("fdl") == 1 and summary["v"] == "drain"

    mc.wait(lambda: all(marked(n) for n in RACK), 3 * mc.hc_interval,
            lambda: "every tray publishing its last domain: " + "; ".join(mc.node(n).get("Extra", "") for n in RACK))
    escalations = [w for n in RACK for (w,) in mc.history(n, "select why from actions where action = 'rack'")]
    assert escalations and all(w.startswith(f"rack {domain} drained") for w in escalations), escalations
    assert [mc.state(n) for n in ("n1", "n2", "n3", "n4")] == ["IDLE"] * 4


def test_an_xid_line_with_a_20_digit_number_blinds_no_health_check(mc):
    mc.wait_published()
    with open(mc.gpus / "n2.kmsg", "a") as fh:
        fh.write("[ 1234.5] NVRM: Xid (PCI:0000:00:06): 99999999999999999999, pid=1, name=x, corrupted line\n")
    start = _runs(mc, "n2")
    mc.wait(lambda: _runs(mc, "n2") - start >= 2, 4 * mc.hc_interval, "two health checks of n2")
    assert mc.state("n2") == "IDLE"  # a warning: the line is counted as unread, never an Xid
    last = mc.history("n2", "select verdict from runs where hook = 'healthcheck' order by id desc limit 1")[0][0]
    assert last == "warn"
    found = mc.history("n2", "select message from findings where [check] = 'xid' order by rowid desc limit 1")
    assert found == [("1 kernel-log line(s) mentioning an Xid not read",)]
    # and the check still judges the rest: a row-remap failure drains the node
    mc.fault("n2", 3, "row_remap_failure")
    mc.wait(lambda: "DRAIN" in mc.state("n2"), 3 * mc.hc_interval, "n2 drained for its row-remap failure")
    assert mc.node("n2")["Reason"].startswith("memory gpu3 row remapping failed")
