"""Readers never crash: any input is a snapshot or a ReportError."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import H200, PUBLIC

from slurm_gpufleet import evaluate
from slurm_gpufleet.readers import ReportError, read_report
from slurm_gpufleet.readers.kernel_log import parse_kernel_log

TEXT = (H200 / "nvidia-smi-q.txt").read_text()
XML = (H200 / "nvidia-smi-q.xml").read_text()
TABLE = (PUBLIC / "nvidia-smi" / "fan_err_geforce_table_1.txt").read_text()
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _read(data):
    try:
        snap = read_report(data)
    except ReportError:
        return
    evaluate(snap)  # the checks must take whatever a reader produced


@SETTINGS
@given(st.binary(max_size=2000))
def test_random_bytes(data):
    _read(data)


@SETTINGS
@given(st.sampled_from([TEXT, XML, TABLE]), st.integers(0, 20000), st.integers(0, 400), st.text(max_size=40))
def test_cut_and_garbled_reports(base, start, length, junk):
    start %= len(base)
    _read(base[:start] + junk + base[start + length:])


@SETTINGS
@given(st.sampled_from([TEXT, XML]), st.integers(0, 30000))
def test_truncated_reports(base, cut):
    _read(base[: cut % len(base)])


@SETTINGS
@given(st.lists(st.text(max_size=200), max_size=30))
def test_kernel_log_lines(lines):
    events, boots = parse_kernel_log(lines)
    assert all(e.xid >= 0 for e in events) and boots >= 0


@SETTINGS
@given(st.text(alphabet="0123456789abcdef:.", max_size=12), st.integers(0, 10**6), st.text(max_size=60))
def test_xid_lines_with_odd_fields(pci, number, rest):
    parse_kernel_log([f"NVRM: Xid (PCI:{pci}): {number}, {rest}"])
