"""Xid and SXid events from the kernel log: dmesg (plain, -T, -x, --time-format iso), journalctl, syslog,
/dev/kmsg.

Only `NVRM: Xid (...)` lines are GPU Xids; the "caused by previous Xid N" text inside another message is
not: the Xid number is always the one right after the header.  `nvidia-nvswitchN: SXid (...)` lines are
the NVSwitch's own faults on an HGX board, read as SXid events.  Every other line that mentions an Xid
or SXid is counted as unparsed, with why (`KernelLog.unparsed`): never read as "Xid 0", never dropped.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from .snapshot import NicEvent, SXidEvent, XidEvent, normalize_pci

# Header forms, as the open GPU kernel modules print them (src/nvidia/src/kernel/gpu/rc/kernel_rc.c,
# krcReportXid: "NVRM: Xid (" attr "): %d, pid=%s, name=%s, %s%s" or "NVRM: Xid (" attr "): %d, %s%s",
# attr "PCI:%04x:%02x:%02x" with " GPU-I:%02u" and " GPU-CI:%02u" for MIG; the last %s is
# " caused by previous Xid %d" or nothing), their tracepoint (kernel-open/nvidia/nv-tracepoint.h:
# "Xid (PCI:%s): %u, %s", no NVRM prefix), and as seen in the field:
#   NVRM: Xid (PCI:0000:3b:00): 79, pid=123, name=python, GPU has fallen off the bus.
#   NVRM: Xid (0000:02:00): 79, GPU has fallen off the bus.              (older drivers)
#   NVRM: Xid (PCI:0000:07:00 GPU-I:05): 31, pid=..., ...                (MIG: GPU instance)
#   NVRM: Xid (PCI:0000:07:00 GPU-I:05 GPU-CI:01): 13, ...               (MIG: and compute instance)
#   NVRM: Xid (PCI:0008:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 ...)
#   NVRM: Xid (PCI:0000:01:00): 154 (                                    (a line cut after the number)
# "SXid" (NVSwitch) lines are not GPU Xids: the header must not follow a letter.
_XID = re.compile(
    r"(?<![A-Za-z])Xid\s*\(\s*(?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)"
    r"(?P<mig>(?:\s+GPU-(?:I|CI|C):\s*\d+)*)\s*\)\s*:\s*(?P<xid>\d+)\b\s*(?P<sep>,)?\s*(?P<rest>.*)$"
)
# any other line that says it is an Xid: read as far as it goes, and counted
_XID_LOOSE = re.compile(r"NVRM:\s*Xid\b(?P<head>[^:]*(?::[^:)]*)*\)?)\s*:?\s*(?P<xid>\d+)?")
# osapi.c's three-line form for a GPU that is gone before the driver binds it:
#   NVRM: The NVIDIA GPU 0000:3b:00.0
#   NVRM: (PCI ID: 10de:2335) installed in this system has
#   NVRM: fallen off the bus and is not responding to commands.
_THE_GPU = re.compile(r"NVRM:\s*The NVIDIA GPU\s+(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)")
_NOT_RESPONDING = re.compile(r"NVRM:\s*fallen off the bus and is not responding", re.I)
_PCI_ANY = re.compile(r"(?P<pci>(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)")
# NVLink5 Xids 144-150: "<unit> Fatal|Nonfatal ... (0x<first register> ...)"; the sub-code is bits 20-25.
# The unit and the register may be missing ("150, Nonfatal (0x1)", "149, Nonfatal"): the word decides.
_NVL5_UNIT = re.compile(r"^(?P<unit>[A-Z][A-Z0-9_]*[A-Z0-9])\b(?![,:])")
_NVL5_SEV = re.compile(r"(?<![A-Za-z])(?P<sev>Fatal|Non[- ]?fatal)(?![A-Za-z])", re.I)
_NVL5_REG = re.compile(r"\((?P<reg>0x[0-9A-Fa-f]{1,8})(?:[\s,]+(?P<status>0x[0-9A-Fa-f]{1,8})\b)?")
NVLINK5_XIDS = range(144, 151)
# the largest Xid number the parser takes (NVIDIA's catalog ends below 200): a larger one is no Xid
# (a corrupted or hostile line) and is counted as unparsed, never stored
XID_MAX = 9999
SXID_MAX = 99999
# NVSwitch SXid lines (the nvswitch driver): a header, then "Fatal|Non-fatal, <what>", or a continuation
# of the event before it ("Severity N Engine instance ...", "Data {0x..., ...}")
#   nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up
#   nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Severity 1 Engine instance 60 Sub-engine instance 00
#   nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x10000000, 0x10000000, ...}
#   nvidia-nvswitch4: SXid (PCI:0000:c6:00.0): 19084, Non-fatal, Link 29 AN1 Heartbeat Timeout Error (First)
_SXID = re.compile(
    r"nvidia-nvswitch(?P<sw>\d+)?\s*:\s*SXid\s*\(\s*(?:PCI:)?"
    r"(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)\s*\)\s*:\s*(?P<code>\d+)\s*"
    r"(?:,\s*(?P<rest>.*))?$")
_SXID_SEV = re.compile(r"^(?P<sev>Fatal|Non[- ]?fatal)\b\s*,?\s*(?P<msg>.*)$", re.I)
_SXID_MORE = re.compile(r"^(?:Severity\s+\d+|Data\s*\{)", re.I)
_LINK = re.compile(r"\bLink\s+(?P<link>\d+)\b")
# any line that mentions an Xid or SXid at all
_MENTION = re.compile(r"(?<![A-Za-z])S?Xid(?![A-Za-z])")
_CAUSED = re.compile(r"caused by previous Xid\s*(?P<xid>\d+)", re.I)
_PID = re.compile(r"^pid\s*=\s*'?(?P<pid><unknown>|\d+)'?\s*(?:,\s*)?")
_NAME = re.compile(r"^name\s*=\s*(?P<name>[^,]*)\s*(?:,\s*)?")
_TS_MONO = re.compile(r"\[\s*(?P<s>\d+\.\d+)\]")
_TS_ISO = re.compile(r"(?P<ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:[+-]\d{2}:?\d{2}|Z)?)")
_TS_CTIME = re.compile(r"\[(?P<ts>(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3}\s+\d+ \d{2}:\d{2}:\d{2} \d{4})\]")
_TS_SYSLOG = re.compile(r"^(?P<ts>\w{3}\s+\d+ \d{2}:\d{2}:\d{2})\s")
_KMSG = re.compile(r"^\d+,\d+,(?P<usec>\d+),[^;]*;")
# What slurm-gpufleet writes to the kernel log after it reset a GPU (remedy/ladder.py), one line per GPU:
# the Xids logged for that GPU before it in the same boot were answered by the reset
RESET_MARK = "slurm-gpufleet: GPU reset PCI:"
_RESET = re.compile(re.escape(RESET_MARK) + r"(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)")
# a syslog or journal line's head: its time, host and the program that logged it ("kernel" for the kernel);
# dmesg's own lines ("[  12.3] NVRM: ...", "2026-...T... NVRM: Xid ...") have none
_SYSLOG_HEAD = re.compile(r"^(?:\w{3}\s+\d+ \d{2}:\d{2}:\d{2}|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?"
                          r"(?:[+-]\d{2}:?\d{2}|Z)?)\s+\S+\s+(?P<tag>[^\s:\[\]]+)(?:\[\d+\])?:\s")
_BOOT_MARK = re.compile(r"^-- Boot [0-9a-f]+ --|Linux version \d|\[\s*0\.000000\]|^\d+,\d+,0,[^;]*;")


@dataclass
class KernelLog:
    """What a kernel log says of the GPUs and their switches."""

    events: list[XidEvent] = field(default_factory=list)
    boots: int = 0
    sxids: list[SXidEvent] = field(default_factory=list)
    # "line N: why: text" for each line that mentions an Xid or SXid and was not read as one
    unparsed: list[str] = field(default_factory=list)
    # mlx5 lines of failed InfiniBand / RoCE cards and links (data/mlx5_events.toml)
    nics: list[NicEvent] = field(default_factory=list)
    # lines of a syslog or journal file logged by a program other than the kernel that would have counted
    # (an Xid, SXid, fallen-off-the-bus, reset or boot line): never counted, since any user can log them
    foreign: list[str] = field(default_factory=list)
    # what of the input was not read, and why (a log longer than TAIL_BYTES is read from its tail)
    notes: list[str] = field(default_factory=list)


# printk's records are at most 1,024 bytes (PRINTK_MESSAGE_MAX): a line past this, with any syslog or journal
# head, is no kernel message; it is read only this far, so that every pattern's work per line is bounded
LINE_MAX = 4096
# a kernel log is read from its end, at most this much: the boots that matter are the recent ones, and
# a log of hundreds of megabytes (a syslog never rotated) must not cost gigabytes to read
TAIL_BYTES = 32 << 20


def parse_kernel_log(lines: Iterable[str]) -> tuple[list[XidEvent], int]:
    """Return the GPU Xid events and the number of boots the log spans (at least 1 if non-empty)."""
    log = read_kernel_log(lines)
    return log.events, log.boots


def read_kernel_log(lines: Iterable[str]) -> KernelLog:
    """The Xid and SXid events, the boots the log spans, and the lines that mention an Xid unread."""
    out = KernelLog()
    events = out.events
    boot = 0
    seen_any = False
    # a boot shows as several marks in a row (journal "-- Boot --", then "Linux version", then [0.000000]);
    # only the first mark after other lines starts a new boot
    content_since_mark = False
    last_mono: float | None = None
    the_gpu: tuple[str, int] | None = None  # "NVRM: The NVIDIA GPU <pci>" seen, and on which line
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")[:LINE_MAX]
        if not line.strip():
            continue
        head = _SYSLOG_HEAD.match(line)
        if head and head.group("tag") != "kernel":
            # another program's line in a syslog file: whatever it says, the kernel did not say it
            if _MENTION.search(line) or "NVRM" in line or RESET_MARK in line or _BOOT_MARK.search(line):
                out.foreign.append(f"line {number}: logged by {head.group('tag')[:40]}, not the kernel: "
                                   f"{line.strip()[:160]}")
            continue
        mono = _monotonic(line)
        banner = bool(_BOOT_MARK.search(line))
        # time going backwards without a banner (two boots' logs joined, a boot whose banner was cut):
        # a new boot starts here, and this line is still read for its Xid
        if banner or (mono is not None and last_mono is not None and mono < last_mono):
            if content_since_mark:
                boot += 1
            content_since_mark = False
        if mono is not None:
            last_mono = mono
        seen_any = True
        if banner:
            continue
        content_since_mark = True
        reset = _RESET.search(line)
        if reset:
            pci = normalize_pci(reset.group("pci"))
            for e in events:
                if e.boot == boot and e.pci == pci:
                    e.cleared = True
            continue
        gone = _THE_GPU.search(line)
        if gone:
            the_gpu = (normalize_pci(gone.group("pci")), number)
        if "mlx5" in line:
            nic = _nic(line, number, boot)
            if nic is not None:
                out.nics.append(nic)
                continue
        sx = _SXID.search(line)
        if sx:
            why = _sxid(sx, line, number, boot, out.sxids)
            if why:
                out.unparsed.append(f"line {number}: {why}: {line.strip()[:160]}")
            continue
        read = _xid(line, number)
        if isinstance(read, str):
            out.unparsed.append(f"line {number}: {read}: {line.strip()[:160]}")
            continue
        event = read or _fallen_off(line, number, events, boot)
        if event is None and the_gpu is not None and number - the_gpu[1] <= 3 and _NOT_RESPONDING.search(line):
            event = XidEvent(line=number, xid=79, pci=the_gpu[0], timestamp=_timestamp(line), raw=line[:1000],
                             message="GPU has fallen off the bus and is not responding (kernel lines, no Xid header)")
            the_gpu = None
        if event is not None:
            event.boot = boot
            events.append(event)
        elif _MENTION.search(line):
            out.unparsed.append(f"line {number}: mentions an Xid but is no Xid line of a known form: "
                                f"{line.strip()[:160]}")
    out.boots = boot + 1 if seen_any else 0
    return out


_MLX5_PCI = re.compile(r"mlx5_core\s+(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")


@functools.cache
def _nic_patterns() -> tuple[tuple[str, re.Pattern], ...]:
    from ..catalogs import mlx5_events

    return tuple((row["name"], re.compile(row["pattern"])) for row in mlx5_events())


def _nic(line: str, number: int, boot: int) -> NicEvent | None:
    """An mlx5 line of data/mlx5_events.toml, or None."""
    for name, pattern in _nic_patterns():
        m = pattern.search(line)
        if m:
            pci = _MLX5_PCI.search(line)
            what = (m.groupdict().get("what") or "").strip()[:120]
            return NicEvent(line=number, name=name, pci=normalize_pci(pci.group("pci")) if pci else None,
                            what=what, boot=boot, raw=line[:1000])
    return None


def _sxid(m: re.Match, line: str, number: int, boot: int, sxids: list[SXidEvent]) -> str | None:
    """Read one SXid line into `sxids` (a continuation line into the event it continues).  Returns why
    it was not read, or None."""
    code = int(m.group("code"))
    if code > SXID_MAX:
        return f"SXid number {m.group('code')[:24]} out of range"
    rest = (m.group("rest") or "").strip()
    switch = int(m.group("sw")) if m.group("sw") else None
    pci = normalize_pci(m.group("pci"))
    if _SXID_MORE.match(rest):
        # the detail of an event whose header line came before, on this switch (switches' lines interleave)
        if any((e.sxid, e.switch, e.pci, e.boot) == (code, switch, pci, boot) for e in reversed(sxids[-64:])):
            return None  # one event, not two
        # its header line is lost (a ring buffer that wrapped, a log cut): still an SXid of this switch,
        # its severity left to the catalog
        sev, message = None, f"header line lost: {rest[:480]}"
    else:
        sev = _SXID_SEV.match(rest)
        message = (sev.group("msg") if sev else rest)[:500]
    link = _LINK.search(message)
    sxids.append(SXidEvent(line=number, sxid=code, switch=switch, pci=pci,
                           fatal=(not sev.group("sev").lower().startswith("non")) if sev else None,
                           message=message, link=int(link.group("link")) if link else None,
                           timestamp=_timestamp(line[: m.start()]), boot=boot, raw=line[:1000]))
    return None


# The kernel's own "GPU has fallen off the bus" line, without an Xid header: the event behind Xid 79.
#   NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.
#   NVRM: GPU at PCI:0000:3b:00: GPU has fallen off the bus.
#   NVRM: GPU 18:00.0: GPU has fallen off the bus.                      (the short PCI form, no domain)
_FELL = re.compile(r"NVRM:\s*GPU\s+(?:at\s+)?(?:PCI:)?"
                   r"(?P<pci>(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)"
                   r"[^\n]*?fallen off the bus", re.I)


def _fallen_off(line: str, number: int, events: list[XidEvent], boot: int) -> XidEvent | None:
    if "off the bus" not in line.lower():   # the lazy scan of _FELL runs only on a line that can match
        return None
    m = _FELL.search(line)
    if not m or "SXid" in line:
        return None
    pci = normalize_pci(m.group("pci"))
    # the driver usually prints it right after its own Xid 79 for the same GPU: one event, not two
    if any(e.xid == 79 and e.pci == pci and e.boot == boot for e in events[-8:]):
        return None
    return XidEvent(line=number, xid=79, pci=pci, message="GPU has fallen off the bus (kernel line, no Xid header)",
                    pid=None, process=None, timestamp=_timestamp(line[: m.start()]), raw=line[:1000])


def parse_xid_line(line: str, number: int = 1) -> XidEvent | None:
    read = _xid(line, number)
    return read if isinstance(read, XidEvent) else None


def _xid(line: str, number: int) -> XidEvent | str | None:
    """The line's Xid event; why it is an Xid line that cannot be read (a str); None for any other line."""
    m = _XID.search(line)
    if not m:
        return _loose(line, number)
    if int(m.group("xid")) > XID_MAX:
        return f"Xid number {m.group('xid')[:24]} out of range"
    rest = (m.group("rest") or "").strip()
    # a number with no ", message" after it but something else: the line was cut or is of a new form
    partial = m.group("sep") is None and bool(rest)
    pid: int | None = None
    process: str | None = None
    pm = _PID.match(rest)
    if pm:
        pid = int(pm.group("pid")) if pm.group("pid").isdecimal() else None
        rest = rest[pm.end():]
        nm = _NAME.match(rest)
        if nm:
            name = nm.group("name").strip()
            process = None if name in ("<unknown>", "") else name
            rest = rest[nm.end():]
    xid = int(m.group("xid"))
    event = XidEvent(
        line=number,
        xid=xid,
        pci=normalize_pci(m.group("pci")),
        message=rest.strip()[:500],
        pid=pid,
        process=process,
        timestamp=_timestamp(line[: m.start()]),
        raw=line[:1000],
        partial=partial,
    )
    if xid in NVLINK5_XIDS:
        text = rest.strip()
        sev = _NVL5_SEV.search(text)
        if sev:
            event.fatal = not sev.group("sev").lower().startswith("non")
            unit = _NVL5_UNIT.match(text[: sev.start()].strip())
            event.unit = unit.group("unit") if unit else None
            reg = _NVL5_REG.search(text, sev.end())
            if reg and event.unit:  # the first register of a unit's line carries the sub-code
                event.intrinfo = int(reg.group("reg"), 16)
                event.subcode = (event.intrinfo >> 20) & 0x3F
                if reg.group("status"):
                    event.error_status = int(reg.group("status"), 16)
    caused = _CAUSED.search(rest)
    if caused and int(caused.group("xid")) != xid:
        event.caused_by = int(caused.group("xid"))
    return event


