"""Optional backend through pyslurm, the Python binding of libslurm.

pyslurm is built for one Slurm release: PyPI serves 25.11 only, and PySlurm's repository keeps a branch
per release (`22.5.x`, `23.11.x`, `24.11.x`, ...; docs/slurm.md says how to install the one that matches).
It is used when it imports and its release (pyslurm 22.5.3 -> 22.5) is the running Slurm's (scontrol
22.05.8 -> 22.5), compared as numbers, or when `[slurm] backend = "pyslurm"` asks for it.

Reads go through libslurm (no process forked): one node, and the rollout engine's fleet reads of every
node and of the running jobs (one RPC each, as scontrol and squeue make).  Every field of the backend
contract is mapped from pyslurm's own types (gres as a mapping, features and partitions as lists, times
as epoch seconds).  Writes that cover several nodes (one scontrol call per host list), reservations (no
class for them before pyslurm 24.11), the other job queries and the reboot, which pyslurm's Node API does
not have, stay on the commands backend.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from .actions import one_line
from .base import JobInfo, NodeInfo, SlurmError
from .commands import CommandBackend, _info, expand_hostlist

# what squeue -t RUNNING,COMPLETING,CONFIGURING lists (libslurm's job_state_string names a flag first)
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING"})


def pyslurm_usable(scontrol: str = "/usr/bin/scontrol", cache_dir: str | None = None) -> tuple[bool, str]:
    try:
        import pyslurm  # type: ignore[import-not-found]
    except Exception as exc:  # ImportError, or a libslurm that does not load
        return False, f"pyslurm does not import ({type(exc).__name__})"
    try:
        import subprocess

        from .release import parse_release, slurm_release

        built = pyslurm_version(pyslurm)
        mine = parse_release(built)  # "22.5.3" is Slurm 22.05, as "slurm 22.05.8" is
        running = slurm_release(scontrol, cache_dir, lambda: subprocess.run(
            [scontrol, "--version"], capture_output=True, text=True, timeout=5).stdout)
    except Exception as exc:
        return False, f"cannot compare versions: {exc}"
    if running != mine:
        return False, f"pyslurm {built} is built for Slurm {'.'.join(map(str, mine))}, not {'.'.join(map(str, running))}"
    too_old = _too_old(built)
    if too_old:
        return False, too_old
    return True, f"pyslurm {built}"


# The first release of each branch with the classes this backend uses (Node, Nodes, Jobs): 22.5.0 and
# 22.5.1 import and match Slurm 22.05, and every call then fails
FIRST_USABLE = {(22, 5): (22, 5, 2)}


def _too_old(built: str) -> str | None:
    """Why this pyslurm release lacks what the backend calls, or None."""
    import re

    found = re.match(r"^(\d+)\.(\d+)\.(\d+)", built.strip())
    if not found:
        return None
    version = tuple(int(x) for x in found.groups())
    first = FIRST_USABLE.get(version[:2])
    if first and version < first:
        return (f"pyslurm {built} predates {'.'.join(map(str, first))}, the first of its branch with the "
                "Node, Nodes and Jobs classes")
    return None


def pyslurm_version(pyslurm: Any) -> str:
    """Every branch has `pyslurm.__version__`; 22.5 also a function `version()`, 24.11 a module of that name."""
    found = getattr(pyslurm, "__version__", None)
    if found is None and callable(getattr(pyslurm, "version", None)):
        found = pyslurm.version()
    return str(found)


def gres_text(gres: Any) -> str:
    """pyslurm's gres ({"gpu:h200": 8}, or a list/str on some branches) as Slurm prints it (gpu:h200:8)."""
    if isinstance(gres, dict):
        return ",".join(f"{k}:{v}" if v not in (None, "") else str(k) for k, v in gres.items())
    if isinstance(gres, list | tuple):
        return ",".join(str(g) for g in gres)
    return str(gres or "")


