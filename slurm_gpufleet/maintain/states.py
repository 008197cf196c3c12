"""Every state a node, a job and a rollout can be in, and the moves allowed between them, in one place.

A node moves  pending -> reserved -> upgrading -> returning -> validating [-> testing] -> done
(testing: where a validation job is configured, the node leaves the drain but stays in its maintenance
reservation while that job runs on it), and on failure to `failed` (it stays drained with our reason).
A rollback is a direction of its own, with its own table: every node touched goes
rolling_back -> returning -> validating -> rolled_back; a node not yet touched is `skipped`.  A node
upgraded and back in service waits in `back_pending` (in service) until the rollback's window has room
for it in the budget: a rollback drains no more nodes at once than the rollout did.  An abort
ends every node where it is.  Each state is written to the SQLite store before the work it names starts,
so a crashed `apply` finds every node where it was and `resume` repeats that state's work (every step is
idempotent).  The values are the strings the store keeps.
"""

from __future__ import annotations

from enum import StrEnum


class NodeState(StrEnum):
    PENDING = "pending"            # in the plan, not started
    RESERVED = "reserved"          # taken: drained (or reboot ASAP asked); waiting for the node to empty
    UPGRADING = "upgrading"        # drained by us, the site's upgrade command runs
    RETURNING = "returning"        # waiting for the node's slurmd to come back
    VALIDATING = "validating"      # health check: driver == target, verdict ok
    TESTING = "testing"            # undrained inside its maintenance reservation; the validation job runs there
    DONE = "done"                  # validated and released
    FAILED = "failed"              # upgrade or validation failed; stays drained with our reason
    SKIPPED = "skipped"            # not ours to touch (held by someone else) or already at target
    ROLLING_BACK = "rolling_back"  # the upgrade command with the previous driver
    ROLLED_BACK = "rolled_back"    # back on the previous driver, validated, released
    BACK_PENDING = "back_pending"  # upgraded, in service, waiting for the rollback's window to take it


class RolloutState(StrEnum):
    RUNNING = "running"
    HALTED = "halted"              # too many failures; waiting for an admin (rollback, abort, or resume)
    DONE = "done"
    ABORTED = "aborted"
    ROLLING_BACK = "rolling_back"
    ROLLED_BACK = "rolled_back"


class JobState(StrEnum):
    """A job a deadline plan stops (maintain/deadline.py): planned -> told (its comment says what will
    happen) -> [signalled (checkpoint-requeue: the signal sent, its grace running) ->] stopping (requeue /
    cancel, repeated each step while the same run of the job is still on its nodes) -> stopped; or `ended`
    on its own."""

    PLANNED = "planned"
    TOLD = "told"
    SIGNALLED = "signalled"
    STOPPING = "stopping"
    STOPPED = "stopped"
    ENDED = "ended"


class Direction(StrEnum):
    FORWARD = "forward"     # a running (or halted, then resumed) rollout
    TURN_BACK = "turn-back"  # the one pass that turns a rollout into a rollback
    ROLLBACK = "rollback"   # every node touched on its way back to its previous driver
    ABORT = "abort"         # an admin's stop: nothing more is started


(PENDING, RESERVED, UPGRADING, RETURNING, VALIDATING, TESTING, DONE, FAILED, SKIPPED, ROLLING_BACK, ROLLED_BACK,
 BACK_PENDING) = NodeState
NODE_STATES = tuple(NodeState)
FINAL = {DONE, FAILED, SKIPPED, ROLLED_BACK}
# states in which a node is out of service because of us: they count against the budget
IN_FLIGHT = {RESERVED, UPGRADING, RETURNING, VALIDATING, TESTING, ROLLING_BACK}
OUT_OF_SERVICE = IN_FLIGHT | {FAILED}

# The legal moves per direction, one line per state (the shape of the GPU Operator's upgrade state
# machine).  The engine refuses any other: a bug shows as an error, never as a node in a state no unit
# knows.  A rollout turning into a rollback or an abort moves its nodes once by that direction's table.
TRANSITIONS: dict[Direction, dict[NodeState, frozenset[NodeState]]] = {
    Direction.FORWARD: {
        PENDING: frozenset({RESERVED, SKIPPED}),
        RESERVED: frozenset({UPGRADING, SKIPPED, FAILED}),
        UPGRADING: frozenset({RETURNING, FAILED}),
        RETURNING: frozenset({VALIDATING, FAILED}),
        VALIDATING: frozenset({DONE, TESTING, FAILED}),
        TESTING: frozenset({DONE, FAILED}),
        DONE: frozenset(), FAILED: frozenset(), SKIPPED: frozenset(),
        ROLLING_BACK: frozenset(), ROLLED_BACK: frozenset(), BACK_PENDING: frozenset(),
    },
    Direction.TURN_BACK: {  # nodes not yet touched are given back; every node touched goes back
        PENDING: frozenset({SKIPPED}),
        RESERVED: frozenset({SKIPPED}),
        **{s: frozenset({ROLLING_BACK, FAILED}) for s in (UPGRADING, RETURNING, VALIDATING, TESTING)},
        DONE: frozenset({BACK_PENDING}),   # in service: the rollback's window takes it (schedule.admit_back)
        FAILED: frozenset({ROLLING_BACK}),
        SKIPPED: frozenset(), ROLLING_BACK: frozenset(), ROLLED_BACK: frozenset(), BACK_PENDING: frozenset(),
    },
    Direction.ROLLBACK: {
        BACK_PENDING: frozenset({ROLLING_BACK}),
        ROLLING_BACK: frozenset({RETURNING, FAILED}),
        RETURNING: frozenset({VALIDATING, FAILED}),
        VALIDATING: frozenset({ROLLED_BACK, FAILED}),
        **{s: frozenset() for s in (PENDING, RESERVED, UPGRADING, TESTING, DONE, FAILED, SKIPPED, ROLLED_BACK)},
    },
    Direction.ABORT: {
        PENDING: frozenset({SKIPPED}),
        RESERVED: frozenset({SKIPPED}),
        **{s: frozenset({FAILED}) for s in (UPGRADING, RETURNING, VALIDATING, TESTING, ROLLING_BACK)},
        BACK_PENDING: frozenset({DONE}),   # never taken back: it stays on the target, in service
        DONE: frozenset(), FAILED: frozenset(), SKIPPED: frozenset(), ROLLED_BACK: frozenset(),
    },
}


def legal(old: str, new: str, direction: Direction = Direction.FORWARD) -> bool:
    return new in TRANSITIONS[direction].get(NodeState(old), frozenset())


def direction_of(rollout_state: str) -> Direction:
    if rollout_state in (R_ROLLING_BACK, R_ROLLED_BACK):
        return Direction.ROLLBACK
    if rollout_state == R_ABORTED:
        return Direction.ABORT
    return Direction.FORWARD


J_PLANNED, J_TOLD, J_SIGNALLED, J_STOPPING, J_STOPPED, J_ENDED = JobState
JOB_FINAL = {J_STOPPED, J_ENDED}

R_RUNNING, R_HALTED, R_DONE, R_ABORTED, R_ROLLING_BACK, R_ROLLED_BACK = RolloutState
ROLLOUT_STATES = tuple(RolloutState)
ROLLOUT_FINAL = {R_DONE, R_ABORTED, R_ROLLED_BACK}
