"""How far long work is, said on stderr: one bar redrawn in place on a terminal, plain lines elsewhere (a
log, a CI job).  The simulators' pools and `maintain apply` both say it through this one class."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

BAR_WIDTH = 30
LINE_WIDTH = 160  # a terminal line redrawn in place: longer would wrap and leave its tail behind


class Progress:
    """`quiet_s`: nothing is said before a run has gone on this long (a quick run says nothing at all);
    `every_s`: off a terminal, counted progress is a line at most this often, and always its last."""

    def __init__(self, stream: Any = None, quiet_s: float = 3.0, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet_s, self.every_s, self.clock = quiet_s, every_s, clock
        self.start = clock()
        self.last = self.start  # when something was last said: a quiet apply says what it waits for
        self.said_at: float | None = None
        self.open = False  # a terminal's bar without its line end yet
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    @staticmethod
    def bar(done: int, total: int) -> str:
        filled = int(BAR_WIDTH * done / total) if total else BAR_WIDTH
        return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"

    def __call__(self, done: int, total: int, what: str) -> None:
        """`done` of `total` runs finished (the pool's callback)."""
        now = self.clock()
        elapsed = now - self.start
        if elapsed < self.quiet_s and (done < total or self.said_at is None):
            return
        if self.tty:
            self._write(f"\r{what}: {self.bar(done, total)} {done}/{total} {elapsed:.0f} s"
                        + ("\n" if done == total else ""), now)
        elif self.said_at is None or now - self.said_at >= self.every_s or done == total:
            self._write(f"{what}: {done}/{total} done, {elapsed:.0f} s\n", now)

    def event(self, done: int, total: int, summary: str, latest: str, line: str) -> None:
        """Something happened: on a terminal the bar with `summary` and the `latest` event, redrawn;
        elsewhere `line` with the summary, timestamped, every time."""
        if self.tty:
            self._write(f"\r{self.bar(done, total)} {done}/{total} {summary} | {latest}"[:LINE_WIDTH]
                        .ljust(LINE_WIDTH), self.clock())
        else:
            self._write(f"{time.strftime('%H:%M:%S')} {line} ({summary})\n", self.clock())

    def say(self, text: str) -> None:
        """A line of its own (a terminal's bar goes on below it)."""
        self._write(("\n" if self.tty else "") + f"{time.strftime('%H:%M:%S')} {text}\n", self.clock())

    def close(self) -> None:
        """Ends a bar left open, so that what is printed next starts a line of its own."""
        if self.open:
            self.stream.write("\n")
            self.stream.flush()
            self.open = False

    def _write(self, text: str, now: float) -> None:
        self.stream.write(text)
        self.stream.flush()
        self.said_at = self.last = now
        self.open = self.tty and not text.endswith("\n")
