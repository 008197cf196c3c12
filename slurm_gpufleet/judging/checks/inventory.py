"""Inventory: are all the GPUs there, readable, and the model the node group expects?"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...readers.snapshot import known
from ..findings import Finding

if TYPE_CHECKING:
    from . import Context

NAME = "inventory"
ORDER = 10


def check(ctx: Context) -> list[Finding]:
    snap, pol = ctx.snapshot, ctx.policy
    out: list[Finding] = []
    if "no_devices" in snap.errors:
        out.append(Finding(NAME, "drain", "drain", None, "no GPUs found",
                           snap.error_text or "the driver reports no NVIDIA devices"))
    for g in snap.gpus:
        if g.lost:
            out.append(Finding(NAME, "reboot", "reboot_node", g.index, "GPU lost",
                               f"{known(g.pci_bus_id) or 'GPU'}: {'; '.join(g.errors) or 'GPU is lost'}"))
    readable = [g for g in snap.gpus if not g.lost]
    if pol.expected_gpus is not None and snap.has_gpu_state() and not _driver_down(snap):
        if len(readable) < pol.expected_gpus:
            out.append(Finding(NAME, "drain", "drain", None, f"{len(readable)} of {pol.expected_gpus} GPUs",
                               f"expected {pol.expected_gpus} GPUs, {len(readable)} readable "
                               f"({len(snap.gpus) - len(readable)} lost)"))
        elif len(readable) > pol.expected_gpus:
            out.append(Finding(NAME, "warn", "fix_config", None, f"{len(readable)} GPUs, expected {pol.expected_gpus}",
                               "more GPUs than the policy expects: update expected_gpus"))
    elif pol.expected_gpus and not snap.has_gpu_state():
        # nothing said of the GPUs at all where some are expected: not healthy, and not known to be a fault
        out.append(Finding(NAME, "warn", "none", None, f"no GPU read, expected {pol.expected_gpus}",
                           "the source says nothing of the node's GPUs: not judged healthy"))
    elif snap.attached_gpus is not None and snap.attached_gpus > len(snap.gpus):
        out.append(Finding(NAME, "ok", "none", None, f"report lists {len(snap.gpus)} of {snap.attached_gpus} GPUs",
                           "the report names more attached GPUs than it describes (trimmed report?)"))
    if pol.expected_model:
        for g in readable:
            name = known(g.name)
            if name and pol.expected_model.lower() not in name.lower():
                out.append(Finding(NAME, "drain", "drain", g.index, f"model {name}",
                                   f"expected model {pol.expected_model!r}, found {name!r}"))
    return out


def _driver_down(snap) -> bool:
    return bool(set(snap.errors) & {"driver_library_mismatch", "driver_not_loaded", "library_missing", "nvml_error"})
