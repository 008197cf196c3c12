"""Acting through Slurm: one small interface, two backends (Slurm's commands, pyslurm)."""

from __future__ import annotations

from .base import NodeInfo, ReadOnly, SlurmBackend, SlurmError

__all__ = ["NodeInfo", "ReadOnly", "SlurmBackend", "SlurmError", "get_backend"]


def get_backend(choice: str = "auto", scontrol: str = "/usr/bin/scontrol", timeout: float = 10.0,
                cache_dir: str | None = None) -> ReadOnly:
    """`commands` (scontrol), `pyslurm`, or `auto`: pyslurm when it imports and matches the running Slurm.
    cache_dir: where the Slurm release is kept once learned (slurm/release.py).  Read-only: what it writes,
    it writes through an `Actuator` made with it (slurm/actuator.py)."""
    from .commands import CommandBackend

    if choice in ("pyslurm", "auto"):
        from .pyslurm_backend import PyslurmBackend, pyslurm_usable

        usable, why = pyslurm_usable(scontrol, cache_dir)
        if usable:
            return ReadOnly(PyslurmBackend(scontrol, timeout, cache_dir))
        if choice == "pyslurm":
            raise SlurmError(f"pyslurm backend unavailable: {why}")
        _said_once(f"backend auto: Slurm's commands, not pyslurm ({why})")
    return ReadOnly(CommandBackend(scontrol=scontrol, timeout=timeout, cache_dir=cache_dir))


_SAID: set[str] = set()


def _said_once(line: str) -> None:
    """An `auto` fallback is logged once per run (a process), not at every backend made."""
    if line not in _SAID:
        _SAID.add(line)
        import logging

        logging.getLogger("slurm_gpufleet").info("%s", line)
