"""Performance (`check --level deep`): each GPU's measurements against the same model's baseline.

The baseline is the fleet median for the model when the caller has one (history, published results),
else the model table's reference.  Memory bandwidth is the measure that decides (about 1-2 % spread on
an idle H200); the GEMM rate moves about 15 % with clocks and power, so it only adds detail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...catalogs import find_model
from ...readers.snapshot import known
from ..findings import Finding

if TYPE_CHECKING:
    from . import Context

NAME = "performance"
ORDER = 160
THROTTLE = {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown", "sw_power_cap"}


def check(ctx: Context) -> list[Finding]:
    snap, pol = ctx.snapshot, ctx.policy
    out: list[Finding] = []
    gpus = {g.index: g for g in snap.gpus}
    for s in snap.performance:
        if s.error:
            out.append(Finding(NAME, "ok", "none", s.gpu, "performance not measured", s.error))
            continue
        gpu = gpus.get(s.gpu)
        name = known(gpu.name) if gpu else None
        baseline = (ctx.perf_baseline or {}).get(name or "", {}).get("mem_bw_gbps")
        source = "fleet median"
        if baseline is None:
            model = find_model(name, ctx.models)
            baseline = model.mem_bw_gbps if model else None
            source = f"reference for {model.name}" if model else ""
        if baseline is None or s.mem_bw_gbps is None:
            out.append(Finding(NAME, "ok", "none", s.gpu, "no performance baseline",
                               f"{name or 'this model'} has no reference or fleet median for memory bandwidth"))
            continue
        drop = (baseline - s.mem_bw_gbps) / baseline * 100
        if drop < pol.perf_tolerance_pct:
            continue
        out.append(Finding(NAME, "warn", "inspect_hardware", s.gpu,
                           f"memory bandwidth {s.mem_bw_gbps:.0f} GB/s, -{drop:.0f}%",
                           f"{source} {baseline:.0f} GB/s; GEMM {s.gemm_tflops} TFLOP/s; likely cause: {_cause(s, gpu)}"))
    return out


def _cause(s, gpu) -> str:
    reasons = set(s.clock_event_reasons) & THROTTLE
    if reasons:
        return "throttling (" + ", ".join(sorted(reasons)) + ")"
    max_sm = known(gpu.clocks.max_sm_mhz) if gpu else None
    if s.sm_clock_mhz and isinstance(max_sm, int) and s.sm_clock_mhz < 0.85 * max_sm:
        return f"low clocks ({s.sm_clock_mhz} of {max_sm} MHz)"
    limit = known(gpu.power.limit_w) if gpu else None
    default = known(gpu.power.default_limit_w) if gpu else None
    if isinstance(limit, float) and isinstance(default, float) and limit < default:
        return f"power limit lowered ({limit:g} of {default:g} W)"
    return "hardware (clocks, power and temperature normal during the test)"
