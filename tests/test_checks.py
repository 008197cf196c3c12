"""One fault per test, injected into the real H200 capture; each check domain has at least one."""

import datetime as dt

import pytest

from slurm_gpufleet import evaluate
from slurm_gpufleet.judging.checks import CHECKS
from slurm_gpufleet.policy import parse_policy
from slurm_gpufleet.readers.snapshot import (
    DcgmDiag,
    DcgmResult,
    HostFacts,
    IbPort,
    IbState,
    KernelFacts,
    KernelModule,
    NvLink,
    PerfSample,
    Process,
    SlurmView,
    XidEvent,
)


def g0(s):
    return s.gpus[0]


def set_(path, value):
    def apply(s):
        obj = g0(s)
        *parents, leaf = path.split(".")
        for p in parents:
            obj = getattr(obj, p)
        setattr(obj, leaf, value)
    return apply


def xid_event(number, boot=0, pci="0000:00:06"):
    return XidEvent(line=1, xid=number, pci=pci, message="test", boot=boot)


def with_sxids(*lines):
    def apply(s):
        from slurm_gpufleet.readers.kernel_log import read_kernel_log

        s.sxid_events = read_kernel_log(lines).sxids
        s.boots_seen = 1
    return apply


def with_xids(*events, boots=1):
    def apply(s):
        s.xid_events = list(events)
        s.boots_seen = boots
    return apply


def add_second_gpu_lost(s):
    import copy
    lost = copy.deepcopy(g0(s))
    lost.index, lost.lost, lost.errors = 1, True, ["GPU is lost"]
    s.gpus.append(lost)


def nvlinks(states):
    return set_("nvlinks", [NvLink(link=i, active=a) for i, a in enumerate(states)])


