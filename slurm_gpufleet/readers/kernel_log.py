"""Xid events from the kernel log: dmesg (plain, -T, -x, --time-format iso), journalctl, syslog, /dev/kmsg.

Only `NVRM: Xid (...)` lines are GPU Xids.  NVSwitch `SXid` lines and the "caused by previous Xid N"
text inside another message are not: the Xid number is always the one right after the header.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..snapshot import XidEvent, normalize_pci

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
# NVLink5 Xids 144-150: "<unit> Fatal|Nonfatal ... (0x<first register> ...)"; the sub-code is bits 20-25
_NVL5 = re.compile(r"^(?P<unit>[A-Z][A-Z0-9_]*)\s+(?P<sev>Fatal|Non-?fatal)\b.*?\((?P<reg>0x[0-9A-Fa-f]+)", re.I)
NVLINK5_XIDS = range(144, 151)
_CAUSED = re.compile(r"caused by previous Xid\s*(?P<xid>\d+)", re.I)
_PID = re.compile(r"^pid\s*=\s*'?(?P<pid><unknown>|\d+)'?\s*(?:,\s*)?")
_NAME = re.compile(r"^name\s*=\s*(?P<name>[^,]*)\s*(?:,\s*)?")
_TS_MONO = re.compile(r"\[\s*(?P<s>\d+\.\d+)\]")
_TS_ISO = re.compile(r"(?P<ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:[+-]\d{2}:?\d{2}|Z)?)")
_TS_CTIME = re.compile(r"\[(?P<ts>(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3}\s+\d+ \d{2}:\d{2}:\d{2} \d{4})\]")
_TS_SYSLOG = re.compile(r"^(?P<ts>\w{3}\s+\d+ \d{2}:\d{2}:\d{2})\s")
_KMSG = re.compile(r"^\d+,\d+,(?P<usec>\d+),[^;]*;")
# What slurm-gpufleet writes to the kernel log after it reset a GPU (remediation.py), one line per GPU:
# the Xids logged for that GPU before it in the same boot were answered by the reset
RESET_MARK = "slurm-gpufleet: GPU reset PCI:"
_RESET = re.compile(re.escape(RESET_MARK) + r"(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)")
_BOOT_MARK = re.compile(r"^-- Boot [0-9a-f]+ --|Linux version \d|\[\s*0\.000000\]|^\d+,\d+,0,[^;]*;")


def parse_kernel_log(lines: Iterable[str]) -> tuple[list[XidEvent], int]:
    """Return the GPU Xid events and the number of boots the log spans (at least 1 if non-empty)."""
    events: list[XidEvent] = []
    boot = 0
    seen_any = False
    # a boot shows as several marks in a row (journal "-- Boot --", then "Linux version", then [0.000000]);
    # only the first mark after other lines starts a new boot
    content_since_mark = False
    last_mono: float | None = None
    the_gpu: tuple[str, int] | None = None  # "NVRM: The NVIDIA GPU <pci>" seen, and on which line
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if not line.strip():
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
        event = parse_xid_line(line, number) or _fallen_off(line, number, events, boot)
        if event is None and the_gpu is not None and number - the_gpu[1] <= 3 and _NOT_RESPONDING.search(line):
            event = XidEvent(line=number, xid=79, pci=the_gpu[0], timestamp=_timestamp(line), raw=line[:1000],
                             message="GPU has fallen off the bus and is not responding (kernel lines, no Xid header)")
            the_gpu = None
        if event is not None:
            event.boot = boot
            events.append(event)
    return events, (boot + 1 if seen_any else 0)


# The kernel's own "GPU has fallen off the bus" line, without an Xid header: the event behind Xid 79.
#   NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.
#   NVRM: GPU at PCI:0000:3b:00: GPU has fallen off the bus.
#   NVRM: GPU 18:00.0: GPU has fallen off the bus.                      (the short PCI form, no domain)
_FELL = re.compile(r"NVRM:\s*GPU\s+(?:at\s+)?(?:PCI:)?"
                   r"(?P<pci>(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)"
                   r"[^\n]*?fallen off the bus", re.I)


def _fallen_off(line: str, number: int, events: list[XidEvent], boot: int) -> XidEvent | None:
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
    m = _XID.search(line)
    if not m:
        return _loose(line, number)
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
        nv = _NVL5.search(rest.strip())
        if nv:
            event.fatal = not nv.group("sev").lower().startswith("non")
            event.subcode = (int(nv.group("reg"), 16) >> 20) & 0x3F
    caused = _CAUSED.search(rest)
    if caused and int(caused.group("xid")) != xid:
        event.caused_by = int(caused.group("xid"))
    return event


def _loose(line: str, number: int) -> XidEvent | None:
    """An Xid header of a form the strict pattern does not know: its number and GPU where they can be
    read (xid 0 where not), marked partial.  Counted, never dropped."""
    m = _XID_LOOSE.search(line)
    if not m:
        return None
    pci = _PCI_ANY.search(m.group("head") or "")
    return XidEvent(line=number, xid=int(m.group("xid")) if m.group("xid") else 0,
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


def read_kernel_log_file(path: str) -> tuple[list[XidEvent], int]:
    """Xid events from a saved log, or from the live ring buffer when the path is /dev/kmsg."""
    if path == "/dev/kmsg":
        return parse_kernel_log(read_kmsg(path))
    with open(path, "rb") as fh:
        data = fh.read()
    return parse_kernel_log(kernel_log_text(data, path).splitlines())


def kernel_log_text(data: bytes, where: str = "input") -> str:
    """A kernel log's text; binary junk (a core file, a gzip given by mistake) is no log at all, said as
    a binary nvidia-smi file is, never read as "0 Xid events"."""
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


def boot_epoch() -> float | None:
    try:
        with open("/proc/stat") as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None
