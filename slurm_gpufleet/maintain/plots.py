"""Plain-SVG plots of a simulated rollout: capacity in service over time per strategy, and the waves."""

from __future__ import annotations

import html as html_lib
from typing import Any

COLORS = {"gpufleet": "#0072b2", "reboot-asap": "#e69f00", "drain-all": "#cc79a7"}


def _capacity_svg(results: dict[str, Any], width: int = 900, height: int = 260) -> str:
    series = {k: r.capacity for k, r in results.items() if r.capacity}
    if not series:
        return "<p>no capacity data</p>"
    t_max = max(max(t for t, _ in s) for s in series.values()) * 1.05 or 1
    g_max = max(max(g for _, g in s) for s in series.values()) or 1
    g_min = 0
    x = lambda t: 50 + (max(t, 0) / t_max) * (width - 60)  # noqa: E731
    y = lambda g: 10 + (1 - (g - g_min) / (g_max - g_min or 1)) * (height - 40)  # noqa: E731
    parts = [f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg" font-size="11">',
             f'<line x1="50" y1="{height - 30}" x2="{width - 10}" y2="{height - 30}" stroke="#999"/>',
             f'<line x1="50" y1="10" x2="50" y2="{height - 30}" stroke="#999"/>',
             f'<text x="4" y="{y(g_max) + 4}">{g_max}</text><text x="4" y="{y(0) + 4}">0</text>',
             f'<text x="{width - 150}" y="{height - 8}">hours since rollout start</text>']
    for i in range(6):
        t = t_max * i / 5
        parts.append(f'<text x="{x(t) - 8}" y="{height - 16}">{t:.0f}</text>')
    for k, (name, s) in enumerate(series.items()):
        pts = []
        for j, (t, g) in enumerate(s):
            if j:
                pts.append(f"{x(t):.1f},{y(s[j - 1][1]):.1f}")
            pts.append(f"{x(t):.1f},{y(g):.1f}")
        pts.append(f"{x(t_max):.1f},{y(s[-1][1]):.1f}")
        color = COLORS.get(name, "#333")
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{" ".join(pts)}"/>')
        parts.append(f'<text x="{width - 200}" y="{24 + 14 * k}" fill="{color}">{html_lib.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _waves_svg(waves: list[dict[str, Any]], width: int = 900) -> str:
    done = [w for w in waves if w.get("end") is not None]
    if not done:
        return "<p>no waves</p>"
    t_max = max(w["end"] for w in done) or 1
    row = 16
    height = 30 + row * len(waves)
    x = lambda t: 80 + (max(t or 0, 0) / t_max) * (width - 90)  # noqa: E731
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
    parts.append(f'<text x="{width - 160}" y="{height - 4}">hours since rollout start (0-{t_max:.1f})</text></svg>')
    return "".join(parts)


def simulation_html(result: dict[str, Any], results: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{html_lib.escape(k)}</td>" + "".join(f"<td>{v}</td>" for v in m.values()) + "</tr>"
        for k, m in result["strategies"].items())
    head = "".join(f"<th>{k}</th>" for k in next(iter(result["strategies"].values())))
    assumptions = "".join(f"<li><b>{html_lib.escape(str(k))}</b>: {html_lib.escape(str(v))}</li>"
                          for k, v in result["assumptions"].items())
    waves = results.get("gpufleet").waves if "gpufleet" in results else []
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>slurm-gpufleet: simulated rollouts</title>
<style>body{{font:14px system-ui,sans-serif;margin:24px}}table{{border-collapse:collapse}}td,th{{border:1px solid #ddd;padding:4px 8px}}</style>
</head><body><h1>Simulated rollouts</h1>
<table><tr><th>strategy</th>{head}</tr>{rows}</table>
<h2>GPUs in service</h2>{_capacity_svg(results)}
<h2>gpufleet waves</h2>{_waves_svg(waves)}
<h2>Assumptions</h2><ul>{assumptions}</ul></body></html>"""
