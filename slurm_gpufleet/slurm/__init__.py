"""Acting through Slurm: one small interface, two backends (Slurm's commands, pyslurm)."""

from __future__ import annotations

from .base import NodeInfo, SlurmBackend, SlurmError

__all__ = ["NodeInfo", "SlurmBackend", "SlurmError", "get_backend"]


def get_backend(choice: str = "auto", scontrol: str = "/usr/bin/scontrol", timeout: float = 10.0) -> SlurmBackend:
    """`commands` (scontrol), `pyslurm`, or `auto`: pyslurm when it imports and matches the running Slurm."""
    from .commands import CommandBackend

    if choice in ("pyslurm", "auto"):
        from .pyslurm_backend import PyslurmBackend, pyslurm_usable

        usable, why = pyslurm_usable(scontrol)
        if usable:
            return PyslurmBackend(scontrol)
        if choice == "pyslurm":
            raise SlurmError(f"pyslurm backend unavailable: {why}")
    return CommandBackend(scontrol=scontrol, timeout=timeout)
