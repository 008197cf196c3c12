import pytest
from support import H200, PUBLIC, public_index

from slurm_gpufleet import evaluate
from slurm_gpufleet.readers.compare import diff_snapshots
from slurm_gpufleet.readers.report import ReportError, read_report, read_report_file
from slurm_gpufleet.readers.snapshot import UNSUPPORTED


def test_h200_xml_reads_every_domain(h200):
    assert h200.driver_version == "580.159.04" and h200.cuda_driver_version == "13.0"
    (g,) = h200.gpus
    assert g.name == "NVIDIA H200" and g.architecture == "Hopper"
    assert g.uuid == "GPU-8b8d67a3-0202-2257-9594-5337ca94eab8"
    assert g.vbios == "96.00.A5.00.1A" and g.inforom.image == "G520.0282.02.02" and g.gsp_firmware == "580.159.04"
    assert g.memory_total_mib == 143771
    # v13 prints thresholds relative to T.Limit: 34 C now, 53 C margin -> limit 87; slowdown 2 C above it
    assert (g.temperature.gpu_c, g.temperature.slowdown_c, g.temperature.shutdown_c) == (34, 89, 95)
    assert g.power.default_limit_w == 700.0 and g.power.enforced_limit_w == 700.0
    assert g.clocks.max_sm_mhz == 1980 and g.clock_event_reasons == ["gpu_idle"]
    assert g.ecc.mode_current is True and g.ecc.volatile_dram_uncorrected == 0
    assert g.remapped_rows.histogram == {"max": 3072, "high": 0, "partial": 0, "low": 0, "none": 0}
    assert g.remapped_rows.pending is False and g.retired_pages.pending is UNSUPPORTED
    assert (g.pcie.gen_current, g.pcie.width_current, g.pcie.replay_counter) == (5, 16, 0)
    assert g.persistence_mode is True and g.mig_mode_current is False and g.processes == []
    assert g.recovery_action == "none"


def test_h200_text_and_xml_agree_field_by_field(h200):
    text = read_report_file(str(H200 / "nvidia-smi-q.txt"))
    diffs, compared = diff_snapshots(h200, text)
    assert compared >= 60
    assert diffs == []


@pytest.mark.parametrize("source", ["nvidia-smi-q.xml", "nvidia-smi-q.txt"])
def test_real_h200_is_ok_with_no_findings(source):
    report = evaluate(read_report_file(str(H200 / source)))
    assert report.verdict == "ok"
    assert report.findings == []


# INDEX.tsv's expected_action -> the verdict a default policy must reach
EXPECTED = {"ok": {"ok"}, "drain": {"drain"}, "rma_candidate": {"drain"}, "reboot_or_reset": {"reboot"},
            "not_a_gpu_fault": {"ok", "warn"}}


@pytest.mark.parametrize("row", public_index(), ids=lambda r: r["file"])
def test_every_public_capture_parses_and_gets_its_verdict(row):
    snap = read_report_file(str(PUBLIC / row["file"]))
    assert snap.gpus, "a real capture must yield GPUs"
    report = evaluate(snap)
    assert report.verdict in EXPECTED[row["expected_action"]], [f.line() for f in report.findings]
    if row["expected_action"] == "ok":
        assert all(f.severity == "ok" for f in report.findings)


def test_remap_pending_points_at_the_right_gpu():
    snap = read_report_file(str(PUBLIC / "nvidia-smi" / "remap_pending_a100x4_2.txt"))
    report = evaluate(snap)
    (finding,) = [f for f in report.findings if f.message == "row remap pending"]
    gpu = snap.gpus[finding.gpu]
    assert gpu.pci_bus_id.upper().endswith("9E:00.0")


def test_old_ecc_layout_reads_volatile_dbe():
    snap = read_report_file(str(PUBLIC / "nvidia-smi" / "retired_pages_dbe_pending_v100_1.xml"))
    g = snap.gpus[0]
    assert g.ecc.volatile_dram_uncorrected == 1 and g.ecc.aggregate_dram_uncorrected == 7627
    assert g.retired_pages.double_bit == 2 and g.retired_pages.pending is True


def test_table_and_nvlink_outputs():
    table = read_report_file(str(PUBLIC / "nvidia-smi" / "inforom_corrupted_v100x8_table_1.txt"))
    assert len(table.gpus) == 8 and table.driver_version == "460.32.03"
    assert [g.index for g in table.gpus if g.inforom.valid is False] == [7]
    links = read_report_file(str(PUBLIC / "nvidia-smi" / "nvlink_inactive_v100_1.txt"))
    down = {g.index: [link.link for link in g.nvlinks if not link.active] for g in links.gpus}
    assert {i: d for i, d in down.items() if d} == {3: [3, 5], 4: [1], 5: [0, 4], 6: [1]}


@pytest.mark.parametrize("text,code,verdict", [
    ("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n",
     "driver_library_mismatch", "reboot"),
    ("No devices were found\n", "no_devices", "drain"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
     "NVIDIA driver is installed and running.\n", "driver_not_loaded", "reboot"),
])
def test_failure_texts_become_a_snapshot_that_says_so(text, code, verdict):
    snap = read_report(text)
    assert snap.errors == [code]
    assert evaluate(snap).verdict == verdict


