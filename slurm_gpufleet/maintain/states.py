"""Every state a node and a rollout can be in, in one place.

A node moves  pending -> reserved -> upgrading -> returning -> validating [-> testing] -> done
(testing: where a validation job is configured, the node leaves the drain but stays in its maintenance
reservation while that job runs on it), and on failure to `failed` (it stays drained with our reason); `rollback` takes upgraded nodes through
rolling_back -> returning -> validating -> rolled_back.  `skipped` nodes were never touched.
Each state is written to the SQLite store before the work it names starts, so a crashed `apply` finds
every node where it was and `resume` repeats that state's work (every step is idempotent).
"""

from __future__ import annotations

PENDING = "pending"            # in the plan, not started
RESERVED = "reserved"          # maintenance reservation made (or reboot ASAP asked); waiting for the node to empty
UPGRADING = "upgrading"        # drained by us, the site's upgrade command runs
RETURNING = "returning"        # waiting for the node's slurmd to come back
VALIDATING = "validating"      # health check: driver == target, verdict ok
TESTING = "testing"            # undrained inside its maintenance reservation; the validation job runs there
DONE = "done"                  # validated and released
FAILED = "failed"              # upgrade or validation failed; stays drained with our reason
SKIPPED = "skipped"            # not ours to touch (held by someone else) or already at target
ROLLING_BACK = "rolling_back"  # the upgrade command with the previous driver
ROLLED_BACK = "rolled_back"    # back on the previous driver, validated, released

NODE_STATES = (PENDING, RESERVED, UPGRADING, RETURNING, VALIDATING, TESTING, DONE, FAILED, SKIPPED, ROLLING_BACK,
               ROLLED_BACK)
FINAL = {DONE, FAILED, SKIPPED, ROLLED_BACK}
# states in which a node is out of service because of us: they count against the budget
IN_FLIGHT = {RESERVED, UPGRADING, RETURNING, VALIDATING, TESTING, ROLLING_BACK}
OUT_OF_SERVICE = IN_FLIGHT | {FAILED}

# The legal moves, one line per state (the shape of the GPU Operator's upgrade state machine).  The engine
# refuses any other: a bug shows as an error, never as a node in a state no handler knows.
TRANSITIONS: dict[str, frozenset[str]] = {
    PENDING: frozenset({RESERVED, SKIPPED}),
    RESERVED: frozenset({UPGRADING, SKIPPED, FAILED}),
    UPGRADING: frozenset({RETURNING, FAILED, ROLLING_BACK}),
    RETURNING: frozenset({VALIDATING, FAILED, ROLLING_BACK}),
    VALIDATING: frozenset({DONE, TESTING, ROLLED_BACK, FAILED, ROLLING_BACK}),
    TESTING: frozenset({DONE, FAILED, ROLLING_BACK}),
    DONE: frozenset({ROLLING_BACK}),
    FAILED: frozenset({ROLLING_BACK}),
    ROLLING_BACK: frozenset({RETURNING, FAILED}),
    SKIPPED: frozenset(),
    ROLLED_BACK: frozenset(),
}


def legal(old: str, new: str) -> bool:
    return new in TRANSITIONS.get(old, frozenset())

# a job a deadline plan stops (maintain/deadline.py): planned -> told (its comment says what will happen)
# -> [signalled (checkpoint-requeue: the signal sent, its grace running) ->] stopping (requeue / cancel,
# repeated each step while the same run of the job is still on its nodes) -> stopped; or `ended` on its own
J_PLANNED, J_TOLD, J_SIGNALLED, J_STOPPING, J_STOPPED, J_ENDED = \
    "planned", "told", "signalled", "stopping", "stopped", "ended"
JOB_FINAL = {J_STOPPED, J_ENDED}

# rollout
R_RUNNING = "running"
R_HALTED = "halted"            # too many failures; waiting for an admin (rollback, abort, or resume)
R_DONE = "done"
R_ABORTED = "aborted"
R_ROLLING_BACK = "rolling_back"
R_ROLLED_BACK = "rolled_back"
ROLLOUT_STATES = (R_RUNNING, R_HALTED, R_DONE, R_ABORTED, R_ROLLING_BACK, R_ROLLED_BACK)
ROLLOUT_FINAL = {R_DONE, R_ABORTED, R_ROLLED_BACK}

# prefix of every reason a rollout sets; the health check leaves these alone
from ..slurm.ownership import MAINTAIN_PREFIX as MAINT_REASON  # noqa: E402,F401
