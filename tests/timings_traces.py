"""Per-rank timing traces in the shape Megatron's timers give them (forward-compute, backward-compute,
grads-reduce-scatter, params-all-gather, optimizer per step; a rank is a tensor-parallel group's leader),
for the `--timings` tests and bench/timings_stragglers.py.  Seeded: the same case gives the same rows."""

from __future__ import annotations

import random

OPS = (("forward-compute", 0.10), ("backward-compute", 0.20), ("grads-reduce-scatter", 0.05),
       ("params-all-gather", 0.03), ("optimizer", 0.02))
COMPUTE = ("forward-compute", "backward-compute")


def trace(case: str, dp: int = 8, stages: int = 4, steps: int = 40, seed: int = 7, noise: float = 0.05,
          slow: tuple[int, int] = (3, 1), factor: float = 2.0, ops: tuple = OPS, compute: tuple = COMPUTE,
          hiccup_every: int = 0, slow_share: float = 1.0, offset: float = 1.06,
          offset_ranks: tuple[int, ...] = (1, 4, 6, 9, 12, 15, 17, 20, 23, 26, 30)) -> list[dict]:
    """Rows of one job.  `case`: healthy; slow_worker (the worker at (dp, stage) `slow` computes `factor`
    times slower, and its replicas wait for it in their reduce-scatter); slow_stage (the last stage slower by
    1.5 in every replica); data (each replica's step costs what its sequences cost: 0.7-1.6 of the mean,
    drawn again every step).  `noise`: each time's lognormal sigma (0.15: 15 % step noise); `ops`, `compute`:
    other operation names; `hiccup_every`: every Nth step every rank computes 3x slower (a garbage
    collection, a checkpoint write); `slow_share`: the slow worker is slow in this share of the steps (drawn
    step by step: a GPU that throttles now and then); op_offset (the ranks `offset_ranks` spend `offset`
    times longer in the optimizer in every step, their compute keeping pace: optimizer shards of unequal
    size, the shape a real 128-rank job showed)."""
    rng = random.Random(seed)
    reduce_op = next((op for op, _ in ops if "reduce" in op), None)
    rows = []
    t = 0.0
    for step in range(steps):
        seq = [rng.uniform(0.7, 1.6) for _ in range(dp)]
        slow_now = slow_share >= 1.0 or rng.random() < slow_share
        extra_wait = 0.0
        for stage in range(stages):
            for d in range(dp):
                rank = stage * dp + d
                node = f"gpu{rank // 2 + 1:04d}"
                gpus = "0-3" if rank % 2 == 0 else "4-7"
                clock = t
                for op, base in ops:
                    dur = base * rng.lognormvariate(0, noise)
                    if op in compute and hiccup_every and step % hiccup_every == hiccup_every - 1:
                        dur *= 3
                    if op in compute:
                        if case == "slow_worker" and (d, stage) == slow and slow_now:
                            dur *= factor
                            extra_wait = max(extra_wait, base * (factor - 1))
                        elif case == "slow_stage" and stage == stages - 1:
                            dur *= 1.5
                        elif case == "data":
                            dur *= seq[d]
                    elif op == "optimizer" and case == "op_offset" and rank in offset_ranks:
                        dur *= offset
                    elif op == reduce_op and case == "slow_worker" and (d, stage) != slow \
                            and stage == slow[1] and slow_now:
                        dur += 3 * 0.10 * (factor - 1)  # waiting for the slow replica's forward and backward
                    rows.append({"rank": rank, "dp": d, "stage": stage, "step": step, "op": op,
                                 "start": round(clock, 6), "duration": round(dur, 6), "node": node, "gpus": gpus})
                    clock += dur
        t += 1.0 + extra_wait
    return rows
