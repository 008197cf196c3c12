"""Parsers never crash: any input is a value or the parser's own one-line error.  Each property runs at
150 examples in the fast tier and at 3,000 in the slow-marked run (`pytest -m slow`; `make test`
runs both, as CI does).  Every run draws new cases; a failure hypothesis found is kept in its example
database outside the repository (~/.cache/slurm-gpufleet-hypothesis) and tried first next time, and
hypothesis prints the `@reproduce_failure` line that replays it anywhere."""

import json
import os
import re
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from support import H200, PUBLIC

from slurm_gpufleet import evaluate
from slurm_gpufleet.judging.summary import from_node as published
from slurm_gpufleet.judging.summary import published_at
from slurm_gpufleet.maintain.sacct import SacctError, read_sacct
from slurm_gpufleet.policy import PolicyError, parse_policy
from slurm_gpufleet.readers.ib import COUNTERS, read_ib
from slurm_gpufleet.readers.kernel_log import parse_kernel_log, read_kernel_log
from slurm_gpufleet.readers.report import ReportError, read_report
from slurm_gpufleet.readers.snapshot import NodeSnapshot
from slurm_gpufleet.records.history import History
from slurm_gpufleet.slurm.base import NodeInfo, SlurmError
from slurm_gpufleet.slurm.commands import parse_node_json, parse_node_text

TEXT = (H200 / "nvidia-smi-q.txt").read_text()
XML = (H200 / "nvidia-smi-q.xml").read_text()
TABLE = (PUBLIC / "nvidia-smi" / "fan_err_geforce_table_1.txt").read_text()
SACCT = ("JobIDRaw|User|Submit|Start|End|Elapsed|NNodes|AllocTRES|State|Timelimit\n"
         "1|u|2020-09-01T00:00:00|2020-09-01T00:00:00|2020-09-01T01:00:00|01:00:00|1|gres/gpu=2|COMPLETED|02:00:00\n")
NODE = ("NodeName=n2 Arch=x86_64 CoresPerSocket=1\n   State=IDLE+DRAIN ThreadsPerCore=1 Weight=1\n"
        "   Reason=memory gpu5 row remapping failed [gpufleet] [root@2026-11-30T10:04:11]\n"
        '   Extra={"gpufleet":1,"v":"ok","drv":"580.159.04","t":"2026-11-30T10:04:11Z"}\n')
EXAMPLES = DirectoryBasedExampleDatabase(os.path.expanduser("~/.cache/slurm-gpufleet-hypothesis"))
QUICK = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=EXAMPLES,
                 print_blob=True)
SLOW = settings(max_examples=3_000, deadline=None, suppress_health_check=list(HealthCheck), database=EXAMPLES,
                print_blob=True)


def _read(data):
    try:
        snap = read_report(data)
    except ReportError:
        return
    evaluate(snap)  # the checks must take whatever a reader produced


def _splice(base, start, length, junk):
    start %= len(base)
    return base[:start] + junk + base[start + length:]


def random_bytes(data):
    _read(data)


def cut_and_garbled_reports(base, start, length, junk):
    _read(_splice(base, start, length, junk))


def truncated_reports(base, cut):
    _read(base[: cut % len(base)])


def kernel_log_lines(lines):
    events, boots = parse_kernel_log(lines)
    assert all(e.xid >= 0 for e in events) and boots >= 0


PLANTED = "NVRM: Xid (PCI:0000:5d:00): 79, pid=777, name=python3, GPU has fallen off the bus."


def a_real_xid_among_junk_lines(before, after, pad, stamp):
    """A real Xid 79 planted among junk lines (any text but NUL, numbers of thousands of digits, lines of
    any length, NUL padding before the log): it is still found (issue 54: one line hid the rest)."""
    from slurm_gpufleet.readers.kernel_log import kernel_log_text

    lines = [*before, f"{stamp}{PLANTED}", *after]
    data = b"\0" * pad + "\n".join(lines).encode("utf-8", "surrogatepass") + b"\n"
    log = read_kernel_log(kernel_log_text(data).splitlines())
    assert any(e.xid == 79 and e.pci == "0000:5d:00" for e in log.events), (lines, log.events)


