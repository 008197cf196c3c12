"""The fleet report: verdicts over time from every node's history, performance per model, stragglers."""

from __future__ import annotations

import datetime as dt
import glob
import html
import os
import sqlite3
from collections import Counter, defaultdict

from .fleet import from_history, stragglers

COLORS = {"ok": "#2a9d4b", "warn": "#e6a700", "reboot": "#e07000", "drain": "#c62828"}


def _verdicts_by_hour(history_dir: str) -> dict[int, Counter]:
    """Per hour, each node's worst health-check verdict."""
    by_hour: dict[int, dict[str, str]] = defaultdict(dict)
    rank = {"ok": 0, "warn": 1, "reboot": 2, "drain": 3}
    for db in sorted(glob.glob(os.path.join(history_dir, "*.db"))):
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
                rows = conn.execute("select ts, node, verdict from runs where hook = 'healthcheck'").fetchall()
        except sqlite3.Error:
            continue
        for ts, node, verdict in rows:
            hour = int(ts // 3600)
            old = by_hour[hour].get(node)
            if old is None or rank[verdict] > rank[old]:
                by_hour[hour][node] = verdict
    return {h: Counter(v.values()) for h, v in sorted(by_hour.items())}


def _svg(series: dict[int, Counter], width: int = 900, height: int = 220) -> str:
    if not series:
        return "<p>no health checks recorded</p>"
    hours = sorted(series)
    top = max(sum(c.values()) for c in series.values()) or 1
    bar = max(2.0, (width - 60) / len(hours))
    parts = [f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg" font-size="11">']
    for i, h in enumerate(hours):
        y = height - 30
        for verdict in ("ok", "warn", "reboot", "drain"):
            n = series[h].get(verdict, 0)
            if not n:
                continue
            bh = n / top * (height - 50)
            y -= bh
            parts.append(f'<rect x="{50 + i * bar:.1f}" y="{y:.1f}" width="{bar * 0.9:.1f}" height="{bh:.1f}" '
                         f'fill="{COLORS[verdict]}"><title>{verdict}: {n}</title></rect>')
    first = dt.datetime.fromtimestamp(hours[0] * 3600, dt.UTC).strftime("%m-%d %H:00")
    last = dt.datetime.fromtimestamp(hours[-1] * 3600, dt.UTC).strftime("%m-%d %H:00")
    parts.append(f'<text x="50" y="{height - 12}">{first} UTC</text><text x="{width - 110}" y="{height - 12}">{last}</text>')
    parts.append(f'<text x="4" y="20">{top} nodes</text></svg>')
    return "".join(parts)


def _reliability_rows(rel: dict | None) -> str:
    if not rel or not rel.get("groups"):
        return '<tr><td colspan="9">no node history</td></tr>'

    def num(v, fmt="{:.2f}"):
        return "-" if v is None else fmt.format(v)

    rows = []
    for group, g in rel["groups"].items():
        auto, manual = g["ttr_hours"]["automatic"], g["ttr_hours"]["manual"]
        out = ", ".join(f"{c} {n}" for c, n in g["out_now"].items()) or "none"
        rows.append(f"<tr><td>{html.escape(group)}</td><td>{g['nodes']}</td><td>{g['incidents']}</td>"
                    f"<td>{num(g['incidents_per_node_day'], '{:.4f}')}</td><td>{num(g['mtbi_hours'], '{:.1f}')}</td>"
                    f"<td>{num(auto['p50'])} / {num(auto['p90'])} ({auto['n']})</td>"
                    f"<td>{num(manual['p50'])} / {num(manual['p90'])} ({manual['n']})</td>"
                    f"<td>{num(g['false_hold_share'], '{:.0%}')}</td><td>{html.escape(out)}</td></tr>")
    return "".join(rows)


def fleet_html(history_dir: str, policy, rel: dict | None = None) -> str:
    series = _verdicts_by_hour(history_dir)
    samples = from_history(history_dir)
    found, summary = stragglers(samples, policy.slurm)
    models = "".join(
        f"<tr><td>{html.escape(m)}</td><td>{s['peers']}</td><td>{s.get('median', 0):.0f}</td><td>{s.get('mad', 0):.1f}</td>"
        f"<td>{'yes' if s['judged'] else 'too few peers'}</td></tr>" for m, s in summary.items())
    slow = "".join(f"<tr><td>{html.escape(o.key)}</td><td>{html.escape(o.model)}</td><td>{o.value:.0f}</td>"
                   f"<td>-{o.drop_pct:.1f}%</td><td>{o.z:.1f}</td></tr>" for o in found) or \
        '<tr><td colspan="5">no stragglers</td></tr>'
    legend = " ".join(f'<span style="color:{c}">&#9632; {v}</span>' for v, c in COLORS.items())
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>slurm-gpufleet fleet report</title>
<style>body{{font:14px system-ui,sans-serif;margin:24px}}table{{border-collapse:collapse;margin:8px 0 20px}}
td,th{{border:1px solid #ddd;padding:4px 8px}}th{{background:#f4f4f4}}</style></head><body>
<h1>Fleet health</h1><p>{len(samples)} GPU measurement(s) from {html.escape(history_dir)}</p>
<h2>Nodes by verdict, per hour</h2><p>{legend}</p>{_svg(series)}
<h2>Memory bandwidth per model (GB/s)</h2><table><tr><th>model</th><th>GPUs</th><th>median</th><th>MAD</th><th>judged</th></tr>{models}</table>
<h2>Reliability</h2><table><tr><th>group</th><th>nodes</th><th>incidents</th><th>per node-day</th>
<th>MTBI h</th><th>repair h automatic p50 / p90 (n)</th><th>manual p50 / p90 (n)</th><th>holds that found nothing</th>
<th>out now</th></tr>{_reliability_rows(rel)}</table>
<h2>Stragglers</h2><table><tr><th>GPU</th><th>model</th><th>GB/s</th><th>vs median</th><th>robust z</th></tr>{slow}</table>
</body></html>"""
