"""The node reasons slurm-gpufleet writes to Slurm, and how it knows them again.

A reason says what happened first, so that `sinfo -R`'s narrow column shows it, and ends with the mark
that makes it ours:

    memory gpu1 row remap pending [gpufleet]
    repair ecc attempt 3 of 3 in 7d: memory gpu3 uncorrectable ECC [gpufleet]
    validate after reboot: xid gpu2 Xid 79 fallen off the bus [gpufleet] : reboot issued : reboot complete

Slurm may append its own words after ours (a reboot's ": reboot issued : reboot complete"); the mark
stays where we put it.  The first words say whose and what kind (ownership.py reads them): `maintain`
(a rollout), `performance` (a straggler drain), `rack` (rack escalation), `validate after` (a node on its
way back), `repair` (held for hands), anything else a health finding.  Reasons written before the mark
existed (`gpufleet: <words>`) are still ours, so that an upgrade of this tool keeps every node it drained.
"""

from __future__ import annotations

import re

MAX_REASON = 120  # scontrol has no real limit, but sinfo -R and dashboards cut long reasons
MARK = "[gpufleet]"
_MARKED = f" {MARK}"
LEGACY_PREFIX = "gpufleet:"

# the first words of each kind of reason
MAINTAIN = "maintain"
PERFORMANCE = "performance"
RACK = "rack"
VALIDATE_AFTER = "validate after"
REPAIR = "repair"


def one_line(text: str) -> str:
    """Any reason on its way to Slurm: one line, no control characters or quotes, at most MAX_REASON.
    A marked reason that is too long loses words before the mark, never the mark."""
    text = re.sub(r"[\x00-\x1f\x7f\"'`\\]+", " ", text)
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) <= MAX_REASON:
        return text
    at = text.find(_MARKED)
    if at < 0:
        return text[: MAX_REASON - 3].rstrip() + "..."
    tail = text[at:]
    room = max(MAX_REASON - len(tail) - 3, 0)
    return text[:at][:room].rstrip() + "..." + tail


def ours(words: str) -> str:
    """The reason Slurm gets for `words`: the words, then the mark."""
    return one_line(f"{words}{_MARKED}")


def words_of(reason: str) -> str | None:
    """The words of a reason we wrote (without the mark and whatever Slurm appended), None for anyone else's."""
    reason = (reason or "").strip()
    at = reason.find(_MARKED)
    if at >= 0:
        return reason[:at].strip()
    if reason.startswith(LEGACY_PREFIX):
        return reason[len(LEGACY_PREFIX):].strip()
    return None


def says(reason: str, first: str) -> bool:
    """One of our reasons, whose words begin with the word(s) `first`."""
    words = words_of(reason)
    return words is not None and (words == first or words.startswith((f"{first} ", f"{first}:")))


def after(reason: str, first: str) -> str | None:
    """What one of our reasons says after its first words (`first`), or None when it does not begin so."""
    if not says(reason, first):
        return None
    return (words_of(reason) or "")[len(first):].lstrip(" :")


def same(shown: str, wanted: str) -> bool:
    """Does the reason Slurm shows already say what we want it to?  Our words are compared, not the form:
    a reason written before the mark is not rewritten for the form's sake."""
    words = words_of(shown)
    return shown == wanted or (words is not None and words == words_of(wanted))
