"""A pynvml-compatible NVML for nodes without GPUs: the mini-cluster puts this directory on the node
interpreter's PYTHONPATH, so `import pynvml` in the health check, prolog and epilog finds it instead of
nvidia-ml-py, and the live NVML reader runs unchanged.

Each node answers from its own recorded NVML session, `$GPUFLEET_FAKE_NVML_DIR/<node>.json` (built by
tests/slurm/gpustate.py from the real H200 capture; faults are edits to it).  The node is
SLURMD_NODENAME, which slurmd sets for every program it runs, else the host name.  The file is read at
nvmlInit, as a real driver's state is read at init: a fault written between two runs is seen by the
next.  A node without a file has no driver (NVML_ERROR_DRIVER_NOT_LOADED); a file that cannot be read
(a FIFO nobody writes) blocks in nvmlInit like a wedged driver.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from slurm_gpufleet.readers.nvml_replay import FabricInfoV3, NvmlReplay, ReplayError

NVMLError = ReplayError
# the struct nvidia-ml-py defines for nvmlDeviceGetGpuFabricInfoV, laid out the same
c_nvmlGpuFabricInfo_v3_t = FabricInfoV3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_UNINITIALIZED = 1

_session: NvmlReplay | None = None
_loaded: tuple[str, int] | None = None  # the state file and its mtime as read


def _state_path() -> str:
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    return os.path.join(os.environ.get("GPUFLEET_FAKE_NVML_DIR", "/nonexistent"), f"{node}.json")


def nvmlInit() -> None:
    global _session
    try:
        with open(_state_path(), encoding="utf-8") as fh:
            probe: dict[str, Any] = json.load(fh)
    except FileNotFoundError:
        raise ReplayError(NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded") from None
    session = NvmlReplay(probe)
    session.nvmlInit()
    _session = session
    global _loaded
    _loaded = (_state_path(), os.stat(_state_path()).st_mtime_ns)


def _live() -> None:
    """A long-lived reader (the in-job sampler) sees the state as it changes, as a real driver's is live."""
    if _loaded is None:
        return
    try:
        now = os.stat(_loaded[0]).st_mtime_ns
    except OSError:
        return
    if now != _loaded[1]:
        nvmlInit()


def nvmlShutdown() -> None:
    global _session
    _session = None


def __getattr__(name: str) -> Any:
    """An NVML function fails when it is called, never when it is looked up (as nvidia-ml-py's): the
    reader looks functions up before its guarded call (`c(n.nvmlDeviceGetName, h)`, `getattr(n, ...,
    None)`).  Looked up with the state re-read, a fault written mid-read (a bad driver installed while a
    health check ran) escaped the guard as an internal error (CI, test_bad_driver_...: LibRmVersionMismatch)."""
    if not name.startswith("nvml"):
        raise AttributeError(name)
    member = getattr(NvmlReplay, name, None)
    if member is None:
        raise AttributeError(name)
    if not callable(member) or isinstance(member, type):
        return member

    def call(*args: Any) -> Any:
        if _session is None:
            raise ReplayError(NVML_ERROR_UNINITIALIZED, "Uninitialized")
        _live()
        return getattr(_session, name)(*args)

    call.__name__ = name
    return call
