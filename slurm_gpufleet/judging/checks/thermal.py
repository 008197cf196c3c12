"""Thermal and power: temperature against the slowdown threshold, hardware slowdown reasons, fan
errors, a power limit set below the default."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...readers.snapshot import known
from ..findings import Finding
from ._util import num, readable_gpus

if TYPE_CHECKING:
    from . import Context

NAME = "thermal"
ORDER = 80

# Clock-event reasons that mean the hardware itself is pulling the clocks down.
HARDWARE_REASONS = {
    "hw_slowdown": "HW slowdown",
    "hw_thermal_slowdown": "HW thermal slowdown",
    "hw_power_brake_slowdown": "HW power brake",
}


def check(ctx: Context) -> list[Finding]:
    pol = ctx.policy
    out: list[Finding] = []
    for g in readable_gpus(ctx.snapshot):
        t, p = g.temperature, g.power
        if t.fan_error is True:
            out.append(Finding(NAME, "drain", "inspect_hardware", g.index, "fan error", "fan speed reads ERR!"))
        temp, slow = num(t.gpu_c), num(t.slowdown_c)
        if temp is not None and slow is not None:
            if temp >= slow:
                out.append(Finding(NAME, "drain", "cool_off", g.index, f"{temp} C at slowdown threshold",
                                   f"GPU at {temp} C, slowdown at {slow} C: check cooling"))
            elif temp >= slow - pol.temperature_margin_c:
                out.append(Finding(NAME, "warn", "watch", g.index, f"{temp} C near slowdown {slow} C",
                                   f"within {pol.temperature_margin_c} C of the slowdown threshold"))
        mem, mem_max = num(t.memory_c), num(t.memory_max_operating_c)
        if mem is not None and mem_max is not None and mem >= mem_max:
            out.append(Finding(NAME, "warn", "watch", g.index, f"memory {mem} C over {mem_max} C",
                               "HBM above its maximum operating temperature"))
        reasons = known(g.clock_event_reasons) or []
        hw = [HARDWARE_REASONS[r] for r in reasons if r in HARDWARE_REASONS]
        if hw:
            out.append(Finding(NAME, "drain", "cool_off", g.index, ", ".join(hw) + " active",
                               f"clock event reasons: {', '.join(reasons)}"))
        elif "sw_thermal_slowdown" in reasons:
            out.append(Finding(NAME, "warn", "watch", g.index, "SW thermal slowdown active",
                               f"clock event reasons: {', '.join(reasons)}"))
        default, limit, enforced = num(p.default_limit_w), num(p.limit_w), num(p.enforced_limit_w)
        factor = 1 - pol.power_limit_tolerance_pct / 100
        if default and limit is not None and limit < default * factor:
            out.append(Finding(NAME, "warn", "fix_config", g.index, f"power limit {limit:g} W < default {default:g} W",
                               "someone lowered the power limit (nvidia-smi -pl); the GPU will be slower"))
        elif limit and enforced is not None and enforced < limit * factor:
            # the platform caps it (a GH200 module budget, a chassis limit): worth knowing, not a fault
            out.append(Finding(NAME, "ok", "none", g.index, f"enforced power limit {enforced:g} W < requested {limit:g} W",
                               "the platform enforces a lower limit than the one set on the GPU"))
    return out
