"""Modes: persistence, compute mode and MIG mode against the node group's policy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...readers.snapshot import known
from ..findings import Finding
from ._util import readable_gpus

if TYPE_CHECKING:
    from . import Context

NAME = "modes"
ORDER = 120


def check(ctx: Context) -> list[Finding]:
    pol = ctx.policy
    out: list[Finding] = []
    for g in readable_gpus(ctx.snapshot):
        if pol.require_persistence and g.persistence_mode is False:
            out.append(Finding(NAME, "warn", "fix_config", g.index, "persistence mode off",
                               "enable nvidia-persistenced; without it every job pays driver start-up"))
        mode = known(g.compute_mode)
        if mode:
            if mode == "Prohibited" and pol.compute_mode != "Prohibited":
                out.append(Finding(NAME, "drain", "fix_config", g.index, "compute mode Prohibited",
                                   "no CUDA context can be created on this GPU"))
            elif pol.compute_mode and mode != pol.compute_mode:
                out.append(Finding(NAME, "warn", "fix_config", g.index, f"compute mode {mode}",
                                   f"the node group expects {pol.compute_mode}"))
        cur, pending = g.mig_mode_current, g.mig_mode_pending
        if isinstance(cur, bool) and isinstance(pending, bool) and cur != pending:
            out.append(Finding(NAME, "reboot", "reset_gpu", g.index, "MIG mode change pending",
                               f"MIG {'on' if cur else 'off'} now, {'on' if pending else 'off'} after a reset"))
        elif pol.mig_mode is not None and isinstance(cur, bool) and cur != pol.mig_mode:
            out.append(Finding(NAME, "warn", "fix_config", g.index, f"MIG {'on' if cur else 'off'}",
                               f"the node group expects MIG {'on' if pol.mig_mode else 'off'}"))
    return out
