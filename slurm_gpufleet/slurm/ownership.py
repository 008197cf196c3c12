"""Whose is a node?  One answer for everything that drains, resumes or sets a reason: the health check,
the prolog and epilog, the NVML-timeout watchdog, `fleet stragglers --drain` and a rollout.

A node's owner is read from its Slurm state and reason:

    free        not drained, down or rebooting
    health      drained by our health check, prolog or epilog ("<check> <gpu> ... [gpufleet]")
    maintain    drained by a rollout ("maintain <id> ... [gpufleet]")
    straggler   drained by `fleet stragglers --drain` ("performance ... [gpufleet]")
    hook        Slurm's own "Prolog error"/"Epilog error" drain (ours only when our hook failed)
    other       anyone else: an admin, another tool, a down node; never touched, reason never replaced

One down node is ours: the one our health check rebooted for a validation (`scontrol reboot ASAP
nextstate=DOWN`, so Slurm does not hand it back): it comes back DOWN with our reason and Slurm's own
words after it ("validate after reboot: ... [gpufleet] : reboot issued : reboot complete"), responding.
How a reason is written and read back: reasons.py.

Each actor may drain a free node, and may update or give back only what it owns itself.
"""

from __future__ import annotations

from . import reasons
from .base import NodeInfo
from .reasons import MAINTAIN as MAINTAIN_WORDS
from .reasons import PERFORMANCE as STRAGGLER_WORDS
from .reasons import RACK as RACK_WORDS
from .reasons import VALIDATE_AFTER

SLURM_HOOK_REASONS = ("Prolog error", "Epilog error")


def rack_of_reason(reason: str) -> str | None:
    """The domain a rack-escalation reason ("rack <domain> ... [gpufleet]") names, None for any other."""
    rest = reasons.after(reason, RACK_WORDS)
    return (rest.split() or [None])[0] if rest is not None else None

FREE, HEALTH, MAINTAIN, STRAGGLER, HOOK, OTHER = "free", "health", "maintain", "straggler", "hook", "other"
# who may write to Slurm (slurm/actuator.py takes no other): the health check and its hooks, a rollout and
# its simulations' jobs, the straggler and lemon steps
ACTORS = (HEALTH, MAINTAIN, STRAGGLER)

# the reservations each actor makes, by name: it changes and deletes only those (a rollout's MAINT slots;
# the lemon hold of a node under a deep check, which a rollout leaves alone)
ROLLOUT_RESERVATION_PREFIX = "gpufleet_"
LEMON_RESERVATION_PREFIX = "gpufleet-lemon-"
VALIDATE_RESERVATION_PREFIX = "gpufleet-validate-"   # validation before return (returning.py)
SUSPECT_RESERVATION_PREFIX = "gpufleet-suspect-"     # the suspect rung (remedy/decide.py)
# each actor's reservations, by their names' prefixes (str.startswith takes the tuple)
RESERVATION_PREFIXES = {MAINTAIN: ROLLOUT_RESERVATION_PREFIX, STRAGGLER: LEMON_RESERVATION_PREFIX,
                        HEALTH: (VALIDATE_RESERVATION_PREFIX, SUSPECT_RESERVATION_PREFIX)}


def owner_of_reason(reason: str) -> str:
    # a rollout's drains: the rollout gives them back, not the health check; a straggler drain: the quick
    # health check measures no performance, so a clean run proves nothing about it
    if reasons.says(reason, MAINTAIN_WORDS):
        return MAINTAIN
    if reasons.says(reason, STRAGGLER_WORDS):
        return STRAGGLER
    if reasons.words_of(reason) is not None:
        return HEALTH
    if reason.strip() in SLURM_HOOK_REASONS:
        return HOOK
    return OTHER


# what Slurm appends to a reboot's reason once the node is back (22.05 to 26.05)
REBOOT_COMPLETE = ": reboot complete"


def back_from_our_reboot(info: NodeInfo) -> bool:
    """Down after the reboot our health check asked for, with nextstate=DOWN, and responding."""
    return (info.down and reasons.says(info.reason, f"{VALIDATE_AFTER} reboot") and REBOOT_COMPLETE in info.reason
            and "NOT_RESPONDING" not in info.flags and not info.rebooting)


def owner(info: NodeInfo) -> str:
    if not (info.drained or info.down or info.rebooting):
        return FREE
    if info.down and not info.drained and not back_from_our_reboot(info):
        return OTHER  # down: Slurm's or an admin's, whatever its reason says
    return owner_of_reason(info.reason)


def may_drain(info: NodeInfo, actor: str) -> bool:
    """Drain a free node, or update the reason of a node the actor drained itself."""
    return owner(info) in (FREE, actor)


def owns(info: NodeInfo, actor: str) -> bool:
    """The actor drained this node: it may give it back (resume) or change its reason."""
    return owner(info) == actor


def left_alone(info: NodeInfo) -> str:
    """Why an actor leaves a node someone else holds, in the words every actor logs."""
    who = f" by {info.reason_user}" if info.reason_user else ""
    return (f"node is {info.state}+{'+'.join(sorted(info.flags))}{who} ({info.reason or 'no reason'}): "
            "not ours, left alone")