def test_gpu_lost_text_marks_that_gpu():
    snap = read_report("Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  "
                       "Reboot the system to recover this GPU\n")
    assert snap.gpus[0].lost and snap.gpus[0].pci_bus_id == "0000:3B:00.0"
    report = evaluate(snap)
    assert report.verdict == "reboot" and report.findings[0].check == "inventory"


@pytest.mark.parametrize("data", [b"", b"\x00\x01\x02binary junk\xff" * 20, b"hello world\n", b"<html></html>",
                                  b"<?xml version='1.0'?><nvidia_smi_log><gpu id='x'>", b"{not json",
                                  b'{"schema": 99}'])
def test_junk_is_a_report_error(data):
    with pytest.raises(ReportError):
        read_report(data) if data else read_report(b" ").gpus[0]


def test_truncated_report_still_reads_what_is_there():
    text = (H200 / "nvidia-smi-q.txt").read_text()
    cut = text[: text.index("    Remapped Rows")]
    snap = read_report(cut)
    assert snap.gpus[0].name == "NVIDIA H200"
    assert snap.gpus[0].remapped_rows.pending is None  # not reported, not "no"


def _h200_text_with(edit) -> str:
    text = (H200 / "nvidia-smi-q.txt").read_text()
    lines = text.splitlines()
    at = next(k for k, line in enumerate(lines) if line.strip().startswith("DRAM Uncorrectable"))
    lines[at] = lines[at].replace(": 0", ": 5")   # 5 volatile uncorrectable DRAM errors: a reset is due
    return "\n".join(edit(lines, at)) + "\n"


@pytest.mark.parametrize("case", ["tab", "pasted", "both"])
def test_one_line_out_of_place_hides_no_fault_after_it(case):
    """A line indented with a tab, or a note pasted less indented inside a GPU's block, before the ECC
    counters: the 5 uncorrectable DRAM errors after it are still read (REBOOT), and the odd line is said."""
    def edit(lines, at):
        out = list(lines)
        if case in ("tab", "both"):   # the line before the counter, its 12 spaces now a tab
            out[at - 1] = "\t" + out[at - 1].lstrip()
        if case in ("pasted", "both"):
            out.insert(at - 4, "see ticket 4242 (pasted here)")
            out.insert(at - 4, "    note: reseated")
        return out

    snap = read_report(_h200_text_with(edit).encode())
    report = evaluate(snap)
    assert report.verdict == "reboot", [f.message for f in report.findings]
    assert snap.gpus[0].ecc.volatile_dram_uncorrected == 5
    assert snap.input_notes, "the odd line is said"


@pytest.mark.parametrize("value", ["NaN", "inf", "lots", "0.5", "-"])
def test_a_counter_that_is_no_count_is_a_finding_never_zero(value):
    def edit(lines, at):
        return [line.replace(": 5", f": {value}") if k == at else line for k, line in enumerate(lines)]

    snap = read_report(_h200_text_with(edit).encode())
    assert snap.gpus[0].ecc.volatile_dram_uncorrected is None
    report = evaluate(snap)
    said = [f for f in report.findings if f.check == "input"]
    assert report.verdict != "ok" and said and "DRAM Uncorrectable" in said[0].detail, report.findings


def test_a_report_line_of_60000_spaces_reads_in_linear_time():
    """No backtracking pattern over a line (issue 54: one such line ran past 60 s): in a process of its own,
    so that a parse that does not end fails the test instead of hanging it."""
    import subprocess
    import sys

    def edit(lines, at):
        return lines[:at] + ["    Foo" + " " * 60_000 + "bar", " " * 60_000 + "x"] + lines[at:]

    code = ("import sys; from slurm_gpufleet.readers.report import read_report; "
            "print(read_report(sys.stdin.buffer.read()).gpus[0].ecc.volatile_dram_uncorrected)")
    out = subprocess.run([sys.executable, "-c", code], input=_h200_text_with(edit).encode(), capture_output=True,
                         timeout=20)
    assert out.stdout.strip() == b"5", out.stderr


# -- a fault field is a count, a word nvidia-smi prints, or not read (issue 63) ---------------------------
K8S = PUBLIC / "nvidia-k8s-test-infra"


def _h200_with(source: str, swaps: list[tuple[str, str]]) -> bytes:
    text = (H200 / source).read_text()
    for old, new in swaps:
        assert old in text, old
        text = text.replace(old, new)
    return text.encode()


