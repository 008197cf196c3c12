"""In-job straggler detection on generated samples (issue 22): 64-node jobs of 8 GPUs sampled every 15 s,
+-2% drift common to the whole job, a 14% spread of speed between healthy GPUs (Meta), power capping on
some healthy GPUs (SwPowerCap at normal clocks); one job in five has one node slowed by 10% from a
random moment (half throttled: one GPU's SM clock down with SwThermalSlowdown; half silent: the node's
clocks normal, every GPU 10% slower); some jobs slow down everywhere (their GPUs all wait on I/O).

A synchronous job: each step lasts as long as its slowest GPU, so a GPU's utilisation is its share of the
step it computes, and its power follows its utilisation and clock.

Prints the confusion table (per job and node), precision, recall, the latency from onset to flag
(percentiles), the flags on uniformly slow jobs, and the detector's seconds.  Targets (the issue):
precision >= 0.90, recall >= 0.88, flagged within 5 minutes of onset, no flag on a uniformly slow job.

    python bench/instep_stragglers.py [--jobs 40] [--seed 1] [--minutes 30] [--json]
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

from slurm_gpufleet.instep import Sample, Settings, detect  # noqa: E402

NODES, GPUS, STEP_S, NOMINAL_MHZ = 64, 8, 15.0, 1980.0


def job_samples(rng: random.Random, job: str, minutes: float, kind: str, nodes: int = NODES):
    """kind: healthy | throttled | silent | uniform.  Returns (samples, slowed node or None, onset t)."""
    speed = {(n, g): rng.uniform(0.93, 1.07) for n in range(nodes) for g in range(GPUS)}
    capped = {k for k in speed if rng.random() < 0.05}
    bad_node = rng.randrange(nodes) if kind in ("throttled", "silent") else None
    bad_gpu = rng.randrange(GPUS)
    onset = rng.uniform(0.3, 0.6) * minutes * 60
    phase = rng.uniform(0, 2 * math.pi)
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
            eff[k], clock[k], thr[k] = s * f * drift, c, mask
        slowest = min(eff.values())
        io_wait = 0.7 if kind == "uniform" and t >= onset else 1.0
        for k, e in eff.items():
            util = min(100.0, max(0.0, 97.0 * slowest / e * io_wait + rng.gauss(0, 1.5)))
            power = 120 + 580 * util / 100 * clock[k] / NOMINAL_MHZ + rng.gauss(0, 10)
            out.append(Sample(t, job, f"n{k[0]:03d}", k[1], clock[k] + rng.gauss(0, 8), power, util, thr[k],
                              "NVIDIA H200"))
    return out, (f"n{bad_node:03d}" if bad_node is not None else None), onset


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    settings = Settings()
    kinds = []
    for i in range(args.jobs):  # one in five slowed (alternating signatures), one in eight uniformly slow
        kinds.append("throttled" if i % 10 == 0 else "silent" if i % 10 == 5 else "uniform" if i % 8 == 3 else "healthy")
    tp = fp = fn = 0
    uniform_flags = 0
    latencies = []
    detect_s = 0.0
    n_samples = 0
    for i, kind in enumerate(kinds):
        samples, bad, onset = job_samples(rng, f"job{i}", args.minutes, kind)
        n_samples += len(samples)
        t0 = time.process_time()
        flags = detect(samples, settings)
        detect_s += time.process_time() - t0
        hit = [f for f in flags if f.node == bad]
        fp += len(flags) - len(hit)
        if kind == "uniform":
            uniform_flags += len(flags)
        if bad is not None:
            if hit:
                tp += 1
                latencies.append(hit[0].t_first + settings.windows * settings.window_s - onset)
            else:
                fn += 1
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    lat = sorted(latencies)

    def pct(p):
        return round(lat[min(len(lat) - 1, int(p * len(lat)))], 1) if lat else None

    result = {"jobs": args.jobs, "slowed_jobs": tp + fn, "uniformly_slow_jobs": kinds.count("uniform"),
              "confusion": {"tp": tp, "fp": fp, "fn": fn}, "precision": round(precision, 3),
              "recall": round(recall, 3), "latency_s": {"p50": pct(0.5), "p90": pct(0.9), "max": pct(1.0)},
              "flags_on_uniformly_slow_jobs": uniform_flags, "samples": n_samples,
              "detector_cpu_s": round(detect_s, 2), "us_per_sample": round(1e6 * detect_s / max(1, n_samples), 2)}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{args.jobs} jobs of {NODES} nodes x {GPUS} GPUs, {args.minutes:g} min each, seed {args.seed}")
        print(f"  slowed node: flagged {tp}, missed {fn}; other nodes flagged: {fp}")
        print(f"  precision {precision:.3f}  recall {recall:.3f}")
        print(f"  latency from onset: p50 {pct(0.5)} s, p90 {pct(0.9)} s, max {pct(1.0)} s")
        print(f"  flags on {kinds.count('uniform')} uniformly slow job(s): {uniform_flags}")
        print(f"  detector: {detect_s:.2f} s CPU for {n_samples} samples ({result['us_per_sample']} us each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
