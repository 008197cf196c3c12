"""The fleet at a glance, per node group, from what nodes publish to Slurm: drivers, GPU models, firmware,
verdicts, and which nodes are off their group's standard and why."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from ..policy import Policy
from .fleet import FleetState


def inventory(fleet: FleetState, policy: Policy, interval_s: float | None = None) -> dict[str, Any]:
    """`interval_s`: slurm.conf's HealthCheckInterval, where known (a node checked less often than its
    heartbeat is silent only after three of its intervals)."""
    groups: dict[str, list] = defaultdict(list)
    for node in sorted(fleet.nodes.values(), key=lambda n: n.name):
        p = policy.for_node(node.name)
        groups[p.groups[-1] if p.groups else "(defaults)"].append((node, p))
    out: dict[str, Any] = {"nodes": len(fleet.nodes), "groups": {},
                           "groups_matching_no_node": [{"group": name, "nodes": nodes}
                                                       for name, nodes in policy.unmatched_groups(fleet.nodes)],
                           # nodes whose checks cannot run as configured (a config that does not load): each
                           # runs on the last config that did, and says why
                           "cannot_check": [{"node": n.name, "err": n.error} for n in
                                            sorted(fleet.nodes.values(), key=lambda n: n.name) if n.error],
                           "silent": silent(fleet, policy, interval_s),
                           "samplers_gone": samplers_gone(fleet, policy)}
    for group, members in groups.items():
        drivers = Counter(n.driver or "unknown" for n, _ in members)
        firmware = Counter(n.firmware or "unknown" for n, _ in members)
        standard_driver = members[0][1].driver_version or drivers.most_common(1)[0][0]
        allowed_fw = set(members[0][1].vbios)
        standard_fw = firmware.most_common(1)[0][0]
        off: list[dict[str, str]] = []
        for node, _ in members:
            why = []
            if node.driver is None:
                why.append("publishes no GPU summary (health check not running?)")
            else:
                if node.driver != standard_driver:
                    why.append(f"driver {node.driver} != {standard_driver}")
                fw_ok = (node.firmware or "") in allowed_fw if allowed_fw else node.firmware == standard_fw
                if not fw_ok:
                    why.append(f"firmware {node.firmware} != {', '.join(sorted(allowed_fw)) or standard_fw}")
                if node.verdict not in ("ok", "warn"):
                    why.append(f"verdict {node.verdict}")
                if node.config_refused:
                    why.append("config refused (not root's alone): checked on the packaged defaults")
                if node.error:
                    why.append(f"the tool's own fault, not the GPUs': {node.error}")
            if why:
                off.append({"node": node.name, "why": "; ".join(why)})
        out["groups"][group] = {
            "nodes": len(members),
            "mode": members[0][1].mode,  # observe, quarantine or full (what its remedies may do)
            "standard_driver": standard_driver,
            "pinned": bool(members[0][1].driver_version),
            "drivers": dict(drivers.most_common()),
            "models": dict(Counter(n.gpus or "unknown" for n, _ in members).most_common()),
            "firmware": dict(firmware.most_common()),
            "verdicts": dict(Counter(n.verdict or "unknown" for n, _ in members).most_common()),
            "states": dict(Counter("+".join([n.state, *n.flags]) for n, _ in members).most_common()),
            "off_standard": off,
            "exposed": _exposure(members),
            # observe mode: what each node's health check would have done (nothing was)
            "observed": [{"node": n.name, "would": n.observed} for n, _ in members if n.observed],
            "network": _network(members),
        }
    return out


def _network(members) -> dict[str, Any]:
    """The group's InfiniBand as its nodes published it: ports down, below their rate, error counters that
    grew at the last check, HCAs missing; each kind with its nodes."""
    out: dict[str, Any] = {}
    names = {"d": "down", "s": "slow", "c": "counters_grew", "m": "missing"}
    for node, _ in members:
        for key, kind in names.items():
            value = (node.network or {}).get(key)
            if value:
                entry = out.setdefault(kind, {"nodes": [], "ports": 0})
                entry["nodes"].append(node.name)
                entry["ports"] += value if isinstance(value, int) else len(value)
    return out


def _exposure(members) -> list[dict[str, Any]]:
    """Per driver the group runs: the nodes exposed to CVEs of NVIDIA's bulletins, and the first safe
    version on that branch (None: the branch gets no fix)."""
    from ..catalogs import compat

    by_driver: dict[str, list[str]] = defaultdict(list)
    for node, _ in members:
        if node.driver:
            by_driver[node.driver].append(node.name)
    out = []
    for driver, nodes in sorted(by_driver.items()):
        try:
            cves = compat.cves_for(driver)
        except ValueError:
            continue  # not a version number: nothing to look up
        if cves:
            worst = max(cves, key=lambda c: c["cvss"] or 0)
            out.append({"driver": driver, "nodes": nodes, "cves": [c["id"] for c in cves],
                        "worst": f"{worst['id']} {worst['severity']} {worst['cvss']}",
                        "safe_version": compat.safe_version(driver)})
    return out




def silent(fleet: FleetState, policy: Policy, interval_s: float | None = None) -> dict[str, Any]:
    """No news is not good news: the nodes in service whose summary is older than SILENT_AFTER heartbeats
    (summary.heartbeat_s: an unchanged summary is written again that often), or than as many health-check
    intervals, or that publish none; `after_s` is that bound."""
    from ..judging.summary import SILENT_AFTER, heartbeat_s, published_at

    after = SILENT_AFTER * max(heartbeat_s(policy.slurm, len(fleet.nodes)), float(interval_s or 0))
    nodes = []
    for node in sorted(fleet.nodes.values(), key=lambda n: n.name):
        if node.held or node.state in ("DOWN", "FUTURE", "UNKNOWN"):
            continue  # out of service: its checks are not expected to run
        at = published_at({"t": node.checked}) if node.checked else None
        if at is None:
            nodes.append({"node": node.name, "last": None})
        elif fleet.taken_at - at > after:
            nodes.append({"node": node.name, "last": node.checked})
    return {"after_s": round(after), "nodes": nodes}


def samplers_gone(fleet: FleetState, policy: Policy) -> list[dict[str, Any]]:
    """Multi-node jobs running long enough that each of their nodes' samplers should have published (the
    windows sampler.publish_every spaces them by, and two more), with the nodes whose summary holds no live
    digest of the job: their sampler died, and the job's straggler view is blind there.  Not judged where
    the samplers write to a shared directory (instep_share_dir) instead of Slurm."""
    from ..slowgpus.sampler import publish_every

    s = policy.slurm
    if s.instep_share_dir or s.publish == "none":
        return []
    grace = (publish_every(s, len(fleet.nodes)) + 2) * s.instep_window_s
    out = []
    for job in sorted(fleet.jobs, key=lambda j: j.job_id):
        if len(job.nodes) < 2 or job.start_time is None or fleet.taken_at - job.start_time < grace:
            continue
        missing = [n for n in job.nodes if n in fleet.nodes and job.job_id not in fleet.nodes[n].sampled_jobs]
        if missing:
            out.append({"job": job.job_id, "nodes": missing})
    return out
