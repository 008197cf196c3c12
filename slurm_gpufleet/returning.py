"""Validation before return: a node the ladder reset or rebooted, or one an admin marks repaired (`fleet
repaired`), goes back to work only after a validation run passes.  (A reboot for it is asked for with
nextstate=DOWN: Slurm keeps our reason across it and does not resume the node itself.)

The node carries the request in its reason, `validate after <what> [gpufleet]` (visible to every tool,
kept across our own runs).  Once the node runs clean (`clean_runs_to_resume`), its health check:

1. makes a maintenance reservation of its own, `gpufleet-validate-<node>` (MAINT, root only), resumes
   the node into it, so no user job can land, and submits `validation_command` there as a job
   (`sbatch --reservation --exclusive`, `validation_timeout_minutes`);
2. on the following runs reads that job (squeue, only while a validation is open: the node's history
   says so, so a node with none makes no call for it): passed, the reservation is deleted and the node
   is in service; failed or timed out, it is submitted again up to `validation_retries` times, then the
   node is drained for repair with the job's last words, and the reservation deleted.

Where `validation_command` is "", a node returns after its clean runs, as before.  Sample commands for
DCGM's level 3 diagnostic and an NCCL all-reduce inside the NVLink domain are in etc/validation/.
"""

from __future__ import annotations

from dataclasses import dataclass

from .slurm.ownership import VALIDATE_RESERVATION_PREFIX as RESERVATION_PREFIX
from .slurm.reasons import VALIDATE_AFTER, after, ours, says

JOB_NAME = "gpufleet-validate"
PASSED = frozenset({"COMPLETED"})
FAILED = frozenset({"FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
                    "PREEMPTED"})


def reservation_name(node: str) -> str:
    return f"{RESERVATION_PREFIX}{node}"


def is_validate(reason: str) -> bool:
    return says(reason, VALIDATE_AFTER)


def validate_reason(cause: str) -> str:
    """The reason of a node that returns only through a validation run: "validate after <cause> [gpufleet]"."""
    return ours(f"{VALIDATE_AFTER} {cause}")


def cause_of(reason: str) -> str:
    """What a validate reason says the node is validated after ("reboot: xid gpu2 ..."), "repair" when unsaid."""
    return (after(reason, VALIDATE_AFTER) or "").split(" : reboot ")[0] or "repair"


@dataclass
class Open:
    """The node's validation in progress, as its history keeps it."""

    attempt: int
    job: str
    cause: str
    since: float


def judge(job_state: str | None, attempt: int, retries: int, waited_s: float, timeout_s: float) -> str:
    """What to do with an open validation: wait, passed, retry or failed.  `job_state` None: Slurm no
    longer shows the job (MinJobAge): past its time limit it counts as failed."""
    if job_state in PASSED:
        return "passed"
    gone = job_state is None and waited_s > timeout_s + 120
    if job_state in FAILED or gone:
        return "retry" if attempt <= retries else "failed"
    return "wait"
