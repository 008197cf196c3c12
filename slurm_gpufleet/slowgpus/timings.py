"""The slow worker of a training job, from the job's own per-rank timings (Megatron's timers, PyTorch's
profiler, NVIDIA's resiliency extension): `fleet stragglers --timings FILE`.  Pure: rows in, flags out.

Each worker is compared only with the workers that do the same work: the same pipeline stage and the same
operation, in the same step, across data-parallel replicas.  So

* a worker over its peers' median in a share of steps that chance would not give (a binomial tail under
  `Settings.false_flag` for the whole operation) and slower than they are by `min_effect` is flagged,
  naming its rank, node and GPUs: 1.3x at 15 % step noise and 1.15x at 5 % are found within 40 steps, and
  more steps find less (a worker slowest in only 73 % of its slow steps was called data before);
* a stage slower in every replica (pipeline stages of unequal cost) is compared only with itself and flags
  nothing: it is reported as a job-wide slowdown of kind `pipeline_stage`;
* a slowdown that moves from worker to worker with the data (sequences of unequal length) never holds for
  one worker over many steps and flags nothing: reported as kind `data`;
* a worker slow in a share of its steps only (a GPU that throttles now and then) is flagged where it is
  clearly slow (`slower` over its peers' median) in at least `intermittent_share` of its steps, far more
  often than its peers are (a binomial tail under `false_flag` against the peers' own rate of such steps);
* a slow GPU is slow where the GPU works: in its compute operations, forward and backward alike.  A worker
  apart in one operation alone while its other compute operations keep pace (optimizer shards of unequal
  size on a fixed set of ranks) is the work's split, not its GPU: reported as kind `one_operation`, never
  flagged.  A worker apart in an operation is flagged where it is slower than its peers (by `min_effect`)
  in more than half of the compute operations it is judged in (both, where the job times two).

Communication operations (all-reduce, reduce-scatter, all-gather, send/recv, barriers) are never judged:
a rank that waits for a slow peer spends longer in them, so there the fast ranks look slow.  That is the
same trap as NVML's utilisation under NCCL's spinning kernels, and the reason this reads compute times.
ByteDance's straggler study and Minder compare workers of one job the same way.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..common.stats import binomial_upper_tail

COLUMNS = ("rank", "dp", "stage", "step", "op", "start", "duration", "node", "gpus")
# words of an operation's name that make it communication (its time includes waiting for the slowest peer)
COMM_WORDS = ("reduce", "gather", "all-to-all", "alltoall", "all_to_all", "broadcast", "send", "recv", "comm",
              "nccl", "barrier", "wait", "sync", "p2p")


@dataclass(frozen=True)
class Row:
    rank: str
    dp: int
    stage: int
    step: int
    op: str
    start: float
    duration: float
    node: str
    gpus: str


@dataclass
class Settings:
    min_peers: int = 3          # workers doing the same work in a step, the worker included
    min_steps: int = 10         # steps a worker is judged over before it may be flagged
    # A worker is a straggler when it is over its peers' median in a share of steps no chance would give
    # (a binomial tail under `false_flag` over all the workers of an operation: each step's ranks are
    # independent draws, so a healthy worker is over the median in half its steps), and its time is at
    # least `min_effect` over theirs (median over its steps): step noise lowers the share, never the rule.
    false_flag: float = 1e-4    # the chance that a healthy job's operation flags any worker
    min_effect: float = 0.05
    # the data note: the workers' times in a step spread wider than step noise spreads them (their
    # coefficient of variation, median over the steps; 15 % lognormal noise gives 0.15, sequences of
    # 0.7-1.6x the mean cost 0.23 more), and no worker is the slowest in most steps
    data_spread: float = 0.20
    slower: float = 0.20        # a step "has a slow worker" at this much over the peers' median (said in the note)
    consistent: float = 0.80    # the data note needs no worker slowest in this share of those steps
    stage_slower: float = 0.20  # a stage this much over the others' median is a pipeline-stage slowdown
    intermittent_share: float = 0.20   # the least share of its steps an intermittent straggler is slow in
    # a worker apart in one operation is a slow GPU where its other compute operations back it: slower there
    # too by `min_effect`, over the peers' median in more steps than this chance gives
    support: float = 0.05


@dataclass
class TimingFlag:
    rank: str
    node: str
    gpus: str
    op: str
    stage: int
    times_slower: float         # the median, over its steps (its slow steps where intermittent), of its time
                                # over its peers' median
    steps_slower: int           # the steps it was over its peers' median (clearly slow, where intermittent)
    steps: int
    kind: str = "steady"        # steady | intermittent

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Result:
    flags: list[TimingFlag] = field(default_factory=list)
    job_wide: list[dict] = field(default_factory=list)
    rows: int = 0
    skipped: list[str] = field(default_factory=list)   # "line N: why"
    not_judged: list[str] = field(default_factory=list)  # operations left out, and why

    def to_dict(self) -> dict:
        return {"flags": [f.to_dict() for f in self.flags], "job_wide": self.job_wide, "rows": self.rows,
                "skipped": len(self.skipped), "not_judged": self.not_judged}


class TimingsError(ValueError):
    """The file is not a timings file at all (no header, no rows): one line for the CLI."""


def is_communication(op: str) -> bool:
    low = op.lower()
    return any(w in low for w in COMM_WORDS)


def parse(text: str) -> tuple[list[Row], list[str]]:
    """CSV (a header naming the columns) or JSON Lines (one object a row).  Returns the rows and, for each
    line that is not a row, "line N: why"."""
    lines = text.splitlines()
    first = next((ln for ln in lines if ln.strip()), "")
    if not first:
        raise TimingsError("no rows")
    if first.lstrip().startswith("{"):
        records = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError:
                records.append((number, None))
                continue
            records.append((number, value if isinstance(value, dict) else None))
    else:
        reader = csv.DictReader(io.StringIO(text))
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise TimingsError(f"a CSV header naming {', '.join(COLUMNS)} is needed; missing {', '.join(missing)}")
        records = [(reader.line_num, rec) for rec in reader]
    rows: list[Row] = []
    bad: list[str] = []
    for number, rec in records:
        row = _row(rec)
        if isinstance(row, Row):
            rows.append(row)
        else:
            bad.append(f"line {number}: {row}")
    return rows, bad


def _row(rec: dict | None) -> Row | str:
    if rec is None:
        return "not a JSON object"
    missing = [c for c in COLUMNS if rec.get(c) in (None, "")]
    if missing:
        return f"missing {', '.join(missing)}"
    try:
        dp, stage, step = (_int(rec[k]) for k in ("dp", "stage", "step"))
        start, duration = float(rec["start"]), float(rec["duration"])
    except (TypeError, ValueError, OverflowError) as exc:   # OverflowError: an int of hundreds of digits
        return f"not a number: {exc}"[:120]
    if not (math.isfinite(start) and math.isfinite(duration)) or duration < 0:
        return "start and duration must be finite, the duration not negative"
    return Row(str(rec["rank"]), dp, stage, step, str(rec["op"]), start, duration, str(rec["node"]),
               str(rec["gpus"]))


def _int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{value!r}")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return int(str(value))


def judge(rows: Iterable[Row], s: Settings | None = None) -> Result:
    s = s or Settings()
    out = Result()
    # (stage, op) -> step -> rank -> total time (an op timed several times in a step counts as its sum)
    cells: dict[tuple[int, str], dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    where: dict[str, tuple[str, str]] = {}
    for r in rows:
        out.rows += 1
        per_rank = cells[(r.stage, r.op)][r.step]
        per_rank[r.rank] = per_rank.get(r.rank, 0.0) + r.duration
        where[r.rank] = (r.node, r.gpus)
    comm = sorted({op for _, op in cells if is_communication(op)})
    if comm:
        out.not_judged.append(f"{', '.join(comm)}: communication, whose time includes waiting for the slowest peer")
    candidates: list[TimingFlag] = []
    # rank -> each compute operation it was judged in -> whether it is slower there than its peers
    slower_in: dict[str, dict[str, bool]] = defaultdict(dict)
    for (stage, op), steps in sorted(cells.items()):
        if is_communication(op):
            continue
        cell = _judge_cell(stage, op, steps, where, s, out)
        if cell is None:
            continue
        flagged, slower = cell
        candidates += flagged
        for rank, is_slower in slower.items():
            slower_in[rank][op] = is_slower
    for f in candidates:
        slower_in[f.rank][f.op] = True
    out.flags, split = _where_the_gpu_works(candidates, slower_in)
    out.job_wide += split
    out.job_wide += _stage_slowdowns(cells, s)
    return out


def _judge_cell(stage: int, op: str, steps: dict[int, dict[str, float]], where: dict[str, tuple[str, str]],
                s: Settings, out: Result) -> tuple[list[TimingFlag], dict[str, bool]] | None:
    """One operation of one stage: each worker against its peers, step by step.  Returns the workers apart
    (steady or intermittent) and, for each judged worker, whether it is slower than its peers here at all
    (by `min_effect`, over their median in more steps than `support` leaves to chance: evidence that backs
    a flag of another operation, too weak for one of its own); None where no step had peers enough."""
    ratios: dict[str, list[float]] = defaultdict(list)
    step_medians: list[float] = []
    spreads: list[float] = []
    slowest: list[str] = []   # the slowest worker of each step that has one clearly slow
    for _, per_rank in sorted(steps.items()):
        if len(per_rank) < s.min_peers:
            continue
        med = statistics.median(per_rank.values())
        if med <= 0:
            continue
        step_medians.append(med)
        spreads.append(statistics.pstdev(per_rank.values()) / statistics.fmean(per_rank.values()))
        for rank, t in per_rank.items():
            ratios[rank].append(t / med)
        top = max(per_rank, key=lambda k: per_rank[k])
        if per_rank[top] >= med * (1 + s.slower):
            slowest.append(top)
    if not step_medians:
        if steps:
            out.not_judged.append(f"stage {stage} {op}: fewer than {s.min_peers} workers a step")
        return None
    alpha = s.false_flag / max(1, len(ratios))
    # how often a worker of this operation is clearly slow in a step: each worker's rate is judged against
    # its peers' (a Laplace estimate, so that peers never slow still leave chance its due)
    clear = {rank: sum(1 for x in rs if x >= 1 + s.slower) for rank, rs in ratios.items()}
    total_clear, total_obs = sum(clear.values()), sum(len(rs) for rs in ratios.values())
    flagged = []
    for rank, rs in sorted(ratios.items()):
        if len(rs) < s.min_steps:
            continue
        node, gpus = where[rank]
        over = sum(1 for x in rs if x > 1.0)
        effect = statistics.median(rs)
        if effect >= 1 + s.min_effect and binomial_upper_tail(over, len(rs), 0.5) < alpha:
            flagged.append(TimingFlag(rank, node, gpus, op, stage, round(effect, 3), over, len(rs)))
            continue
        base = (total_clear - clear[rank] + 1) / (total_obs - len(rs) + 2)
        if clear[rank] >= s.intermittent_share * len(rs) and binomial_upper_tail(clear[rank], len(rs), base) < alpha:
            slow = statistics.median(x for x in rs if x >= 1 + s.slower)
            flagged.append(TimingFlag(rank, node, gpus, op, stage, round(slow, 3), clear[rank], len(rs),
                                      "intermittent"))
    if not flagged and len(step_medians) >= s.min_steps and statistics.median(spreads) >= s.data_spread:
        # the workers spread wider than noise does, but no one of them stays apart: the data's cost
        top = max(slowest.count(r) for r in set(slowest)) / len(slowest) if slowest else 0.0
        if top < s.consistent:
            out.job_wide.append({"kind": "data", "stage": stage, "op": op,
                                 "spread": round(statistics.median(spreads), 3),
                                 "steps_with_a_slow_worker": round(len(slowest) / len(step_medians), 3),
                                 "most_often_slowest": round(top, 3),
                                 "why": "a slow worker in most steps, a different one from step to step: the "
                                        "work's cost moves with the data, no worker is apart"})
    return flagged, {rank: statistics.median(rs) >= 1 + s.min_effect
                     and binomial_upper_tail(sum(1 for x in rs if x > 1.0), len(rs), 0.5) < s.support
                     for rank, rs in ratios.items() if len(rs) >= s.min_steps}


def _where_the_gpu_works(candidates: list[TimingFlag], slower_in: dict[str, dict[str, bool]]
                         ) -> tuple[list[TimingFlag], list[dict]]:
    """A slow GPU slows every compute operation of its worker: a worker apart in an operation is flagged
    where it is slower than its peers (apart, or backed: `support`) in more than half of the compute
    operations it was judged in; one that keeps pace in the others (one operation's steady offset on a fixed
    set of ranks: optimizer shards of unequal size) is the work's split, said once per operation."""
    flags, split = [], defaultdict(list)
    for f in candidates:
        ops = slower_in[f.rank]
        if sum(ops.values()) * 2 > len(ops):
            flags.append(f)
        else:
            split[(f.stage, f.op)].append(f)
    job_wide = [{"kind": "one_operation", "stage": stage, "op": op, "ranks": sorted({f.rank for f in fs}),
                 "times": round(statistics.median(f.times_slower for f in fs), 3),
                 "why": "these workers are apart in this operation alone; their other compute operations keep "
                        "pace: the work's split (shards of unequal size), not a slow GPU"}
                for (stage, op), fs in sorted(split.items())]
    return flags, job_wide


