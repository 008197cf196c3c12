"""Plain-SVG plots of a simulated rollout: capacity in service over time per strategy, and the waves."""

from __future__ import annotations

import html as html_lib
from typing import Any

COLORS = {"gpufleet": "#0072b2", "reboot-asap": "#e69f00", "drain-all": "#cc79a7"}


LEFT, RIGHT = 80, 20  # both charts: the same margins and the same hours axis, so they line up


def _axis(t_max: float, width: int) -> Any:
    return lambda t: LEFT + (max(t or 0, 0) / t_max) * (width - LEFT - RIGHT)


def _ticks(x: Any, t_max: float, y: float) -> list[str]:
    return [f'<text x="{x(t_max * i / 5):.1f}" y="{y}" text-anchor="middle">{t_max * i / 5:.0f}</text>'
            for i in range(6)]


def _capacity_svg(results: dict[str, Any], t_max: float, width: int = 900, height: int = 280) -> str:
    return series_svg({k: r.capacity for k, r in results.items() if r.capacity}, t_max,
                      "hours since rollout start", width=width, height=height)


def series_svg(series: dict[str, list[tuple[float, float]]], t_max: float, x_label: str, *, colors=None,
               step: bool = True, v_min: float = 0.0, y_fmt: str = "{:g}", width: int = 900, height: int = 280) -> str:
    """One chart of (hours, value) series, one line per name: steps (capacity) or straight lines."""
    series = {k: v for k, v in series.items() if v}
    if not series:
        return "<p>no data</p>"
    colors = colors or COLORS
    v_max = max(max(v for _, v in s) for s in series.values()) or 1
    v_min = min(v_min, min(min(v for _, v in s) for s in series.values()))
    span = (v_max - v_min) or 1
    top, bottom = 30, height - 36  # the legend above the plot area, never over the data
    x = _axis(t_max, width)
    y = lambda v: top + (1 - (v - v_min) / span) * (bottom - top)  # noqa: E731
    parts = [f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg" font-size="11">',
             f'<line x1="{LEFT}" y1="{bottom}" x2="{width - RIGHT}" y2="{bottom}" stroke="#999"/>',
             f'<line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{bottom}" stroke="#999"/>',
             f'<text x="{LEFT - 6}" y="{y(v_max) + 4}" text-anchor="end">{y_fmt.format(v_max)}</text>'
             f'<text x="{LEFT - 6}" y="{y(v_min) + 4}" text-anchor="end">{y_fmt.format(v_min)}</text>',
             f'<text x="{width - RIGHT}" y="{height - 4}" text-anchor="end">{html_lib.escape(x_label)}</text>',
             *_ticks(x, t_max, bottom + 14)]
    for k, (name, s) in enumerate(series.items()):
        pts = []
        for j, (t, v) in enumerate(s):
            if j and step:
                pts.append(f"{x(t):.1f},{y(s[j - 1][1]):.1f}")
            pts.append(f"{x(t):.1f},{y(v):.1f}")
        if step:
            pts.append(f"{x(t_max):.1f},{y(s[-1][1]):.1f}")
        color = colors.get(name, "#333")
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{" ".join(pts)}"/>')
        lx = LEFT + 170 * k
        parts.append(f'<rect x="{lx}" y="8" width="14" height="4" fill="{color}"/>'
                     f'<text x="{lx + 20}" y="14" fill="{color}">{html_lib.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _waves_svg(waves: list[dict[str, Any]], t_max: float, width: int = 900) -> str:
    done = [w for w in waves if w.get("end") is not None]
    if not done:
        return "<p>no waves</p>"
    row = 16
    height = 40 + row * len(waves)
    x = _axis(t_max, width)
    parts = [f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg" font-size="11">']
    for i, w in enumerate(waves):
        yy = 10 + row * i
        parts.append(f'<text x="4" y="{yy + 11}">wave {w["wave"]} ({w["nodes"]})</text>')
        if w.get("reserve_at") is not None and w.get("start") is not None:
            parts.append(f'<rect x="{x(w["reserve_at"]):.1f}" y="{yy}" width="{max(1.0, x(w["start"]) - x(w["reserve_at"])):.1f}" '
                         f'height="12" fill="#ccc"><title>reserved, waiting for jobs</title></rect>')
        if w.get("start") is not None and w.get("end") is not None:
            parts.append(f'<rect x="{x(w["start"]):.1f}" y="{yy}" width="{max(2.0, x(w["end"]) - x(w["start"])):.1f}" '
                         f'height="12" fill="#0072b2"><title>upgrading</title></rect>')
    base = 14 + row * len(waves)
    parts += [f'<line x1="{LEFT}" y1="{base - 2}" x2="{width - RIGHT}" y2="{base - 2}" stroke="#999"/>',
              *_ticks(x, t_max, base + 12),
              f'<text x="{width - RIGHT}" y="{height - 2}" text-anchor="end">hours since rollout start</text></svg>']
    return "".join(parts)


def shared_hours(results: dict[str, Any], waves: list[dict[str, Any]]) -> float:
    """The one hours axis of both charts: the longest capacity series or wave, and a margin."""
    ends = [t for r in results.values() for t, _ in (r.capacity or [])[-1:]]
    ends += [w["end"] for w in waves if w.get("end") is not None]
    return (max(ends, default=1.0) * 1.05) or 1.0


def simulation_html(result: dict[str, Any], results: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{html_lib.escape(k)}</td>" + "".join(f"<td>{v}</td>" for v in m.values()) + "</tr>"
        for k, m in result["strategies"].items())
    head = "".join(f"<th>{k}</th>" for k in next(iter(result["strategies"].values())))
    assumptions = "".join(f"<li><b>{html_lib.escape(str(k))}</b>: {html_lib.escape(str(v))}</li>"
                          for k, v in result["assumptions"].items())
    waves = results.get("gpufleet").waves if "gpufleet" in results else []
    t_max = shared_hours(results, waves)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>slurm-gpufleet: simulated rollouts</title>
<style>body{{font:14px system-ui,sans-serif;margin:24px}}table{{border-collapse:collapse}}td,th{{border:1px solid #ddd;padding:4px 8px}}</style>
</head><body><h1>Simulated rollouts</h1>
<table><tr><th>strategy</th>{head}</tr>{rows}</table>
<h2>GPUs in service</h2>{_capacity_svg(results, t_max)}
<h2>gpufleet waves</h2>{_waves_svg(waves, t_max)}
<h2>Assumptions</h2><ul>{assumptions}</ul></body></html>"""
