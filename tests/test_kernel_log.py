import pytest
from support import kernel_log_lines

from slurm_gpufleet.readers.kernel_log import parse_kernel_log, parse_xid_line, read_kernel_log


@pytest.mark.parametrize("row", kernel_log_lines(), ids=lambda r: r["line"][:40])
def test_every_real_kernel_log_line_is_classified(row):
    event = parse_xid_line(row["line"])
    log = read_kernel_log([row["line"]])
    assert log.unparsed == []  # every real line is an Xid, an SXid, or neither: never left unread
    if row["xid"] == "none":
        assert event is None
        # an NVSwitch SXid line is an SXid event; a Severity or Data line alone (its header not in the log)
        # too, said as such; after its header, it is that event's detail (test below)
        assert len(log.sxids) == (1 if "SXid" in row["line"] else 0)
        if "Severity" in row["line"] or "Data {" in row["line"]:
            assert log.sxids[0].message.startswith("header line lost")
    else:
        assert event is not None and event.xid == int(row["xid"]) and event.pci == row["pci"]
        if " Nonfatal " in row["line"] or " Fatal " in row["line"]:  # NVLink5: the line's own word, and its unit
            assert event.fatal is (" Fatal " in row["line"]) and event.unit == row["line"].split(", ")[1].split()[0]


@pytest.mark.parametrize("line,xid,pci,pid,process", [
    ("[ 1234.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=4321, name=python, GPU has fallen off the bus.", 79,
     "0000:3b:00", 4321, "python"),
    ("NVRM: Xid (0000:02:00): 13, 0003 00000000 0000a097 000015f0 00000000 00000000", 13, "0000:02:00", None, None),
    ("kernel: NVRM: Xid (PCI:0000:07:00 GPU-I:05): 31, pid=99, name=a.out, Ch 00000008, intr 10000000.", 31,
     "0000:07:00", 99, "a.out"),
    ("NVRM: Xid (PCI:0000:07:00 GPU-I:05 GPU-C:01): 43, pid=1, name=x, Ch 0", 43, "0000:07:00", 1, "x"),
    ("6,1234,987654321,-;NVRM: Xid (PCI:0000:c1:00): 48, pid='<unknown>', name=<unknown>, DBE", 48, "0000:c1:00",
     None, None),
])
def test_forms(line, xid, pci, pid, process):
    e = parse_xid_line(line)
    assert (e.xid, e.pci, e.pid, e.process) == (xid, pci, pid, process)


def test_caused_by_previous_xid_is_not_that_xid():
    line = "NVRM: Xid (PCI:0000:3b:00): 45, pid=7, name=p, Ch 00000010, preemptive removal caused by previous Xid 79"
    assert parse_xid_line(line).xid == 45
    assert parse_xid_line("NVRM: GPU0 channel error caused by previous Xid 79 on this GPU") is None


def test_sxid_is_not_a_gpu_xid():
    assert parse_xid_line("nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up") is None


def test_journal_boots_are_counted():
    log = """-- Boot 1a2b --
Nov 28 01:00:00 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, GPU has fallen off the bus.
-- Boot 3c4d --
Nov 28 02:00:00 n1 kernel: Linux version 6.1.0
Nov 28 02:10:00 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, GPU has fallen off the bus.
-- Boot 5e6f --
Nov 28 03:00:00 n1 kernel: something else
""".splitlines()
    events, boots = parse_kernel_log(log)
    assert boots == 3
    assert [e.boot for e in events] == [0, 1]
    assert [e.line for e in events] == [2, 5]


def test_dmesg_timestamps_going_back_mean_a_reboot():
    log = ["[  100.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, x",
           "[    0.000000] Linux version 6.1.0",
           "[   50.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, x"]
    events, boots = parse_kernel_log(log)
    assert boots == 2 and [e.boot for e in events] == [0, 1]


def test_empty_and_junk_logs():
    assert parse_kernel_log([]) == ([], 0)
    log = read_kernel_log(["\x00\xff garbage", "", "NVRM: Xid (PCI:zz): x"])
    # a line that says it is an Xid but cannot be read is counted as unparsed, never "Xid 0", never dropped
    assert log.events == [] and log.boots == 1
    assert log.unparsed == ["line 3: an Xid line with no Xid number: NVRM: Xid (PCI:zz): x"]


def test_real_dev_kmsg_reads_without_blocking():
    import os

    from slurm_gpufleet.readers.kernel_log import read_kmsg

    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("/dev/kmsg is not readable here")
    lines = read_kmsg()
    assert lines and all("\n" not in line for line in lines)
    events, boots = parse_kernel_log(lines)
    assert boots >= 1 and all(e.xid >= 0 for e in events)


def test_a_binary_kernel_log_is_exit_3_in_one_line_never_zero_events(tmp_path):
    from support import H200, run_cli

    junk = tmp_path / "core"
    junk.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    for args in (("xid", str(junk)), ("check", "--nvidia-smi-q", str(H200 / "nvidia-smi-q.xml"), "--kmsg", str(junk))):
        r = run_cli(*args)
        err = r.stderr.decode()
        assert r.returncode == 3 and err.count("\n") == 1, (args, r.returncode, err)
        assert err == f"slurm-gpufleet: error: {junk}: input is binary, not a kernel log\n"
    r = run_cli("xid", "-", stdin=junk.read_bytes())
    assert r.returncode == 3 and "standard input: input is binary" in r.stderr.decode()