FAULTS = [
    # (id, injection, policy TOML, expected check, expected severity, message fragment)
    ("gpu-lost", add_second_gpu_lost, "", "inventory", "reboot", "GPU lost"),
    ("gpu-missing", lambda s: None, "[defaults]\nexpected_gpus = 8", "inventory", "drain", "1 of 8 GPUs"),
    ("wrong-model", lambda s: None, "[defaults]\nexpected_model = 'H100'", "inventory", "drain", "model NVIDIA H200"),
    ("no-devices", lambda s: (s.gpus.clear(), s.errors.append("no_devices")), "", "inventory", "drain", "no GPUs"),
    ("driver-not-target", lambda s: None, "[defaults]\ndriver_version = '590.48.01'", "driver", "warn", "not target"),
    ("module-mismatch", lambda s: setattr(s, "kernel_module_version", "570.172.08"), "", "driver", "reboot",
     "kernel module 570.172.08"),
    ("lib-mismatch", lambda s: s.errors.append("driver_library_mismatch"), "", "driver", "reboot", "mismatch"),
    ("cuda-too-old", lambda s: None, "[defaults]\nmin_cuda = '13.1'", "driver", "drain", "CUDA 13.0 < required 13.1"),
    ("cuda-unrunnable", lambda s: setattr(s, "driver_version", "575.51.03"), "[defaults]\nrequire_cuda = ['13.0']",
     "driver", "drain", "cannot run CUDA 13.0"),
    ("arch-dropped", lambda s: (set_("architecture", "Volta")(s), setattr(s, "driver_version", "590.48.01")), "",
     "compatibility", "drain", "Volta unsupported by R590"),
    ("branch-eol", lambda s: setattr(s, "driver_version", "550.90.07"), "[defaults]\neol_branch_severity = 'warn'",
     "compatibility", "warn", "R550 end of life"),
    ("inforom-invalid", set_("inforom.valid", False), "", "firmware", "drain", "InfoROM corrupted"),
    ("vbios-drift", lambda s: None, "[defaults]\nvbios = ['96.00.A5.00.01']", "firmware", "warn", "VBIOS 96.00.A5.00.1A"),
    ("gsp-not-driver", set_("gsp_firmware", "570.172.08"), "", "firmware", "warn", "GSP firmware"),
    ("ecc-off", set_("ecc.mode_current", False), "[defaults]\nrequire_ecc = true", "memory", "drain", "ECC disabled"),
    ("ecc-pending", set_("ecc.mode_pending", False), "", "memory", "reboot", "ECC mode change pending"),
    ("dbe-volatile", set_("ecc.volatile_dram_uncorrected", 2), "", "memory", "reboot", "uncorrectable DRAM"),
    ("sram-volatile", set_("ecc.volatile_sram_uncorrected", 1), "", "memory", "reboot", "uncorrectable SRAM"),
    ("sram-threshold", set_("ecc.aggregate_sram_uncorrected", 5), "", "memory", "drain", "SRAM error threshold"),
    ("sram-flag", set_("ecc.sram_threshold_exceeded", True), "", "memory", "drain", "SRAM error threshold"),
    ("dram-correctable-high", set_("ecc.aggregate_dram_corrected", 20_000_000), "", "memory", "warn", "correctable DRAM"),
    ("remap-pending", set_("remapped_rows.pending", True), "", "memory", "reboot", "row remap pending"),
    ("remap-failure", set_("remapped_rows.failure", True), "", "memory", "drain", "row remapping failed"),
    ("histogram-exhausted", set_("remapped_rows.histogram", {"max": 3000, "high": 0, "partial": 0, "low": 70, "none": 2}),
     "", "memory", "drain", "2 memory banks without spare rows"),
    ("histogram-low", set_("remapped_rows.histogram", {"max": 3000, "high": 0, "partial": 0, "low": 72, "none": 0}),
     "", "memory", "warn", "low on spare rows"),
    ("retired-pending", set_("retired_pages.pending", True), "", "memory", "reboot", "retired page pending"),
    ("retired-many", lambda s: (set_("retired_pages.single_bit", 40)(s), set_("retired_pages.double_bit", 22)(s)), "",
     "memory", "drain", "62 retired pages"),
    ("xid-79", with_xids(xid_event(79)), "", "xid", "reboot", "Xid 79"),
    ("xid-13", with_xids(xid_event(13)), "", "xid", "warn", "Xid 13"),
    ("input-null", lambda s: s.input_notes.append("snapshot.gpus[0].fabric: null where an object (Fabric) belongs, "
                                                  "read as empty"), "", "input", "warn", "snapshot.gpus[0].fabric"),
    ("sxid-fatal", with_sxids("nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up"), "",
     "sxid", "reboot", "SXid 20034 LTSSM Fault Up (Fatal)"),
    ("sxid-nonfatal", with_sxids("nvidia-nvswitch4: SXid (PCI:0000:c6:00.0): 19084, Non-fatal, Link 29 AN1 Heartbeat "
                                 "Timeout Error (First)"), "", "sxid", "warn", "SXid 19084"),
    ("xid-unknown", with_xids(xid_event(9999)), "", "xid", "warn", "Xid 9999 (unknown)"),
    ("ib-port-down", lambda s: setattr(s, "ib", IbState(ports=[IbPort("mlx5_0", 1, "DOWN", 1, "Disabled", 3,
                                                                      "400 Gb/sec (4X NDR)", 400.0, "InfiniBand")])),
     "[defaults]\nib_ports = 1", "infiniband", "drain", "InfiniBand mlx5_0 port 1 DOWN/Disabled"),
    ("xid-recurring", with_xids(xid_event(79, 0), xid_event(79, 1), xid_event(79, 2), boots=3), "", "xid", "drain",
     "Xid 79 after 2 reboots"),
    ("too-hot", set_("temperature.gpu_c", 86), "", "thermal", "warn", "near slowdown"),
    ("at-slowdown", set_("temperature.gpu_c", 90), "", "thermal", "drain", "at slowdown threshold"),
    ("hw-slowdown", set_("clock_event_reasons", ["hw_slowdown", "hw_thermal_slowdown"]), "", "thermal", "drain",
     "HW slowdown, HW thermal slowdown active"),
    ("power-brake", set_("clock_event_reasons", ["hw_power_brake_slowdown"]), "", "thermal", "drain", "HW power brake"),
    ("power-limit-lowered", set_("power.limit_w", 500.0), "", "thermal", "warn", "power limit 500 W < default 700 W"),
    ("fan-error", set_("temperature.fan_error", True), "", "thermal", "drain", "fan error"),
    ("max-clock-low", set_("clocks.max_sm_mhz", 1755), "", "clocks", "warn", "max SM clock 1755 < 1980"),
    ("app-clock-low", set_("clocks.app_graphics_mhz", 1500), "", "clocks", "warn", "application clock 1500"),
    ("unknown-model", set_("name", "NVIDIA Z999"), "", "clocks", "warn", "not in GPU table"),
    ("pcie-width", set_("pcie.width_current", 8), "", "pcie", "warn", "PCIe x8 of x16"),
    ("pcie-min-width", set_("pcie.width_current", 8), "[defaults]\npcie_min_width = 16", "pcie", "drain", "x8 < x16"),
    ("pcie-gen-busy", lambda s: (set_("pcie.gen_current", 3)(s), set_("clock_event_reasons", [])(s),
                                 set_("utilization_gpu_pct", 90)(s)), "", "pcie", "warn", "gen 3 of 5 under load"),
    ("pcie-replays", set_("pcie.replay_counter", 50_000), "", "pcie", "warn", "50000 PCIe replays"),
    ("nvlink-down", nvlinks([True, True, False, True]), "", "nvlink", "drain", "1 NVLink(s) inactive"),
    ("fabric-route-unhealthy", lambda s: (set_("fabric.state", "completed")(s), set_("fabric.status", "success")(s),
                                          set_("fabric.route_unhealthy", True)(s)), "", "fabric", "drain",
     "fabric route unhealthy"),
    ("fabric-not-started", set_("fabric.state", "not_started"), "", "fabric", "drain", "not started"),
    ("persistence-off", set_("persistence_mode", False), "[defaults]\nrequire_persistence = true", "modes", "warn",
     "persistence mode off"),
    ("compute-prohibited", set_("compute_mode", "Prohibited"), "", "modes", "drain", "Prohibited"),
    ("mig-pending", set_("mig_mode_pending", True), "", "modes", "reboot", "MIG mode change pending"),
    ("mig-unexpected", lambda s: (set_("mig_mode_current", True)(s), set_("mig_mode_pending", True)(s)),
     "[defaults]\nmig_mode = false", "modes", "warn", "MIG on"),
    ("leftover-process", set_("processes", [Process(pid=4242, name="/usr/bin/python3", used_memory_mib=8000)]),
     "[defaults]\nexpect_idle = true", "processes", "drain", "1 leftover GPU process"),
    ("leaked-memory", set_("memory_used_mib", 4000), "[defaults]\nexpect_idle = true", "processes", "warn",
     "4000 MiB in use"),
    ("recovery-reset", set_("recovery_action", "gpu_reset"), "", "recovery", "reboot", "recovery action gpu_reset"),
    ("recovery-drain-p2p", set_("recovery_action", "drain_p2p"), "", "recovery", "drain", "drain_p2p"),
    ("kernel-no-module", lambda s: setattr(s, "host_facts", HostFacts(
        running=KernelFacts("6.1.0-28-amd64", KernelModule("/lib/modules/x/nvidia.ko", "580.159.04")),
        next_boot=KernelFacts("6.1.0-31-amd64"), next_boot_from="newest in /boot")), "", "kernel", "warn",
     "next boot kernel 6.1.0-31-amd64 has no nvidia 580.159.04 module"),
    ("unknown-error-ecc", set_("unknown_errors", ["ecc_mode/current_ecc"]), "", "unknown_error", "reboot",
     "Unknown Error reading ecc_mode/current_ecc"),
    ("unknown-error-fan", set_("unknown_errors", ["fan_speed"]), "", "unknown_error", "warn",
     "Unknown Error reading fan_speed"),
    ("slow-memory", lambda s: setattr(s, "performance", [PerfSample(gpu=0, mem_bw_gbps=3500.0, gemm_tflops=700.0)]),
     "", "performance", "warn", "memory bandwidth 3500 GB/s, -15%"),
    ("no-gpu-library", lambda s: setattr(s, "performance", [PerfSample(gpu=0, error="no GPU library")]), "",
     "performance", "ok", "performance not measured"),
    ("slurm-short", lambda s: setattr(s, "slurm", SlurmView("DOWN", [], "", 0, held=True)), "", "slurm", "drain",
     "sees gpu:0 of 1"),
    ("slurm-inval", lambda s: setattr(s, "slurm", SlurmView("IDLE", ["DRAIN", "INVALID_REG"], "gpu:h200:1", 1,
                                                            held=True)), "", "slurm", "drain",
     "registered invalid (INVAL)"),
    ("dcgm-memory", lambda s: setattr(s, "dcgm", DcgmDiag([DcgmResult("Hardware", "memory", 0, "fail", 2,
                                                                      ["Faulty memory detected"])])), "", "dcgm",
     "drain", "memory failed (ISOLATE)"),
]


