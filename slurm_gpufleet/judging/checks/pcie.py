"""PCIe: link width or generation below what the slot and GPU support; replay counter growth."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...readers.snapshot import known
from ..findings import Finding
from ._util import grew, num, previous_gpu, readable_gpus

if TYPE_CHECKING:
    from . import Context

NAME = "pcie"
ORDER = 100


def check(ctx: Context) -> list[Finding]:
    pol = ctx.policy
    out: list[Finding] = []
    for g in readable_gpus(ctx.snapshot):
        pc = g.pcie
        width, width_max = num(pc.width_current), num(pc.width_max)
        if width is not None:
            if pol.pcie_min_width is not None and width < pol.pcie_min_width:
                out.append(Finding(NAME, "drain", "inspect_hardware", g.index, f"PCIe x{width} < x{pol.pcie_min_width}",
                                   "link width below the node group's minimum: reseat or replace (riser, cable, slot)"))
            elif pol.pcie_min_width is None and width_max is not None and width < width_max:
                out.append(Finding(NAME, "warn", "watch", g.index, f"PCIe x{width} of x{width_max}",
                                   "link trained below its maximum width (in VMs often virtual; set pcie_min_width)"))
        gen, gen_max = num(pc.gen_current), num(pc.gen_max)
        reasons = known(g.clock_event_reasons)
        busy = (num(g.utilization_gpu_pct) or 0) > 0 and not (isinstance(reasons, list) and "gpu_idle" in reasons)
        # at idle the link drops to gen 1 to save power; only a busy GPU's generation means anything
        if busy and gen is not None and gen_max is not None and gen < gen_max:
            out.append(Finding(NAME, "warn", "watch", g.index, f"PCIe gen {gen} of {gen_max} under load",
                               "link generation below its maximum while the GPU is busy"))
        replays = num(pc.replay_counter)
        if replays is not None and replays > pol.pcie_replay_max:
            out.append(Finding(NAME, "warn", "watch", g.index, f"{replays} PCIe replays",
                               f"replay counter above {pol.pcie_replay_max}: signal integrity problem on the link"))
        prev = previous_gpu(ctx.previous, g)
        growth = grew(pc.replay_counter, prev.pcie.replay_counter) if prev else None
        if growth is not None and growth > pol.pcie_replay_growth_max:
            out.append(Finding(NAME, "warn", "watch", g.index, f"PCIe replays +{growth}",
                               f"replay counter grew by {growth} since the previous check "
                               f"(limit {pol.pcie_replay_growth_max})"))
    return out