def _ecc_fault_text() -> tuple[list[str], int, int]:
    """The real H200 text with 5 volatile uncorrectable DRAM errors, and its ECC Errors block's bounds."""
    lines = (H200 / "nvidia-smi-q.txt").read_text().splitlines()
    at = next(k for k, line in enumerate(lines) if line.strip().startswith("DRAM Uncorrectable"))
    lines[at] = lines[at].replace(": 0", ": 5")
    start = next(k for k in range(at, 0, -1) if lines[k].strip() == "ECC Errors")
    end = next(k for k in range(at, len(lines)) if lines[k].startswith("    ") and not lines[k].startswith("     "))
    return lines, start, end


ECC_TEXT = _ecc_fault_text()


def a_real_fault_among_junk_report_lines(junk):
    """Junk lines (odd indents, tabs, stray text, numbers that are none) anywhere outside the ECC counters'
    own block: the 5 uncorrectable DRAM errors are still read, never an OK (issue 54: one line hid them)."""
    lines, start, end = ECC_TEXT
    out = list(lines)
    for position, text in sorted(junk, reverse=True):
        k = position % len(lines)
        if start <= k <= end:
            k = end + 1
        out.insert(k, text)
    try:
        snap = read_report(("\n".join(out) + "\n").encode())
    except ReportError:
        return   # taken for another kind of input ("{" first: a JSON snapshot) and refused: loud, never OK
    assert evaluate(snap).verdict in ("reboot", "drain"), junk


def xid_lines_with_odd_fields(pci, number, rest):
    parse_kernel_log([f"NVRM: Xid (PCI:{pci}): {number}, {rest}", f"NVRM: GPU {pci}: {rest} fallen off the bus"])


SNAPSHOT = read_report(XML).to_dict()
# one history for every example, removed when the test process ends
_HISTORY = tempfile.TemporaryDirectory(prefix="gpufleet-fuzz-history-")
HISTORY_DIR = _HISTORY.name


def snapshots_with_odd_values(path_choice, value):
    """Any value (a null, a list, a huge number, text) put anywhere in a real snapshot: a clear
    ValueError, or a snapshot every check and the history take."""
    import copy

    data = copy.deepcopy(SNAPSHOT)
    slots = list(_slots(data))
    parent, key = slots[path_choice % len(slots)]
    parent[key] = value
    try:
        snap = NodeSnapshot.from_dict(data)
    except ValueError:
        return
    _judge_and_store(snap)


def _slots(obj):
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        yield obj, key
        yield from _slots(value)


def kernel_logs_into_the_history(lines):
    """Kernel-log lines of every Xid and SXid form, numbers up to 10^30: read, judged and stored."""
    log = read_kernel_log(lines)
    snap = read_report(XML)
    snap.xid_events, snap.sxid_events, snap.xid_unparsed, snap.boots_seen = (log.events, log.sxids, log.unparsed,
                                                                             log.boots)
    _judge_and_store(snap)


def _judge_and_store(snap):
    report = evaluate(snap)
    history = History(os.path.join(HISTORY_DIR, "n1.db"))
    try:
        history.record_run("n1", "healthcheck", report.verdict, report.findings, driver=None, gpus=len(snap.gpus))
    finally:
        history.close()


XID_LINE = st.builds(lambda form, pci, number, rest: form.format(pci=pci, n=number, rest=rest),
                     st.sampled_from(["NVRM: Xid (PCI:{pci}): {n}, {rest}", "NVRM: Xid ({pci}): {n} {rest}",
                                      "nvidia-nvswitch1: SXid (PCI:{pci}.0): {n}, {rest}", "NVRM: Xid {rest} {n}",
                                      "[  12.5] NVRM: Xid (PCI:{pci}): {n}, pid={n}, name={rest}, {rest}"]),
                     st.sampled_from(["0000:3b:00", "0008:01:00", "zz", ""]),
                     st.integers(-10, 10**30), st.text(max_size=40) | st.sampled_from(
                         ["Fatal, Link 4 x", "Non-fatal, y", "Nonfatal (0x1)", "NETIR_LINK_EVT Fatal (0x021425c6)",
                          "Data {0x1}", "Severity 1 Engine instance 2"]))


def sacct_histories(start, length, junk):
    try:
        read_sacct(_splice(SACCT, start, length, junk).splitlines())
    except SacctError:
        pass


def policies(text):
    try:
        parse_policy(text)
    except PolicyError:
        pass


