#!/usr/bin/env python3
"""`fleet stragglers --timings` on traces in the shape Megatron's timers give them (tests/timings_traces.py):
per case, what is flagged and what is called job-wide; and the time to read and judge 100,000 rows.
Prints a table and writes bench/results/timings_stragglers.json; asserts nothing.

    python bench/timings_stragglers.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from timings_traces import trace  # noqa: E402

from slurm_gpufleet.slowgpus.timings import judge, parse  # noqa: E402

FACTORS = (1.1, 1.15, 1.3, 2.0)
NOISES = (0.05, 0.10, 0.15)
SEEDS = 10
HEALTHY_SEEDS = 50


def main() -> None:
    out = {"cases": [], "scale": {}}
    print(f"{'case':<40} {'rows':>6} {'flagged (rank@node gpus)':<28} {'job-wide kinds':<20}")
    cases = [("one worker computes 2x slower", "slow_worker", {"factor": 2.0}),
             ("one worker computes 1.3x slower", "slow_worker", {"factor": 1.3}),
             ("last pipeline stage 1.5x, every replica", "slow_stage", {}),
             ("step cost follows the data", "data", {}),
             ("healthy", "healthy", {})]
    for label, case, kw in cases:
        rows, _ = parse("\n".join(json.dumps(r) for r in trace(case, **kw)))
        result = judge(rows)
        flagged = sorted({f"{f.rank}@{f.node} {f.gpus}" for f in result.flags})
        kinds = sorted({j["kind"] for j in result.job_wide})
        print(f"{label:<40} {len(rows):>6} {', '.join(flagged) or '-':<28} {', '.join(kinds) or '-':<20}")
        out["cases"].append({"case": label, "rows": len(rows), "flagged": flagged, "job_wide": kinds})
    # the sweep: a worker 1.1x to 2x slower at 5-15 % step noise, 40 and 100 steps, 10 seeds each: how often
    # it alone is flagged (recall), how often anything else is (a false flag)
    print(f"\n{'steps':>5} {'noise':>6} " + " ".join(f"{f'{x}x found/false':>16}" for x in FACTORS))
    out["sweep"] = []
    for steps in (40, 100):
        for noise in NOISES:
            cells = []
            for factor in FACTORS:
                found = false = 0
                for seed in range(SEEDS):
                    rows, _ = parse("\n".join(json.dumps(r) for r in trace(
                        "slow_worker", steps=steps, seed=seed, noise=noise, factor=factor)))
                    ranks = {f.rank for f in judge(rows).flags}
                    found += "11" in ranks
                    false += bool(ranks - {"11"})
                cells.append(f"{found}/{SEEDS} {false}")
                out["sweep"].append({"steps": steps, "noise": noise, "factor": factor, "found": found,
                                     "false": false, "seeds": SEEDS})
            print(f"{steps:>5} {noise:>6.0%} " + " ".join(f"{c:>16}" for c in cells))
    # healthy, data-driven and slow-stage jobs at 15 % noise: every flag is a false one
    judged_ops = flagged_ops = 0
    notes: dict[str, dict[str, int]] = {}
    for case in ("healthy", "data", "slow_stage"):
        for seed in range(HEALTHY_SEEDS):
            rows, _ = parse("\n".join(json.dumps(r) for r in trace(case, steps=100, seed=seed, noise=0.15)))
            result = judge(rows)
            judged_ops += 8   # 4 stages x 2 compute operations
            flagged_ops += len({(f.stage, f.op) for f in result.flags})
            for kind in {j["kind"] for j in result.job_wide}:
                notes.setdefault(case, {}).setdefault(kind, 0)
                notes[case][kind] = notes[case].get(kind, 0) + 1
    print(f"\nhealthy, data and slow-stage jobs at 15 % noise, {HEALTHY_SEEDS} seeds each: "
          f"{flagged_ops} of {judged_ops} operations flagged; notes {notes}")
    out["false_flags"] = {"operations": judged_ops, "flagged": flagged_ops, "seeds": HEALTHY_SEEDS,
                          "notes": notes}
    out["work_split"] = _work_split()
    out["intermittent"] = _intermittent()
    # 100,000 rows: 16 replicas x 4 stages x 5 ops x 313 steps
    text = "\n".join(json.dumps(r) for r in trace("slow_worker", dp=16, stages=4, steps=313))
    t = time.perf_counter()
    rows, _ = parse(text)
    parsed = time.perf_counter() - t
    result = judge(rows)
    total = time.perf_counter() - t
    print(f"\n{len(rows)} rows: read {parsed:.2f} s, read and judged {total:.2f} s ({len(result.flags)} flag(s))")
    out["scale"] = {"rows": len(rows), "read_s": round(parsed, 3), "total_s": round(total, 3),
                    "flags": len(result.flags)}
    (REPO / "bench" / "results" / "timings_stragglers.json").write_text(json.dumps(out, indent=1) + "\n")


def _work_split() -> list[dict]:
    """11 fixed ranks spend `offset` times longer in the optimizer in every step, their forward and backward
    keeping pace (the shape a real 128-rank job showed): every flag is a false one."""
    print(f"\n{'ranks':>5} {'noise':>6} {'optimizer offset':>17} {'ranks flagged':>14} {'said: work split':>17}")
    rows_out = []
    for dp, noise in ((32, 0.02), (32, 0.05), (8, 0.15)):
        for offset in (1.06, 1.3, 2.0):
            flagged = said = 0
            for seed in range(SEEDS):
                rows, _ = parse("\n".join(json.dumps(r) for r in trace(
                    "op_offset", dp=dp, stages=4, steps=60, seed=seed, noise=noise, offset=offset)))
                result = judge(rows)
                flagged += len({f.rank for f in result.flags})
                said += any(j["kind"] == "one_operation" for j in result.job_wide)
            print(f"{dp * 4:>5} {noise:>6.0%} {offset:>16}x {flagged:>14} {f'{said}/{SEEDS}':>17}")
            rows_out.append({"ranks": dp * 4, "noise": noise, "offset": offset, "ranks_flagged": flagged,
                             "said_work_split": said, "seeds": SEEDS})
    return rows_out


def _intermittent() -> list[dict]:
    """A worker 1.5x slower in a share of the steps (drawn step by step), 10 % noise, 80 steps: found and
    false flags, under the shipped rule (clearly slow in at least 20 % of its steps) and a stricter one."""
    from slurm_gpufleet.slowgpus.timings import Settings

    print(f"\n{'slow share':>10} " + " ".join(f"{f'share>={x:.0%} found/false':>24}" for x in (0.2, 0.5)))
    rows_out = []
    for share in (0.25, 0.5, 0.75):
        cells = []
        for least in (0.2, 0.5):
            found = false = 0
            for seed in range(SEEDS):
                rows, _ = parse("\n".join(json.dumps(r) for r in trace(
                    "slow_worker", factor=1.5, noise=0.10, steps=80, slow_share=share, seed=seed)))
                ranks = {f.rank for f in judge(rows, Settings(intermittent_share=least)).flags}
                found += "11" in ranks
                false += bool(ranks - {"11"})
            cells.append(f"{found}/{SEEDS} {false}")
            rows_out.append({"slow_share": share, "intermittent_share": least, "found": found, "false": false,
                             "seeds": SEEDS})
        print(f"{share:>10.0%} " + " ".join(f"{c:>24}" for c in cells))
    return rows_out


if __name__ == "__main__":
    main()
