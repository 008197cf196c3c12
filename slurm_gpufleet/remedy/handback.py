"""`fleet repaired`: an admin hands nodes back after a repair.  A move of the remedy table's own (the
admin's: repair or drained -> returning), carried through the actuator like every other write, so that
ownership and the node group's mode hold here too; the node's health check then returns it to work only
through a validation run (remedy/carrier.py).  The CLI, the fault simulator and the tests' harness all
call this one function."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..slurm import effects as E
from .table import ADMIN, OTHERS, RETURNING, legal, state_of


@dataclass
class HandBack:
    marked: list[str] = field(default_factory=list)        # now `validate after repair` (or would be)
    left: dict[str, str] = field(default_factory=dict)     # node -> why it was not handed back
    free: list[str] = field(default_factory=list)          # not drained: nothing to hand back


def hand_back(actuator: Any, nodes: list[Any], dry_run: bool = False) -> HandBack:
    """Each held node whose state the table lets an admin move to `returning` gets the reason `validate after
    repair [gpufleet]`; others' nodes, a rack's trays (the domain returns whole) and nodes the actuator does
    not hold are left, each with why.  `dry_run`: what would be marked, nothing written."""
    from ..slurm.ownership import left_alone
    from .returning import validate_reason

    out = HandBack(free=[i.name for i in nodes if not i.drained])
    movable = []
    for info in (i for i in nodes if i.drained):
        before = state_of(info)
        if before == OTHERS or not actuator.holds(info):
            out.left[info.name] = left_alone(info)
        elif not legal(before, RETURNING, ADMIN):
            out.left[info.name] = f"{before}: not handed back by `fleet repaired` (its domain returns whole)"
        else:
            movable.append(info)
    if dry_run:
        out.marked = [i.name for i in movable]
        return out
    if movable:
        (done,) = actuator.apply(E.SetReason(tuple(movable), validate_reason("repair")))
        out.marked = list(done.done) + [i.name for i in movable if i.name not in done.done and i.name not in done.left]
        out.left.update(done.left)
    return out