@pytest.mark.parametrize("inject,toml,check,severity,fragment", [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS])
def test_fault_is_found(h200, inject, toml, check, severity, fragment):
    inject(h200)
    report = evaluate(h200, parse_policy(toml), today=dt.date(2026, 11, 29))
    hits = [f for f in report.findings if f.check == check and fragment in f.message]
    assert hits, [f.line() for f in report.findings]
    assert hits[0].severity == severity
    assert report.verdict != "ok" or severity == "ok"
    assert len(hits[0].message) <= 80  # fit for a Slurm reason


def test_every_check_domain_has_a_fault_test():
    assert {f[3] for f in FAULTS} == set(CHECKS)


def test_healthy_h200_gives_nothing_even_with_a_strict_policy(h200):
    strict = parse_policy("""
[defaults]
expected_gpus = 1
expected_model = "H200"
driver_version = "580.159.04"
min_cuda = "13.0"
require_cuda = ["12.4", "13.0"]
vbios = ["96.00.A5.00.1A"]
gsp_firmware = ["580.159.04"]
require_ecc = true
require_persistence = true
compute_mode = "Default"
mig_mode = false
expect_idle = true
eol_branch_severity = "drain"
""")
    report = evaluate(h200, strict, today=dt.date(2026, 11, 29))
    assert report.verdict == "ok" and report.findings == []


