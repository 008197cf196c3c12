"""Independent simulation runs side by side: the strategies' replays and the gate's seeds
(`maintain simulate --jobs N`), with progress on stderr for a run that takes more than a few seconds."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import TypeVar

T = TypeVar("T")


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class Progress:
    """Counts finished runs; says so on stderr once a run has gone on for `quiet_s`: a bar redrawn in
    place on a terminal, otherwise a line every `every_s` (a log, a CI job)."""

    def __init__(self, stream=None, quiet_s: float = 3.0, every_s: float = 10.0, clock=time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet_s, self.every_s, self.clock = quiet_s, every_s, clock
        self.start = clock()
        self.said_at: float | None = None
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def __call__(self, done: int, total: int, what: str) -> None:
        now = self.clock()
        elapsed = now - self.start
        if elapsed < self.quiet_s and done < total:
            return
        if self.said_at is None and done == total and elapsed < self.quiet_s:
            return  # quick: nothing to say
        if self.tty:
            width = 30
            filled = int(width * done / total) if total else width
            self.stream.write(f"\r{what}: [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {elapsed:.0f} s"
                              + ("\n" if done == total else ""))
        elif self.said_at is None or now - self.said_at >= self.every_s or done == total:
            self.stream.write(f"{what}: {done}/{total} done, {elapsed:.0f} s\n")
        else:
            return
        self.said_at = now
        self.stream.flush()


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
