"""Where the site's upgrade commands run: at most N at once, each with its own timeout.  The engine only
starts commands and collects results; the simulator supplies an executor driven by its clock."""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from .upgrade import CommandResult, run


class Executor(Protocol):
    def start(self, node: str, script: str, timeout_s: float) -> None: ...

    def running(self) -> set[str]: ...

    def finished(self) -> dict[str, CommandResult]: ...


class PoolExecutor:
    """A bounded thread pool, each command in its own process group with its own timeout."""

    def __init__(self, workers: int, run_dir: str | None = None):
        """run_dir: where each node's upgrade lock lives (`<node>.lock`, held while its command runs)."""
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="gpufleet-upgrade")
        self.futures: dict[str, Future] = {}
        self.run_dir = run_dir

    def start(self, node: str, script: str, timeout_s: float) -> None:
        lock_file = os.path.join(self.run_dir, f"{node}.lock") if self.run_dir else None
        self.futures[node] = self.pool.submit(run, script, timeout_s, lock_file)

    def running(self) -> set[str]:
        return set(self.futures)

    def finished(self) -> dict[str, CommandResult]:
        done = {n: f for n, f in self.futures.items() if f.done()}
        for n in done:
            del self.futures[n]
        out = {}
        for n, f in done.items():
            try:
                out[n] = f.result()
            except Exception as exc:  # the command could not even start
                out[n] = CommandResult(False, -1, f"{type(exc).__name__}: {exc}")
        return out

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True)