def test_counter_growth_needs_the_previous_snapshot(h200):
    import copy
    before = copy.deepcopy(h200)
    h200.gpus[0].pcie.replay_counter = 500
    assert not [f for f in evaluate(h200).findings if f.check == "pcie"]
    found = [f for f in evaluate(h200, previous=before).findings if f.check == "pcie"]
    assert found and "+500" in found[0].message


def test_nvlink_error_growth(h200):
    import copy
    h200.gpus[0].nvlinks = [NvLink(link=0, active=True, errors={"crc_flit": 10})]
    before = copy.deepcopy(h200)
    h200.gpus[0].nvlinks[0].errors["crc_flit"] = 15
    found = [f.message for f in evaluate(h200, previous=before).findings if f.check == "nvlink"]
    # (one link of the H200's 18 is also a finding of its own)
    assert "NVLink 0 crc_flit +5" in found and "1 of 18 NVLinks present" in found


def test_xid_from_an_earlier_boot_does_not_count_now(h200):
    h200.xid_events = [xid_event(79, boot=0)]
    h200.boots_seen = 2
    assert evaluate(h200).verdict == "ok"


def test_xid_ignore_list(h200):
    h200.xid_events = [xid_event(13)]
    assert evaluate(h200, parse_policy("[defaults]\nxid_ignore = [13]")).verdict == "ok"


def test_xid_finding_names_the_gpu_and_carries_the_number(h200):
    h200.xid_events = [xid_event(48)]
    (f,) = evaluate(h200).findings
    assert (f.gpu, f.xid, f.action) == (0, 48, "reset_gpu")
    assert f.to_dict()["xid"] == 48


