"""A whole-run time limit that holds even when a C call (a hung NVML, a blocking read) never returns.

A signal handler only runs between Python bytecodes, so it cannot interrupt a stuck libnvidia-ml
call; a daemon timer thread that calls os._exit can.  `before_exit` (e.g. draining the node) gets the
same time again at most, then the process ends regardless.

A thread needs the interpreter to run, and a C call that holds it (a pattern matched over a huge input)
would hold the timer too: a backstop process, forked before the timer starts, kills the run with
SIGKILL once the timer and its `before_exit` have both had their time and a margin more, unless the run
cancelled it or ended first (its end closes the pipe the backstop waits on).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

_current: threading.Timer | None = None
_backstop: tuple[int, int] | None = None   # (the backstop's pid, the pipe end whose close releases it)
BACKSTOP_MARGIN_S = 5.0


def start(seconds: float, message: str, code: int, before_exit: Callable[[], None] | None = None
          ) -> threading.Timer | None:
    global _current
    if seconds <= 0:
        return None

    def fire() -> None:
        try:
            sys.stderr.write(f"slurm-gpufleet: {message} (timed out after {seconds:g} s)\n")
            sys.stderr.flush()
            if before_exit is not None:
                backstop = threading.Timer(seconds, lambda: os._exit(code))
                backstop.daemon = True
                backstop.start()
                before_exit()
        finally:
            os._exit(code)

    _start_backstop(2 * seconds + BACKSTOP_MARGIN_S)
    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    _current = timer
    return timer


def _start_backstop(after_s: float) -> None:
    global _backstop
    _stop_backstop()
    parent = os.getpid()
    try:
        r, w = os.pipe()
        pid = os.fork()
    except OSError:
        return   # no process to spare: the timer thread alone, as before
    if pid == 0:   # the backstop: only os calls, then out
        try:
            os.close(w)
            import select
            import signal

            ready, _, _ = select.select([r], [], [], after_s)
            if not ready:
                os.kill(parent, signal.SIGKILL)
        finally:
            os._exit(0)
    os.close(r)
    _backstop = (pid, w)


def _stop_backstop() -> None:
    global _backstop
    if _backstop is not None:
        pid, w = _backstop
        _backstop = None
        os.close(w)
        try:
            os.waitpid(pid, 0)   # it ends as soon as its pipe closes
        except ChildProcessError:
            pass


def cancel() -> None:
    global _current
    if _current is not None:
        _current.cancel()
        _current = None
    _stop_backstop()
