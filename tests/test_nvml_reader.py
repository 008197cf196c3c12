"""The live NVML reader, driven by the real H200 NVML recording (same code path as on a GPU node)."""

import pytest

from slurm_gpufleet import evaluate
from slurm_gpufleet.readers.compare import diff_snapshots
from slurm_gpufleet.readers.nvml import NvmlReader, parse_module_version
from slurm_gpufleet.readers.nvml_replay import NvmlReplay
from slurm_gpufleet.readers.snapshot import UNSUPPORTED


def read(probe, level="quick"):
    return NvmlReader(nvml=NvmlReplay(probe), level=level, module_version_path="/nonexistent").read()


def test_replayed_nvml_agrees_with_nvidia_smi_xml(probe, h200):
    live = read(probe, "full")
    diffs, compared = diff_snapshots(live, h200)
    assert compared >= 60
    assert diffs == []
    assert evaluate(live).verdict == "ok"


def test_not_supported_is_unsupported_not_zero(probe):
    g = read(probe).gpus[0]
    assert g.retired_pages.single_bit is UNSUPPORTED and g.retired_pages.pending is UNSUPPORTED
    assert g.nvlinks is UNSUPPORTED and g.inforom.power is UNSUPPORTED
    assert g.ecc.volatile_dram_uncorrected == 0  # a real 0 stays 0


def test_quick_level_skips_the_slow_inforom_calls(probe):
    replay = NvmlReplay(probe)
    snap = NvmlReader(nvml=replay, level="quick").read()
    assert snap.gpus[0].inforom.valid is None and snap.gpus[0].inforom.checksum is None
    quick_calls = replay.calls
    replay_full = NvmlReplay(probe)
    full = NvmlReader(nvml=replay_full, level="full").read()
    assert full.gpus[0].inforom.valid is True and replay_full.calls == quick_calls + 2


@pytest.mark.parametrize("error,code", [("NVMLError_LibRmVersionMismatch", "driver_library_mismatch"),
                                        ("NVMLError_DriverNotLoaded", "driver_not_loaded"),
                                        ("NVMLError_LibraryNotFound", "library_missing"),
                                        ("NVMLError_Unknown", "nvml_error")])
def test_init_failures_become_node_errors(probe, error, code):
    probe["init"] = {"error": error}
    snap = read(probe)
    assert snap.errors == [code] and snap.gpus == []
    assert evaluate(snap).verdict in ("reboot", "drain")


def test_gpu_lost_mid_query_marks_the_gpu_lost(probe):
    probe["devices"][0]["temp_gpu"] = {"error": "NVMLError_GpuIsLost"}
    snap = read(probe)
    assert snap.gpus[0].lost is True
    assert evaluate(snap).findings[0].message == "GPU lost"


def test_lost_at_handle(probe):
    probe["devices"][0]["handle"] = {"error": "NVMLError_GpuIsLost"}
    snap = read(probe)
    assert snap.gpus[0].lost is True


def test_injected_remap_pending_through_nvml(probe):
    probe["devices"][0]["remapped_rows"]["value"] = [0, 1, 1, 0]
    report = evaluate(read(probe))
    assert report.verdict == "reboot" and report.findings[0].message == "row remap pending"


def test_recovery_action_field(probe):
    probe["devices"][0]["recovery_action"] = {"value": 2}
    snap = read(probe)
    assert snap.gpus[0].recovery_action == "node_reboot"
    assert evaluate(snap).verdict == "reboot"


def test_clock_reasons_mask_decoded(probe):
    probe["devices"][0]["clocks_event_reasons"]["value"] = 0x8 | 0x80
    g = read(probe).gpus[0]
    assert g.clock_event_reasons == ["hw_slowdown", "hw_power_brake_slowdown"]


def test_real_pynvml_without_a_driver_is_a_node_error():
    # this machine has no NVIDIA driver: the real pynvml fails nvmlInit, and says so
    pytest.importorskip("pynvml")
    snap = NvmlReader(module_version_path="/nonexistent").read()
    if snap.gpus:
        pytest.skip("a GPU is present")
    assert snap.errors and snap.errors[0] in ("library_missing", "driver_not_loaded", "nvml_error")


@pytest.mark.parametrize("text,version", [
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U16)  Thu",
     "580.159.04"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024", "535.183.01"),
    ("580.159.04\n", "580.159.04"),
    ("garbage", None),
])
def test_kernel_module_version(text, version):
    assert parse_module_version(text) == version


def test_nvml_unknown_error_on_ecc_mode_is_a_reboot(probe):
    probe["devices"][0]["ecc_mode"] = {"error": "NVMLError_Unknown"}
    snap = read(probe)
    assert snap.gpus[0].unknown_errors == ["nvmlDeviceGetEccMode"]
    report = evaluate(snap)
    assert report.verdict == "reboot"
    assert [f.check for f in report.findings if f.severity == "reboot"] == ["unknown_error"]


def test_v1_memory_used_counts_the_driver_reserve_so_it_is_not_judged(probe):
    # the recording holds v1 only: 615 MiB "used" on an idle H200 is the driver's reserve, not a leak
    assert probe["devices"][0]["memory"]["value"]["used"] >> 20 == 615
    snap = read(probe)
    assert snap.gpus[0].memory_used_mib is None and snap.gpus[0].memory_total_mib == 143771
    assert evaluate(snap).verdict == "ok"


def test_v2_memory_used_is_what_nvidia_smi_calls_used(probe):
    mib = 1 << 20
    probe["devices"][0]["memory_v2"] = {"value": {"version": 0x02000028, "total": 143771 * mib,
                                                  "reserved": 616 * mib, "free": 143155 * mib, "used": 0}}
    assert read(probe).gpus[0].memory_used_mib == 0
    probe["devices"][0]["memory_v2"]["value"]["used"] = 2048 * mib
    report = evaluate(read(probe), expect_idle=True)  # between jobs (epilog, health check on an idle node)
    assert report.verdict == "warn" and report.findings[0].message == "2048 MiB in use with no process"


def test_reset_required_through_nvml_asks_for_the_reset_as_the_report_readers_do(probe):
    """NVML_ERROR_RESET_REQUIRED on a call: the one meaning nvidia-smi's `[GPU requires reset]` has."""
    probe["devices"][0]["remapped_rows"] = {"error": "NVMLError_ResetRequired"}
    snap = read(probe)
    assert snap.gpus[0].requires_reset and not snap.gpus[0].lost
    (f,) = [f for f in evaluate(snap).findings if f.severity != "ok"]
    assert (f.message, f.severity, f.action) == ("GPU requires reset", "reboot", "reset_gpu")
