"""The NVLink fabric domain on GB200/GB300 sessions, nvidia-smi Fabric blocks, NVLink5 and Xid forms."""

from __future__ import annotations

import copy
import json
import tomllib

import pytest

from slurm_gpufleet import evaluate
from slurm_gpufleet.common.datafiles import GB_SESSIONS
from slurm_gpufleet.judging.checks import Context
from slurm_gpufleet.judging.checks import fabric as fabric_check
from slurm_gpufleet.policy import parse_policy
from slurm_gpufleet.readers.kernel_log import parse_kernel_log, parse_xid_line
from slurm_gpufleet.readers.nvml import NvmlReader
from slurm_gpufleet.readers.nvml_replay import NvmlReplay
from slurm_gpufleet.readers.report import read_report_file
from slurm_gpufleet.readers.snapshot import FabricManager, HostFacts, NodeSnapshot, XidEvent

FAULTS = tomllib.loads((GB_SESSIONS / "fabric_faults.toml").read_text())
SESSIONS = ["gb200-tray", "gb300-board"]


def session(kind: str) -> dict:
    return json.loads((GB_SESSIONS / f"{kind}.json").read_text())


def read(probe: dict, uptime_s: float = 3600.0) -> NodeSnapshot:
    """The session replayed as a node an hour after boot: the reader takes uptime from this machine's
    /proc/uptime, which under the 300 s fabric grace of a freshly booted CI machine made "stuck" read "in
    progress"."""
    snap = NvmlReader(nvml=NvmlReplay(probe)).read()
    snap.uptime_s = uptime_s
    return snap


def noisy(report) -> list:
    return [f for f in report.findings if f.severity != "ok"]


@pytest.mark.parametrize("kind", SESSIONS)
def test_healthy_trays_are_quiet_and_known(kind):
    snap = read(session(kind))
    report = evaluate(snap)
    assert report.verdict == "ok", [f.line() for f in noisy(report)]
    assert not noisy(report)  # "not in GPU table" was the first thing a GB200 user saw
    g = snap.gpus[0]
    assert g.fabric.state == "completed" and g.fabric.status == "success" and g.fabric.clique_id == 32766
    assert g.fabric.route_unhealthy is False and g.fabric.incorrect_configuration == "none"
    assert len(g.nvlinks) == 18 and {link.speed_gbps for link in g.nvlinks} == {53.125}


@pytest.mark.parametrize("kind", SESSIONS)
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_fabric_fault_is_caught_and_names_its_gpu(kind, fault):
    probe = session(kind)
    gpu = 2 if kind == "gb300-board" else 1
    probe["devices"][gpu]["fabric"]["value"].update(FAULTS[fault]["fabric"])
    report = evaluate(read(probe))
    hits = [f for f in report.findings if f.check == "fabric"]
    assert [(f.gpu, f.severity, f.message) for f in hits][:1] == [(gpu, FAULTS[fault]["severity"],
                                                                    FAULTS[fault]["message"])]
    assert all(f.gpu == gpu for f in noisy(report))  # the other GPUs stay quiet
    assert "fabric." in hits[0].detail or "state" in hits[0].detail  # the field it read


def test_incompatible_firmware_is_a_firmware_finding_too():
    probe = session("gb200-tray")
    probe["devices"][0]["fabric"]["value"].update(FAULTS["incompatible_gpu_firmware"]["fabric"])
    checks = {f.check for f in noisy(evaluate(read(probe)))}
    assert checks == {"fabric", "firmware"}


def test_in_progress_is_a_warning_within_the_grace_then_a_drain():
    probe = session("gb200-tray")
    probe["devices"][0]["fabric"]["value"].update(FAULTS["stuck_in_progress"]["fabric"])
    snap = read(probe)
    policy = parse_policy("[defaults]\nfabric_grace_s = 300").for_node("n1")
    snap.uptime_s = 120.0
    assert [f.severity for f in fabric_check.check(Context(snap, policy))] == ["warn"]
    snap.uptime_s = 301.0
    assert [f.severity for f in fabric_check.check(Context(snap, policy))] == ["drain"]
    snap.uptime_s = None  # a saved report: time since boot unknown, never called stuck
    assert [f.severity for f in fabric_check.check(Context(snap, policy))] == ["warn"]


