"""Job history in the shape of `sacct --parsable2 -o JobIDRaw,User,Submit,Start,End,Elapsed,NNodes,AllocTRES,State[,Timelimit]`.

Every line is either a job or a counted reason for leaving it out; nothing raises past `read_sacct`.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import Counter
from dataclasses import dataclass, field

REQUIRED = ("JobIDRaw", "Submit", "NNodes", "AllocTRES")
_STEP = re.compile(r"^\d+(_\d+|_\[[^\]]*\])?\.(\d+|batch|extern|interactive)$")
_JOBID = re.compile(r"^\d+(_\d+)?$")
_GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")


class SacctError(ValueError):
    pass


@dataclass
class TraceJob:
    job_id: str
    submit: float            # seconds from the trace's first submission
    run_s: float             # what the workload ran (End - Start, or Elapsed)
    nodes: int
    gpus: int                # GPUs in all
    time_limit_s: float | None  # None: not in the history (an assumption fills it in)


@dataclass
class Trace:
    jobs: list[TraceJob]
    lines: int = 0
    skipped: Counter = field(default_factory=Counter)
    start: dt.datetime | None = None
    has_time_limits: bool = False   # at least one job has a finite time limit in the history
    limits_known: int = 0           # jobs whose time limit the history gives


def _time(text: str) -> dt.datetime | None:
    text = text.strip()
    if not text or text in ("Unknown", "None", "N/A", "(null)"):
        return None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    # Slurm prints local time without an offset; a SLURM_TIME_FORMAT with %z gives one.  Both become
    # local naive time, so the two kinds can be subtracted in one trace.
    return when.astimezone().replace(tzinfo=None) if when.tzinfo is not None else when


def duration_s(text: str) -> float | None:
    """Slurm durations: '1-02:03:04', '02:03:04', '03:04', '45', 'UNLIMITED'/'Partition_Limit' -> None."""
    text = text.strip()
    if not text or text.upper() in ("UNLIMITED", "PARTITION_LIMIT", "INVALID", "NONE", "UNKNOWN"):
        return None
    days = 0
    if "-" in text:
        d, _, text = text.partition("-")
        if not d.isdecimal():
            raise ValueError(text)
        days = int(d)
    parts = text.split(":")
    if not all(p.replace(".", "", 1).isdecimal() for p in parts) or len(parts) > 3:
        raise ValueError(text)
    nums = [float(p) for p in parts]
    if len(nums) == 1:  # sacct prints plain minutes for limits, seconds never appear alone
        secs = nums[0] * 60
    elif len(nums) == 2:
        secs = nums[0] * 60 + nums[1]
    else:
        secs = nums[0] * 3600 + nums[1] * 60 + nums[2]
    return days * 86400 + secs


def read_sacct(lines, *, gpus_only: bool = True) -> Trace:
    lines = iter(lines)
    try:
        header = next(lines).rstrip("\n").split("|")
    except StopIteration:
        raise SacctError("empty file: no sacct header") from None
    index = {name.strip(): i for i, name in enumerate(header)}
    missing = [c for c in REQUIRED if c not in index]
    if missing:
        raise SacctError(f"sacct header lacks {', '.join(missing)} (need --parsable2 -o "
                         "JobIDRaw,Submit,Start,End,Elapsed,NNodes,AllocTRES,...)")
    if "Elapsed" not in index and not ("Start" in index and "End" in index):
        raise SacctError("sacct header needs Elapsed, or Start and End, for run times")
    trace = Trace(jobs=[], has_time_limits="Timelimit" in index)
    first: dt.datetime | None = None
    raw: list[tuple[str, dt.datetime, float, int, int, float | None]] = []
    for line in lines:
        trace.lines += 1
        line = line.rstrip("\n")
        if not line.strip():
            trace.skipped["empty line"] += 1
            continue
        cols = line.split("|")
        if len(cols) < len(header):
            trace.skipped["too few columns"] += 1
            continue

        def col(name: str, cols: list[str] = cols) -> str:
            return cols[index[name]].strip() if name in index else ""

        job_id = col("JobIDRaw")
        if _STEP.match(job_id):
            trace.skipped["job step (123.batch, 123.0)"] += 1
            continue
        if not _JOBID.match(job_id):
            trace.skipped["unreadable job id"] += 1
            continue
        submit = _time(col("Submit"))
        if submit is None:
            trace.skipped["no submit time"] += 1
            continue
        run: float | None = None
        start, end = _time(col("Start")), _time(col("End"))
        if start and end:
            run = (end - start).total_seconds()
        elif "Elapsed" in index:
            try:
                run = duration_s(col("Elapsed"))
            except ValueError:
                run = None
        if run is None or run < 0:
            trace.skipped["no run time (Unknown start/end)"] += 1
            continue
        try:
            nnodes = int(col("NNodes") or "1")
        except ValueError:
            trace.skipped["unreadable NNodes"] += 1
            continue
        m = _GPU_TRES.search(col("AllocTRES"))
        gpus = int(m.group(1)) if m else 0
        if gpus_only and gpus == 0:
            trace.skipped["no GPUs in AllocTRES"] += 1
            continue
        limit = None
        if "Timelimit" in index:
            try:
                limit = duration_s(col("Timelimit"))
            except ValueError:
                trace.skipped["unreadable Timelimit (kept, assumed)"] += 1
        first = submit if first is None or submit < first else first
        raw.append((job_id, submit, run, max(1, nnodes), gpus, limit))
    if not raw:
        raise SacctError(f"no usable job in {trace.lines} line(s): {dict(trace.skipped)}")
    trace.start = first
    trace.jobs = [TraceJob(j, (s - first).total_seconds(), r, nn, g, lim) for j, s, r, nn, g, lim in raw]
    trace.jobs.sort(key=lambda j: j.submit)
    # a Timelimit column that is empty or UNLIMITED everywhere says nothing: the limits are assumed
    trace.limits_known = sum(1 for j in trace.jobs if j.time_limit_s is not None)
    trace.has_time_limits = trace.limits_known > 0
    return trace


def assume_limit(run_s: float, how: str) -> float:
    """The time limit a job would have had, for histories without one (named option, always printed)."""
    if how == "runtime-ceil-hour":
        return max(3600.0, math.ceil(run_s / 3600) * 3600)
    if how.startswith("factor:"):
        return max(run_s * float(how.split(":", 1)[1]), 60.0)
    if how.startswith("partition:"):
        return duration_s(how.split(":", 1)[1]) or float("inf")
    raise ValueError(f"unknown time-limit assumption {how!r}")