def _loose(line: str, number: int) -> XidEvent | str | None:
    """An Xid header of a form the strict pattern does not know: its number and GPU where they can be
    read, marked partial; why not, where no number can be (counted as unparsed, never dropped)."""
    m = _XID_LOOSE.search(line)
    if not m:
        return None
    if not m.group("xid"):
        return "an Xid line with no Xid number"
    if int(m.group("xid")) > XID_MAX or int(m.group("xid")) == 0:
        return f"Xid number {m.group('xid')[:24]} out of range"
    pci = _PCI_ANY.search(m.group("head") or "")
    return XidEvent(line=number, xid=int(m.group("xid")),
                    pci=normalize_pci(pci.group("pci")) if pci else None,
                    message=line[m.start() + line[m.start():].find("Xid") + 3:].strip()[:500], timestamp=_timestamp(line[: m.start()]),
                    raw=line[:1000], partial=True)


def _monotonic(line: str) -> float | None:
    km = _KMSG.match(line)
    if km:
        return int(km.group("usec")) / 1e6
    m = _TS_MONO.search(line)
    return float(m.group("s")) if m else None


def _timestamp(prefix: str) -> str | None:
    for pattern in (_TS_ISO, _TS_CTIME, _TS_SYSLOG):
        m = pattern.search(prefix)
        if m:
            return m.group("ts")
    mono = _monotonic(prefix)
    return f"{mono:.6f}s" if mono is not None else None