def test_degraded_bandwidth_follows_the_site_policy():
    probe = session("gb200-tray")
    probe["devices"][0]["fabric"]["value"].update(FAULTS["degraded_bandwidth"]["fabric"])
    snap = read(probe)
    assert evaluate(snap).verdict == "warn"
    assert evaluate(snap, parse_policy("[defaults]\nfabric_degraded = 'drain'")).verdict == "drain"


def test_clique_zero_is_healthy_on_a_single_node_hgx_board():
    # the real H100 x8 capture: Completed / Success / clique 0 / zero UUID on an HGX board is normal
    from slurm_gpufleet.common.datafiles import PUBLIC

    snap = read_report_file(str(PUBLIC / "nvidia-smi" / "healthy_h200_1.txt"))
    assert snap.gpus[0].fabric.clique_id == 0
    assert not [f for f in evaluate(snap).findings if f.check == "fabric"]
    # a site that says its nodes are in a multi-node NVLink domain gets the drain
    policy = parse_policy("[defaults]\nfabric_multinode = true")
    assert [f.message for f in evaluate(snap, policy).findings if f.check == "fabric"][0].startswith("fabric clique 0")


@pytest.mark.parametrize("name,verdict,message", [
    ("healthy", "ok", None),
    ("insufficient-resources", "drain", "fabric registration failed: insufficient resources"),
    ("in-progress", "warn", "fabric registration in progress"),
    ("route-unhealthy", "drain", "fabric route unhealthy"),
    ("garbage", "warn", "unknown fabric value"),
])
def test_nvidia_smi_fabric_blocks(name, verdict, message):
    for ext in ("txt", "xml"):
        path = GB_SESSIONS / f"gb200-tray-{name}.{ext}"
        if not path.exists():
            continue
        report = evaluate(read_report_file(str(path)))
        assert report.verdict == verdict, (ext, [f.line() for f in noisy(report)])
        if message:
            assert [(f.gpu, f.message) for f in noisy(report) if f.check == "fabric"] == [(1, message)]


def test_missing_fields_in_a_fabric_block_are_an_unknown_state():
    text = (GB_SESSIONS / "gb200-tray-healthy.txt").read_text()
    cut = text.replace("        State                                          : Completed\n", "", 1)
    path = GB_SESSIONS.parent / "x"  # never written: read_text from a string
    from slurm_gpufleet.readers.smi_text import read_text

    report = evaluate(read_text(cut))
    assert [(f.gpu, f.severity, f.message) for f in noisy(report)] == [(0, "warn", "unknown fabric value")]
    assert not path.exists()


def test_nvlink5_count_and_speed_are_judged_per_model():
    probe = session("gb200-tray")
    probe["devices"][3]["nvlink_speed_mbps_common"]["value"] = 26562
    for link in ("16", "17"):
        del probe["devices"][1]["nvlink"][link]
    report = evaluate(read(probe))
    got = sorted((f.gpu, f.severity, f.message) for f in noisy(report))
    assert got == [(1, "drain", "16 of 18 NVLinks present"), (3, "drain", "NVLink at 26.562 GB/s < 53.125")]


def test_summary_publishes_the_fabric_and_domains_are_discovered_from_it():
    from slurm_gpufleet.judging.summary import fabric_fields
    from slurm_gpufleet.slurm.domains import discover, fabric_domain

    fields = fabric_fields(read(session("gb200-tray")))
    assert fields == {"fab": "C", "clq": 32766, "cuid": "4f6a7c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b"}
    assert fabric_fields(read_report_file(str(GB_SESSIONS.parent / "h200-real" / "nvidia-smi-q.xml"))) == {}
    rack = fabric_domain(fields)
    nodes = [("t1", rack), ("t2", rack), ("t3", fabric_domain({"clq": 0, "cuid": "0" * 8 + "-0000"})), ("t4", None)]
    found = discover((), None, nodes)
    assert found.members == {"nvl-4f6a7c1e-32766": ["t1", "t2"]}


