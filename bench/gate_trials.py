#!/usr/bin/env python3
"""Issue #43's figures, for the old gate and the new side by side: does a gated rollout keep its budget and
finish, and how far does a bad driver get?

The old gate is the code at --old (a git revision, default the last commit before #43's work), checked out
in a temporary worktree; the new is this tree.  Each runs in a process of its own, with its own package on
sys.path, on the same inputs: the bundled Helios load at +260 h, 8 GPUs a node, a 10% node budget, 20 min a
node, the evidence gate with its default keys (`[maintain] gate = "evidence"`), hard failures at Meta's
RSC-1 rate (6.5 per 1,000 node-days), soft events at NCSA Delta's Xid 31 rate.

* replay: the full replay of the history (`maintain simulate`), 60 and 300 nodes, a driver no worse than
  the old one, gated and ungated: makespan, GPU-hours lost, peak nodes out, nodes out beyond the budget and
  the failures that struck after the rollout last admitted a node (the new simulator's `over_budget`);
* seeds: `--seeds` trials at 300 nodes (steps of 2 h), per driver effect: the share of seeds that finished,
  halted, waited for an admin or never finished; the share of the fleet upgraded when a halt came; the
  median makespan against the ungated one, over the finished seeds and over all.

Prints the two side by side and writes bench/results/gate_trials.json (docs/performance.md shows it).
Asserts nothing.

    python bench/gate_trials.py [--seeds 25] [--old 7211d41] [--skip-old]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OLD_REV = "7211d41"  # main before issue #43
OUT = REPO / "bench" / "results" / "gate_trials.json"

# run inside each tree's process: argv[1] the tree, argv[2] the case as JSON; prints the figures as JSON
CASE = r'''
import json, sys
tree, case = sys.argv[1], json.loads(sys.argv[2])
sys.path.insert(0, tree)
from dataclasses import replace
from slurm_gpufleet.common.datafiles import HELIOS_SACCT, open_text
from slurm_gpufleet.simulators.failures import Rates
from slurm_gpufleet.maintain.sacct import read_sacct
from slurm_gpufleet.simulators.rollout import budget_of, simulate
from slurm_gpufleet.policy import parse_policy

with open_text(str(HELIOS_SACCT)) as fh:
    trace = read_sacct(fh)
policy = parse_policy(case["config"])
rates = Rates(6.5, 0.18, case["effect"])
nodes = case["nodes"]
policy = replace(policy, maintain=replace(policy.maintain, max_unavailable=budget_of("10%", nodes),
                                          upgrade_minutes=20))
if case["kind"] == "replay":
    out = simulate(trace, nodes=nodes, gpus_per_node=8, strategies=("gpufleet",), rollout_at_h=260,
                   max_unavailable="10%", policy=policy, assumption="runtime-ceil-hour", upgrade_minutes=20,
                   rates=rates)
    m = out["strategies"]["gpufleet"]
    print(json.dumps({k: m.get(k) for k in ("makespan_h", "gpu_hours_lost", "peak_nodes_out", "over_budget")}
                     | {"budget": out["assumptions"]["max_unavailable_nodes"],
                        "done": m.get("done", True), "nodes_upgraded": m.get("nodes_upgraded")}))
else:
    from slurm_gpufleet.simulators.trials import trial
    out = simulate(trace, nodes=nodes, gpus_per_node=8, strategies=(), rollout_at_h=260, max_unavailable="10%",
                   policy=policy, assumption="runtime-ceil-hour", upgrade_minutes=20, rates=rates)
    running, sim_policy = out["_running"], out["_policy"]
    gated = replace(sim_policy, maintain=replace(sim_policy.maintain, gate="evidence"))
    plain = replace(sim_policy, maintain=replace(sim_policy.maintain, gate="validated"))
    runs = [trial(running, nodes, 8, gated, rates, s, 260 * 3600.0, 7200.0) for s in range(case["seeds"])]
    ungated = [trial(running, nodes, 8, plain, rates, s, 260 * 3600.0, 7200.0) for s in range(min(10, case["seeds"]))]
    def outcome(r):
        if "outcome" in r:
            return r["outcome"]
        return {"done": "finished", "halted": "halted"}.get(r["state"], "unfinished")
    print(json.dumps({"seeds": [{"outcome": outcome(r), "upgraded_at_halt": r["upgraded_at_halt"],
                                 "makespan_h": r["makespan_h"]} for r in runs],
                      "ungated_makespan_h": [r["makespan_h"] for r in ungated if r["state"] == "done"]}))
'''

REPLAYS = [{"kind": "replay", "nodes": n, "effect": 1.0, "config": cfg, "label": f"{n} nodes, {label}"}
           for n in (60, 300) for label, cfg in (("ungated", "[maintain]\n"),
                                                 ("gated", '[maintain]\ngate = "evidence"\n'))]


def run(tree: Path, case: dict) -> dict:
    r = subprocess.run([sys.executable, "-c", CASE, str(tree), json.dumps(case)], capture_output=True, text=True,
                       cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})
    if r.returncode != 0:
        raise SystemExit(f"{tree}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def seed_figures(raw: dict) -> dict:
    seeds = raw["seeds"]
    n = len(seeds)
    halts = sorted(s["upgraded_at_halt"] for s in seeds if s["outcome"] == "halted" and s["upgraded_at_halt"] is not None)
    ungated = sorted(raw["ungated_makespan_h"])
    u50 = ungated[len(ungated) // 2] if ungated else None

    def p50(values):
        values = sorted(values)
        return values[len(values) // 2] if values else None

    finished = [s["makespan_h"] for s in seeds if s["outcome"] == "finished"]
    return {"seeds": n, **{k: sum(1 for s in seeds if s["outcome"] == k) / n
                           for k in ("finished", "halted", "waiting", "unfinished")},
            "halted_by_12pct": sum(1 for f in halts if f <= 0.12) / n,
            "upgraded_at_halt_p50": p50(halts), "upgraded_at_halt_max": halts[-1] if halts else None,
            "makespan_p50_vs_ungated_finished": round(p50(finished) / u50, 3) if finished and u50 else None,
            "makespan_p50_vs_ungated_all": round(p50([s["makespan_h"] for s in seeds]) / u50, 3) if u50 else None,
            "ungated_makespan_h_p50": u50}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=25)
    ap.add_argument("--old", default=OLD_REV, help="the git revision of the old gate")
    ap.add_argument("--skip-old", action="store_true", help="the new gate alone (no git worktree)")
    args = ap.parse_args()
    trees = {"new": REPO}
    tmp = None
    if not args.skip_old:
        tmp = tempfile.mkdtemp(prefix="gpufleet-old-")
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", tmp, args.old], check=True)
        trees["old"] = Path(tmp)
    results: dict = {"old_rev": None if args.skip_old else args.old, "replay": {}, "seeds": {}}
    try:
        for case in REPLAYS:
            for name, tree in trees.items():
                t = time.monotonic()
                results["replay"].setdefault(case["label"], {})[name] = {**run(tree, case),
                                                                         "wall_s": round(time.monotonic() - t, 1)}
        for effect in (1.0, 3.0):
            case = {"kind": "seeds", "nodes": 300, "effect": effect, "seeds": args.seeds,
                    "config": '[maintain]\ngate = "evidence"\n'}
            for name, tree in trees.items():
                results["seeds"].setdefault(f"driver x{effect:g}", {})[name] = seed_figures(run(tree, case))
    finally:
        if tmp:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", tmp], check=False)
    names = list(trees)
    print("replay (good driver, failures 6.5/1,000 node-days):")
    print(f"  {'case':<22}" + "".join(f"{n + ' ' + k:>16}" for n in names for k in ("makespan h", "peak out", "over budget")))
    for label, by in results["replay"].items():
        row = f"  {label:<22}"
        for n in names:
            m = by[n]
            makespan = "not done" if not m.get("done", True) or m["makespan_h"] is None else f"{m['makespan_h']:.1f}"
            row += f"{makespan:>16}{m['peak_nodes_out']:>16}{'-' if m.get('over_budget') is None else m['over_budget']:>16}"
        print(row + f"   (budget {by[names[0]]['budget']})")
    print(f"seeds ({args.seeds} at 300 nodes, the ungated median over 10):")
    keys = ("finished", "halted", "waiting", "unfinished", "halted_by_12pct", "upgraded_at_halt_max",
            "makespan_p50_vs_ungated_finished", "makespan_p50_vs_ungated_all")
    def shown(v) -> str:
        return "-" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)

    for driver, by in results["seeds"].items():
        for k in keys:
            print(f"  {driver:<9} {k:<34}" + "".join(f"{n}: {shown(by[n][k]):<10}" for n in names))
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
