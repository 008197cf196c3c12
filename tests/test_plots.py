"""The simulate plot: the legend sits above the data, and both charts share one hours axis."""

import re
from types import SimpleNamespace

from slurm_gpufleet.simulators.plots import simulation_html


def test_legend_outside_the_data_and_one_hours_axis():
    results = {
        "gpufleet": SimpleNamespace(capacity=[(0.0, 80), (2.0, 72), (30.0, 80)],
                                    waves=[{"wave": 0, "nodes": 1, "reserve_at": 0.0, "start": 0.5, "end": 1.0},
                                           {"wave": 1, "nodes": 4, "reserve_at": 1.0, "start": 3.0, "end": 26.0}]),
        "drain-all": SimpleNamespace(capacity=[(0.0, 80), (0.1, 0), (12.0, 80)], waves=[]),
    }
    result = {"strategies": {k: {"makespan_h": 1} for k in results}, "assumptions": {"seed": 1}}
    page = simulation_html(result, results)
    capacity, waves = re.findall(r"<svg.*?</svg>", page, re.S)
    # the legend's labels lie above every point of every line
    legend_y = [float(y) for y in re.findall(r'<text x="[\d.]+" y="([\d.]+)" fill=', capacity)]
    points = [float(p.split(",")[1]) for line in re.findall(r'points="([^"]+)"', capacity) for p in line.split()]
    assert len(legend_y) == 2 and max(legend_y) < min(points)
    # the same hour ticks at the same x in both charts
    def ticks(svg):
        return re.findall(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="middle">(\d+)</text>', svg)
    assert ticks(capacity) == ticks(waves) and len(ticks(capacity)) == 6
    assert ticks(capacity)[-1][1] == str(round(30 * 1.05))