# -- fabric manager on HGX boards ----------------------------------------------------------------
def _hgx(model: str, fm: FabricManager | None, uptime: float = 3600.0) -> NodeSnapshot:
    snap = read(session("gb300-board"))
    for g in snap.gpus:
        g.name = model
        g.fabric.state = None
    snap.host_facts = HostFacts(fabric_manager=fm)
    snap.uptime_s = uptime
    return snap


@pytest.mark.parametrize("fm,uptime,expect", [
    (FabricManager(True, "active", 0, 9000.0), 9000.0, []),
    # one probe (a one-off check, or the first run): not confirmed, a warning
    (FabricManager(True, "failed", 1, 50.0), 3600.0, [("warn", "nvidia-fabricmanager failed")]),
    (FabricManager(False), 3600.0, [("warn", "nvidia-fabricmanager not installed")]),
    # confirmed by 3 failed probes over the health check's runs: drained
    (FabricManager(True, "failed", 1, 50.0, failed_probes=3), 3600.0, [("drain", "nvidia-fabricmanager failed")]),
    (FabricManager(False, failed_probes=3), 3600.0, [("drain", "nvidia-fabricmanager not installed")]),
    (FabricManager(True, "failed", 1, 50.0, failed_probes=2), 3600.0, [("warn", "nvidia-fabricmanager failed")]),
    (FabricManager(True, "activating", 0, 5.0, failed_probes=5), 60.0, [("warn", "nvidia-fabricmanager activating")]),
    # flapping: 3 restarts within 600 s, counted across runs; since boot alone it is only a warning
    (FabricManager(True, "active", 7, 120.0, restarts_in_window=3), 3600.0, [("drain", "nvidia-fabricmanager flapping")]),
    (FabricManager(True, "active", 7, 120.0, restarts_in_window=2), 3600.0, []),
    (FabricManager(True, "active", 4, 120.0), 3600.0, [("warn", "nvidia-fabricmanager restarted recently")]),
    (FabricManager(True, "active", 4, 5000.0), 9000.0, []),
])
def test_fabric_manager_on_hgx_boards(fm, uptime, expect):
    snap = _hgx("NVIDIA B200", fm, uptime)
    got = [(f.severity, f.message) for f in evaluate(snap).findings if f.check == "fabric"]
    assert got == expect


def test_fabric_manager_probes_are_remembered_across_runs(tmp_path):
    from slurm_gpufleet.readers.host import remember_fabric_manager

    path = str(tmp_path / "fabric-manager-n1.json")

    def probe(now, fm):
        remember_fabric_manager(fm, path, now, probe_s=30, window_s=600)
        return fm.failed_probes, fm.restarts_in_window

    assert probe(1000, FabricManager(True, "failed", 0)) == (1, 0)
    assert probe(1010, FabricManager(True, "failed", 0)) == (1, 0)   # within 30 s of the last: not counted again
    assert probe(1031, FabricManager(True, "failed", 0)) == (2, 0)
    assert probe(1062, FabricManager(True, "failed", 0)) == (3, 0)
    assert probe(1100, FabricManager(True, "active", 0)) == (0, 0)   # a good probe clears them
    assert probe(1200, FabricManager(True, "failed", 1)) == (1, 1)
    # restarts: NRestarts rising by 3 within 600 s is flapping; an old rise has left the window
    assert probe(1300, FabricManager(True, "active", 3)) == (0, 3)
    assert probe(1850, FabricManager(True, "active", 4)) == (0, 1)   # 1300: 3, 1850: 4
    assert probe(2500, FabricManager(True, "active", 4)) == (0, 0)
    (tmp_path / "fabric-manager-n1.json").write_text("{not json")
    assert probe(2100, FabricManager(True, "failed", 4)) == (1, 0)  # an unreadable file: a fresh start


