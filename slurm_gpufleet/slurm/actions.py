"""Reasons and comments on their way to Slurm, and the fault identities the remedies count by.

What to do about a node is decided in remedy/decide.py and carried out by remedy/carrier.py.
"""

from __future__ import annotations

import re

from ..findings import RANK, Finding
from .ownership import (  # noqa: F401  (re-exported: one place names them)
    HEALTH,
    HOOK,
    MAINTAIN_PREFIX,
    PREFIX,
    RACK_PREFIX,
    SLURM_HOOK_REASONS,
    STRAGGLER_PREFIX,
    left_alone,
    owner,
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
