"""Every state a node's remedies can put it in, and the moves between them, in one place.

A node in service that a check finds faulty climbs the ladder (data/remediation.toml), cheapest first:

    in_service -> resetting -> returning -> validating -> in_service
               -> rebooting -> returning -> validating -> in_service
               -> suspect (an uncertain fault: held in a reservation of its own) -> in_service | repair
               -> drained (waiting for its GPUs to go idle; quarantine; a drain-severity finding)
               -> repair (the cap of attempts, or what survived its reboots: an admin resumes it)
    a rack-level fault holds every tray of its domain (rack) until the domain runs clean again.

The states are read off what Slurm shows of the node (its flags and our reason) and, for `validating` and
`suspect`, off the node's history (a validation job, a suspect hold is open): a crashed run leaves
nothing of its own to recover.
`resetting` lasts within one run (the reset and the read after it).

Each move says who makes it: the ladder (remedy/carrier.py, through the actuator), Slurm itself (a
reboot asked for ends), or an admin (a resume, `fleet repaired`).  The carrier refuses a move of the
ladder that is not here: a bug shows as an error, never as a node in a state no rule knows.  Observe
mode makes no move (what it would do is logged and published); quarantine makes `drained` where full
mode would reset or reboot.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..slurm.base import NodeInfo


class RemedyState(StrEnum):
    IN_SERVICE = "in_service"    # not held by us: jobs land on it
    DRAINED = "drained"          # drained by our check: waiting for idle GPUs, quarantined, or a drain finding
    RESETTING = "resetting"      # its GPUs being reset (within one run: the reset, then a read)
    REBOOTING = "rebooting"      # `scontrol reboot ASAP` asked for: drained until it has rebooted
    RETURNING = "returning"      # remedied, drained with `validate after ... [gpufleet]`: a validation run next
    VALIDATING = "validating"    # resumed into its own maintenance reservation, its validation job running
    SUSPECT = "suspect"          # in service, held in a maintenance reservation of its own: its job finishes,
                                 # no new job lands; re-checked, then released or drained for repair
    REPAIR = "repair"            # drained for repair (attempts capped, survived its reboots, failed validation)
    RACK = "rack"                # held with its rack: the domain drained whole for a rack-level fault
    OTHERS = "others"            # drained, down or rebooting by someone else: never touched


(IN_SERVICE, DRAINED, RESETTING, REBOOTING, RETURNING, VALIDATING, SUSPECT, REPAIR, RACK, OTHERS) = RemedyState
STATES = tuple(RemedyState)
# out of service for a fault of its own or of its rack: a job Slurm sends back to the queue from such a node
# runs next elsewhere (hooks/away.py)
HELD_FOR_FAULT = frozenset({DRAINED, REBOOTING, RETURNING, REPAIR, RACK})

LADDER, SLURM, ADMIN = "ladder", "slurm", "admin"

# (from, to) -> who makes the move and why.  A fault found again at any point of the way back climbs
# again from where the node is: the moves to drained/resetting/rebooting/repair from returning and
# validating are that.
MOVES: dict[tuple[RemedyState, RemedyState], tuple[str, str]] = {
    (IN_SERVICE, DRAINED): (LADDER, "a drain finding; reset-fixable with busy GPUs; quarantine mode"),
    (IN_SERVICE, RESETTING): (LADDER, "reset-fixable, its GPUs idle"),
    (IN_SERVICE, REBOOTING): (LADDER, "reboot-fixable, or a reset already tried"),
    (IN_SERVICE, REPAIR): (LADDER, "the class's attempts capped, or survived its reboots"),
    (IN_SERVICE, RACK): (LADDER, "its domain escalated: drained whole"),
    (IN_SERVICE, SUSPECT): (LADDER, "a drain finding of a suspect class (data/remediation.toml [suspect])"),
    (SUSPECT, SUSPECT): (LADDER, "a clean re-check counted, or waiting for the next"),
    (SUSPECT, IN_SERVICE): (LADDER, "suspect_passes clean re-checks: its reservation deleted"),
    (SUSPECT, REPAIR): (LADDER, "its fault still there at a re-check: drained for repair"),
    (SUSPECT, DRAINED): (LADDER, "another class's drain finding: the hold ends, the ladder takes it"),
    (SUSPECT, RESETTING): (LADDER, "another class's reset-fixable fault, its GPUs idle: the hold ends"),
    (SUSPECT, REBOOTING): (LADDER, "another class's fault: the hold ends, the reboot rung"),
    (DRAINED, DRAINED): (LADDER, "a new reason for the same hold"),
    (DRAINED, RESETTING): (LADDER, "its GPUs went idle"),
    (DRAINED, REBOOTING): (LADDER, "the reset did not fix it, or a reboot rung"),
    (DRAINED, REPAIR): (LADDER, "the cap, or what survived its reboots"),
    (DRAINED, IN_SERVICE): (LADDER, "clean runs in a row (clean_runs_to_resume)"),
    (DRAINED, RACK): (LADDER, "its domain escalated"),
    (RESETTING, RETURNING): (LADDER, "the reset fixed it: a validation run before it returns"),
    (RESETTING, IN_SERVICE): (LADDER, "the reset fixed it; no validation_command"),
    (RESETTING, DRAINED): (LADDER, "the reset fixed nothing yet: drained for the next rung"),
    (RESETTING, REBOOTING): (LADDER, "the reset did not fix it: the next rung"),
    (RESETTING, REPAIR): (LADDER, "the reset did not fix it and no rung is left"),
    (REBOOTING, IN_SERVICE): (SLURM, "rebooted; no validation_command (Slurm resumes it)"),
    (REBOOTING, RETURNING): (SLURM, "rebooted into nextstate=DOWN with our validate reason"),
    (RETURNING, VALIDATING): (LADDER, "clean runs: its validation job in its own reservation"),
    (RETURNING, IN_SERVICE): (LADDER, "clean runs; validation_command turned off since"),
    (RETURNING, DRAINED): (LADDER, "the fault is back"),
    (RETURNING, RETURNING): (LADDER, "a new reason for the same hold"),
    (RETURNING, RESETTING): (LADDER, "the fault is back, its GPUs idle"),
    (RETURNING, REBOOTING): (LADDER, "the fault is back"),
    (RETURNING, REPAIR): (LADDER, "the fault is back and no rung is left"),
    (VALIDATING, IN_SERVICE): (LADDER, "its validation job passed, or its outcome cannot be read (unverified)"),
    (VALIDATING, REPAIR): (LADDER, "its validation failed validation_retries + 1 times"),
    (VALIDATING, VALIDATING): (LADDER, "its validation job submitted again"),
    (VALIDATING, DRAINED): (LADDER, "the fault is back during validation"),
    (VALIDATING, RESETTING): (LADDER, "the fault is back during validation, its GPUs idle"),
    (VALIDATING, REBOOTING): (LADDER, "the fault is back during validation"),
    (REPAIR, IN_SERVICE): (ADMIN, "resumed by an admin: the case closes"),
    (REPAIR, RETURNING): (ADMIN, "`fleet repaired`: a validation run before it returns"),
    (DRAINED, RETURNING): (ADMIN, "`fleet repaired` after an inspection (a drain after its reboots)"),
    (RACK, IN_SERVICE): (LADDER, "every member of its domain runs clean: the domain resumed whole"),
    (RACK, RESETTING): (LADDER, "a tray's own reset-fixable fault under its rack's hold, its GPUs idle"),
    (RACK, REBOOTING): (LADDER, "a tray's own fault under its rack's hold: its reboot rung"),
}

class IllegalMove(RuntimeError):
    """A move of the ladder the table does not have: a bug, never carried out."""


def legal(old: RemedyState, new: RemedyState, by: str = LADDER) -> bool:
    """Staying where it is is always legal; any other move must be in the table, made by `by`."""
    return old == new or MOVES.get((old, new), ("", ""))[0] == by


def state_of(node: NodeInfo, validating: bool = False, suspect: bool = False) -> RemedyState:
    """Where the node stands, from what Slurm shows of it; `validating`, `suspect`: its history has a
    validation job, a suspect hold open."""
    from ..slurm.ownership import HEALTH, HOOK, owner, rack_of_reason
    from .ladder import is_repair
    from .returning import is_validate

    held = node.drained or node.down or node.rebooting
    if not held:
        return VALIDATING if validating else SUSPECT if suspect else IN_SERVICE
    if owner(node) not in (HEALTH, HOOK):
        return OTHERS
    if node.rebooting:
        return REBOOTING
    if rack_of_reason(node.reason) is not None:
        return RACK
    if is_repair(node.reason):
        return REPAIR
    if is_validate(node.reason):
        return RETURNING
    return DRAINED


def target_of(kind: str, reason: str, rung: str, before: RemedyState) -> RemedyState:
    """Where an action of decide's takes the node, as `state_of` will read it back off Slurm (a drain
    "after N reboots" is the repair rung in the history, and a plain drain in Slurm: it resumes itself
    once an inspection leaves it running clean)."""
    from .ladder import is_repair
    from .returning import is_validate

    if kind in ("drain", "set_reason", "fail"):   # fail: the prolog's (slurmd drains the node for it)
        if is_repair(reason):
            return REPAIR
        return RETURNING if is_validate(reason) else DRAINED
    return {"reset": RESETTING, "reboot": REBOOTING, "validate": VALIDATING, "resume": IN_SERVICE,
            "suspect": SUSPECT, "release": IN_SERVICE}.get(kind, before)
