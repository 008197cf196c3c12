"""The four classes of real-world input issue #11 found misread, on inputs shaped like the real ones
(the real H200 capture with one line changed; kernel log lines in dmesg's own forms)."""

import re

import pytest
from support import H200

from slurm_gpufleet import evaluate
from slurm_gpufleet.readers.kernel_log import parse_kernel_log
from slurm_gpufleet.readers.report import read_report

TEXT = (H200 / "nvidia-smi-q.txt").read_text()
XML = (H200 / "nvidia-smi-q.xml").read_text()


def _section_line(text: str, section: str, key: str, value: str) -> str:
    """Replace the value of `key` inside `section` of `nvidia-smi -q` text, keeping its layout."""
    start = text.index(f"    {section}\n")
    m = re.compile(rf"^(\s+{re.escape(key)}\s+: ).*$", re.M).search(text, start)
    return text[: m.start()] + m.group(1) + value + text[m.end():]


# -- backwards timestamps ----------------------------------------------------------------------------
def test_an_xid_on_the_first_line_after_time_goes_back_is_kept():
    log = ["[ 8812.100001] nvidia-modeset: Allocated GPU:0 (GPU-8b8d67a3) @ PCI:0000:18:00.0",
           "[ 8813.400123] NVRM: Xid (PCI:0000:18:00): 31, pid=4211, name=python, Ch 00000010",
           # two boots' logs joined, no banner between them: the clock restarts
           "[   42.771204] NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
           "[   43.000000] NVRM: GPU 0000:18:00.0: GPU serial number is 1653724061893."]
    events, boots = parse_kernel_log(log)
    assert [(e.xid, e.boot) for e in events] == [(31, 0), (79, 1)]
    assert boots == 2


def test_a_banner_still_starts_a_boot_and_is_no_event():
    events, boots = parse_kernel_log(["[  100.0] NVRM: Xid (PCI:0000:18:00): 48, DBE",
                                      "[    0.000000] Linux version 6.1.0-31-amd64",
                                      "[    5.1] NVRM: Xid (PCI:0000:18:00): 48, DBE"])
    assert [(e.xid, e.boot) for e in events] == [(48, 0), (48, 1)] and boots == 2


# -- a lone "fallen off the bus" -------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "[6781741.548783] NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.",
    "May 19 07:08:57 gpu042 kernel: NVRM: GPU at PCI:0000:91:00: GPU has fallen off the bus.",
])
def test_the_kernels_own_fallen_off_the_bus_line_is_xid_79(line):
    events, _ = parse_kernel_log([line])
    assert [(e.xid, e.pci) for e in events] == [(79, "0000:91:00")]


def test_fallen_off_after_its_own_xid_79_is_one_event():
    events, _ = parse_kernel_log([
        "[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "[6781741.548783] NVRM: GPU 0000:91:00.0: GPU has fallen off the bus."])
    assert [e.xid for e in events] == [79]


# -- "Unknown Error" fields ------------------------------------------------------------------------
def test_unknown_error_in_ecc_mode_is_a_reboot_in_text_and_xml():
    text = _section_line(_section_line(TEXT, "ECC Mode", "Current", "Unknown Error"), "ECC Mode", "Pending",
                         "Unknown Error")
    xml = XML.replace("<current_ecc>Enabled</current_ecc>", "<current_ecc>Unknown Error</current_ecc>") \
             .replace("<pending_ecc>Enabled</pending_ecc>", "<pending_ecc>Unknown Error</pending_ecc>")
    for source in (text, xml):
        report = evaluate(read_report(source))
        found = [f for f in report.findings if f.check == "unknown_error"]
        assert report.verdict == "reboot" and found and "ecc" in found[0].message.lower(), report.findings


def test_unknown_error_elsewhere_is_at_least_a_warning():
    text = _section_line(TEXT, "Temperature", "GPU Current Temp", "Unknown Error")
    report = evaluate(read_report(text))
    assert report.verdict == "warn"
    assert [f.check for f in report.findings if f.severity == "warn"] == ["unknown_error"]


def test_not_available_is_still_not_an_error():
    assert evaluate(read_report(TEXT)).verdict == "ok"  # the capture has many N/A fields


# -- trailing text after a value -------------------------------------------------------------------
def test_a_value_followed_by_a_note_is_still_read():
    text = _section_line(TEXT, "Remapped Rows", "Pending", "Yes   <-- seen again after reset, ticket 4711")
    snap = read_report(text)
    assert snap.gpus[0].remapped_rows.pending is True
    assert evaluate(snap).verdict == "reboot"
