"""Fields a GPU answers with "Unknown Error": the GPU answers other calls, so the driver reached it, but
cannot read these.  Unlike "not supported", that is a GPU in a bad state (often before it falls off the
bus).  At least warn; reboot (a reset, between jobs) when the field is one that decides health.  A field
that reads "GPU requires reset" (NVML_ERROR_RESET_REQUIRED) asks for that reset in so many words."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..findings import Finding

if TYPE_CHECKING:
    from . import Context

NAME = "unknown_error"
ORDER = 150

# Fields that decide whether a GPU is healthy: without them ECC and memory faults cannot be judged.
# Names as nvidia-smi XML (ecc_mode/current_ecc), text (Ecc Mode/Current) and NVML calls spell them.
DECIDING = re.compile(r"ecc.?mode|eccmode|remap|retired.?pages|retiredpages|pending.?(?:retire|blacklist)|"
                      r"ecc.?errors/volatile|volatile.*uncorr|totaleccerrors", re.I)


# Known to read "Unknown Error" on healthy GPUs: the host side of the PCIe link is not visible inside a
# VM with GPU pass-through (seen on 8 healthy V100s, data/captures/public/.../retired_page_sbe_v100x8_vm_1.txt).
BENIGN = re.compile(r"host.?max|pcie_gen/max_host", re.I)


def check(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    for g in ctx.snapshot.gpus:
        if g.requires_reset and not g.lost:
            more = f" (+{len(g.requires_reset) - 2} more)" if len(g.requires_reset) > 2 else ""
            out.append(Finding(NAME, "reboot", "reset_gpu", g.index, "GPU requires reset",
                               f"the GPU answers 'GPU requires reset' reading {', '.join(g.requires_reset[:2])}{more}"))
        fields_seen = [f for f in g.unknown_errors if not BENIGN.search(f)]
        if not fields_seen or g.lost:
            continue
        deciding = [f for f in fields_seen if DECIDING.search(f)]
        fields = ", ".join((deciding or fields_seen)[:4])
        more = f" (+{len(fields_seen) - 4} more)" if len(fields_seen) > 4 else ""
        if deciding:
            out.append(Finding(NAME, "reboot", "reset_gpu", g.index, f"Unknown Error reading {fields}{more}",
                               "health-deciding fields cannot be read: the GPU needs a reset"))
        else:
            out.append(Finding(NAME, "warn", "watch", g.index, f"Unknown Error reading {fields}{more}",
                               "the GPU answers but cannot read these fields"))
    return out
