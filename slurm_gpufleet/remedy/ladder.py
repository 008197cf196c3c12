"""The remediation ladder: the cheapest fix first (reset the GPU, reboot the node, drain for repair), with
the attempts per failure class counted and capped.  The ladders and classes are data
(data/remediation.toml, with sources); `remedy/decide.decide` climbs them and `remedy/carrier.Carrier` carries a
reset out with `run_reset`, the one edge here.

Words used throughout:
* an *attempt* is one occurrence of a fault of a class that the ladder took on (its rungs tried in turn:
  one reset, then reboots, then repair);  `max_attempts` attempts of a class within `attempt_window_s`
  is the cap: that attempt is not remedied again, the node is drained for repair;
* a *remedy* is one rung tried; its outcome is `succeeded` (the fault was gone on the next read),
  `transient` (the remedy did not complete: the command failed or timed out) or `permanent` (it ran and
  the fault stayed);
* a *case* is a node's open story for a class: its attempts, first and last, and whether it is drained
  for repair.  It closes when an admin resumes a node drained for repair.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

# "repair <class> attempt N of M in Dd: ... [gpufleet]" never resumes by itself
from ..slurm.reasons import REPAIR as REPAIR_WORD
from ..slurm.reasons import ours, says

if TYPE_CHECKING:
    from ..judging.findings import Finding
    from ..readers.snapshot import NodeSnapshot

OUTCOMES = ("pending", "succeeded", "transient", "permanent")
MODES = ("observe", "quarantine", "full")


def _data() -> dict:
    from ..catalogs import remediation_data  # loaded once, cached there

    return remediation_data()


def rungs_for(action: str) -> tuple[str, ...]:
    """The ladder of a finding's action; an action with none (drain-severity ones) goes to repair."""
    ladder = _data()["ladder"].get(action)
    return tuple(ladder["rungs"]) if ladder else ("repair",)


def class_of(finding: Finding) -> str:
    """The finding's failure class, whose attempts are counted together."""
    classes = _data()["class"]
    if finding.xid is not None and str(finding.xid) in classes["xid"]:
        return classes["xid"][str(finding.xid)]
    return classes["check"].get(finding.check, finding.check)


def reset_targets(snap: NodeSnapshot, finding: Finding, models: tuple = ()) -> list[int]:
    """The GPUs a reset of this finding takes: the finding's GPU, or every GPU where the board has
    NVSwitch (the driver resets them together) or the finding names no GPU."""
    from ..judging.checks.fabric import needs_fabric_manager

    every = sorted(g.index for g in snap.gpus)
    if finding.gpu is None or needs_fabric_manager(snap, models):
        return every
    return [finding.gpu]


def gpus_idle(snap: NodeSnapshot, gpus: list[int]) -> bool:
    """No compute process on any of these GPUs (a reset of a GPU in use fails, or kills the user's work)."""
    by_index = {g.index: g for g in snap.gpus}
    return all(not (by_index[i].processes or []) for i in gpus if i in by_index)


@dataclass
class ResetResult:
    """How a GPU reset went."""

    ok: bool
    detail: str
    seconds: float


def render(template: str, node: str, gpus: list[int]) -> list[str]:
    """The site's reset command as an argv (never a shell): {gpus} is the comma list, {node} the node."""
    joined = ",".join(str(g) for g in gpus)
    return [part.replace("{gpus}", joined).replace("{gpu}", joined).replace("{node}", node)
            for part in shlex.split(template)]


def run_reset(template: str, node: str, gpus: list[int], timeout_s: float) -> ResetResult:
    """Run the reset command; one that outlives `timeout_s` is killed with its whole process group and
    counts as a reset that did not complete."""
    from ..policy.trust import ROOT_PATH, root_program

    argv = render(template, node, gpus)
    program = root_program(argv[0]) if argv else None
    if program is None:
        return ResetResult(False, f"{argv[0] if argv else 'reset_command'}: not an absolute path nor a program on "
                                  f"root's PATH ({ROOT_PATH})", 0.0)
    argv[0] = program
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    except OSError as exc:
        return ResetResult(False, f"{argv[0]}: {exc.strerror or exc}", 0.0)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        return ResetResult(False, f"killed after {timeout_s:g} s", time.monotonic() - start)
    took = time.monotonic() - start
    last = (out or "").strip().splitlines()[-1:] or [""]
    if proc.returncode != 0:
        return ResetResult(False, f"exit {proc.returncode}: {last[0][:160]}", took)
    return ResetResult(True, last[0][:160], took)


