"""Firmware: VBIOS, InfoROM and GSP against the node group's expected set; a corrupted InfoROM."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from ...readers.snapshot import known
from ..findings import Finding
from ..summary import OFF_STANDARD
from ._util import readable_gpus

if TYPE_CHECKING:
    from . import Context

NAME = "firmware"
ORDER = 40


def check(ctx: Context) -> list[Finding]:
    snap, pol = ctx.snapshot, ctx.policy
    out: list[Finding] = []
    driver = known(snap.driver_version)
    vbios_by_model: dict[str, set[str]] = defaultdict(set)
    for g in readable_gpus(snap):
        if g.inforom.valid is False:
            out.append(Finding(NAME, "drain", "inspect_hardware", g.index, "InfoROM corrupted",
                               "; ".join(e for e in g.errors if "nfoROM" in e) or "nvmlDeviceValidateInforom failed"))
        for label, value, allowed in (("VBIOS", known(g.vbios), pol.vbios),
                                      ("InfoROM", known(g.inforom.image), pol.inforom_image),
                                      ("GSP firmware", known(g.gsp_firmware), pol.gsp_firmware)):
            if allowed and value and value not in allowed:
                out.append(Finding(NAME, pol.firmware_mismatch_severity, "fix_config", g.index,
                                   f"{label} {value} not in expected set",
                                   f"expected one of {', '.join(allowed)}", extra={OFF_STANDARD: label}))
        gsp = known(g.gsp_firmware)
        if not pol.gsp_firmware and gsp and driver and gsp != driver:
            out.append(Finding(NAME, "warn", "reload_driver", g.index, f"GSP firmware {gsp} != driver {driver}",
                               "GSP firmware ships with the driver; a mismatch means a partial upgrade"))
        if known(g.vbios) and known(g.name):
            vbios_by_model[g.name].add(g.vbios)
    for model, versions in vbios_by_model.items():
        if len(versions) > 1 and not pol.vbios:
            # boards of one model often ship with several VBIOS builds; a note unless the group pins a set
            out.append(Finding(NAME, "ok", "none", None, f"VBIOS differs across {model} GPUs",
                               f"versions on this node: {', '.join(sorted(versions))}"))
    return out
