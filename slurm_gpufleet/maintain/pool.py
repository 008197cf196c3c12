"""Independent simulation runs side by side: the strategies' replays and the gate's seeds
(`maintain simulate --jobs N`), with progress on stderr for a run that takes more than a few seconds;
or, for sweeps that outgrow one machine, the seeds as one Slurm job array (`--slurm-array PARTITION`):
each task runs one call and writes its JSON, and the command waits and merges them in order.

    python -m slurm_gpufleet.maintain.pool DIR INDEX    (what each array task runs)"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import TypeVar

T = TypeVar("T")


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def in_pool(calls: list[Callable[[], T]], jobs: int, progress: Callable[[int, int, str], None] | None = None,
            what: str = "runs") -> list[T]:
    """Each call's result, in the calls' order.  `jobs` processes at most; one job, or one call, runs
    here.  Processes are forked: each starts with the history and the engine already loaded."""
    total = len(calls)
    say = progress or (lambda *_: None)
    if jobs <= 1 or total <= 1:
        out = []
        for call in calls:
            out.append(call())
            say(len(out), total, what)
        return out
    with ProcessPoolExecutor(max_workers=min(jobs, total), mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(call) for call in calls]
        for n, _ in enumerate(as_completed(futures), 1):
            say(n, total, what)
        return [f.result() for f in futures]


ARRAY_DONE = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                        "BOOT_FAIL", "DEADLINE"})


SHOW_GRACE_S = 60.0


class ArrayError(Exception):
    """A job array that could not be submitted or whose tasks left no result."""


def in_slurm_array(calls: list[Callable[[], T]], partition: str, actuator, reader, workdir: str,
                   progress: Callable[[int, int, str], None] | None = None, what: str = "runs",
                   poll_s: float = 2.0, clock=time.monotonic, sleep=time.sleep) -> list[T]:
    """Each call's result, in order, from one Slurm job array on `partition`: the calls are written to a
    private directory under `workdir` (which the partition's nodes must see: a shared file system),
    `actuator` submits the array, and `reader`'s one `squeue` per poll says when every task ended.  The
    results are JSON.  A task that left none is named with its log; the directory is removed only when
    every task gave its result."""
    total = len(calls)
    say = progress or (lambda *_: None)
    folder = tempfile.mkdtemp(prefix=".gpufleet-array-", dir=workdir)  # mode 0700, ours
    with open(os.path.join(folder, "calls.pkl"), "wb") as fh:
        pickle.dump(calls, fh)
    name = f"gpufleet-{os.path.basename(folder).removeprefix('.gpufleet-array-')}"
    command = f"{sys.executable} -m slurm_gpufleet.maintain.pool {folder} $SLURM_ARRAY_TASK_ID"
    try:
        job = actuator.submit_array(name, partition, total, command, os.path.join(folder, "%a.log"), workdir)
    except Exception as exc:  # SlurmError: sbatch refused (no such partition, ...)
        _remove(folder)
        raise ArrayError(f"the job array on {partition} was not submitted: {exc}") from None
    start = clock()
    seen = False
    while True:
        states = [state for _, state, _ in reader.jobs_named(name)]
        seen = seen or bool(states)
        finished = sum(1 for i in range(total) if os.path.exists(os.path.join(folder, f"{i}.json")))
        say(finished, total, f"{what} (job array {job})")
        # every task ended; or squeue shows them no more (MinJobAge) after it did, or every result is in;
        # an array never shown at all is given SHOW_GRACE_S to appear before its results are judged
        if all(s in ARRAY_DONE for s in states) and (states or seen or finished == total
                                                     or clock() - start > SHOW_GRACE_S):
            break
        sleep(poll_s)
    out = []
    for i in range(total):
        path = os.path.join(folder, f"{i}.json")
        try:
            with open(path) as fh:
                out.append(json.load(fh))
        except (OSError, ValueError):
            raise ArrayError(f"task {i} of job array {job} left no result after {clock() - start:.0f} s: see "
                             f"{os.path.join(folder, f'{i}.log')}") from None
    _remove(folder)
    return out


def _remove(folder: str) -> None:
    for entry in os.listdir(folder):
        os.unlink(os.path.join(folder, entry))
    os.rmdir(folder)


def run_task(folder: str, index: int) -> None:
    """One array task: the call at `index`, its result written as JSON (atomically).  The calls are read
    only from a directory of this user's that no one else can write (the one `in_slurm_array` made)."""
    st = os.stat(folder)
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise SystemExit(f"{folder}: not a private directory of this user's: its calls are not read")
    with open(os.path.join(folder, "calls.pkl"), "rb") as fh:
        calls = pickle.load(fh)  # noqa: S301 - written by this user, in a directory only it can write
    result = calls[index]()
    from ..common.safefile import write_file

    write_file(os.path.join(folder, f"{index}.json"), json.dumps(result), mode=0o600)


if __name__ == "__main__":
    run_task(sys.argv[1], int(sys.argv[2]))
