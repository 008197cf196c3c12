"""Slurm's own view before a node returns: a node that was held (drained, down, rebooting) goes back into
service only when slurmd registered it whole.  Nodes go INVAL when slurmd's gres/nvml cannot load
libnvidia-ml.so (crusoecloud/slurm #13), and a node whose GPUs are all good but which slurmd registers
with fewer (a gres.conf that lost a line, a Slurm built without NVML: MIT CSAIL's September 2025 outage)
would be handed back short.  Pure: the SlurmView the health check read with the node's state.

The reason reads "slurm node sees gpu:7 of 8 [gpufleet]", "slurm node registered invalid (INVAL) ...",
"slurm node slurmd 22.05.7, its group 22.05.8", "slurm node lost feature ib".  The last two are read only
when a held node would otherwise return (hooks/healthcheck.py): its group's slurmd version from one read of
the fleet, the features slurm.conf gives it from the file.
A node in service is not judged here (its jobs run as Slurm sees it); a run that did not read Slurm (a quiet
run, the prolog) has no view and says nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..findings import Finding

if TYPE_CHECKING:
    from . import Context

NAME = "slurm"
ORDER = 190   # after the GPUs' own checks: a fault of theirs names the reason first

# what a registration Slurm refused or lost shows in the node's state
_BROKEN = {"INVALID_REG": "registered invalid (INVAL)", "NOT_RESPONDING": "slurmd not responding",
           "INVAL": "registered invalid (INVAL)"}


def _release(version: str) -> tuple[int, ...]:
    out = []
    for part in version.split("."):
        digits = "".join(c for c in part if c.isdecimal())[:6]
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def check(ctx: Context) -> list[Finding]:
    view = ctx.snapshot.slurm
    if view is None or not view.held:
        return []
    out = []
    for flag in sorted(({view.state} | set(view.flags)) & set(_BROKEN)):
        out.append(Finding(NAME, "drain", "fix_config", None, _BROKEN[flag],
                           f"slurmctld shows state {'+'.join([view.state, *view.flags])}: it must register "
                           f"whole before it returns"))
    # older than most of its group (a node imaged from an old image); a newer one is a Slurm upgrade under way
    if view.version and view.peers_version and _release(view.version) < _release(view.peers_version):
        out.append(Finding(NAME, "drain", "fix_config", None, f"slurmd {view.version}, its group {view.peers_version}",
                           f"the slurmd that registered it is {view.version}; most nodes of its group in service "
                           f"run {view.peers_version}"))
    lost = [f for f in (view.configured_features or []) if f not in view.features]
    if lost:
        out.append(Finding(NAME, "drain", "fix_config", None, f"lost feature {','.join(lost)}"[:60],
                           f"slurm.conf gives it {','.join(view.configured_features or [])}; it registered "
                           f"{','.join(view.features) or 'none'}"))
    # every GPU the driver lists, lost ones too: a GPU gone from NVML is the inventory check's, and Slurm
    # seeing more than the node has is that fault, not Slurm's
    gpus = ctx.snapshot.gpus
    mig = any(g.mig_mode_current for g in gpus)
    if view.gpus is not None and gpus and not mig and view.gpus < len(gpus):
        out.append(Finding(NAME, "drain", "fix_config", None, f"sees gpu:{view.gpus} of {len(gpus)}",
                           f"slurmd registered Gres={view.gres or '(none)'} for {len(gpus)} GPU(s) the check "
                           f"found: gres.conf, AutoDetect=nvml or libnvidia-ml.so on the node"))
    return out
