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

from ..slurm.ownership import VALIDATE_RESERVATION_PREFIX as RESERVATION_PREFIX
from ..slurm.reasons import VALIDATE_AFTER, after, ours, says

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


def judge(job_state: str | None, attempt: int, retries: int, waited_s: float, timeout_s: float,
          exit_code: int | None = None) -> str:
    """What to do with an open validation: wait, passed, retry, failed or unverified.  `job_state` None:
    neither Slurm (MinJobAge purged it) nor the job's output on the node (`ending_of`) says how it ended:
    past its time limit it is `unverified`, an outcome not known, never a failure.  `exit_code`
    DEPENDENCY_EXIT: the validation's own tools could not run (dcgmi missing or hung, its host engine
    unreachable or of another version): not the GPUs' failure, `unverified`."""
    if exit_code == DEPENDENCY_EXIT:
        return "unverified"
    if job_state in PASSED:
        return "passed"
    if job_state in FAILED:
        return "retry" if attempt <= retries else "failed"
    if job_state is None and waited_s > timeout_s + 120:
        return "unverified"
    return "wait"


# the validation job's last line, written by its own script (`wrapped`): how it ended, kept on its node in
# its output file after Slurm has forgotten the job
EXIT_MARK = "gpufleet-validation-exit="
# a validation command's exit status for "could not judge the GPUs: a tool of its own failed" (sysexits'
# EX_TEMPFAIL): etc/validation/dcgm-diag.sh uses it
DEPENDENCY_EXIT = 75


def wrapped(command: str) -> str:
    """The validation command as submitted: its exit status said in its output, then returned."""
    return f"{command}\nrc=$?\necho {EXIT_MARK}$rc\nexit $rc"


def ending_of(output: str, tail_bytes: int = 4096) -> tuple[int | None, str]:
    """The exit status the job's output file ends with (`wrapped`; None where it says none), and its last
    line of its own before it."""
    try:
        with open(output, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - tail_bytes))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        return None, ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    for k in range(len(lines) - 1, -1, -1):
        if lines[k].startswith(EXIT_MARK):
            code = lines[k][len(EXIT_MARK):]
            return (int(code) if code.isdigit() else None), (lines[k - 1] if k else "")
    return None, (lines[-1] if lines else "")
