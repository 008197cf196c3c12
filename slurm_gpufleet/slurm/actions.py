"""Reasons and comments on their way to Slurm, and the fault identities the remedies count by.

What to do about a node is decided in remedy/decide.py and carried out by remedy/carrier.py.
"""

from __future__ import annotations

import re

from ..judging.findings import RANK, Finding
from .ownership import (  # noqa: F401  (re-exported: one place names them)
    HEALTH,
    HOOK,
    SLURM_HOOK_REASONS,
    left_alone,
    owner,
    owner_of_reason,
)
from .reasons import MAX_REASON, one_line, ours, words_of  # noqa: F401  (re-exported)


def fault_words(finding: Finding, suffix: str = "") -> str:
    """'<check> <gpu> <short message>': what a finding's reason says."""
    gpu = f"gpu{finding.gpu}" if finding.gpu is not None else "node"
    return f"{finding.check} {gpu} {finding.message}{suffix}"


def make_reason(finding: Finding, suffix: str = "") -> str:
    """'<check> <gpu> <short message> [gpufleet]', one line, no quotes, at most MAX_REASON chars."""
    return ours(fault_words(finding, suffix))


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