def read_kernel_log_file(path: str) -> KernelLog:
    """Xid and SXid events from a saved log, or from the live ring buffer when the path is /dev/kmsg."""
    if path == "/dev/kmsg":
        return read_kernel_log(read_kmsg(path))
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        cut = size > TAIL_BYTES
        if cut:
            fh.seek(size - TAIL_BYTES)
        data = fh.read(TAIL_BYTES)
    if cut:   # from the first whole line
        data = data[data.find(b"\n") + 1:]
    log = read_kernel_log(kernel_log_text(data, path).splitlines())
    if cut:
        log.notes.append(f"read its last {_size(TAIL_BYTES)} of {_size(size)}: older boots not judged")
    return log


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"


def kernel_log_text(data: bytes, where: str = "input") -> str:
    """A kernel log's text; binary junk (a core file, a gzip given by mistake) is no log at all, said as
    a binary nvidia-smi file is, never read as "0 Xid events"."""
    # a file preallocated, or cut by logrotate's copytruncate, starts with NULs: the log is what follows
    data = data.lstrip(b"\x00")
    if b"\x00" in data[:4096]:
        from .errors import ReportError

        raise ReportError(f"{where}: input is binary, not a kernel log")
    return data.decode("utf-8", "replace")


def event_epoch(event: XidEvent, boot_epoch: float | None = None, year: int | None = None) -> float | None:
    """Seconds since the epoch for an event's timestamp, when the log says enough to know it."""
    import datetime as dt

    ts = event.timestamp
    if not ts:
        return None
    if ts.endswith("s") and ts[:-1].replace(".", "", 1).isdecimal():
        return boot_epoch + float(ts[:-1]) if boot_epoch is not None else None
    text = ts.replace(",", ".")
    try:
        if text[:4].isdecimal():
            parsed = dt.datetime.fromisoformat(text.replace(" ", "T"))
            return parsed.timestamp()
        if text[:3].isalpha() and text[4:7].isalpha():  # ctime: "Sun Feb 23 16:24:18 2025"
            return dt.datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y").timestamp()
        # syslog: "May 19 07:08:57" has no year
        parsed = dt.datetime.strptime(f"{year or dt.date.today().year} {' '.join(text.split())}", "%Y %b %d %H:%M:%S")
        return parsed.timestamp()
    except ValueError:
        return None


