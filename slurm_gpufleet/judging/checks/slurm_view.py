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

import re
from typing import TYPE_CHECKING

from ...readers.snapshot import known
from ..findings import Finding

if TYPE_CHECKING:
    from . import Context

NAME = "slurm"
ORDER = 190   # after the GPUs' own checks: a fault of theirs names the reason first

# what a registration Slurm refused shows in the node's state
_BROKEN = {"INVALID_REG": "registered invalid (INVAL)", "INVAL": "registered invalid (INVAL)"}
# what Slurm shows while a node comes back (a reboot, a restarted slurmd, power saving): its registration
# is not made yet, so there is nothing to judge: waited for (the validation's time bounds it), never a fault
_COMING_BACK = {"NOT_RESPONDING": "slurmd not registered yet", "REBOOT_ISSUED": "reboot issued",
                "REBOOT_REQUESTED": "reboot requested", "POWERING_UP": "powering up", "POWER_UP": "powering up",
                "POWERED_DOWN": "powered down", "UNKNOWN": "not registered yet", "FUTURE": "not registered yet"}


# a MIG profile as Slurm's AutoDetect=nvml names an instance's type: 1g.18gb, 3g.71gb, 1g.10gb+me
_MIG = re.compile(r"^\d+g\.\d+gb(?:\+\w+)?$", re.I)


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
    shown = {view.state} | set(view.flags)
    coming = sorted(shown & set(_COMING_BACK))
    if coming:
        return [Finding(NAME, "warn", "wait", None, f"coming back: {_COMING_BACK[coming[0]]}",
                        f"slurmctld shows state {'+'.join([view.state, *view.flags])}: its return is judged once "
                        f"slurmd has registered it")]
    out = []
    for flag in sorted(shown & set(_BROKEN)):
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
    # A MIG GPU is one or more instances in Slurm's count (slurmd registers each), so a node with MIG needs at
    # least one a GPU: fewer is a GPU Slurm cannot schedule at all
    gpus = ctx.snapshot.gpus
    if view.gpus is not None and gpus and view.gpus < len(gpus):
        mig = sum(1 for g in gpus if g.mig_mode_current is True)
        out.append(Finding(NAME, "drain", "fix_config", None, f"sees gpu:{view.gpus} of {len(gpus)}",
                           f"slurmd registered Gres={view.gres or '(none)'} for {len(gpus)} GPU(s) the check "
                           f"found{f' ({mig} in MIG mode, each at least one instance)' if mig else ''}: gres.conf, "
                           f"AutoDetect=nvml or libnvidia-ml.so on the node"))
    out += _types(view, gpus)
    return out


def _norm(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower())


def _types(view, gpus) -> list[Finding]:
    """Each GPU type the node's Gres names must be the model of one of its GPUs (AutoDetect=nvml names them
    from the model, "nvidia_h200"; a site's own short name, "h200", is a part of it) or a MIG profile
    ("1g.18gb").  A type that names none is a job asking for one model given another: warned, since a site's
    type names are its own."""
    names = [_norm(n) for g in gpus for n in [known(g.name)] if isinstance(n, str)]
    if not names:
        return []
    foreign = [t for t in view.gpu_types if not _MIG.match(t) and not any(_norm(t) in n for n in names)]
    if not foreign:
        return []
    models = ", ".join(sorted({known(g.name) for g in gpus if isinstance(known(g.name), str)}))
    return [Finding(NAME, "warn", "fix_config", None, f"gres type {foreign[0]} is not its GPUs' model"[:60],
                    f"slurmd registered Gres={view.gres}; the GPUs are {models}: a job asking for "
                    f"gpu:{foreign[0]} is given these")]