def _epoch(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and value > 0 else None


def state_parts(n: Any) -> list[str]:
    """The node's state as scontrol prints it.  libslurm's state string says ALLOCATED for a node with some
    of its CPUs allocated; scontrol says MIXED (it compares the allocated CPUs with the usable ones, as
    slurm_sprint_node_table does), and the engine reads a MIXED node as one with room (seen on 22.05)."""
    parts = str(n.state or "UNKNOWN").split("+")
    allocated = getattr(n, "allocated_cpus", None) or 0
    usable = getattr(n, "effective_cpus", None) or getattr(n, "total_cpus", None) or 0
    if 0 < allocated < usable:
        parts = ["MIXED" if p.upper() in ("ALLOCATED", "ALLOC") else p for p in parts]
    return parts


def node_info(n: Any) -> NodeInfo:
    """One pyslurm.Node as the contract's NodeInfo, field by field."""
    boot = _epoch(n.boot_time)
    info = _info(n.name, state_parts(n), n.reason or "", n.comment or "", n.extra or "",
                 dt.datetime.fromtimestamp(boot).isoformat(timespec="seconds") if boot else None,
                 gres_text(n.configured_gres))
    info.reason_user = n.reason_user if info.reason else None
    info.reason_time = _epoch(getattr(n, "reason_time", None)) if info.reason else None
    info.partitions = list(n.partitions or [])
    info.features = list(n.available_features or [])
    info.active_features = list(n.active_features or [])
    info.weight = n.weight
    info.slurmd_start = _epoch(getattr(n, "slurmd_start_time", None))
    version = getattr(n, "version", None)
    info.slurmd_version = version if isinstance(version, str) and version[:1].isdecimal() else None
    # LastBusyTime (idle sweeps); the attribute's name is not checked against a pyslurm build here: where it
    # is absent, a sweep skips the node rather than guess how long it has been idle
    info.last_busy = _epoch(getattr(n, "last_busy_time", None))
    return info


def job_info(j: Any) -> JobInfo:
    """One running pyslurm.Job as squeue's fields give it to the contract's JobInfo."""
    gres = j.gres_per_node or {}
    # {"gpu": 2} from 22.05's "gres:gpu:2"; {"gres/gpu": 2} from 24.11's "gres/gpu:2", which pyslurm's
    # parser leaves prefixed (seen on 24.11)
    names = {str(k).removeprefix("gres/"): v for k, v in gres.items()} if isinstance(gres, dict) else {}
    gpus = next((int(v) for k, v in names.items() if (k == "gpu" or k.startswith("gpu:")) and isinstance(v, int)), 0)
    return JobInfo(str(j.id), expand_hostlist(j.allocated_nodes or ""), _epoch(j.end_time), j.partition or "",
                   start_time=_epoch(j.start_time), gpus_per_node=gpus, comment=j.comment or "")


class PyslurmBackend:
    name = "pyslurm"

    def __init__(self, scontrol: str = "/usr/bin/scontrol", timeout: float = 10.0, cache_dir: str | None = None) -> None:
        import pyslurm  # type: ignore[import-not-found]

        self._p = pyslurm
        self._commands = CommandBackend(scontrol=scontrol, timeout=timeout, cache_dir=cache_dir)

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # pyslurm.RPCError and friends
            raise SlurmError(f"pyslurm: {exc}".splitlines()[0]) from None

    def node(self, name: str) -> NodeInfo:
        return node_info(self._call(self._p.Node.load, name))

    def nodes(self) -> list[NodeInfo]:
        return [node_info(n) for n in self._call(self._p.Nodes.load).values()]

    def running_jobs(self) -> list[JobInfo]:
        return [job_info(j) for j in self._call(self._p.Jobs.load).values()
                if j.state in RUNNING_STATES and j.allocated_nodes]

    def _modify(self, name: str, **changes: Any) -> None:
        self._call(self._p.Node(name).modify, self._p.Node(**changes))

    def drain(self, name: str, reason: str) -> None:
        self._modify(name, state="DRAIN", reason=one_line(reason))

    def resume(self, name: str) -> None:
        self._modify(name, state="RESUME")

    def set_reason(self, name: str, reason: str) -> None:
        self._modify(name, reason=one_line(reason))

    def reboot_asap(self, name: str, reason: str, next_state: str = "RESUME") -> None:
        self._commands.reboot_asap(name, reason, next_state)

    def set_field(self, name: str, field: str, value: str) -> None:
        if field not in ("comment", "extra"):
            raise ValueError(field)
        self._modify(name, **{field: value})

    def __getattr__(self, name: str) -> Any:
        # host-list writes, reservations, the other job queries, the reboot: the commands backend
        return getattr(self._commands, name)