def test_lost_gpu_is_not_judged_by_other_domains(h200):
    h200.gpus[0].lost = True
    h200.gpus[0].clocks.max_sm_mhz = 1
    report = evaluate(h200)
    assert {f.check for f in report.findings} == {"inventory"}


def test_platform_power_cap_is_a_note_not_a_fault(h200):
    h200.gpus[0].power.enforced_limit_w = 500.0
    report = evaluate(h200)
    assert report.verdict == "ok" and report.findings[0].severity == "ok"


def test_slow_gpu_names_its_likely_cause(h200):
    h200.performance = [PerfSample(gpu=0, mem_bw_gbps=3000.0, clock_event_reasons=["gpu_idle", "sw_power_cap"])]
    (f,) = evaluate(h200).findings
    assert "throttling (sw_power_cap)" in f.detail
    h200.performance = [PerfSample(gpu=0, mem_bw_gbps=3000.0, sm_clock_mhz=1980)]
    (f,) = evaluate(h200).findings
    assert "likely cause: hardware" in f.detail
    h200.performance = [PerfSample(gpu=0, mem_bw_gbps=4100.0)]  # within 10 % of the reference: fine
    assert evaluate(h200).findings == []


def test_a_node_that_says_nothing_of_its_gpus_where_some_are_expected_is_never_healthy():
    from slurm_gpufleet import evaluate
    from slurm_gpufleet.policy import parse_policy
    from slurm_gpufleet.readers.snapshot import NodeSnapshot

    empty = NodeSnapshot(source="test")
    found = [f for f in evaluate(empty, parse_policy("[defaults]\nexpected_gpus = 8\n")).findings
             if f.check == "inventory"]
    assert [(f.severity, f.message) for f in found] == [("warn", "no GPU read, expected 8")]
    assert not [f for f in evaluate(empty).findings if f.check == "inventory"], "nothing expected: nothing said"


@pytest.mark.parametrize("toml, fw_ok", [
    ("", 1),
    ('[defaults]\ndriver_version = "580.159.04"\n', 1),
    ('[defaults]\ndriver_version = "570.195.03"\ndriver_mismatch_severity = "warn"\n', 0),
    ('[defaults]\nvbios = ["96.00.00.00.01"]\n', 0),
])
def test_the_summary_says_whether_the_node_is_on_its_group_s_driver_and_firmware(h200, toml, fw_ok):
    """`fw_ok`, a number a job selects on: 0 where the driver or firmware check found the node off its
    group's pins, 1 otherwise; `suspect` and `lemon` start at 0 (the ladder and `fleet lemons` set them)."""
    from slurm_gpufleet.judging.summary import encode

    report = evaluate(h200, parse_policy(toml), today=dt.date(2026, 11, 29))
    data = encode(report, report.verdict)
    assert (data["fw_ok"], data["suspect"], data["lemon"]) == (fw_ok, 0, 0), [f.line() for f in report.findings]


