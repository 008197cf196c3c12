"""Xid: kernel-log GPU errors mapped through the catalog; a reset-fixable Xid that survives reboots
is escalated to a drain for hardware inspection.  An Xid a GPU reset answered (the reset's line in the
kernel log after it, readers/kernel_log.RESET_MARK) no longer counts in its boot.

NVLink5 Xids (144-150) say Fatal or Nonfatal: what each calls for is the catalog's, by the unit the
line names ([[nvlink5]]); a Nonfatal line is never more than a warning.  A line that says it was "caused
by previous Xid N" repeats an event already counted (Xid 45 after 149 on GB200): the cause is counted
once.  A header the parser read only in part is still judged by its number; the lines that mention an
Xid and could not be read at all are counted in one warning that names the first."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING

from ...catalogs import nvlink5_action, xid_info
from ...readers.kernel_log import NVLINK5_XIDS, XID_MAX
from ..findings import RANK, Finding
from ._util import current_boot

if TYPE_CHECKING:
    from . import Context

NAME = "xid"
ORDER = 70


def check(ctx: Context) -> list[Finding]:
    snap, pol = ctx.snapshot, ctx.policy
    # an event with a number no driver prints (a snapshot written elsewhere) is counted with the unread lines
    unread = list(snap.xid_unparsed) + [f"line {e.line}: Xid number {e.xid} out of range: {e.raw[:160]}"
                                        for e in snap.xid_events if not 0 < e.xid <= XID_MAX]
    out: list[Finding] = []
    if unread:
        out.append(Finding(NAME, "warn", "watch", None, f"{len(unread)} kernel-log line(s) mentioning an Xid not read",
                           unread[0] + (f" (and {len(unread) - 1} more)" if len(unread) > 1 else "")))
    events = [e for e in snap.xid_events if 0 < e.xid <= XID_MAX and e.xid not in pol.xid_ignore]
    if not events:
        return out
    # the cause is counted once: a follow-on line goes only where its cause is in the log for that GPU
    causes = {(e.xid, e.pci, e.boot) for e in events}
    events = [e for e in events if e.caused_by is None or (e.caused_by, e.pci, e.boot) not in causes]
    boot = current_boot(snap, events)
    boots_by_key: dict[tuple[int, str | None], set[int]] = defaultdict(set)
    current: dict[tuple[int, str | None], list] = defaultdict(list)
    for e in events:
        boots_by_key[(e.xid, e.pci)].add(e.boot)
        if e.boot == boot and not e.cleared:
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
        if not fatal:  # NVLink5 "Nonfatal": the link recovered on its own; at most a warning
            codes = sorted({e.subcode for e in evs if e.subcode is not None})
            row = nvlink5_action(number, first.unit, False, first.intrinfo, first.error_status)
            action = row.action if row is not None and RANK[row.severity] <= RANK["warn"] else "watch"
            units = sorted({e.unit for e in evs if e.unit})
            out.append(Finding(NAME, "warn", action, index, f"Xid {number} {info.name} (Nonfatal)",
                               f"{where}, {times}, {'unit ' + ', '.join(units) + ', ' if units else ''}sub-code "
                               f"{', '.join(map(str, codes)) or '?'}, first at line {first.line}"
                               + (f"; {row.action_text}" if row is not None else ""), xid=number))
            continue
        first = fatal[0]
        if number in NVLINK5_XIDS and first.fatal:
            row = nvlink5_action(number, first.unit, True, first.intrinfo, first.error_status)
            if row is not None:  # the unit's own action (the decode sheet's resolution)
                info = replace(info, action=row.action, severity=row.severity, action_text=row.action_text)
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
