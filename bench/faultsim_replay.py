#!/usr/bin/env python3
"""What the checks save, and how fast the fault simulator replays a site's year (issue 44).

Three runs of `slurm-gpufleet fleet simulate-faults` (the command other tools call, by its contract
names), each with every strategy side by side: the four compared (none, drain-on-any, two-tier,
gpufleet) and gpufleet without its reset rung (gpufleet-reboot-first) or its suspect rung
(gpufleet-no-suspect):

* `default`: the bundled history on the default fleet (300 nodes) with the default stream of 1,024-GPU
  jobs beside it, failures drawn at Llama 3's rates (the mean of --seeds seeds, 10 unless given);
* `rack`: 144 nodes in NVLink domains of 18 (an NVL72 rack each), half the domain classes' faults
  switch-side (`--switch-share 0.5`: the default 0.1 draws about one rack event in ten runs), with a
  breaker above one rack's share of the fleet (`breaker_threshold = "20%"`: a rack is 12.5 % of 144
  nodes, so the default 10 % holds every escalation back, as tests/test_faultsim.py shows);
* `fault-log`: a year-long fault log of 400 nodes, written here as the CSV `--fault-log` reads (the
  faults drawn once at Llama 3's rates for 400 nodes over 365 days with a lemon tail, seed 7: about 600,
  each lasting until its repair: 1 h where a reset or reboot would fix it, 48 h otherwise).  The log is generated, not a site's: it
  stands for one in size and shape, and its replay is timed (the aim: under 60 s on 2 cores).

Prints the tables and writes bench/results/faultsim_replay.json; prints the markdown table
docs/performance.md shows.
Measures; asserts nothing.

    python bench/faultsim_replay.py [--seeds 10]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "results" / "faultsim_replay.json"
STRATEGIES = ("none", "drain-on-any", "two-tier", "gpufleet", "gpufleet-reboot-first", "gpufleet-no-suspect")
FIGURES = ("ettr", "ettr_1024", "waiting_1024_h", "goodput", "availability", "node_hours_out", "peak_nodes_out",
           "faults", "black_hole_crashes", "jobs_lost")


def write_log(path: Path, nodes: int = 400, days: float = 365.0, seed: int = 7) -> int:
    """Llama 3's rates with a lemon tail (5 % of the nodes fail 5 times as often): about 600 faults."""
    sys.path.insert(0, str(REPO))
    from slurm_gpufleet.simulators.faultmodel import draw_faults, load_model

    faults, _ = draw_faults(load_model(), nodes, days * 86400, seed, lemon_share=0.05, lemon_factor=5.0)
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["node", "start", "end", "class", "detail"])
        for f in faults:
            hours = 1.0 if f.level in ("reset", "reboot") else 48.0
            start = f.t / 3600
            out.writerow([f"gpu{f.node + 1:04d}", f"{start:.3f}", f"{min(start + hours, days * 24):.3f}", f.cls.what,
                          f"drawn: {f.cls.name}"])
    return len(faults)


def run(args: list[str]) -> tuple[dict, float]:
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "slurm_gpufleet.cli", "fleet", "simulate-faults", "--json",
                          *[a for s in STRATEGIES for a in ("--strategy", s)], *args],
                         capture_output=True, text=True, cwd=REPO, check=True).stdout
    return json.loads(out), time.perf_counter() - t


LABELS = {"default": "default (300 nodes, 36.5 days, the 1,024-GPU stream, 10 seeds)",
          "rack": "rack (144 nodes in domains of 18, switch share 0.5, breaker 20 %, no big job, 10 seeds)",
          "fault-log": "fault log (400 nodes, 365 days, 642 faults, the 1,024-GPU stream, 1 replay)"}


def markdown(results: dict) -> str:
    """The figures as docs/performance.md shows them."""
    rows = ["| case | strategy | ETTR | ETTR >= 1,024 GPUs | goodput | availability | node-hours out | peak nodes out "
            "| black holes | resolved reset/reboot/suspect/repair/rack |", "|---|---|---|---|---|---|---|---|---|---|"]
    for label, r in results.items():
        for k, (name, m) in enumerate(r["strategies"].items()):
            res, e = m["resolved"], m["ettr_1024"]
            rows.append(f"| {LABELS.get(label, label) if k == 0 else ''} | {name} | {m['ettr']:.4f} | "
                        f"{'-' if e is None else f'{e:.4f}'} | {m['goodput']:.4f} | {m['availability']:.4f} | "
                        f"{m['node_hours_out']:.1f} | {m['peak_nodes_out']:g} | {m['black_hole_crashes']:g} | "
                        f"{res['reset']:.2f}/{res['reboot']:.2f}/{res.get('suspect', 0):.2f}/{res['repair']:.2f}/"
                        f"{res.get('rack', 0):.2f} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    a = ap.parse_args()
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "year.csv"
        rows = write_log(log)
        roomy = Path(tmp) / "rack.toml"
        roomy.write_text('[slurm]\nbreaker_threshold = "20%"\n')
        cases = {
            "default": ["--seeds", str(a.seeds)],
            "rack": ["--nodes", "144", "--domain-size", "18", "--switch-share", "0.5", "--big-job", "0",
                     "--seeds", str(a.seeds), "--config", str(roomy)],
            "fault-log": ["--fault-log", str(log), "--nodes", "400"],   # one replay: the one timed
        }
        for label, args in cases.items():
            d, took = run(args)
            results[label] = {"seconds": round(took, 1), "assumptions": {
                k: d["assumptions"].get(k) for k in ("nodes", "days", "jobs", "seeds", "faults_drawn", "domain_size",
                                                     "switch_share", "switch_events_drawn", "fault_log")},
                "strategies": {name: {k: m.get(k) for k in (*FIGURES, "gpu_hours_lost", "resolved",
                                                             "fault_to_drain_min", "rack_escalations",
                                                             "breaker_trips")}
                               for name, m in d["strategies"].items()}}
            print(f"== {label}: {d['assumptions']['nodes']} nodes, {d['assumptions']['days']:g} days, "
                  f"{sum(d['assumptions']['faults_drawn'].values())} faults over {d['assumptions']['seeds']} seed(s); "
                  f"{took:.1f} s"
                  + (f" (a log of {rows} rows)" if label == "fault-log" else ""))
            print(f"{'strategy':<22} {'ETTR':>7} {'>=1024':>7} {'goodput':>7} {'avail':>7} {'node-h out':>10} {'peak out':>8} "
                  f"{'black holes':>11} {'reset/reboot/suspect/repair/rack':>32}")
            for name, m in d["strategies"].items():
                r = m["resolved"]
                e1024 = "-" if m["ettr_1024"] is None else f"{m['ettr_1024']:.4f}"
                print(f"{name:<22} {m['ettr']:>7.4f} {e1024:>7} {m['goodput']:>7.4f} {m['availability']:>7.4f} "
                      f"{m['node_hours_out']:>10.1f} {m['peak_nodes_out']:>8g} {m['black_hole_crashes']:>11g} "
                      f"{r['reset']:.2f}/{r['reboot']:.2f}/{r.get('suspect', 0):.2f}/{r['repair']:.2f}/"
                      f"{r.get('rack', 0):.2f}")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n")
    print("\nas docs/performance.md shows it:\n" + markdown(results))
    print(f"fault-log replay: {results['fault-log']['seconds']} s (aim: under 60 s on 2 cores); wrote {OUT}")


if __name__ == "__main__":
    main()
