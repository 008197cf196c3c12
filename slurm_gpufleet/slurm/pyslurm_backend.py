"""Optional backend through pyslurm (`pip install slurm-gpufleet[pyslurm]`).

PyPI serves pyslurm 25.11 only, which builds against Slurm 25.11 only; Debian ships 22.05 and 24.11, so
on those the commands backend is used.  pyslurm's Node API has no reboot call: reboots go through
scontrol either way.  Not exercised in CI here (pyslurm cannot be built against Slurm 22.05).
"""

from __future__ import annotations

import datetime as dt
import subprocess
from typing import Any

from .actions import one_line
from .base import NodeInfo, SlurmError
from .commands import CommandBackend, _info


def pyslurm_usable(scontrol: str = "/usr/bin/scontrol") -> tuple[bool, str]:
    try:
        import pyslurm  # type: ignore[import-not-found]
    except Exception as exc:  # ImportError, or a libslurm that does not load
        return False, f"pyslurm does not import ({type(exc).__name__})"
    try:
        mine = str(pyslurm.version()).split(".")[:2]
        running = subprocess.run([scontrol, "--version"], capture_output=True, text=True, timeout=5).stdout.split()[-1]
    except Exception as exc:
        return False, f"cannot compare versions: {exc}"
    if running.split(".")[:2] != mine:
        return False, f"pyslurm {'.'.join(mine)} does not match Slurm {running}"
    return True, "ok"


class PyslurmBackend:
    name = "pyslurm"

    def __init__(self, scontrol: str = "/usr/bin/scontrol") -> None:
        import pyslurm  # type: ignore[import-not-found]

        self._p = pyslurm
        self._commands = CommandBackend(scontrol)

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # pyslurm.RPCError and friends
            raise SlurmError(f"pyslurm: {exc}".splitlines()[0]) from None

    def node(self, name: str) -> NodeInfo:
        n = self._call(self._p.Node.load, name)
        boot = n.boot_time
        boot_str = dt.datetime.fromtimestamp(boot).isoformat() if isinstance(boot, int | float) and boot else None
        info = _info(name, (n.state or "UNKNOWN").split("+"), n.reason or "", n.comment or "", n.extra or "",
                     boot_str, str(n.configured_gres or ""))
        info.reason_user = n.reason_user
        info.weight = n.weight
        return info

    def _modify(self, name: str, **changes: Any) -> None:
        node = self._p.Node(name)
        self._call(node.modify, self._p.Node(**changes))

    def drain(self, name: str, reason: str) -> None:
        self._modify(name, state="DRAIN", reason=one_line(reason))

    def resume(self, name: str) -> None:
        self._modify(name, state="RESUME")

    def set_reason(self, name: str, reason: str) -> None:
        self._modify(name, reason=one_line(reason))

    def reboot_asap(self, name: str, reason: str, next_state: str = "RESUME") -> None:
        self._commands.reboot_asap(name, reason, next_state)

    def set_weight(self, name: str, weight: int) -> None:
        self._modify(name, weight=int(weight))

    def set_field(self, name: str, field: str, value: str) -> None:
        if field not in ("comment", "extra"):
            raise ValueError(field)
        self._modify(name, **{field: value})

    def __getattr__(self, name: str) -> Any:
        # fleet-wide reads and reservations go through the commands backend
        return getattr(self._commands, name)
