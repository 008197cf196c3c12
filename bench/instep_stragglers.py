"""In-job straggler detection on generated samples (issue 22): 64-node jobs of 8 GPUs sampled every 15 s,
+-2% drift common to the whole job, a 14% spread of speed between healthy GPUs (Meta), power capping on
some healthy GPUs (SwPowerCap at normal clocks); one job in five has one node slowed by 10% from a
random moment (half throttled: one GPU's SM clock down with SwThermalSlowdown; half silent: the node's
clocks normal, every GPU 10% slower); some jobs slow down everywhere (their GPUs all wait on I/O).

A synchronous job: each step lasts as long as its slowest GPU, so a GPU's utilisation is its share of the
step it computes, and its power follows its utilisation and clock.

Cases (issue 33 adds the held-out style): one GPU of one node the bottleneck, throttled and silent; a
whole node silent; 2-node jobs; uniform slowdowns.  Prints per case the confusion counts, precision,
recall, the latency from onset to the flag (`t_flagged`), whether the flag names the slowed GPU, and the
detector's seconds.  Targets: precision >= 0.90, recall >= 0.90, flagged within 5 minutes of onset, no
flag on a uniformly slow job.

    python bench/instep_stragglers.py [--jobs 40] [--nodes 64] [--seed 1] [--minutes 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_gpufleet.slowgpus.instep import Sample, Settings, detect  # noqa: E402

NODES, GPUS, STEP_S, NOMINAL_MHZ = 64, 8, 15.0, 1980.0


def job_samples(rng: random.Random, job: str, minutes: float, kind: str, nodes: int = NODES,
                bad_gpu_out: list | None = None, style: str = "nccl", noise: float = 1.5,
                power_noise: float = 10.0, offset: float = 0.0, energy: bool = False, step_w: float = 0.0):
    """kind: healthy | throttled (one GPU's clock down, SwThermalSlowdown) | silent (a whole node 10%
    slower, clocks normal) | gpu_silent (one GPU slowed to 10% under the job's slowest other GPU, clocks
    normal: it holds the job back, staying busy while the job's other GPUs, its own node's included, wait;
    a GPU that slows but stays faster than the slowest holds no one back, and its power rising alone is
    what a level change shows too) | uniform.  Returns (samples, slowed node or None, onset
    t); `bad_gpu_out` gets the slowed GPU's index where one GPU is slowed.  `style`: "nccl" (the GPUs that
    wait for the slowest spin in NCCL's kernels: NVML shows them near 100 % busy, and their power follows the
    share of the step they compute) or "idle" (waiting GPUs' utilisation falls with their share).  `noise`:
    the per-sample utilisation noise, in points; `power_noise`: the per-sample power noise, watts (real
    training jobs sampled every 15 s: 6-15 W on 300 W A40s, 15-17 W on 700 W H100s, mostly one-second
    dips); `offset`: each GPU draws up to this share more or less than its model's law, for the whole job
    (one H100 of eight drew +28 W; one rank of an H200 job 21 % less); `energy`: the samples carry NVML's
    total energy counter, which integrates the power the GPU drew (its 15 s average varies by 2.5-2.9 W).
    `step_w`: on each node, one healthy GPU draws this many watts more from a moment of its own on (a phase
    of its work, a neighbour's heat): its level changes, its speed does not.  The offsets, the counter and
    the steps draw from generators of their own, so a seed gives the same job either way."""
    speed = {(n, g): rng.uniform(0.93, 1.07) for n in range(nodes) for g in range(GPUS)}
    capped = {k for k in speed if rng.random() < 0.05}
    bad_node = rng.randrange(nodes) if kind in ("throttled", "silent", "gpu_silent") else None
    bad_gpu = rng.randrange(GPUS)
    if bad_gpu_out is not None and kind in ("throttled", "gpu_silent"):
        bad_gpu_out.append(bad_gpu)
    onset = rng.uniform(0.3, 0.6) * minutes * 60
    hold_back = 0.9 * min(v for k, v in speed.items() if k != (bad_node, bad_gpu))
    phase = rng.uniform(0, 2 * math.pi)
    drawn = random.Random(f"{job}/offsets")
    scale = {k: 1 + drawn.uniform(-offset, offset) for k in speed} if offset else {}
    stepped = random.Random(f"{job}/steps")
    steps = {(n, stepped.randrange(GPUS)): stepped.uniform(0.2, 0.8) * minutes * 60 for n in range(nodes)} \
        if step_w else {}
    counter = random.Random(f"{job}/energy")
    joules = {k: counter.uniform(1e6, 1e8) for k in speed} if energy else {}
    out = []
    for i in range(int(minutes * 60 / STEP_S)):
        t = i * STEP_S
        drift = 1 + 0.02 * math.sin(phase + 2 * math.pi * t / (minutes * 60))
        eff, clock, thr = {}, {}, {}
        for k, s in speed.items():
            n, g = k
            c, mask, f = NOMINAL_MHZ, 0, 1.0
            if k in capped:
                c, mask = NOMINAL_MHZ * 0.97, 0x4
            if t >= onset and n == bad_node:
                if kind == "throttled" and g == bad_gpu:
                    c, mask, f = NOMINAL_MHZ * 0.87, 0x20, 0.9
                elif kind == "silent":
                    f = 0.9
                elif kind == "gpu_silent" and g == bad_gpu:
                    f = hold_back / s   # 10 % under the job's slowest other GPU: it holds the job back
            eff[k], clock[k], thr[k] = s * f * drift, c, mask
        slowest = min(eff.values())
        io_wait = 0.7 if kind == "uniform" and t >= onset else 1.0
        for k, e in eff.items():
            share = slowest / e * io_wait  # of the step it computes; the rest it waits
            if style == "nccl":  # waiting for a peer spins in NCCL's kernels (busy to NVML); waiting on I/O does not
                util = min(100.0, max(0.0, 97.0 * io_wait + rng.gauss(0, noise)))
            else:
                util = min(100.0, max(0.0, 97.0 * share + rng.gauss(0, noise)))
            drawn_w = (120 + 580 * 0.97 * share * clock[k] / NOMINAL_MHZ) * scale.get(k, 1.0)
            if k in steps and t >= steps[k] and k != (bad_node, bad_gpu):
                drawn_w += step_w
            power = drawn_w + rng.gauss(0, power_noise)
            if energy:
                joules[k] += (drawn_w + counter.gauss(0, 2.7)) * STEP_S
            out.append(Sample(t, job, f"n{k[0]:03d}", k[1], clock[k] + rng.gauss(0, 8), power, util, thr[k],
                              "NVIDIA H200", energy_j=round(joules[k], 3) if energy else None))
    return out, (f"n{bad_node:03d}" if bad_node is not None else None), onset


CASES = {  # kind -> (node count, jobs of each 10): the held-out style of case, and the old ones
    "throttled": (None, 1), "silent": (None, 1), "gpu_silent": (None, 2), "healthy": (None, 4),
    "uniform": (None, 1), "silent_2node": (2, 1), "healthy_2node": (2, 2), "gpu_silent_2node": (2, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=NODES, help="nodes per job (the 2-node case aside)")
    ap.add_argument("--style", choices=("nccl", "idle"), default="nccl",
                    help="how waiting GPUs look: spinning in NCCL (busy, power down; the default) or idle")
    ap.add_argument("--noise", type=float, default=1.5, help="per-sample utilisation noise, points")
    ap.add_argument("--matrix", action="store_true",
                    help="both styles at 1.5, 3 and 5 points of noise; writes bench/results/instep_stragglers.json")
    ap.add_argument("--power", action="store_true",
                    help="the NCCL case at 0-60 W of per-sample power noise, with and without per-GPU offsets of "
                         "up to 10 %%, judged on instantaneous power and on the energy counter side by side; writes "
                         "bench/results/instep_power.json")
    ap.add_argument("--power-step", action="store_true",
                    help="on each node one healthy GPU draws 0, 15, 30 or 60 W more from a moment mid-job on (its "
                         "level changes, its speed does not), 3 seeds, the NCCL case; writes "
                         "bench/results/instep_power_step.json")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", default=None, help="with --matrix: where to write its JSON "
                    "(default bench/results/instep_stragglers.json; a 64-node run: instep_stragglers_64.json)")
    args = ap.parse_args()
    if args.matrix:
        return matrix(args)
    if args.power:
        return power_sweep(args)
    if args.power_step:
        return power_step(args)
    result = run(args.jobs, args.minutes, args.seed, args.nodes, args.style, args.noise)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        show(result, args)
    return 0


def matrix(args) -> int:
    out = []
    print(f"{args.jobs} jobs of {args.nodes} nodes x {GPUS} GPUs (and 2-node jobs), {args.minutes:g} min each, "
          f"seed {args.seed}")
    print(f"  {'style':<6} {'noise':>5} {'precision':>9} {'recall':>6} {'slowest s':>9} {'uniform flags':>13}  "
          "recall per case")
    for style in ("nccl", "idle"):
        for noise in (1.5, 3.0, 5.0):
            r = run(args.jobs, args.minutes, args.seed, args.nodes, style, noise)
            cases = ", ".join(f"{k} {v['recall']}" for k, v in r["per_case"].items() if v["recall"] is not None)
            print(f"  {style:<6} {noise:>5g} {r['precision']:>9.3f} {r['recall']:>6.3f} "
                  f"{str(r['worst_latency_s']):>9} {r['flags_on_uniformly_slow_jobs']:>13}  {cases}")
            out.append({"style": style, "noise": noise, **{k: r[k] for k in (
                "precision", "recall", "worst_latency_s", "flags_on_uniformly_slow_jobs", "per_case")}})
    path = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / "instep_stragglers.json"
    path.write_text(json.dumps({"jobs": args.jobs, "nodes_per_job": args.nodes, "minutes": args.minutes,
                                "seed": args.seed, "runs": out}, indent=1) + "\n")
    return 0


def power_step(args, detector=None, out_path: str | None = None) -> int:
    """A healthy GPU's power rising mid-job (one a node): every flag it adds is a false one."""
    out = []
    print(f"{args.jobs} jobs of {args.nodes} nodes x {GPUS} GPUs (and 2-node jobs), {args.minutes:g} min each, "
          f"seeds {args.seed}-{args.seed + 2}, NCCL case, one GPU a node stepping up mid-job")
    print(f"  {'step W':>6} {'precision':>9} {'recall':>6} {'false flags':>11} {'on uniform jobs':>15}")
    for step_w in (0.0, 15.0, 30.0, 60.0):
        runs = [run(args.jobs, args.minutes, args.seed + i, args.nodes, "nccl", args.noise, step_w=step_w,
                    detector=detector) for i in range(3)]
        tp = sum(r["confusion"]["tp"] for r in runs)
        fp = sum(r["confusion"]["fp"] for r in runs)
        fn = sum(r["confusion"]["fn"] for r in runs)
        uniform = sum(r["flags_on_uniformly_slow_jobs"] for r in runs)
        row = {"step_w": step_w, "precision": round(tp / (tp + fp), 3) if tp + fp else None,
               "recall": round(tp / (tp + fn), 3) if tp + fn else None, "false_flags": fp,
               "flags_on_uniformly_slow_jobs": uniform, "seeds": 3}
        out.append(row)
        print(f"  {step_w:>6g} {str(row['precision']):>9} {str(row['recall']):>6} {fp:>11} {uniform:>15}")
    path = Path(out_path) if out_path else Path(__file__).resolve().parent / "results" / "instep_power_step.json"
    path.write_text(json.dumps({"jobs": args.jobs, "nodes_per_job": args.nodes, "minutes": args.minutes,
                                "seed": args.seed, "runs": out}, indent=1) + "\n")
    return 0


def power_sweep(args) -> int:
    """Per power-noise level and offset: precision and recall, judged on instantaneous power and on energy."""
    out = []
    print(f"{args.jobs} jobs of {args.nodes} nodes x {GPUS} GPUs (and 2-node jobs), {args.minutes:g} min each, "
          f"seed {args.seed}, waiting GPUs spin in NCCL, utilisation noise {args.noise:g} points")
    print(f"  {'power noise W':>13} {'offsets':>7}   {'instantaneous: precision recall uniform':<40} "
          f"{'energy: precision recall uniform':<34}")
    for power_noise in (0.0, 10.0, 20.0, 40.0, 60.0):
        for offset in (0.0, 0.10):
            cells, row = [], {"power_noise_w": power_noise, "offset": offset}
            for energy in (False, True):
                r = run(args.jobs, args.minutes, args.seed, args.nodes, "nccl", args.noise, power_noise, offset, energy)
                name = "energy" if energy else "instantaneous"
                row[name] = {k: r[k] for k in ("precision", "recall", "worst_latency_s",
                                               "flags_on_uniformly_slow_jobs")}
                cells.append(f"{r['precision']:>9.3f} {r['recall']:>6.3f} {r['flags_on_uniformly_slow_jobs']:>7}")
            print(f"  {power_noise:>13g} {offset:>7.0%}   {cells[0]:<40} {cells[1]:<34}")
            out.append(row)
    path = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / "instep_power.json"
    path.write_text(json.dumps({"jobs": args.jobs, "nodes_per_job": args.nodes, "minutes": args.minutes,
                                "seed": args.seed, "util_noise": args.noise, "runs": out}, indent=1) + "\n")
    return 0


def run(jobs: int, minutes: float, seed: int, nodes_per_job: int, style: str, noise: float,
        power_noise: float = 10.0, offset: float = 0.0, energy: bool = False, step_w: float = 0.0,
        detector=None) -> dict:
    rng = random.Random(seed)
    settings = Settings()
    kinds = [k for k, (_, per) in CASES.items() for _ in range(per)]
    kinds = [kinds[i % len(kinds)] for i in range(jobs)]
    per: dict[str, dict] = {}
    uniform_flags = 0
    detect_s = 0.0
    n_samples = 0
    for i, kind in enumerate(kinds):
        nodes = CASES[kind][0] or nodes_per_job
        gen = kind.removesuffix("_2node")
        gpu: list[int] = []
        samples, bad, onset = job_samples(rng, f"job{i}", minutes, gen, nodes=nodes, bad_gpu_out=gpu, style=style,
                                          noise=noise, power_noise=power_noise, offset=offset, energy=energy,
                                          step_w=step_w)
        n_samples += len(samples)
        t0 = time.process_time()
        flags = (detector or detect)(samples, settings)
        detect_s += time.process_time() - t0
        row = per.setdefault(kind, {"tp": 0, "fp": 0, "fn": 0, "latency": [], "named_gpu": 0})
        hit = [f for f in flags if f.node == bad]
        row["fp"] += len(flags) - len(hit)
        if kind == "uniform":
            uniform_flags += len(flags)
        if bad is not None:
            if hit:
                row["tp"] += 1
                row["latency"].append(hit[0].t_flagged - onset)
                row["named_gpu"] += int(bool(gpu) and hit[0].gpu == gpu[0])
            else:
                row["fn"] += 1
    tp = sum(r["tp"] for r in per.values())
    fp = sum(r["fp"] for r in per.values())
    fn = sum(r["fn"] for r in per.values())
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0

    def pct(lat, p):
        lat = sorted(lat)
        return round(lat[min(len(lat) - 1, int(p * len(lat)))], 1) if lat else None

    rows = {k: {"tp": r["tp"], "fp": r["fp"], "fn": r["fn"],
                "precision": round(r["tp"] / (r["tp"] + r["fp"]), 3) if r["tp"] + r["fp"] else None,
                "recall": round(r["tp"] / (r["tp"] + r["fn"]), 3) if r["tp"] + r["fn"] else None,
                "latency_s": {"p50": pct(r["latency"], 0.5), "p90": pct(r["latency"], 0.9),
                              "max": pct(r["latency"], 1.0)}, "gpu_named": r["named_gpu"]}
            for k, r in per.items()}
    worst = max((lat for r in per.values() for lat in r["latency"]), default=None)
    targets = {"precision>=0.90": precision >= 0.90, "recall>=0.90": recall >= 0.90,
               "flagged_within_300_s": worst is not None and worst <= 300, "no_flag_on_uniform": uniform_flags == 0}
    return {"targets": targets, "worst_latency_s": round(worst, 1) if worst is not None else None,
              "jobs": jobs, "nodes_per_job": nodes_per_job, "style": style, "noise": noise, "per_case": rows,
              "confusion": {"tp": tp, "fp": fp, "fn": fn}, "precision": round(precision, 3),
              "recall": round(recall, 3), "flags_on_uniformly_slow_jobs": uniform_flags, "samples": n_samples,
              "detector_cpu_s": round(detect_s, 2), "us_per_sample": round(1e6 * detect_s / max(1, n_samples), 2)}


def show(result: dict, args) -> None:
    rows, targets = result["per_case"], result["targets"]
    precision, recall, uniform_flags = result["precision"], result["recall"], result["flags_on_uniformly_slow_jobs"]
    detect_s, n_samples = result["detector_cpu_s"], result["samples"]
    print(f"{args.jobs} jobs of {args.nodes} nodes x {GPUS} GPUs (and 2-node jobs), {args.minutes:g} min "
          f"each, seed {args.seed}, waiting GPUs {args.style}, noise {args.noise:g} points")
    print(f"  {'case':<16} {'tp':>3} {'fp':>3} {'fn':>3} {'precision':>9} {'recall':>6} "
          f"{'p50 s':>6} {'max s':>6} {'GPU named':>9}")
    for k, r in rows.items():
        print(f"  {k:<16} {r['tp']:>3} {r['fp']:>3} {r['fn']:>3} {str(r['precision']):>9} "
              f"{str(r['recall']):>6} {str(r['latency_s']['p50']):>6} {str(r['latency_s']['max']):>6} "
              f"{r['gpu_named']:>9}")
    print(f"  all: precision {precision:.3f}  recall {recall:.3f}; flags on uniformly slow jobs: "
          f"{uniform_flags}")
    print("  targets: " + ", ".join(f"{k} {'met' if ok else 'MISSED'}" for k, ok in targets.items())
          + f" (slowest flag {result['worst_latency_s']} s after onset)")
    print(f"  detector: {detect_s:.2f} s CPU for {n_samples} samples ({result['us_per_sample']} us each)")


if __name__ == "__main__":
    sys.exit(main())
