"""Put on PYTHONPATH by tests/test_actuator_only.py: every call into a write of Slurm's command backend
(slurm/commands.py) is logged, with the file that made it, to $GPUFLEET_WRITE_AUDIT (JSON lines).
Observes; changes nothing."""

import json
import os
import sys
import threading

_LOG = os.environ.get("GPUFLEET_WRITE_AUDIT")
_WRITES = frozenset(os.environ.get("GPUFLEET_WRITE_NAMES", "").split())


def _profile(frame, event, arg):
    if event != "call" or frame.f_code.co_name not in _WRITES:
        return
    if not frame.f_code.co_filename.endswith(os.path.join("slurm", "commands.py")):
        return
    caller = frame.f_back
    with open(_LOG, "a") as fh:
        fh.write(json.dumps([frame.f_code.co_name, caller.f_code.co_filename, caller.f_lineno]) + "\n")


if _LOG:
    sys.setprofile(_profile)
    threading.setprofile(_profile)