def test_fabric_manager_is_never_judged_on_gb200_trays_or_small_nodes():
    snap = _hgx("NVIDIA GB200", FabricManager(False))
    assert not [f for f in evaluate(snap).findings if f.check == "fabric"]
    snap = _hgx("NVIDIA B200", FabricManager(False))
    snap.gpus = snap.gpus[:1]
    assert not [f for f in evaluate(snap).findings if f.check == "fabric"]


# -- Xid lines -------------------------------------------------------------------------------
def test_nvlink5_xids_nonfatal_is_a_warning_and_fatal_follows_the_catalog():
    lines = ["[171167.6] NVRM: Xid (PCI:0008:01:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 01 "
             "(0x00082226 0x00000001 0x00000000 0x00000000 0x00000000 0x00000000)"]
    snap = read(session("gb200-tray"))
    snap.xid_events, snap.boots_seen = parse_kernel_log(lines)
    assert [(f.severity, f.message) for f in noisy(evaluate(snap))] == [
        ("warn", "Xid 149 NVLink5 NETIR error (Nonfatal)")]
    lines.append("[171167.7] NVRM: Xid (PCI:0008:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 "
                 "(0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)")
    snap.xid_events, snap.boots_seen = parse_kernel_log(lines)
    found = noisy(evaluate(snap))
    assert [(f.gpu, f.severity, f.message) for f in found] == [(0, "reboot", "Xid 149.33 NVLink5 NETIR error (Fatal)")]


def test_nvlink5_fatal_lines_take_the_decode_sheets_rule_by_sub_code_and_error_status():
    """NVIDIA's decode sheet keys Xid 149 NETIR_LINK_EVT by its sub-code (bits 20-25 of the first register)
    and the error status (the second): sub-code 33 resolves RESET_GPU, sub-code 38 IGNORE (a warning, though
    the line says Fatal).  Registers that match no rule fall back to the unit's row; the rule is named."""
    from slurm_gpufleet.catalogs import nvlink5_action

    def line(intrinfo: int, status: int = 0, word: str = "Fatal") -> str:
        return (f"[171167.7] NVRM: Xid (PCI:0008:01:00): 149, NETIR_LINK_EVT {word} XC0 i0 Link 01 "
                f"(0x{intrinfo:08x} 0x{status:08x} 0x00000000 0x00000000 0x00000000 0x00000000)")

    snap = read(session("gb200-tray"))
    cases = [(0x021425c6, 0, "reboot", "reset_gpu", "Xid 149.33"),
             ((38 << 20) | 0x1C6, 0, "warn", "watch", "Xid 149.38"),
             ((40 << 20) | 0x1C6, 0, "warn", "watch", "Xid 149.40"),
             ((38 << 20) | 0x1C6, 7, "reboot", "reset_gpu", "Xid 149.38")]   # no rule: the unit's Fatal row
    for intrinfo, status, severity, action, label in cases:
        snap.xid_events, snap.boots_seen = parse_kernel_log([line(intrinfo, status)])
        found = noisy(evaluate(snap))
        assert [(f.severity, f.action) for f in found] == [(severity, action)], (hex(intrinfo), found)
        assert found[0].message.startswith(label), found[0].message
    row = nvlink5_action(149, "NETIR_LINK_EVT", True, (38 << 20) | 0x1C6, 0)
    assert row is not None and row.source == "nvl5 decode: sub-code 38, error status 0x0: Link Fatal, IGNORE"
    # RLW_REMAP Nonfatal, error status 0x1: the sheet's XID_154_EVAL, still only a warning
    rlw = ("NVRM: Xid (PCI:0008:01:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 01 (0x00000082 0x00000001 0x0 0x0)")
    snap.xid_events, snap.boots_seen = parse_kernel_log([rlw])
    found = noisy(evaluate(snap))
    assert [(f.severity, f.action) for f in found] == [("warn", "follow_recovery_action")], found
    assert snap.xid_events[0].intrinfo == 0x82 and snap.xid_events[0].error_status == 1


def test_caused_by_previous_xid_counts_the_cause_once():
    from slurm_gpufleet.judging.summary import event_counters

    lines = ["NVRM: Xid (PCI:0008:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 01 (0x021425c6 0x0)",
             "NVRM: Xid (PCI:0008:01:00): 45, pid=7, name=python, Ch 00000010, caused by previous Xid 149",
             "NVRM: Xid (PCI:0009:01:00): 45, pid=7, name=python, Ch 00000010, caused by previous Xid 149"]
    snap = read(session("gb200-tray"))
    snap.xid_events, snap.boots_seen = parse_kernel_log(lines)
    found = sorted((f.gpu, f.xid) for f in evaluate(snap).findings if f.check == "xid")
    # GPU 0: Xid 149 once, its Xid 45 not again; GPU 1's 45 has no cause in the log: counted as itself
    assert found == [(0, 149), (1, 45)]
    assert event_counters(snap) == {"xh": 1, "xs": 1}


@pytest.mark.parametrize("line,xid,pci,partial", [
    ("NVRM: Xid (PCI:0000:01:00): 154 (", 154, "0000:01:00", True),
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=123, name=python, GPU has fallen off the bus.", 79, "0000:3b:00", False),
    ("NVRM: Xid (PCI:0000:07:00 GPU-I:05 GPU-C:01): 13, pid=1, name=x, Graphics Exception", 13, "0000:07:00", False),
    ("NVRM: Xid (0000:02:00): 79, GPU has fallen off the bus.", 79, "0000:02:00", False),
    ("NVRM: Xid (PCI:0000:02:00 new-field): 48, DBE", 48, "0000:02:00", True),
])
def test_xid_line_forms(line, xid, pci, partial):
    e = parse_xid_line(line)
    assert (e.xid, e.pci, e.partial) == (xid, pci, partial)


def test_short_pci_fallen_off_the_bus_form():
    events, _ = parse_kernel_log(["[Sun Feb 23 16:24:18 2025] NVRM: GPU 18:00.0: GPU has fallen off the bus."])
    assert [(e.xid, e.pci) for e in events] == [(79, "0000:18:00")]


def test_an_unreadable_xid_line_is_a_warning_not_silence():
    from slurm_gpufleet.readers.kernel_log import read_kernel_log

    snap = read(session("gb200-tray"))
    log = read_kernel_log(["NVRM: Xid: something the parser has never seen", "NVRM: Xid (invalid): some error",
                           "NVRM: Xid (PCI:0008:01:00): 9223372036854775808, x", "a tool says Xid 79 happened"])
    assert log.events == [] and len(log.unparsed) == 4
    snap.xid_events, snap.xid_unparsed, snap.boots_seen = log.events, log.unparsed, log.boots
    found = noisy(evaluate(snap))
    assert [(f.severity, f.message) for f in found] == [("warn", "4 kernel-log line(s) mentioning an Xid not read")]
    assert found[0].detail.startswith("line 1: an Xid line with no Xid number") and "(and 3 more)" in found[0].detail
    # a snapshot written elsewhere with an Xid 0 or a 20-digit one: counted the same, never judged as an Xid
    snap.xid_unparsed = []
    snap.xid_events = [XidEvent(line=4, xid=0, pci=None, raw="NVRM: Xid: ???", partial=True),
                       XidEvent(line=5, xid=2**70, pci=None, raw="NVRM: Xid (PCI:0000:01:00): 2**70")]
    assert [(f.severity, f.message) for f in noisy(evaluate(snap))] == [
        ("warn", "2 kernel-log line(s) mentioning an Xid not read")]


def test_a_fabric_finding_fits_a_slurm_reason():
    from slurm_gpufleet.slurm.actions import make_reason, worst

    probe = session("gb200-tray")
    probe["devices"][2]["fabric"]["value"].update(FAULTS["route_unhealthy"]["fabric"])
    report = evaluate(read(copy.deepcopy(probe)))
    assert make_reason(worst(report.findings)) == "fabric gpu2 fabric route unhealthy [gpufleet]"


