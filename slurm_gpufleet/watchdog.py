"""A whole-run time limit that holds even when a C call (a hung NVML) never returns.

A signal handler only runs between Python bytecodes, so it cannot interrupt a stuck libnvidia-ml
call; a daemon timer thread that calls os._exit can.
"""

from __future__ import annotations

import os
import sys
import threading


def start(seconds: float, message: str, code: int) -> threading.Timer | None:
    if seconds <= 0:
        return None

    def fire() -> None:
        try:
            sys.stderr.write(f"slurm-gpufleet: {message} (timed out after {seconds:g} s)\n")
            sys.stderr.flush()
        finally:
            os._exit(code)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer
