"""Prometheus text-format metrics for node_exporter's textfile collector, written atomically."""

from __future__ import annotations

import time
from typing import Any

from ..judging.findings import RANK
from ..judging.pipeline import Report
from ..readers.snapshot import CLOCK_EVENT_REASONS, known


def registry_for(report: Report, node: str | None = None, breaker_open: bool | None = None) -> Any:
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry()
    s = report.snapshot
    host = node or s.host or "unknown"
    verdict = Gauge("gpufleet_gpu_verdict", "Worst severity per GPU (0 ok, 1 warn, 2 reboot, 3 drain)",
                    ["node", "gpu", "uuid"], registry=reg)
    node_verdict = Gauge("gpufleet_node_verdict", "The node's verdict (0 ok, 1 warn, 2 reboot, 3 drain)", ["node"],
                         registry=reg)
    findings = Gauge("gpufleet_findings", "Findings by check and severity", ["node", "check", "severity"],
                     registry=reg)
    ecc = Gauge("gpufleet_ecc_errors", "ECC error counters", ["node", "gpu", "scope", "memory", "kind"], registry=reg)
    remap = Gauge("gpufleet_remapped_rows", "Remapped rows", ["node", "gpu", "kind"], registry=reg)
    remap_flag = Gauge("gpufleet_remap_state", "Remap pending / failure flags (1 = set)", ["node", "gpu", "flag"],
                       registry=reg)
    throttle = Gauge("gpufleet_clock_event_reason", "Active clock-event (throttle) reasons (1 = active)",
                     ["node", "gpu", "reason"], registry=reg)
    perf = Gauge("gpufleet_perf", "Last performance measurement", ["node", "gpu", "measure"], registry=reg)
    last = Gauge("gpufleet_last_check_timestamp_seconds", "When the check ran", ["node"], registry=reg)
    duration = Gauge("gpufleet_check_duration_seconds", "How long the checks took", ["node"], registry=reg)
    if breaker_open is not None:
        Gauge("gpufleet_drain_breaker_open", "1 while the fleet-wide drain breaker is open (reset by an admin)",
              ["node"], registry=reg).labels(host).set(int(breaker_open))

    worst: dict[int | None, int] = {}
    counts: dict[tuple[str, str], int] = {}
    for f in report.findings:
        worst[f.gpu] = max(worst.get(f.gpu, 0), RANK[f.severity])
        counts[(f.check, f.severity)] = counts.get((f.check, f.severity), 0) + 1
    for (check, severity), n in counts.items():
        findings.labels(host, check, severity).set(n)
    node_verdict.labels(host).set(RANK[report.verdict])
    for g in s.gpus:
        gid = str(g.index)
        verdict.labels(host, gid, known(g.uuid) or "").set(max(worst.get(g.index, 0), worst.get(None, 0)))
        for scope in ("volatile", "aggregate"):
            for memory in ("dram", "sram"):
                for kind in ("corrected", "uncorrected"):
                    v = known(getattr(g.ecc, f"{scope}_{memory}_{kind}"))
                    if isinstance(v, int):
                        ecc.labels(host, gid, scope, memory, kind).set(v)
        for kind in ("correctable", "uncorrectable"):
            v = known(getattr(g.remapped_rows, kind))
            if isinstance(v, int):
                remap.labels(host, gid, kind).set(v)
        for flag in ("pending", "failure"):
            v = known(getattr(g.remapped_rows, flag))
            if isinstance(v, bool):
                remap_flag.labels(host, gid, flag).set(int(v))
        reasons = known(g.clock_event_reasons)
        if isinstance(reasons, list):
            for name in CLOCK_EVENT_REASONS.values():
                throttle.labels(host, gid, name).set(int(name in reasons))
    for p in s.performance:
        for measure in ("mem_bw_gbps", "gemm_tflops", "h2d_gbps"):
            v = getattr(p, measure)
            if v is not None:
                perf.labels(host, str(p.gpu), measure).set(v)
    last.labels(host).set(time.time())
    duration.labels(host).set(report.duration_s)
    return reg


def _write(path: str, registry: Any) -> None:
    """The registry in the text format, written whole (safefile: never through another user's link)."""
    from prometheus_client import generate_latest

    from ..common.safefile import write_file

    write_file(path, generate_latest(registry))


def write_textfile(path: str, report: Report, node: str | None = None, breaker_open: bool | None = None) -> None:
    _write(path, registry_for(report, node, breaker_open))


def lemon_registry(flags: list, scores: dict[str, int], cases: list, lemon_jobs: int) -> Any:
    """The lemon record's view (`fleet lemons --textfile`): each in-job flag seen this step, each node's
    score (distinct jobs flagged since its last case closed), each open or just-closed case."""
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry()
    flag = Gauge("gpufleet_instep_flag", "1 for each node (and GPU) the in-job detector holds apart from its job now",
                 ["node", "job", "gpu", "signature"], registry=reg)
    score = Gauge("gpufleet_lemon_score", "Distinct jobs the node was flagged in since its last lemon case closed",
                  ["node"], registry=reg)
    threshold = Gauge("gpufleet_lemon_jobs", "The score at which a node is held for the deep check", registry=reg)
    case = Gauge("gpufleet_lemon_case", "1 for the state of each lemon case this step saw (checking, confirmed, "
                 "cleared, unchecked)", ["node", "state"], registry=reg)
    for f in flags:
        flag.labels(f.node, f.job, "" if f.gpu is None else str(f.gpu), f.signature).set(1)
    for node, n in scores.items():
        score.labels(node).set(n)
    threshold.set(lemon_jobs)
    for c in cases:
        case.labels(c.node, c.state).set(1)
    return reg


def fleet_registry(inv: dict[str, Any]) -> Any:
    """`fleet --textfile`: the nodes that cannot be trusted to be checked, by kind."""
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry()
    unchecked = Gauge("gpufleet_fleet_nodes_unchecked", "Nodes in service whose checks cannot be trusted: silent "
                      "(no summary within the bound), erroring (the tool's own faults, summary err), or in a "
                      "multi-node job whose in-job sampler publishes nothing (sampler_gone)", ["kind"],
                      registry=reg)
    unchecked.labels("silent").set(len((inv.get("silent") or {}).get("nodes") or []))
    unchecked.labels("error").set(len(inv.get("cannot_check") or []))
    unchecked.labels("sampler_gone").set(len({n for g in inv.get("samplers_gone") or [] for n in g["nodes"]}))
    return reg


def reliability_registry(rel: dict[str, Any]) -> Any:
    """`fleet report --textfile`: the fleet's reliability per node group over the report's window."""
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry()
    per_day = Gauge("gpufleet_fleet_incidents_per_node_day", "Incidents (nodes taken out of service by the tool) "
                    "per node-day over the report's window", ["group"], registry=reg)
    mtbi = Gauge("gpufleet_fleet_mtbi_hours", "Mean time between incidents per node, hours", ["group"], registry=reg)
    ttr = Gauge("gpufleet_fleet_ttr_hours", "Time to repair, hours, by who closed it (automatic: the ladder; "
                "manual: an admin or the repair rung)", ["group", "how", "quantile"], registry=reg)
    false = Gauge("gpufleet_fleet_false_hold_ratio", "Share of ended holds that found nothing (no remedy tried)",
                  ["group"], registry=reg)
    out = Gauge("gpufleet_fleet_nodes_out", "Nodes out of service now, by failure class", ["group", "cause"],
                registry=reg)
    worked = Gauge("gpufleet_fleet_remedy_success_ratio", "Remedies that worked, by failure class and rung",
                   ["group", "class", "rung"], registry=reg)
    for group, g in rel.get("groups", {}).items():
        if g["incidents_per_node_day"] is not None:
            per_day.labels(group).set(g["incidents_per_node_day"])
        if g["mtbi_hours"] is not None:
            mtbi.labels(group).set(g["mtbi_hours"])
        for how, q in g["ttr_hours"].items():
            for name in ("p50", "p90"):
                if q[name] is not None:
                    ttr.labels(group, how, "0.5" if name == "p50" else "0.9").set(q[name])
        if g["false_hold_share"] is not None:
            false.labels(group).set(g["false_hold_share"])
        for cause, n in g["out_now"].items():
            out.labels(group, cause).set(n)
        for cls, rungs in g["remedies"].items():
            for rung, v in rungs.items():
                if v["tried"]:
                    worked.labels(group, cls, rung).set(round(v["succeeded"] / v["tried"], 4))
    return reg


def write_reliability_textfile(path: str, rel: dict[str, Any]) -> None:
    _write(path, reliability_registry(rel))


def write_fleet_textfile(path: str, inv: dict[str, Any]) -> None:
    _write(path, fleet_registry(inv))


def write_lemon_textfile(path: str, flags: list, scores: dict[str, int], cases: list, lemon_jobs: int) -> None:
    _write(path, lemon_registry(flags, scores, cases, lemon_jobs))
