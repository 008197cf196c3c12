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

from slurm_gpufleet.perf.timings import judge, parse  # noqa: E402


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


if __name__ == "__main__":
    main()