def test_systemctl_show_is_read_into_the_fabric_manager_state():
    from slurm_gpufleet.readers.host import parse_systemctl_show

    fm = parse_systemctl_show("LoadState=loaded\nActiveState=active\nNRestarts=4\n"
                              "StateChangeTimestampMonotonic=3500000000\n", uptime_s=3600.0)
    assert fm == FabricManager(True, "active", 4, 100.0)
    assert parse_systemctl_show("LoadState=not-found\nActiveState=inactive\n", 10.0) == FabricManager(False, "inactive")
    assert parse_systemctl_show("garbage", 10.0) is None


def test_a_missing_or_hung_systemctl_is_not_read(tmp_path):
    import os
    import time

    from slurm_gpufleet.readers.host import read_fabric_manager

    hung = tmp_path / "systemctl"
    hung.write_text("#!/bin/sh\nsleep 30\n")
    os.chmod(hung, 0o755)
    started = time.monotonic()
    assert read_fabric_manager(str(hung), 10.0, timeout_s=0.5) is None
    assert time.monotonic() - started < 5
    assert read_fabric_manager(str(tmp_path / "absent"), 10.0) is None


def printf(fmt: str, *args) -> str:
    """C's printf, for the driver's own format strings as its source has them."""
    return fmt % args  # noqa: UP031


# Every form the open GPU kernel modules (595.45.04) print an Xid in, filled in as printf would:
# kernel_rc.c krcReportXid's two formats with the three attributions, the root-cause suffix, the
# tracepoint (nv-tracepoint.h), and osinit.c/osapi.c's fallen-off-the-bus lines.
SOURCE_FORMS = [
    (printf("NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s%s", 0, 0x3B, 0, 48, "1234", "python3",
                                                                   "DBE (0x1) detected", ""), 48, "0000:3b:00"),
    (printf("NVRM: Xid (PCI:%04x:%02x:%02x): %d, %s%s", 8, 1, 0, 149, "NETIR_LINK_EVT Fatal XC0 i0 Link 01 (0x0)", ""),
     149, "0008:01:00"),
    (printf("NVRM: Xid (PCI:%04x:%02x:%02x GPU-I:%02u): %d, pid=%s, name=%s, %s%s", 0, 7, 0, 5, 31, "9", "a", "MMU", ""),
     31, "0000:07:00"),
    (printf("NVRM: Xid (PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u): %d, %s%s", 0, 7, 0, 5, 1, 13, "Graphics", ""),
     13, "0000:07:00"),
    (printf("NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s%s", 8, 1, 0, 45, "7", "python", "Ch 00000010",
                                                                   " caused by previous Xid 149"), 45, "0008:01:00"),
    (printf("nvidia_dev_xid: Xid (PCI:%s): %u, %s", "0000:5d:00", 79, "GPU has fallen off the bus."), 79, "0000:5d:00"),
]


@pytest.mark.parametrize("line,xid,pci", SOURCE_FORMS, ids=[f"form{i}" for i in range(len(SOURCE_FORMS))])
def test_every_xid_form_in_the_open_driver_source(line, xid, pci):
    e = parse_xid_line(line)
    assert (e.xid, e.pci, e.partial) == (xid, pci, False)
    if "caused by previous Xid" in line:
        assert e.caused_by == 149


def test_the_three_line_fallen_off_the_bus_form():
    lines = ["NVRM: The NVIDIA GPU 0000:3b:00.0", "NVRM: (PCI ID: 10de:2335) installed in this system has",
             "NVRM: fallen off the bus and is not responding to commands."]
    events, _ = parse_kernel_log(lines)
    assert [(e.xid, e.pci, e.line) for e in events] == [(79, "0000:3b:00", 3)]
    # an SXid (NVSwitch) line is never a GPU Xid, with or without NVRM
    assert parse_xid_line("nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up") is None


