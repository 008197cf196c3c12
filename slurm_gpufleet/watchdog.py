"""A whole-run time limit that holds even when a C call (a hung NVML, a blocking read) never returns.

A signal handler only runs between Python bytecodes, so it cannot interrupt a stuck libnvidia-ml
call; a daemon timer thread that calls os._exit can.  `before_exit` (e.g. draining the node) gets the
same time again at most, then the process ends regardless.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

_current: threading.Timer | None = None


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

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    _current = timer
    return timer


def cancel() -> None:
    global _current
    if _current is not None:
        _current.cancel()
        _current = None
