"""DCGM's diagnostic, read as data (readers/dcgm.py): a failed test of one of the node's GPUs is a finding
whose severity and action come from the severity DCGM gives its errors (data/dcgm.toml, from DCGM's
dcgm_errors.h): ISOLATE drains, RESET asks for a reset, CONFIG and MONITOR only warn.  Where the output gives
no severity (DCGM 2.x to 3.1), the reader takes the class from DCGM's own error table (data/dcgm_errors.toml);
a failed test no table places is TRIAGE.  A warning is a warning; a test of another entity (a CPU) only warns.
GPUs of the node that the run did not judge are unverified, never passed.  What DCGM itself could not do is
not the GPUs' fault: no finding here (the node's summary says it, `err`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..findings import Finding

if TYPE_CHECKING:
    from . import Context

NAME = "dcgm"
ORDER = 185

# a failed test whose errors no severity, id, message or test places: it failed, nothing says it may be ignored
NO_SEVERITY = 4


def check(ctx: Context) -> list[Finding]:
    from ...catalogs import dcgm_severities
    from ...readers.dcgm import uncovered

    diag = ctx.snapshot.dcgm
    if diag is None:
        return []
    severities = dcgm_severities()
    gpus = {g.index for g in ctx.snapshot.gpus}
    out = []
    for r in diag.results:
        if r.status not in ("fail", "warn"):
            continue
        words = "; ".join(r.errors) or f"{r.category} {r.test} {r.status}"
        where = r.test or r.category or "test"
        if r.status == "warn" or r.gpu is None or r.gpu not in gpus:
            whose = "" if r.gpu in gpus else f" ({r.entity} {r.gpu})" if r.gpu is not None else f" ({r.entity})"
            out.append(Finding(NAME, "warn", "watch", r.gpu if r.gpu in gpus else None,
                               f"{where} {r.status}{whose}"[:80], words[:300]))
            continue
        sev = severities.get(NO_SEVERITY if r.severity is None else r.severity, severities[NO_SEVERITY])
        out.append(Finding(NAME, sev["severity"], sev["action"], r.gpu, f"{where} failed ({sev['name']})",
                           words[:300]))
    missed = uncovered(diag, sorted(gpus))
    if missed and diag.error is None:
        out.append(Finding(NAME, "warn", "watch", None, f"DCGM judged {len(gpus) - len(missed)} of {len(gpus)} GPUs",
                           f"GPU(s) {', '.join(map(str, missed))} not in DCGM's run: unverified"))
    return out
