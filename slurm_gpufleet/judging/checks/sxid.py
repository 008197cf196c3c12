"""NVSwitch SXids: the switch's own faults on an HGX board, from the kernel log's `nvidia-nvswitchN: SXid`
lines (readers/kernel_log.py).  The line's own word decides, through the catalog (data/sxid_catalog.toml):
"Fatal" calls for a restart of the host, which resets the NVSwitches and GPUs together; "Non-fatal" is
watched.  Only SXids of the current boot count: a restart answers the ones before it."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from ...catalogs import sxid_action
from ..findings import Finding
from ._util import current_boot

if TYPE_CHECKING:
    from . import Context

NAME = "sxid"
ORDER = 71


def check(ctx: Context) -> list[Finding]:
    snap = ctx.snapshot
    if not snap.sxid_events:
        return []
    boot = current_boot(snap, snap.sxid_events)
    groups: dict[tuple[int, bool | None], list] = defaultdict(list)
    for e in snap.sxid_events:
        if e.boot == boot:
            groups[(e.sxid, e.fatal)].append(e)
    out: list[Finding] = []
    for (code, fatal), evs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] is not True)):
        row, name = sxid_action(code, fatal)
        switches = sorted({f"nvswitch{e.switch}" if e.switch is not None else e.pci or "?" for e in evs})
        links = sorted({e.link for e in evs if e.link is not None})
        word = {True: " (Fatal)", False: " (Non-fatal)", None: ""}[fatal]
        out.append(Finding(NAME, row.severity, row.action, None, f"SXid {code} {name}{word}",
                           f"{', '.join(switches)}{' link ' + ', '.join(map(str, links)) if links else ''}, "
                           f"{len(evs)}x, first at line {evs[0].line}; {row.action_text} ({row.source})"))
    return out
