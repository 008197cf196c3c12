"""Recovery action: NVML's own verdict on what the GPU needs (R570+), honoured as is."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...readers.snapshot import known
from ..findings import Finding
from ._util import readable_gpus

if TYPE_CHECKING:
    from . import Context

NAME = "recovery"
ORDER = 140

# NVML_GPU_RECOVERY_ACTION_* -> (severity, action).  "drain and reset" is exactly what a
# `scontrol reboot ASAP` does, so it is a reboot verdict.
ACTIONS = {
    "none": None,
    "gpu_reset": ("reboot", "reset_gpu"),
    "node_reboot": ("reboot", "reboot_node"),
    "system_reboot": ("reboot", "reboot_node"),
    "bus_reset": ("reboot", "reset_gpu"),
    "drain_and_reset": ("reboot", "reset_gpu"),
    "drain_p2p": ("drain", "drain"),
    "recover_imex_domain": ("warn", "fabric_manager"),
}


def check(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    for g in readable_gpus(ctx.snapshot):
        action = known(g.recovery_action)
        if not action:
            continue
        mapped = ACTIONS.get(action, ("warn", "watch"))
        if mapped is None:
            continue
        severity, what = mapped
        out.append(Finding(NAME, severity, what, g.index, f"recovery action {action}",
                           "the driver asks for this recovery (GPU Recovery Action)"))
    return out