def test_a_binary_kernel_log_never_stops_a_nodes_own_check(tmp_path):
    # the health check reads its kernel log leniently (strict=False): said in its log, the GPUs still judged
    from support import H200

    from slurm_gpufleet.judging.pipeline import Source, gather

    junk = tmp_path / "kmsg"
    junk.write_bytes(b"\x00\x01" * 100)
    snap = gather(Source(report=str(H200 / "nvidia-smi-q.xml"), kernel_log=str(junk), strict=False))
    assert snap.gpus and snap.xid_events == [] and snap.unread == [f"kernel log {junk}: {junk}: input is binary, not a kernel log"]


def test_only_the_kernel_s_lines_count_in_a_syslog_file():
    """In a syslog or journal file any program can log an `NVRM: Xid` line (`logger`): only the kernel's
    lines count; another program's is said (`foreign`), never counted, nor can it clear an Xid with a
    forged reset mark or start a boot with a forged banner."""
    from slurm_gpufleet.readers.kernel_log import RESET_MARK, read_kernel_log

    xid = "NVRM: Xid (PCI:0000:5d:00): 79, pid=777, name=python3, GPU has fallen off the bus."
    forged = [f"Dec  1 08:00:00 gpu01 mallory[4242]: {xid}",
              f"2026-12-01T08:00:01.000000+00:00 gpu01 mallory: {xid}",
              "Dec  1 08:00:02 gpu01 mallory[4242]: Linux version 6.1.0-28-amd64"]
    log = read_kernel_log(forged)
    assert log.events == [] and log.boots == 0 and len(log.foreign) == 3, log
    assert log.foreign[0].startswith("line 1: logged by mallory, not the kernel")
    real = [f"Dec  1 07:59:00 gpu01 kernel: [12.5] {xid}", f"2026-12-01T07:59:01+0000 gpu01 kernel: {xid}",
            f"2026-12-01T07:59:02,000000+00:00 {xid}", f"[  13.1] {xid}"]
    log = read_kernel_log(real + [f"Dec  1 08:01:00 gpu01 mallory: {RESET_MARK}0000:5d:00"] + forged)
    assert [e.xid for e in log.events] == [79] * 4 and not any(e.cleared for e in log.events), log.events
    assert log.boots == 1 and len(log.foreign) == 4
    # the kernel's own reset mark, from a syslog file, still clears what came before it
    log = read_kernel_log(real[:1] + [f"Dec  1 08:01:00 gpu01 kernel: {RESET_MARK}0000:5d:00"])
    assert [e.cleared for e in log.events] == [True]


def test_no_line_of_a_kernel_log_can_hide_or_stall_the_rest(tmp_path, monkeypatch):
    """Bounded by construction (issue 54): a number of thousands of digits, a line of 200,000 characters, NUL
    padding before the log (logrotate's copytruncate) each leave the real Xid 79 after them counted; a log
    past TAIL_BYTES is read from its end, and says so."""
    import subprocess
    import sys

    from slurm_gpufleet.readers import kernel_log
    from slurm_gpufleet.readers.kernel_log import read_kernel_log_file

    xid = "NVRM: Xid (PCI:0000:5d:00): 79, pid=777, name=python3, GPU has fallen off the bus."
    odd = ["NVRM: Xid (PCI:0000:5d:00): " + "9" * 5000 + ", boom", "NVRM: GPU 0000:5d:00.0: " * 9000,
           "NVRM:" + " " * 200_000 + "x", "Xid " * 50_000]
    path = tmp_path / "kern.log"
    path.write_bytes(b"\0" * 10_000 + "\n".join(odd + [f"[  2.0] {xid}"]).encode() + b"\n")
    # in a process of its own, so that a parse that does not end fails the test instead of hanging it
    code = ("import sys; from slurm_gpufleet.readers.kernel_log import read_kernel_log_file as r; "
            "print([e.xid for e in r(sys.argv[1]).events])")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "[79]", out.stdout + out.stderr
    monkeypatch.setattr(kernel_log, "TAIL_BYTES", 4096)
    path.write_text("[  1.0] usb 1-1: new high-speed USB device\n" * 1000 + f"[  2.0] {xid}\n")
    log = read_kernel_log_file(str(path))
    assert [e.xid for e in log.events] == [79] and log.notes == [
        "read its last 4 KiB of 42 KiB: older boots not judged"], log.notes


def test_an_sxid_data_line_whose_header_was_lost_is_still_an_sxid_of_its_switch():
    """The `Data {...}` continuation folds into the event before it on the same switch; where its header
    line is gone (a wrapped ring buffer), it is an SXid of that switch, its severity left to the catalog."""
    head = "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 48 LTSSM Fault Up"
    data = "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x10000000, 0x10000000, 0x0, 0x0}"
    log = read_kernel_log([head, head.replace("Fatal, Link 48 LTSSM Fault Up", "Data {0x1, 0x2}"), data])
    assert [(e.sxid, e.switch, e.fatal) for e in log.sxids] == [(20034, 2, True), (20034, 0, None)]
    assert log.sxids[1].message.startswith("header line lost") and not log.unparsed