def test_fleet_domains_lists_the_nvlink_domains_the_nodes_publish(tmp_path):
    from support import run_cli

    rack = "nvl-9a8b7c6d-32766"
    nodes = [{"name": f"t{i}", "fabric_domain": rack, **({"flags": ["DRAIN"]} if i == 2 else {})} for i in range(1, 5)]
    nodes.append({"name": "h1"})
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"taken_at": 0, "nodes": nodes}))
    r = run_cli("fleet", "--fleet", str(fleet), "domains", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data == {"source": "published NVLink fabric (cluster UUID, clique)",
                    "domains": [{"domain": rack, "nodes": "t[1-4]", "count": 4, "out": "t2"}]}
    text = run_cli("fleet", "--fleet", str(fleet), "domains").stdout.decode()
    assert text.splitlines()[0] == "1 failure domain(s), from published NVLink fabric (cluster UUID, clique)"


def test_every_key_the_summary_carries_is_a_declared_one():
    """`summary.Summary` is the one list of published keys: what the encoder makes from a GB200 tray with
    Xids, a failed check and a deep check's figures, and the sampler's digest, are all in it."""
    from slurm_gpufleet.judging.findings import Finding
    from slurm_gpufleet.judging.pipeline import Report
    from slurm_gpufleet.judging.summary import Summary, encode
    from slurm_gpufleet.readers.snapshot import PerfSample

    snap = read(session("gb200-tray"))
    snap.xid_events, snap.boots_seen = parse_kernel_log(
        ["NVRM: Xid (PCI:0008:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 01 (0x021425c6 0x0)",
         "NVRM: Xid (PCI:0009:01:00): 45, pid=7, name=python, Ch 00000010"])
    snap.performance = [PerfSample(gpu=1, mem_bw_gbps=7000.0)]
    report = Report("drain", [Finding("memory", "drain", "inspect_hardware", 0, "row remap failed")], snap)
    data = encode(report, "drain")
    assert {"fab", "clq", "cuid", "xh", "xs", "f", "bw", "bwgpu", "t", "v", "drv"} <= set(data)
    assert set(data) <= set(Summary.__annotations__), set(data) - set(Summary.__annotations__)
    assert "is" in Summary.__annotations__ and data["f"] == "row remap failed" and data["bwgpu"] == 1


def test_rows_remapped_are_published_for_the_evidence_gate():
    from slurm_gpufleet.judging.summary import event_counters

    snap = read(session("gb200-tray"))
    before = event_counters(snap).get("rr", 0)
    snap.gpus[0].remapped_rows.correctable = (snap.gpus[0].remapped_rows.correctable or 0) + 2
    snap.gpus[1].remapped_rows.uncorrectable = (snap.gpus[1].remapped_rows.uncorrectable or 0) + 1
    assert event_counters(snap)["rr"] == before + 3


@pytest.mark.parametrize("row,value,field", [
    ("Status", "%%garbage%%", "status"),
    ("Route Unhealthy", "Maybe", "route_unhealthy"),
    ("Access Timeout Recovery", "2", "access_timeout_recovery"),
    ("Route Recovery in progress", "Perhaps", "route_recovery_in_progress"),
    ("Bandwidth", "Sideways", "bandwidth"),
    ("Incorrect Configuration", "Cosmic Rays", "health incorrect_configuration"),
])
def test_every_garbage_fabric_field_is_one_unknown_value_never_success_never_a_drain(row, value, field):
    """nvidia-smi's text, one Fabric row replaced by a value no release prints: one warning naming the GPU
    and the field."""
    import re as re_

    from slurm_gpufleet.readers.smi_text import read_text

    text = (GB_SESSIONS / "gb200-tray-healthy.txt").read_text()
    blocks = text.split("\nGPU ")
    # GPU 1's block only
    blocks[2] = re_.sub(rf"(?m)^(\s+{re_.escape(row)}\s+:).*$", rf"\g<1> {value}", blocks[2], count=1)
    report = evaluate(read_text("\nGPU ".join(blocks)))
    found = [(f.gpu, f.severity, f.message) for f in noisy(report)]
    assert found == [(1, "warn", "unknown fabric value")], found
    assert field in noisy(report)[0].detail and report.verdict == "warn"


def test_nvml_fabric_mask_every_field_and_the_undefined_2_bit_value():
    from types import SimpleNamespace

    from slurm_gpufleet.readers.nvml import decode_fabric
    from slurm_gpufleet.readers.snapshot import Fabric

    def info(mask, status=0):
        return SimpleNamespace(state=3, status=status, cliqueId=7, clusterUuid=bytes(range(1, 17)), healthMask=mask,
                               healthSummary=1)

    healthy = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8 | 1 << 12 | 1 << 14
    fab = decode_fabric(info(healthy))
    assert (fab.partition_assigned, fab.gfm_connected, fab.unknown) == (True, True, [])
    fab = decode_fabric(info(healthy | 3 << 4))  # route_unhealthy = 3: NVML defines 0, 1, 2
    assert fab.route_unhealthy is None and fab.unknown == [f"route_unhealthy: 3 (health mask 0x{healthy | 3 << 4:x})"]
    assert decode_fabric(info(healthy, status=12345)).status == "unknown:12345"
    assert decode_fabric(info((healthy & ~(3 << 12)) | 2 << 12)).partition_assigned is False
    assert isinstance(fab, Fabric)


def test_a_partition_not_assigned_drains_a_multi_node_tray_and_a_gfm_disconnect_warns():
    snap = read(session("gb200-tray"))
    snap.gpus[2].fabric.partition_assigned = False
    snap.gpus[3].fabric.gfm_connected = False
    found = [(f.gpu, f.severity, f.message) for f in noisy(evaluate(snap))]
    assert found == [(2, "drain", "fabric partition not assigned"), (3, "warn", "global fabric manager disconnected")]


def test_a_driver_that_refuses_the_v3_fabric_struct_is_read_with_v1_and_says_so():
    import ctypes
    from types import SimpleNamespace

    from slurm_gpufleet.readers.nvml import NvmlReader

    class Mismatch(Exception):
        value = 25  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH

    class V1(ctypes.Structure):
        _fields_ = [("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_uint), ("cliqueId", ctypes.c_uint32),
                    ("state", ctypes.c_uint8)]

    def v3(h, ref):
        raise Mismatch()

    def v1(h, ref):
        ref._obj.state, ref._obj.status, ref._obj.cliqueId = 3, 0, 5
        return 0  # NVML_SUCCESS, as nvidia-ml-py returns it

    n = SimpleNamespace(c_nvmlGpuFabricInfo_v3_t=V1, nvmlDeviceGetGpuFabricInfoV=v3, c_nvmlGpuFabricInfo_t=V1,
                        nvmlDeviceGetGpuFabricInfo=v1)
    fab = NvmlReader(nvml=n)._fabric(n, 0)
    assert (fab.state, fab.status, fab.clique_id) == ("completed", "success", 5)
    assert fab.read_as == "v1 (the driver refused v3: version mismatch)"
    snap = read(session("gb200-tray"))
    snap.gpus[0].fabric = fab
    assert [(f.gpu, f.severity, f.message) for f in noisy(evaluate(snap))] == [(0, "warn", "fabric health not read")]


@pytest.mark.parametrize("path", sorted(p.name for p in GB_SESSIONS.iterdir() if p.suffix in (".txt", ".xml", ".json")))
def test_every_written_gpu_has_a_uuid_and_a_minor_number_of_its_own(path):
    snap = read_report_file(str(GB_SESSIONS / path)) if not path.endswith(".json") else read(session(path[:-5]))
    readable = [g for g in snap.gpus if isinstance(g.uuid, str)]
    assert len(readable) == len(snap.gpus) >= 4
    assert len({g.uuid for g in readable}) == len(readable)
    assert len({g.minor_number for g in snap.gpus}) == len(snap.gpus)
