"""Clocks: a maximum SM clock below what healthy units of the model report; lowered application clocks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...catalogs import find_model
from ...readers.snapshot import known
from ..findings import Finding
from ._util import num, readable_gpus

if TYPE_CHECKING:
    from . import Context

NAME = "clocks"
ORDER = 90


def check(ctx: Context) -> list[Finding]:
    pol = ctx.policy
    out: list[Finding] = []
    unknown_models: dict[str, int] = {}
    for g in readable_gpus(ctx.snapshot):
        c = g.clocks
        max_sm = num(c.max_sm_mhz)
        name = known(g.name)
        if max_sm is not None and name:
            model = find_model(name, ctx.models)
            if model is None:
                unknown_models.setdefault(name, g.index)
            elif model.max_sm_mhz is None:
                pass  # a known model with no vendored capture to read its maximum from: not judged
            elif max_sm < model.max_sm_mhz * (1 - pol.clock_tolerance_pct / 100):
                out.append(Finding(NAME, "warn", "inspect_hardware", g.index,
                                   f"max SM clock {max_sm} < {model.max_sm_mhz} MHz",
                                   f"healthy {model.name} units report {model.max_sm_mhz} MHz ({model.source})"))
        app, default = num(c.app_graphics_mhz), num(c.default_app_graphics_mhz)
        if app is not None and default and app < default * (1 - pol.clock_tolerance_pct / 100):
            out.append(Finding(NAME, "warn", "fix_config", g.index, f"application clock {app} < default {default} MHz",
                               "application clocks were lowered (nvidia-smi -ac); reset with nvidia-smi -rac"))
    for name, index in unknown_models.items():
        out.append(Finding(NAME, "warn", "fix_config", index, f"model {name} not in GPU table",
                           f"max SM clock not judged: add [models.\"{name}\"] with max_sm_mhz to the policy"))
    return out
