"""What to do about a node, decided from its verdict, its Slurm state and its own history.  Pure.

Rules an admin can rely on:
* a node drained, down or rebooting by anyone else is never touched, and its reason never replaced;
* we resume only nodes whose reason carries our prefix (or the "Prolog error"/"Epilog error" drain our
  own prolog/epilog caused), and only after `clean_runs_to_resume` clean runs in a row;
* a reset-fixable fault asks for `scontrol reboot ASAP nextstate=RESUME` once per boot; still there
  after `reboots_before_drain` reboots, it becomes a drain for hardware inspection;
* look before rebooting: a reboot into a kernel with no module for this driver would lose the GPUs, so
  that reboot becomes a drain naming the kernel (from the host facts the node's read gathered).

`slurm/actuator.py` carries the action out (ownership and the drain breaker apply there too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..findings import RANK, Finding
from .base import NodeInfo
from .ownership import (  # noqa: F401  (re-exported: one place names them)
    HEALTH,
    MAINTAIN_PREFIX,
    PREFIX,
    RACK_PREFIX,
    SLURM_HOOK_REASONS,
    STRAGGLER_PREFIX,
    left_alone,
    owner_of_reason,
)

MAX_REASON = 120  # scontrol has no real limit, but sinfo -R and dashboards cut long reasons


def make_reason(finding: Finding, suffix: str = "") -> str:
    """'gpufleet: <check> <gpu> <short message>', one line, no quotes, at most MAX_REASON chars."""
    gpu = f"gpu{finding.gpu}" if finding.gpu is not None else "node"
    return one_line(f"{PREFIX} {finding.check} {gpu} {finding.message}{suffix}")


def one_line(text: str) -> str:
    """Any reason on its way to Slurm: one line, no control characters or quotes, at most MAX_REASON."""
    text = re.sub(r"[\x00-\x1f\x7f\"'`\\]+", " ", text)
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3].rstrip() + "..."


# slurmctld refuses a job comment longer than this ("parameter too long"; sbatch refused 5,012 characters
# on 22.05): a job's comment is its owner's text, so ours is added only where the whole fits
JOB_COMMENT_MAX = 1024


def job_comment(text: str) -> str:
    """A job comment on its way to Slurm (an argv value, never a shell): one line, never cut."""
    return re.sub(r"[\x00-\x1f\x7f]+", " ", text).strip()


def is_ours(reason: str) -> bool:
    """A drain this health check may update or resume: our prefix, but not a rollout's or a straggler's."""
    return owner_of_reason(reason) == HEALTH


def fault_key(finding: Finding) -> str:
    """Identifies 'the same fault' across reboots: domain, GPU and action, not the changing numbers."""
    return f"{finding.check}:{finding.gpu}:{finding.action}"


def worst(findings: list[Finding], severity: str | None = None) -> Finding | None:
    pool = [f for f in findings if severity is None or f.severity == severity]
    return max(pool, key=lambda f: RANK[f.severity], default=None)


@dataclass
class NodeHistory:
    """What the node's own history says, as the decision needs it."""

    clean_runs: int = 0                  # healthcheck runs with verdict ok/warn in a row, this one included
    hook_failure: bool = False           # our prolog/epilog failed since we last resumed the node
    # fault key -> boot ids (Slurm BootTime) at which we asked for a reboot for it
    reboot_boots: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Action:
    kind: str      # drain | set_reason | resume | reboot | none
    reason: str = ""
    why: str = ""
    fault: str | None = None


def decide(node: NodeInfo, verdict: str, findings: list[Finding], history: NodeHistory,
           clean_runs_to_resume: int, reboots_before_drain: int, host=None, driver: str | None = None) -> Action:
    """host: the node's HostFacts (readers/host.py), when read; driver: the driver it runs."""
    ours = is_ours(node.reason) or (node.reason in SLURM_HOOK_REASONS and history.hook_failure)
    held = node.drained or node.down or node.rebooting
    if held and not ours:
        return Action("none", why=left_alone(node))
    if node.rebooting:
        return Action("none", why="our reboot is pending")

    if verdict in ("ok", "warn"):
        if held:
            if history.clean_runs >= clean_runs_to_resume:
                return Action("resume", why=f"{history.clean_runs} clean runs in a row")
            return Action("none", why=f"clean run {history.clean_runs} of {clean_runs_to_resume} before resume")
        return Action("none", why="healthy")

    if verdict == "reboot":
        f = worst(findings, "reboot")
        key = fault_key(f)
        boots = history.reboot_boots.get(key, [])
        survived = len({b for b in boots if b != node.boot_time})
        if survived >= reboots_before_drain:
            reason = make_reason(f, f" after {survived} reboots")
            return _drain(node, ours, reason, f"{f.message} survived {survived} reboots: hardware inspection", key)
        if node.boot_time is not None and node.boot_time in boots:
            return Action("none", why="reboot already requested in this boot", fault=key)
        from ..checks.kernel import reboot_problem

        problem = reboot_problem(host, driver) if host is not None else None
        if problem:
            return _drain(node, ours, one_line(f"{PREFIX} {problem}"), f"not rebooted ({make_reason(f)}): {problem}", key)
        return Action("reboot", reason=make_reason(f), why=f"reset-fixable: {f.message}", fault=key)

    f = worst(findings, "drain")
    return _drain(node, ours, make_reason(f), f.detail or f.message, fault_key(f))


def _drain(node: NodeInfo, ours: bool, reason: str, why: str, key: str) -> Action:
    if node.drained and ours:
        if node.reason.startswith(RACK_PREFIX):  # the rack's reason stands until the rack comes back whole
            return Action("none", why=f"held by its rack's escalation ({why})", fault=key)
        if node.reason == reason:
            return Action("none", why="already drained by us for this", fault=key)
        return Action("set_reason", reason=reason, why=why, fault=key)
    return Action("drain", reason=reason, why=why, fault=key)
