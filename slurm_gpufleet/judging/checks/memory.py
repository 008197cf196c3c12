"""Memory: ECC mode and counters, SRAM thresholds, row remapping, retired pages."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...policy import NodePolicy
from ...readers.snapshot import Gpu, known
from ..findings import Finding
from ._util import num, readable_gpus

if TYPE_CHECKING:
    from . import Context

NAME = "memory"
ORDER = 60


def check(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    repaired = ctx.snapshot.repaired_counters
    for g in readable_gpus(ctx.snapshot):
        out.extend(_gpu(g, ctx.policy, repaired.get(counter_key(g), {})))
    return out


def counter_key(g: Gpu) -> str:
    """The GPU a kept counter belongs to: its UUID (a swapped board is another GPU, with counters of its own)."""
    return known(g.uuid) or known(g.serial) or f"index {g.index}"


def lifetime_counters(g: Gpu) -> dict[str, int]:
    """The counters that never go back down without a new board (the InfoROM keeps them across resets and
    reboots): what a repair leaves behind, kept so that only what rises after it counts."""
    hist = known(g.remapped_rows.histogram)
    out = {"sram_agg": num(g.ecc.aggregate_sram_uncorrected), "sram_flag": g.ecc.sram_threshold_exceeded is True,
           "retired": (num(g.retired_pages.single_bit) or 0) + (num(g.retired_pages.double_bit) or 0),
           "banks_none": num(hist.get("none")) if isinstance(hist, dict) else None}
    return {k: int(v) for k, v in out.items() if v is not None}


def _gpu(g: Gpu, pol: NodePolicy, repaired: dict[str, int]) -> list[Finding]:
    """`repaired`: this GPU's lifetime counters at the node's last repair: a value no higher than then is
    the repaired fault's, never counted again (a new error raises it)."""
    out: list[Finding] = []
    e, rr, rp = g.ecc, g.remapped_rows, g.retired_pages

    def risen(name: str, value: int | None) -> bool:
        return value is not None and value > repaired.get(name, -1)

    def add(severity: str, action: str, message: str, detail: str = "") -> None:
        out.append(Finding(NAME, severity, action, g.index, message, detail))

    if pol.require_ecc and e.mode_current is False:
        add("drain", "fix_config", "ECC disabled", "the node group requires ECC on (nvidia-smi -e 1, then reset)")
    if isinstance(e.mode_current, bool) and isinstance(e.mode_pending, bool) and e.mode_current != e.mode_pending:
        add("reboot", "reset_gpu", "ECC mode change pending",
            f"ECC {'on' if e.mode_current else 'off'} now, {'on' if e.mode_pending else 'off'} after a reset")
    dram_u = num(e.volatile_dram_uncorrected)
    if dram_u:
        add("reboot", "reset_gpu", f"{dram_u} uncorrectable DRAM ECC errors",
            "volatile uncorrectable DRAM errors since the last reset; a reset retires/remaps the rows")
    sram_u = num(e.volatile_sram_uncorrected)
    if sram_u:
        add("reboot", "reset_gpu", f"{sram_u} uncorrectable SRAM ECC errors",
            "volatile uncorrectable SRAM errors since the last reset")
    agg_sram = num(e.aggregate_sram_uncorrected)
    flag = e.sram_threshold_exceeded is True and not repaired.get("sram_flag")
    if flag or (agg_sram is not None and agg_sram > pol.sram_uncorrectable_max and risen("sram_agg", agg_sram)):
        add("drain", "inspect_hardware", "SRAM error threshold exceeded",
            f"aggregate uncorrectable SRAM errors {agg_sram if agg_sram is not None else '?'} "
            f"(limit {pol.sram_uncorrectable_max})"
            + ("; the driver's SRAM threshold flag is set" if e.sram_threshold_exceeded is True else ""))
    dram_c = num(e.aggregate_dram_corrected)
    if dram_c is not None and dram_c > pol.dram_correctable_max:
        add("warn", "watch", f"{dram_c} correctable DRAM errors", f"above {pol.dram_correctable_max}")
    if rr.failure is True:
        add("drain", "inspect_hardware", "row remapping failed",
            "remap failure flag set: RMA candidate (run NVIDIA field diagnostic)")
    if rr.pending is True:
        add("reboot", "reset_gpu", "row remap pending",
            f"remapped rows: {known(rr.correctable)} correctable, {known(rr.uncorrectable)} uncorrectable; "
            "a GPU reset applies the pending remap")
    hist = known(rr.histogram)
    if isinstance(hist, dict):
        none, low = num(hist.get("none")) or 0, num(hist.get("low")) or 0
        if none > 0 and risen("banks_none", none):
            add("drain", "inspect_hardware", f"{hist['none']} memory banks without spare rows",
                f"bank remap availability {hist}: the next uncorrectable error in those banks cannot be remapped")
        elif low > 0:
            add("warn", "watch", f"{hist['low']} memory banks low on spare rows", f"bank remap availability {hist}")
    if rp.pending is True:
        add("reboot", "reset_gpu", "retired page pending", "a page is waiting to be retired at the next reset")
    retired = (num(rp.single_bit) or 0) + (num(rp.double_bit) or 0)
    if retired >= pol.retired_pages_max and risen("retired", retired):
        add("drain", "inspect_hardware", f"{retired} retired pages",
            f"at or above {pol.retired_pages_max} (the driver retires at most 64 pages)")
    return out
