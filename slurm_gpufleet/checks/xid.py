"""Xid: kernel-log GPU errors mapped through the catalog; a reset-fixable Xid that survives reboots
is escalated to a drain for hardware inspection.  An Xid a GPU reset answered (the reset's line in the
kernel log after it, readers/kernel_log.RESET_MARK) no longer counts in its boot.

NVLink5 Xids (144-150) say Fatal or Nonfatal: a nonfatal one is a warning, a fatal one follows the
catalog.  A line that says it was "caused by previous Xid N" repeats an event already counted (Xid 45
after 149 on GB200): the cause is counted once.  A header the parser read only in part is still judged
by its number; one with no number is a warning of its own."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from ..catalog import xid_info
from ..findings import RANK, Finding

if TYPE_CHECKING:
    from . import Context

NAME = "xid"
ORDER = 70


def check(ctx: Context) -> list[Finding]:
    snap, pol = ctx.snapshot, ctx.policy
    events = [e for e in snap.xid_events if e.xid not in pol.xid_ignore]
    if not events:
        return []
    # the cause is counted once: a follow-on line goes only where its cause is in the log for that GPU
    causes = {(e.xid, e.pci, e.boot) for e in events}
    events = [e for e in events if e.caused_by is None or (e.caused_by, e.pci, e.boot) not in causes]
    out: list[Finding] = []
    unreadable = [e for e in events if e.xid == 0]
    if unreadable:
        out.append(Finding(NAME, "warn", "watch", None, f"{len(unreadable)} Xid line(s) of an unknown form",
                           f"first at line {unreadable[0].line}: {unreadable[0].raw[:160]}"))
    events = [e for e in events if e.xid != 0]
    if not events:
        return out
    current_boot = max(e.boot for e in events) if snap.boots_seen <= 1 else snap.boots_seen - 1
    boots_by_key: dict[tuple[int, str | None], set[int]] = defaultdict(set)
    current: dict[tuple[int, str | None], list] = defaultdict(list)
    for e in events:
        boots_by_key[(e.xid, e.pci)].add(e.boot)
        if e.boot == current_boot and not e.cleared:
            current[(e.xid, e.pci)].append(e)
    for (number, pci), evs in current.items():
        gpu = snap.gpu_by_pci(pci)
        index = gpu.index if gpu else None
        where = f"PCI {pci}" if pci else "unknown GPU"
        info = xid_info(number)
        first = evs[0]
        times = f"{len(evs)}x" if len(evs) > 1 else "once"
        if info is None:
            out.append(Finding(NAME, "warn", "watch", index, f"Xid {number} (unknown)",
                               f"{where}, {times}, first at line {first.line}: {first.message[:160]}",
                               xid=number))
            continue
        fatal = [e for e in evs if e.fatal is not False]
        if not fatal:  # NVLink5 "Nonfatal": the link recovered on its own
            codes = sorted({e.subcode for e in evs if e.subcode is not None})
            out.append(Finding(NAME, "warn", "watch", index, f"Xid {number} {info.name} (Nonfatal)",
                               f"{where}, {times}, sub-code {', '.join(map(str, codes)) or '?'}, first at line "
                               f"{first.line}", xid=number))
            continue
        first = fatal[0]
        label = f"{number}.{first.subcode}" if first.subcode is not None else f"{number}"
        boots = len(boots_by_key[(number, pci)])
        if RANK[info.severity] >= RANK["reboot"] and boots > pol.xid_escalate_after_reboots:
            out.append(Finding(NAME, "drain", "inspect_hardware", index, f"Xid {number} after {boots - 1} reboots",
                               f"{info.name} on {where} in {boots} boots: a reset does not fix it",
                               xid=number))
            continue
        out.append(Finding(NAME, info.severity, info.action, index,
                           f"Xid {label} {info.name}" + (" (Fatal)" if first.fatal else ""),
                           f"{where}, {times}, first at line {first.line}; {info.action_text}",
                           xid=number))
    return out
