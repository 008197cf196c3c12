"""Xid: kernel-log GPU errors mapped through the catalog; a reset-fixable Xid that survives reboots
is escalated to a drain for hardware inspection."""

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
    current_boot = max(e.boot for e in events) if snap.boots_seen <= 1 else snap.boots_seen - 1
    boots_by_key: dict[tuple[int, str | None], set[int]] = defaultdict(set)
    current: dict[tuple[int, str | None], list] = defaultdict(list)
    for e in events:
        boots_by_key[(e.xid, e.pci)].add(e.boot)
        if e.boot == current_boot:
            current[(e.xid, e.pci)].append(e)
    out: list[Finding] = []
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
        boots = len(boots_by_key[(number, pci)])
        if RANK[info.severity] >= RANK["reboot"] and boots > pol.xid_escalate_after_reboots:
            out.append(Finding(NAME, "drain", "inspect_hardware", index, f"Xid {number} after {boots - 1} reboots",
                               f"{info.name} on {where} in {boots} boots: a reset does not fix it",
                               xid=number))
            continue
        out.append(Finding(NAME, info.severity, info.action, index, f"Xid {number} {info.name}",
                           f"{where}, {times}, first at line {first.line}; {info.action_text}",
                           xid=number))
    return out