def test_slurm_s_view_is_judged_only_for_a_held_node_by_count_type_and_mig_instances(h200):
    """A node in service is judged as Slurm runs it; a held one whose registration matches returns; a type
    that names none of its GPUs' models warns; a MIG GPU counts as at least one instance; a node Slurm shows
    coming back is waited for, never judged short."""
    from slurm_gpufleet.slurm.base import NodeInfo, view_of

    def found(view):
        h200.slurm = view
        return [f.message for f in evaluate(h200, parse_policy("")).findings if f.check == "slurm"]

    assert found(view_of(NodeInfo("n1", "IDLE", gres="gpu:h200:3"))) == []   # in service: not judged
    assert found(view_of(NodeInfo("n1", "IDLE", {"DRAIN"}, gres="gpu:h200:1(S:0-1)"))) == []
    assert found(view_of(NodeInfo("n1", "IDLE", {"DRAIN"}, gres="gpu:nvidia_h200:1(S:0-1)"))) == []   # AutoDetect
    assert found(view_of(NodeInfo("n1", "DOWN", gres="gpu:h200:2"))) == []   # more: the inventory check's
    assert found(view_of(NodeInfo("n1", "DOWN", gres="gpu:h100:1"))) == ["gres type h100 is not its GPUs' model"]
    h200.gpus.append(h200.gpus[0])
    assert found(view_of(NodeInfo("n1", "DOWN", gres="gpu:h200:1(S:0),gpu:h200:0"))) == ["sees gpu:1 of 2"]
    h200.gpus.pop()
    assert found(view_of(NodeInfo("n1", "IDLE", {"DRAIN"}, gres="(null)"))) == []   # GPUs not GRES: not compared
    assert found(view_of(NodeInfo("n1", "DOWN", gres="gpu:h200:0"))) == ["sees gpu:0 of 1"]
    h200.gpus[0].mig_mode_current = True
    assert found(view_of(NodeInfo("n1", "DOWN", gres="gpu:1g.18gb:7"))) == []   # 7 instances of 1 GPU
    assert found(view_of(NodeInfo("n1", "DOWN", gres="gpu:1g.18gb:0"))) == ["sees gpu:0 of 1"]


@pytest.mark.parametrize("flags,state", [({"DRAIN", "NOT_RESPONDING"}, "IDLE"), ({"DRAIN", "REBOOT_ISSUED"}, "DOWN"),
                                         ({"DRAIN", "POWERING_UP"}, "IDLE"), ({"DRAIN"}, "UNKNOWN")])
def test_a_node_slurm_shows_coming_back_is_waited_for_never_a_failure_and_never_returned(h200, flags, state):
    """Right after a reboot slurmctld shows the node NOT_RESPONDING (or still REBOOT_ISSUED, POWERING_UP,
    not registered): the return waits, the verdict is no fault, and decide does not resume it this run."""
    from slurm_gpufleet.remedy.decide import NodeHistory, decide
    from slurm_gpufleet.slurm.base import NodeInfo, view_of

    info = NodeInfo("n1", state, flags, reason="gpufleet: validate after reboot [gpufleet]", gres="gpu:h200:0")
    h200.slurm = view_of(info)
    report = evaluate(h200, parse_policy(""))
    (f,) = [f for f in report.findings if f.check == "slurm"]
    assert (f.severity, f.action) == ("warn", "wait") and f.message.startswith("coming back")
    assert report.verdict == "warn"
    action = decide(info, report.verdict, report.findings, NodeHistory(clean_runs=5), 3)
    assert action.kind == "none" and ("registered" in action.why or "reboot is pending" in action.why), action


def test_a_held_node_returns_only_with_its_groups_slurmd_and_the_features_slurm_conf_gives_it(h200):
    """Read only when a held node would return (hooks/healthcheck._read_return_view): a slurmd older than
    most of its group's (an old image) or a feature slurm.conf gives it that slurmd did not register holds
    it; a newer slurmd (a Slurm upgrade under way) and features not read never do."""
    from dataclasses import replace

    from slurm_gpufleet.slurm.base import NodeInfo, view_of

    held = view_of(NodeInfo("n1", "IDLE", {"DRAIN"}, gres="gpu:h200:1", features=["ib", "gpufleet_drv580"],
                            slurmd_version="22.05.7"))

    def found(**seen):
        h200.slurm = replace(held, **seen)
        return [f.message for f in evaluate(h200, parse_policy("")).findings if f.check == "slurm"]

    assert found() == []                                     # nothing of its group read: not judged
    assert found(peers_version="22.05.7", configured_features=["ib"]) == []
    assert found(peers_version="22.05.8") == ["slurmd 22.05.7, its group 22.05.8"]
    assert found(peers_version="22.05.10") == ["slurmd 22.05.7, its group 22.05.10"]   # numbers, not text
    assert found(peers_version="21.08.8") == []              # newer than its group: an upgrade under way
    assert found(configured_features=["ib", "nvme"]) == ["lost feature nvme"]
    assert found(configured_features=[]) == []
