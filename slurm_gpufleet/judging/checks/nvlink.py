"""NVLink: links down on a GPU whose peers' links are up; fewer links, or slower ones, than the GPU's model
has (data/gpu_models.toml: 12 on A100, 18 on H100/H200 and Blackwell, none on L40S, L4, T4); error
counters that keep growing.  Only the model's own links are judged: NVML answers for 18 on every board,
and an A100's links 12-17 are not links.  A card whose links go through an optional bridge and has none
active has no bridge, which is not a fault."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...catalogs import find_model
from ...readers.snapshot import known
from ..findings import Finding
from ._util import previous_gpu, readable_gpus

if TYPE_CHECKING:
    from . import Context

NAME = "nvlink"
ORDER = 110


def check(ctx: Context) -> list[Finding]:
    pol = ctx.policy
    out: list[Finding] = []
    judged = []  # (gpu, its model, the links judged)
    for g in readable_gpus(ctx.snapshot):
        if not isinstance(known(g.nvlinks), list) or not g.nvlinks:
            continue
        model = find_model(known(g.name), ctx.models)
        if model is not None and model.nvlink_links == 0:
            continue  # no NVLink on this card: nothing NVML says of one is judged
        links = [link for link in g.nvlinks if model is None or not model.nvlink_links
                 or link.link < model.nvlink_links]
        judged.append((g, model, links))
    any_active = any(link.active for _, _, links in judged for link in links)
    bridged = bool(judged) and all(m is not None and m.nvlink_bridge for _, m, _ in judged)
    for g, model, links in judged:
        down = [link.link for link in links if not link.active]
        if down and any_active:
            out.append(Finding(NAME, "drain", "inspect_hardware", g.index,
                               f"{len(down)} NVLink(s) inactive",
                               f"links {', '.join(map(str, down))} of {len(links)} are inactive"))
        if model is not None and model.nvlink_links and len(links) < model.nvlink_links and \
                not (model.nvlink_bridge and not any_active):
            out.append(Finding(NAME, "drain", "inspect_hardware", g.index,
                               f"{len(g.nvlinks)} of {model.nvlink_links} NVLinks present",
                               f"a healthy {model.name} has {model.nvlink_links} NVLinks ({model.source})"))
        speeds = [link.speed_gbps for link in links if link.active and isinstance(link.speed_gbps, float)]
        if model is not None and model.nvlink_gbps and speeds and \
                min(speeds) < model.nvlink_gbps * (1 - pol.clock_tolerance_pct / 100):
            slow = [link.link for link in links if link.active and isinstance(link.speed_gbps, float)
                    and link.speed_gbps < model.nvlink_gbps * (1 - pol.clock_tolerance_pct / 100)]
            out.append(Finding(NAME, pol.nvlink_slow_severity,
                               "inspect_hardware" if pol.nvlink_slow_severity == "drain" else "watch", g.index,
                               f"NVLink at {min(speeds):g} GB/s < {model.nvlink_gbps:g}",
                               f"links {', '.join(map(str, slow))} run below the {model.name}'s "
                               f"{model.nvlink_gbps:g} GB/s"))
        prev = previous_gpu(ctx.previous, g)
        if prev is None or not isinstance(known(prev.nvlinks), list):
            continue
        before = {link.link: link.errors for link in prev.nvlinks}
        for link in links:
            for counter, value in link.errors.items():
                old = before.get(link.link, {}).get(counter)
                if old is not None and value - old > pol.nvlink_error_growth_max:
                    out.append(Finding(NAME, "warn", "watch", g.index, f"NVLink {link.link} {counter} +{value - old}",
                                       f"{counter} errors on link {link.link} grew from {old} to {value}"))
    if judged and not any_active and not bridged:
        out.append(Finding(NAME, "warn", "watch", None, "no NVLink active",
                           "NVLinks are reported but none is active (bridge missing or fabric down?)"))
    return out
