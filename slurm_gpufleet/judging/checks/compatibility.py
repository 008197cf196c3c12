"""Compatibility: can this driver branch run these GPUs at all, and is the branch still supported?"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...catalogs import compat, find_model
from ...readers.snapshot import known
from ..findings import Finding
from ._util import readable_gpus

if TYPE_CHECKING:
    from . import Context

NAME = "compatibility"
ORDER = 30


def branch_refused(info: compat.BranchInfo, allowed: list[str]) -> str | None:
    """The group's branch policy: why this branch is not one it accepts, or None."""
    if not allowed:
        return None
    if info.type is None:
        return f"R{info.branch} branch type unknown (group accepts {'/'.join(allowed)})"
    if info.type not in allowed:
        return f"R{info.branch} is a {info.type} branch (group accepts {'/'.join(allowed)})"
    return None


def check(ctx: Context) -> list[Finding]:
    snap, pol = ctx.snapshot, ctx.policy
    driver = known(snap.driver_version)
    if not driver:
        return []
    try:
        compat.parse_version(driver)
    except ValueError:
        return [Finding(NAME, "warn", "watch", None, f"driver version {driver!r} unreadable",
                        "the driver version is not dotted numbers; compatibility not judged")]
    out: list[Finding] = []
    seen: set[str] = set()
    for g in readable_gpus(snap):
        arch = known(g.architecture)
        cc = known(g.compute_capability)
        if not arch and not cc:
            model = find_model(known(g.name), ctx.models)
            arch = model.architecture if model else None
        key = arch or cc
        if not key or key in seen:
            continue
        seen.add(key)
        result = compat.evaluate(driver, arch=arch, cc=None if arch else cc, today=ctx.today)
        if not result.compatible:
            out.append(Finding(NAME, "drain", "fix_config", g.index,
                               f"{result.architecture or key} unsupported by R{result.branch}",
                               "; ".join(result.problems)))
    cves = compat.cves_for(driver)
    if cves:
        critical = [c for c in cves if (c["cvss"] or 0) >= 9.0]
        worst = max(cves, key=lambda c: c["cvss"] or 0)
        safe = compat.safe_version(driver)
        severity = max(pol.cve_severity, pol.cve_critical_severity if critical else "ok",
                       key=lambda s: ("ok", "warn", "reboot", "drain").index(s))
        out.append(Finding(NAME, severity, "fix_config" if severity != "ok" else "watch", None,
                           f"driver exposed to {len(cves)} CVE(s), worst {worst['severity']} {worst['cvss']}",
                           f"worst {worst['id']} (bulletin {worst['bulletin']}); "
                           + (f"fixed from {safe} on R{compat.branch_of(driver)}" if safe
                              else f"R{compat.branch_of(driver)} gets no fix: change branch"),
                           extra={"cves": [c["id"] for c in cves]}))
    info = compat.branch_info(compat.branch_of(driver))
    refused = branch_refused(info, pol.allowed_branch_types)
    if refused:
        out.append(Finding(NAME, pol.branch_type_severity, "fix_config", None, refused[:80],
                           f"the node group accepts {', '.join(pol.allowed_branch_types)} branches only"))
    if info.ended(ctx.today):
        out.append(Finding(NAME, pol.eol_branch_severity, "watch", None, f"driver branch R{info.branch} end of life",
                           f"R{info.branch} ({info.type}) support ended ({info.eol}); plan an upgrade"))
    return out