def repair_reason(cls: str, attempt: int, cap: int, window_s: float, what: str) -> str:
    days = window_s / 86400
    window = f"{days:g}d" if days >= 1 else f"{window_s / 3600:g}h"
    return ours(f"{REPAIR_WORD} {cls} attempt {attempt} of {cap} in {window}: {what}")


def is_repair(reason: str) -> bool:
    return says(reason, REPAIR_WORD)


def mark_reset(kernel_log: str | None, node: str, pcis: list[str]) -> str | None:
    """Say in the node's kernel log that these GPUs were reset, one line each (readers/kernel_log.RESET_MARK):
    the Xids logged before it in this boot were answered, and the next read must not take them for new
    ones.  /dev/kmsg gets the lines as kernel messages; a log directory, its `<node>.kmsg`.  Returns why
    it could not, or None."""
    import datetime as dt

    from ..readers.kernel_log import RESET_MARK

    if not kernel_log:
        return "no kernel log configured"
    # a log directory holds one <node>.kmsg per node (pipeline.kernel_log_path): this node's, made if new
    path = os.path.join(kernel_log, f"{node}.kmsg") if os.path.isdir(kernel_log) else kernel_log
    try:
        if path == "/dev/kmsg":
            fd = os.open(path, os.O_WRONLY)
            try:
                for pci in pcis:
                    os.write(fd, f"<5>{RESET_MARK}{pci}\n".encode())  # one write per record
            finally:
                os.close(fd)
        else:
            stamp = dt.datetime.now().astimezone().isoformat(timespec="microseconds")
            with open(path, "a", encoding="utf-8") as fh:
                fh.writelines(f"{stamp} {RESET_MARK}{pci}\n" for pci in pcis)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    return None


CASE_FIELDS = ("node", "class", "attempts", "first", "last", "status", "todo")
# what each status a node publishes asks of an admin, in the order `fleet cases` lists them
CASE_STATUSES = {
    "validation_failed": "validation failed: read its job's output on the node ({state_dir}/validation-JOB.out, "
                         "the job in the reason), repair, then `slurm-gpufleet fleet repaired NODE`",
    "repair": "needs repair: inspect it, then `slurm-gpufleet fleet repaired NODE` (or resume it)",
    "config": "held for its configuration, which no remedy of the ladder fixes (the reason says what: a driver or "
              "firmware off the group's pins, ECC off, a compute mode, or Slurm's own view of the node: gres.conf, "
              "slurmd's registration): fix it; the node returns by itself once its checks run clean",
    "suspect": "held as a suspect in its own maintenance reservation (gpufleet-suspect-NODE): its running job "
               "finishes, no new job lands; re-checked every suspect_recheck_min, released after suspect_passes "
               "clean re-checks, or drained for repair",
    "unverified": "back in service, its validation's outcome not known (the job left Slurm before it was read, "
                  "and its output, {state_dir}/validation-JOB.out on the node, says no exit): read that output; "
                  "to validate it again, drain it and `slurm-gpufleet fleet repaired NODE`",
    "running": "a remedy under way (reset, reboot or validation): nothing to do yet",
    "watch": "nothing: remedied, its attempts still counted within attempt_window_s",
}


def fleet_cases(nodes, state_dir: str = "<state_dir>") -> list[dict]:
    """Every open case of the fleet, from what each node's health check published (FleetNode.cases):
    what needs an admin first (a failed validation, a repair), then the most recent."""
    import datetime as dt

    order = {status: k for k, status in enumerate(CASE_STATUSES)}
    rows = []
    for n in nodes:
        for cls, attempts, first, last, status in n.cases:
            todo = CASE_STATUSES.get(status, "").replace("{state_dir}", state_dir)
            rows.append({"node": n.name, "class": cls, "attempts": attempts,
                         "first": dt.datetime.fromtimestamp(first, dt.UTC).isoformat(timespec="seconds"),
                         "last": dt.datetime.fromtimestamp(last, dt.UTC).isoformat(timespec="seconds"),
                         "status": status, "todo": todo,
                         "reason": n.reason if status in ("repair", "validation_failed", "config") else ""})
    rows.sort(key=lambda r: r["last"], reverse=True)  # the most recent first, within each status
    return sorted(rows, key=lambda r: order.get(r["status"], len(order)))