def test_nvidias_lost_gpu_capture_is_a_lost_gpu_in_the_xml_reader():
    """NVIDIA's own capture of a lost GPU (mock NVML, real nvidia-smi): GPU 1 reads `GPU is lost` in its
    fields and is lost, as NVML's reader judges a lost GPU; GPU 0 is judged as before."""
    snap = read_report_file(str(K8S / "qx-gb200-lost.xml"))
    assert [g.lost for g in snap.gpus] == [False, True]
    report = evaluate(snap)
    lost = [f for f in report.findings if f.message == "GPU lost"]
    assert [(f.gpu, f.check, f.severity) for f in lost] == [(1, "inventory", "reboot")]
    assert not [f for f in report.findings if f.gpu == 1 and f.message != "GPU lost"], report.findings
    assert report.verdict == "drain"   # GPU 0's injected uncorrectable ECC and failed remap


@pytest.mark.parametrize("source,swaps", [
    ("nvidia-smi-q.xml", [("<total>143771 MiB</total>", "<total>GPU is lost</total>"),
                          ("<remapped_row_pending>No</remapped_row_pending>",
                           "<remapped_row_pending>GPU is lost</remapped_row_pending>")]),
    ("nvidia-smi-q.txt", [("Pending                                        : No",
                           "Pending                                        : GPU is lost"),
                          ("Correctable Error                              : 0",
                           "Correctable Error                              : GPU is lost")]),
])
def test_gpu_is_lost_in_any_field_is_a_lost_gpu_in_both_readers(source, swaps):
    snap = read_report(_h200_with(source, swaps))
    assert snap.gpus[0].lost and "GPU is lost" in snap.gpus[0].errors[0]
    report = evaluate(snap)
    assert report.verdict == "reboot" and [f.message for f in report.findings if f.severity != "ok"] == ["GPU lost"]


@pytest.mark.parametrize("source,old,new,field", [
    ("nvidia-smi-q.xml", "<remapped_row_pending>No</remapped_row_pending>",
     "<remapped_row_pending>Maybe</remapped_row_pending>", "remapped_rows/remapped_row_pending"),
    ("nvidia-smi-q.txt", "Pending                                        : No",
     "Pending                                        : Maybe", "Remapped Rows/Pending"),
    ("nvidia-smi-q.xml", "<dram_uncorrectable>0</dram_uncorrectable>",
     "<dram_uncorrectable>NaN</dram_uncorrectable>", "ecc_errors/volatile/dram_uncorrectable"),
    ("nvidia-smi-q.txt", "Uncorrectable Error                            : 0",
     "Uncorrectable Error                            : 12abc", "Remapped Rows/Uncorrectable Error"),
])
def test_a_fault_field_of_no_known_word_is_a_warning_naming_it_and_the_node_judged_in_part(source, old, new, field):
    snap = read_report(_h200_with(source, [(old, new)]))
    report = evaluate(snap)
    (said,) = [f for f in report.findings if f.check == "input"]
    assert (said.severity, said.gpu) == ("warn", 0) and field in said.message, said
    assert report.verdict == "warn"           # never OK in silence, never a drain for a value alone
    assert report.judged_in_part and field in report.judged_in_part[0]
    from slurm_gpufleet.cli.output import check_text

    assert "judged in part" in check_text(report).splitlines()[0]


@pytest.mark.parametrize("source,old,new", [
    ("nvidia-smi-q.xml", "<remapped_row_pending>No</remapped_row_pending>",
     "<remapped_row_pending>[GPU requires reset]</remapped_row_pending>"),
    ("nvidia-smi-q.txt", "Pending                                        : No",
     "Pending                                        : [GPU requires reset]"),
])
def test_gpu_requires_reset_asks_for_the_reset(source, old, new):
    report = evaluate(read_report(_h200_with(source, [(old, new)])))
    (f,) = [f for f in report.findings if f.severity != "ok"]
    assert (f.message, f.severity, f.action) == ("GPU requires reset", "reboot", "reset_gpu")


def test_every_word_of_the_table_has_one_meaning_and_the_counts_read_as_before():
    from slurm_gpufleet.readers import values as v

    assert v.field_word("N/A") == "unsupported" and v.to_int("N/A") is UNSUPPORTED
    assert v.field_word("[Unknown Error]") == "unknown_error" and v.is_unknown_error("Unknown Error")
    assert v.field_word("GPU is lost") == "lost" and v.to_int("GPU is lost") is None
    assert v.field_word("[GPU requires reset]") == "requires_reset"
    assert [v.read_as_given(x) for x in ("0", "3072 bank(s)", "0x1f", "No", "N/A", "Maybe", "NaN", "1.5")] == \
        [True, True, True, True, True, False, False, False]


def test_real_blackwell_trays_read_as_they_are():
    """A GB300 compute tray has 4 GPUs; Blackwell's `fabric/health/partition_assigned` is read without a note."""
    for name, clique in (("qx-gb300.xml", 32766), ("qx-gb200.xml", 2)):
        snap = read_report_file(str(K8S / "hardware" / name))
        assert len(snap.gpus) == 4 and {g.fabric.clique_id for g in snap.gpus} == {clique}
        assert all(g.fabric.state == "completed" and not g.fabric.unknown for g in snap.gpus)
    b200 = read_report_file(str(K8S / "hardware" / "qx-b200.xml"))
    assert len(b200.gpus) == 8 and evaluate(b200).verdict == "ok"
