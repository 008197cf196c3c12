"""How a rollout empties a node before its upgrade: the one list of strategies a plan may name.

`maintain simulate` compares these with hand-written baselines (simulate.BASELINES), which are not
strategies of the engine.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Strategy:
    name: str
    # every waiting node gets a maintenance slot (a MAINT reservation from when its jobs end by their limits)
    slots: bool
    # a busy node may be taken: Slurm empties it (`scontrol reboot ASAP` drains and reboots once idle)
    takes_busy: bool
    # the node is emptied by a reboot asked of Slurm, not by our drain; it reboots before the command runs
    reboot_to_empty: bool
    summary: str


RESERVATION = Strategy("reservation", slots=True, takes_busy=False, reboot_to_empty=False,
                       summary="each node taken once it sits empty, at its slot at the latest; nothing killed")
REBOOT_ASAP = Strategy("reboot-asap", slots=False, takes_busy=True, reboot_to_empty=True,
                       summary="`scontrol reboot ASAP` empties each node as its jobs end; nothing killed")

STRATEGIES: dict[str, Strategy] = {s.name: s for s in (RESERVATION, REBOOT_ASAP)}
# what `maintain simulate --strategy` compares: the two above, and two baselines of its own
SIMULATED = ("gpufleet", "reboot-asap", "drain-all", "wait-then-kill")


def compared_by_default(deadline: bool) -> tuple[str, ...]:
    """What `maintain simulate` compares unless told: with a deadline, the engine against waiting then
    killing what is left (the other baselines do not stop jobs); without, against reboot-asap and drain-all."""
    return ("gpufleet", "wait-then-kill") if deadline else ("gpufleet", "reboot-asap", "drain-all")


def strategy(name: str | None) -> Strategy:
    """The plan's strategy (plans without one are from before reboot-asap existed: reservation)."""
    if name is None:
        return RESERVATION
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r} (one of {', '.join(STRATEGIES)})") from None