def _stage_slowdowns(cells: dict[tuple[int, str], dict[int, dict[str, float]]], s: Settings) -> list[dict]:
    """Stages slower than the job's other stages at the same operation, in every replica."""
    by_op: dict[str, dict[int, float]] = defaultdict(dict)
    for (stage, op), steps in cells.items():
        if is_communication(op):
            continue
        times = [t for per_rank in steps.values() for t in per_rank.values()]
        if times:
            by_op[op][stage] = statistics.median(times)
    found = []
    for op, stages in sorted(by_op.items()):
        if len(stages) < 2:
            continue
        for stage, t in sorted(stages.items()):
            others = [v for k, v in stages.items() if k != stage]
            base = statistics.median(others)
            if base > 0 and t >= base * (1 + s.stage_slower):
                found.append({"kind": "pipeline_stage", "stage": stage, "op": op, "times": round(t / base, 3),
                              "why": "every replica of this stage is slower: the stages' cost differs, no worker "
                                     "is apart"})
    return found


def as_instep_flags(result: Result, job: str, t: float) -> list:
    """The flags as the in-job detector's (instep.Flag, signature `slow_timings`), one a node, so that they
    take the telemetry flags' path: the lemon record and its ladder (`fleet lemons --timings`)."""
    from .instep import Flag

    by_node: dict[str, list[TimingFlag]] = defaultdict(list)
    for f in result.flags:
        by_node[f.node].append(f)
    out = []
    for node, flags in sorted(by_node.items()):
        gpus = {f.gpus for f in flags}
        only = next(iter(gpus)) if len(gpus) == 1 else ""
        out.append(Flag(job, node, int(only) if only.isdecimal() else None, t, "slow_timings",
                        {"ranks": sorted({f.rank for f in flags}), "gpus": sorted(gpus),
                         "ops": sorted({f.op for f in flags}), "times_slower": max(f.times_slower for f in flags),
                         "steps": max(f.steps for f in flags)}, t))
    return out


def read_file(path: str) -> tuple[list[Row], list[str]]:
    """The rows of a timings file ("-": standard input); OSError or TimingsError where it cannot be read."""
    import sys

    from ..common.shapes import MAX_DOCUMENT_BYTES

    if path == "-":
        text = sys.stdin.read(MAX_DOCUMENT_BYTES + 1)
    else:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(MAX_DOCUMENT_BYTES + 1)
    if len(text) > MAX_DOCUMENT_BYTES:
        raise TimingsError(f"{path}: larger than {MAX_DOCUMENT_BYTES >> 20} MiB: not read")
    return parse(text)