def _toml(value) -> str:
    """A TOML literal of any value the strategy draws (json's form is TOML's for these, but for booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def _known_keys():
    from slurm_gpufleet.policy import MAINTAIN_VALIDATORS, SLURM_VALIDATORS, VALIDATORS

    return {"slurm": sorted(SLURM_VALIDATORS), "maintain": sorted(MAINTAIN_VALIDATORS), "defaults": sorted(VALIDATORS)}


def policy_values_of_any_type(rows):
    """Every known key of every section, and the sections themselves, with a value of any type: a PolicyError
    naming a line, never another exception (a config the parser crashed on switched every check off)."""
    keys = _known_keys()
    text = []
    for section, index, value in rows:
        if section in keys:
            text.append(f"[{section}]\n{keys[section][index % len(keys[section])]} = {_toml(value)}")
        elif section == "group":
            key = sorted(keys["defaults"])[index % len(keys["defaults"])]
            text.append(f'[[group]]\nnodes = "n[1-4]"\n{key} = {_toml(value)}')
        else:  # the section itself of another type
            text.append(f"{section} = {_toml(value)}")
    try:
        parse_policy("\n".join(text))
    except PolicyError as exc:
        assert re.search(r":\d+: ", str(exc)), str(exc)


def scontrol_node_text(start, length, junk):
    try:
        parse_node_text(_splice(NODE, start, length, junk))
    except SlurmError:
        pass


def scontrol_node_json(value):
    try:
        parse_node_json(json.dumps({"nodes": [value]}), "n1")
    except SlurmError:
        pass


def published_summaries(text):
    data = published(NodeInfo("n1", "IDLE", extra=text))
    if data is not None:
        published_at(data)


# -- sysfs and host trees: one file's bytes replaced, a real fault planted elsewhere ---------------------
IB_TREE = PUBLIC / "infiniband" / "h100-gpud"
IB_POLICY = parse_policy("[defaults]\nib_ports = 8\nib_rate_gbps = 400\n")
# bytes a sysfs file may hold after a bad driver, a bad copy or a hand: numbers of any size and sign,
# non-finite words, NUL padding, invalid UTF-8, odd whitespace, nothing
FILE_JUNK = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=60).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.integers(-10**30, 10**30).map(lambda n: f"{n}\n".encode()),
    st.integers(1, 5000).map(lambda n: b"9" * n),
    st.sampled_from([b"nan\n", b"inf\n", b"-1\n", b"0.5\n", b"", b"\n", b" \t \n", b"\xff\xfe\n",
                     b"4: ACTIVE\x00", b"\x00\x00\x004: ACTIVE\n", b"lots\n", b"InfiniBand InfiniBand\n",
                     b"6.1.0-" + b"a" * 300 + b"\n", b"6.1.0-28-amd64/../../..\n"]),
)


READ_PORT_FILES = ("state", "phys_state", "rate", "link_layer")   # and counters/<COUNTERS>: what the reader reads


def _ib_copy():
    import shutil

    if not hasattr(_ib_copy, "root"):
        _ib_copy.root = os.path.join(HISTORY_DIR, "infiniband")
        shutil.copytree(IB_TREE, _ib_copy.root)
        _ib_copy.files = sorted(os.path.relpath(os.path.join(top, n), _ib_copy.root)
                                for top, _, names in os.walk(_ib_copy.root) for n in names
                                if "/ports/" in top and not top.startswith(os.path.join(_ib_copy.root, "mlx5_4"))
                                and (n in READ_PORT_FILES or top.endswith("/counters") and n in COUNTERS))
    return _ib_copy.root, _ib_copy.files


def ib_trees_with_odd_files(edits):
    """Up to three of a real H100 node's InfiniBand sysfs files replaced by junk, and port mlx5_4/1 DOWN:
    the DOWN port still drains; every replaced value is read as the kernel prints it or said, never lost;
    nothing but the planted port and the replaced ones is drained."""
    root, files = _ib_copy()
    planted = os.path.join(root, "mlx5_4", "ports", "1", "state")
    kept: dict[str, bytes] = {}
    try:
        for index, junk in edits:
            path = os.path.join(root, files[index % len(files)])
            kept.setdefault(path, open(path, "rb").read())
            with open(path, "wb") as fh:
                fh.write(junk)
        kept.setdefault(planted, open(planted, "rb").read())
        with open(planted, "wb") as fh:
            fh.write(b"1: DOWN\n")
        snap = NodeSnapshot(host="n1")
        snap.ib = read_ib(root)
        report = evaluate(snap, IB_POLICY, host="n1")
    finally:
        for path, data in kept.items():
            with open(path, "wb") as fh:
                fh.write(data)
    found = [f for f in report.findings if f.check == "infiniband"]
    assert any(f.severity == "drain" and f.message.startswith("InfiniBand mlx5_4 port 1 DOWN") for f in found), found
    ports = {(p.device, p.port): p for p in snap.ib.ports}
    edited = {os.path.relpath(p, root) for p in kept} - {os.path.relpath(planted, root)}
    for rel in edited:
        device, _, number, *name = rel.split(os.sep)
        port, name = ports.get((device, int(number))), "/".join(name)
        said = any(w.startswith(f"{device} port {number} {name}:") for w in snap.ib.unread)
        value = {"state": port and port.state, "phys_state": port and port.phys_state,
                 "rate": port and port.rate_gbps, "link_layer": port and port.link_layer}.get(
                     name, port and port.counters.get(name.rsplit("/", 1)[-1]))
        assert said or value not in (None, ""), (rel, snap.ib.unread)
    for f in found:
        if f.severity == "drain" and not f.message.startswith("InfiniBand mlx5_4 port 1 "):
            assert any(f"{rel.split(os.sep)[0]} port {rel.split(os.sep)[2]} " in f.message or
                       rel.endswith("link_layer") for rel in edited), (f.message, edited)


def host_trees_with_odd_files(which, junk, plant_updates):
    """One of a node root's files (the running kernel's release, GRUB's files, /proc/keys, the driver's
    parameters, the Secure Boot variable, the module itself, a kernel's name in /boot) replaced by junk:
    read within its bounds, never a crash; automatic updates planted beside it are still said; a release
    that reads as none is said."""
    from test_kernel import tree

    from slurm_gpufleet.readers.host import read_host

    with tempfile.TemporaryDirectory(dir=HISTORY_DIR) as tmp:
        from pathlib import Path

        root = tree(Path(tmp), kernels=("6.1.0-28-amd64", "6.1.0-31-amd64"), grubenv="6.1.0-31-amd64",
                    secure_boot=True, unattended=plant_updates)
        target = HOST_FILES[which % len(HOST_FILES)]
        if target == "boot/vmlinuz-":
            name = "vmlinuz-" + junk.decode("utf-8", "replace").replace("/", "_").replace("\x00", "")[:200]
            try:
                (root / "boot" / name).write_bytes(b"kernel")
            except (OSError, ValueError):
                return   # a name no file system takes
        else:
            path = root / target
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(junk)
        facts = read_host(str(root))
        snap = read_report(XML)
        snap.host_facts = facts
        found = [f for f in evaluate(snap).findings if f.check == "kernel"]
    said = {f.message for f in found}
    assert ("automatic kernel updates on (unattended-upgrades)" in said) == plant_updates, said
    if target == "proc/sys/kernel/osrelease" and facts.running is None and junk.decode("utf-8", "replace").strip():
        assert "host facts not readable" in said, (junk, said)


HOST_FILES = ["proc/sys/kernel/osrelease", "boot/grub/grubenv", "etc/default/grub", "proc/keys",
              "proc/driver/nvidia/params", "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
              "lib/modules/6.1.0-28-amd64/updates/dkms/nvidia.ko", "lib/modules/6.1.0-31-amd64/updates/dkms/nvidia.ko.xz",
              "lib/modules/6.1.0-31-amd64/updates/dkms/nvidia.ko.gz", "boot/vmlinuz-"]


SCALAR = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
# the shapes scontrol --json uses: scalars, lists of words, and 23.11's {"set": ..., "number": ...}
JSONISH = SCALAR | st.lists(st.text(max_size=12), max_size=4) | st.fixed_dictionaries(
    {"set": st.booleans(), "number": st.integers() | st.floats(allow_nan=False)})
JUNK_LINE = st.one_of(st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                                max_size=300),
                      st.integers(0, 10**9).map(lambda n: "NVRM: Xid (PCI:0000:3b:00): " + "9" * (n % 6000)),
                      st.integers(1, 200_000).map(lambda n: "a" * n), st.just("Linux version 6.1.0"),
                      st.just("Dec  1 08:00:00 gpu01 mallory[42]: NVRM: Xid (PCI:0000:5d:00): 13, x"))
REPORT_JUNK = st.tuples(st.integers(0, 10**6), st.one_of(
    st.text(st.characters(blacklist_characters="\x00\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029",
                          blacklist_categories=("Cs",)), max_size=80),
    st.tuples(st.sampled_from(["", "\t", "  ", "    ", "\t\t", "        "]), st.sampled_from(
        ["note", "Volatile", "DRAM Uncorrectable : NaN", "see ticket 42", "Foo : lots"])).map("".join)))
PROPERTIES = {
    "ib_trees_with_odd_files": (ib_trees_with_odd_files, (st.lists(st.tuples(st.integers(0, 10**6), FILE_JUNK),
                                                                   min_size=1, max_size=3),)),
    "host_trees_with_odd_files": (host_trees_with_odd_files, (st.integers(0, 10**6), FILE_JUNK, st.booleans())),
    "a_real_fault_among_junk_report_lines": (a_real_fault_among_junk_report_lines, (
        st.lists(REPORT_JUNK, min_size=1, max_size=6),)),
    "a_real_xid_among_junk_lines": (a_real_xid_among_junk_lines, (
        st.lists(JUNK_LINE, max_size=6), st.lists(JUNK_LINE, max_size=6), st.integers(0, 9000),
        st.sampled_from(["", "[  12.5] ", "2026-12-01T08:00:00,000000+00:00 ", "Dec  1 08:00:00 gpu01 kernel: "]))),
    "random_bytes": (random_bytes, (st.binary(max_size=2000),)),
    "cut_and_garbled_reports": (cut_and_garbled_reports, (st.sampled_from([TEXT, XML, TABLE]), st.integers(0, 20000),
                                                          st.integers(0, 400), st.text(max_size=40))),
    "truncated_reports": (truncated_reports, (st.sampled_from([TEXT, XML]), st.integers(0, 30000))),
    "kernel_log_lines": (kernel_log_lines, (st.lists(st.text(max_size=200), max_size=30),)),
    "xid_lines_with_odd_fields": (xid_lines_with_odd_fields, (st.text(alphabet="0123456789abcdef:.", max_size=12),
                                                              st.integers(0, 10**6), st.text(max_size=60))),
    "snapshots_with_odd_values": (snapshots_with_odd_values, (st.integers(0, 10**6), JSONISH | st.integers(
        min_value=2**63, max_value=10**30) | st.lists(SCALAR, max_size=3))),
    "kernel_logs_into_the_history": (kernel_logs_into_the_history, (st.lists(XID_LINE, max_size=12),)),
    "sacct_histories": (sacct_histories, (st.integers(0, 400), st.integers(0, 60), st.text(max_size=40))),
    "policies": (policies, (st.text(max_size=300),)),
    "policy_values_of_any_type": (policy_values_of_any_type, (st.lists(st.tuples(
        st.sampled_from(["slurm", "maintain", "defaults", "group", "models", "requires", "domain", "bundle"]),
        st.integers(0, 200), st.recursive(SCALAR.filter(lambda v: v is not None), lambda inner: st.lists(
            inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "nodes", "driver", "name"]), inner,
                                                 max_size=2), max_leaves=4)), min_size=1, max_size=4),)),
    "scontrol_node_text": (scontrol_node_text, (st.integers(0, 400), st.integers(0, 60), st.text(max_size=40))),
    "scontrol_node_json": (scontrol_node_json, (st.dictionaries(
        st.sampled_from(["name", "state", "state_flags", "reason", "boot_time", "weight", "extra",
                         "slurmd_start_time", "reason_changed_at", "comment", "gres"]), JSONISH, max_size=8),)),
    "published_summaries": (published_summaries, (st.one_of(st.text(max_size=200), JSONISH.map(json.dumps)),)),
}


@pytest.mark.parametrize("name", sorted(PROPERTIES))
def test_quick(name):
    fn, strategies = PROPERTIES[name]
    QUICK(given(*strategies)(fn))()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PROPERTIES))
def test_3000_new_cases(name):
    fn, strategies = PROPERTIES[name]
    SLOW(given(*strategies)(fn))()