def read_kmsg(path: str = "/dev/kmsg", max_records: int = 200_000) -> list[str]:
    """Every record in the kernel ring buffer, without blocking (each read() returns one record)."""
    import errno
    import os

    lines: list[str] = []
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while len(lines) < max_records:
            try:
                chunk = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    break
                if exc.errno == errno.EPIPE:  # overwritten while reading: go on from the next record
                    continue
                raise
            if not chunk:
                break
            lines.append(chunk.decode("utf-8", "replace").split("\n", 1)[0])
    finally:
        os.close(fd)
    return lines


def drop_before(snap, t: float, btime: float | None = None) -> int:
    """The node was repaired at `t` (an admin's `fleet repaired`): its Xid and SXid lines logged before then
    never count again, in this boot or any the log spans.  A line whose time the log does not give stays.
    Returns how many were dropped."""
    btime = boot_epoch() if btime is None else btime

    def before(e) -> bool:
        at = event_epoch(e, btime)
        return at is not None and at < t

    count = len(snap.xid_events) + len(snap.sxid_events)
    snap.xid_events = [e for e in snap.xid_events if not before(e)]
    snap.sxid_events = [e for e in snap.sxid_events if not before(e)]
    return count - len(snap.xid_events) - len(snap.sxid_events)


def boot_epoch() -> float | None:
    try:
        with open("/proc/stat") as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None
