"""The text the commands print for people, in one place: each function takes the data a command gives with
--json (or the report behind it) and returns its text, so that the words and the JSON never disagree.
The plan's report keeps its module (maintain/report.py), where its text and its HTML share their helpers.
It imports nothing heavy at the top: the health check's path reaches `check_text` too."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..judging.pipeline import Report


def check_text(report: Report) -> str:
    """`check`: the verdict line, then each finding (and its detail)."""
    from ..readers.snapshot import known

    s = report.snapshot
    head = (f"{report.verdict.upper()}  {s.host or '-'}  driver {known(s.driver_version) or '?'}  "
            f"CUDA {known(s.cuda_driver_version) or '?'}  {len(s.gpus)} GPU(s)  [{s.source}]"
            + (f"  judged in part ({len(report.judged_in_part)} value(s) not read)" if report.judged_in_part else ""))
    lines = [head]
    if not report.findings:
        lines.append("  no findings")
    for f in report.findings:
        lines.append("  " + f.line())
        if f.detail:
            lines.append("      " + f.detail)
    return "\n".join(lines)


def reliability_text(rel: dict[str, Any]) -> str:
    """`fleet report`: one block per node group."""
    def num(v: float | None, fmt: str = "{:.2f}") -> str:
        return "-" if v is None else fmt.format(v)

    days = (rel["until"] - rel["since"]) / 86400
    lines = [f"reliability over {days:g} day(s), from the nodes' histories"]
    for group, g in rel["groups"].items():
        auto, manual = g["ttr_hours"]["automatic"], g["ttr_hours"]["manual"]
        lines += [f"{group}: {g['nodes']} node(s), {g['incidents']} incident(s), "
                  f"{num(g['incidents_per_node_day'], '{:.4f}')} per node-day, "
                  f"mean time between incidents {num(g['mtbi_hours'], '{:.1f}')} h",
                  f"  time to repair, automatic: p50 {num(auto['p50'])} h, p90 {num(auto['p90'])} h ({auto['n']}); "
                  f"manual: p50 {num(manual['p50'])} h, p90 {num(manual['p90'])} h ({manual['n']})",
                  f"  holds that found nothing: {num(g['false_hold_share'], '{:.0%}')}; out now: "
                  + (", ".join(f"{c} {n}" for c, n in g["out_now"].items()) or "none")]
        for cls, rungs in g["remedies"].items():
            lines.append(f"  {cls}: " + ", ".join(f"{r} {v['succeeded']}/{v['tried']} worked" for r, v in rungs.items()))
    if not rel["groups"]:
        lines.append("no node history")
    lines += [f"unread: {u}" for u in rel.get("unread", [])]
    return "\n".join(lines) + "\n"


def inventory_text(inv: dict[str, Any]) -> str:
    """`fleet`: per node group, its drivers, models, firmware, verdicts and states, exposures, and the nodes
    off its standard."""
    from ..common.hostlist import fold, grouped

    lines = [f"{inv['nodes']} node(s)"]
    if inv.get("cannot_check"):
        lines.append(f"cannot be checked as configured (the tool's own faults): {len(inv['cannot_check'])} node(s)")
        for err, count, nodes in grouped((c["node"], c["err"]) for c in inv["cannot_check"]):
            lines.append(f"  {count:>5} {nodes}: {err}")
    quiet = (inv.get("silent") or {}).get("nodes") or []
    if quiet:  # no news is not good news
        hours = inv["silent"]["after_s"] / 3600
        lines.append(f"silent (no summary newer than {hours:.3g} h, in service): {len(quiet)} node(s)")
        for last, count, nodes in grouped((q["node"], "never published" if q["last"] is None else
                                           f"last {q['last']}") for q in quiet):
            lines.append(f"  {count:>5} {nodes}: {last}")
    for gone in inv.get("samplers_gone") or []:
        lines.append(f"job {gone['job']}: no in-job sampler publishing on {fold(gone['nodes'])} (its straggler "
                     "view is blind there)")
    for u in inv.get("groups_matching_no_node", []):
        lines.append(f"warning: group {u['group']} (nodes = \"{u['nodes']}\") matches no node of the fleet: its "
                     "settings apply nowhere (a typo in its host list?)")
    for group, g in inv["groups"].items():
        lines.append(f"{group}: {g['nodes']} node(s), mode {g['mode']}; standard driver {g['standard_driver']}"
                     f"{' (pinned)' if g['pinned'] else ' (most common)'}")
        for label in ("drivers", "models", "firmware", "verdicts", "states"):
            lines.append(f"  {label:<9} " + ", ".join(f"{k} x{v}" for k, v in g[label].items()))
        for e in g.get("exposed", []):
            fix = f"safe from {e['safe_version']}" if e["safe_version"] else "no fix on this branch: change branch"
            lines.append(f"  exposed   {e['driver']} on {len(e['nodes'])} {fold(e['nodes'])}: {len(e['cves'])} CVE(s), "
                         f"worst {e['worst']}; {fix}")
        net = g.get("network") or {}
        if net:
            lines.append("  network   " + "; ".join(f"{kind.replace('_', ' ')}: {e['ports']} port(s) on "
                                                    f"{len(e['nodes'])} node(s) {fold(e['nodes'])}"
                                                    for kind, e in net.items()))
        if g.get("observed"):
            lines.append(f"  observed: {len(g['observed'])} node(s) where full mode would have acted")
            for would, count, nodes in grouped((o["node"], o["would"]) for o in g["observed"]):
                lines.append(f"    {count:>5} {nodes}: would {would}")
        if g["off_standard"]:
            lines.append(f"  off standard: {len(g['off_standard'])}")
            for why, count, nodes in grouped((o["node"], o["why"]) for o in g["off_standard"]):
                lines.append(f"    {count:>5} {nodes}: {why}")
    return "\n".join(lines)


# the audit log names each Slurm write by the call it made (`slurm create_reservation`): said in words here
EVENT_WORDS = {
    "slurm create_reservation": "reservation made", "slurm update_reservation": "reservation changed",
    "slurm postpone_reservation": "reservation moved later", "slurm delete_reservation": "reservation deleted",
    "slurm drain_nodes": "drained", "slurm resume_nodes": "resumed", "slurm set_reason_nodes": "reason set",
    "slurm reboot_asap_nodes": "reboot asked", "slurm set_weight_nodes": "weight set",
    "slurm set_job_comment": "job told", "slurm signal_job": "job signalled", "slurm requeue_jobs": "jobs requeued",
    "slurm cancel_jobs": "jobs cancelled", "slurm submit_job": "job submitted", "slurm submit_array": "array submitted",
}


def status_text(data: dict[str, Any]) -> list[str]:
    """The lines `maintain status` prints: nodes folded per wave, state and error; the gate's signals;
    the last ten events."""
    from ..catalogs.bundle import Bundle
    from ..common.hostlist import grouped

    out = [f"rollout {data['rollout']}: {data['state']}, {Bundle.from_dict(data['target']).named()} ({data['strategy']}); "
           + ", ".join(f"{k} {v}" for k, v in data["counts"].items())]
    for (wave, state, error), count, folded in sorted(
            grouped((n["node"], (n["wave"], n["state"], n["error"] or "")) for n in data["nodes"]),
            key=lambda r: r[0][:2]):
        out.append(f"  wave {wave:>2}  {state:<12} {count:>5}  {folded}{'  ' + error if error else ''}")
    unverified = [n for n in data["nodes"] if n.get("unverified")]
    if unverified:  # returned, but a part it was compared on could never be read: an admin's look, not a failure
        for parts, count, folded in grouped((n["node"], ", ".join(n["unverified"])) for n in unverified):
            out.append(f"  unverified   {count:>5}  {folded}  {parts} not read after the upgrade")
    w = data.get("waiting")
    if w:
        since = time.strftime("%Y-%m-%d %H:%M:%S%z", time.localtime(w["since"]))
        out.append(f"  waiting for {w['for']} since {since}; holding {w['holds']} node(s) "
                   f"({w['in_progress']} under way), every other node in service")
    g = data["gate"]
    if g.get("signals"):
        out.append(f"  evidence gate: {g['decision']} ({g['why']}); worse = {g['worse_ratio']:g}x the control, "
                   f"confidence {g['confidence']:g}")
        for name, e in g["signals"].items():
            out.append(f"    {name:<9} canary {e['canary_events']:>4} / {e['canary_node_hours']:>8.1f} node-h  "
                       f"control {e['control_events']:>4} / {e['control_node_hours']:>8.1f} node-h  ratio "
                       f"{'-' if e['ratio'] is None else format(e['ratio'], '.2f'):>5}  p "
                       f"{'-' if e['p_value'] is None else format(e['p_value'], '.3f'):>5}  {e['decision']}")
        for model, m in g.get("models", {}).items():
            if m["basis"] != "control":
                out.append(f"    {model}: {m['canary']} canary node(s), no control peers: " + (
                    f"judged against the fleet's record ({m['history_node_hours']:g} node-h)"
                    if m["basis"] == "history" else "too little fleet record to judge by"))
    if data["events"]:  # what it did last, newest first: the same events as --json
        out.append("  last events:")
        for e in data["events"][:10]:
            at = time.strftime("%Y-%m-%d %H:%M:%S%z", time.localtime(e["ts"])) if e["ts"] else "-"
            event = EVENT_WORDS.get(e["event"], e["event"])
            out.append(f"    {at}  {e['node'] or '-':<12} {event:<20} {e['detail'] or ''}"[:160])
    return out


def ladder_text(seen: dict[str, list[dict]], limit: int = 30) -> list[str]:
    """The ladder's steps as `history` prints them, oldest first: what was done and why, what each remedy
    came to, each validation run."""
    lines = []
    steps = list(reversed(seen.get("actions", [])[:limit]))
    if steps:
        lines.append("ladder:")
    for a in steps:
        what = "would " + a["why"].split("would ", 1)[1] if a["action"] == "observe" and "would " in a["why"] else a["why"]
        lines.append(f"  {a['time']}  {a['hook']:<11} {a['action']:<10} "
                     + (f"'{a['reason']}': " if a["reason"] and a["action"] != "observe" else "") + what
                     + ("" if a["ok"] else f"  FAILED: {a['error']}"))
    remedies = list(reversed(seen.get("remedies", [])[:limit]))
    if remedies:
        lines.append("remedies:")
    for r in remedies:
        lines.append(f"  {r['time']}  {r['class']:<14} {r['rung']:<7} {r['outcome']:<10} {r['detail'] or ''}".rstrip())
    checks = list(reversed(seen.get("validations", [])[:limit]))
    if checks:
        lines.append("validation runs:")
    for v in checks:
        lines.append(f"  {v['time']}  job {v['job']} attempt {v['attempt']} after {v['cause']}: {v['state']}"
                     + (f" ({v['detail']})" if v["detail"] else ""))
    return lines


def fleet_text(out: dict[str, Any]) -> str:
    """`fleet simulate-faults`: the assumptions, then the strategies side by side."""
    a = out["assumptions"]
    drawn = ", ".join(f"{k} {v}" for k, v in sorted(a["faults_drawn"].items(), key=lambda kv: -kv[1])) or "none"
    lines = [f"{a['nodes']} nodes x {a['gpus_per_node']} GPUs, {a['days']:g} days, {a['jobs']} jobs ({a.get('history', '')})",
             (f"faults replayed from the fault log ({a['fault_log']['form']}: {a['fault_log']['faults']} faults on "
              f"{a['fault_log']['nodes_in_log']} nodes over {a['fault_log']['span_days']:g} days; classes by the "
              f"keywords of {a['rates']}" if a.get("fault_log") else f"failures drawn ({a['rates']}")
             + f", seed {a['seed']}" + (f", {a['seeds']} seeds, figures are means" if a.get('seeds', 1) > 1 else "")
             + f"): {drawn}; false alarms {a['false_alarms_drawn']}",
             f"health check every {a['health_check_interval_s']:g} s, checkpoint every {a['checkpoint_every_h']:g} h, "
             f"restart {a['restart_minutes']:g} min; not modelled: {a['not_modelled']}"]
    if a.get("domain_size"):
        lines.append(f"domains of {a['domain_size']} nodes: {a['switch_share']:g} of the domain classes' faults "
                     f"switch-side, {a['switch_events_drawn']} switch event(s) drawn, each taking its domain whole")
    lines.append("")
    head = f"{'strategy':<22} {'ETTR':>6} {'ETTR>=1024':>10} {'goodput':>7} {'avail':>6} {'lost GPU-h: failures':>20} " \
           f"{'remedies':>9} {'false drains':>12} {'node-h out':>10} {'peak out':>8} {'to drain p50/p90 min':>21} " \
           f"{'reset/reboot/suspect/repair':>27}" \
           + (f" {'rack':>5} {'escalations':>11} {'breaker trips':>13}" if a.get("domain_size") else "")
    lines.append(head)
    for name, m in out["strategies"].items():
        lat = m["fault_to_drain_min"]
        r = m["resolved"]
        e1024 = "-" if m["ettr_1024"] is None else f"{m['ettr_1024']:.4f}"
        p50 = "-" if lat["p50"] is None else f"{lat['p50']:.1f}"
        p90 = "-" if lat["p90"] is None else f"{lat['p90']:.1f}"
        lines.append(f"{name:<22} {m['ettr']:>6.4f} {e1024:>10} {m['goodput']:>7.4f} {m['availability']:>6.4f} "
                     f"{m['gpu_hours_lost']['failures']:>20.1f} "
                     f"{m['gpu_hours_lost']['remedies']:>9.1f} {m['gpu_hours_lost']['false_drains']:>12.1f} "
                     f"{m['node_hours_out']:>10.1f} {m['peak_nodes_out']:>8g} {p50 + ' / ' + p90:>21} "
                     f"{r['reset']:.2f}/{r['reboot']:.2f}/{r.get('suspect', 0):.2f}/{r['repair']:.2f}"
                     + (f" {r.get('rack', 0):>5.2f} {m.get('rack_escalations', 0):>11g} {m.get('breaker_trips', 0):>13g}"
                        if a.get("domain_size") else ""))
    waits = {name: m["waiting_1024_h"] for name, m in out["strategies"].items() if m.get("waiting_1024_h") is not None}
    if waits:
        lines.append("")
        lines.append("ETTR counts from submit: a job waits in the queue, and again after each failure until enough "
                     "nodes are in service for it.")
        lines.append("jobs of 1,024 GPUs or more waited (h): " + ", ".join(f"{k} {v:g}" for k, v in waits.items()))
    lost = {name: m["jobs_lost"] for name, m in out["strategies"].items() if m.get("jobs_lost")}
    if lost:
        lines.append("jobs ended unfinished, held after more than 5 requeues (MaxBatchRequeue): "
                     + ", ".join(f"{k} {v:g}" for k, v in lost.items())
                     + "; ETTR counts each as a job still waiting at the end (nobody releases it here).")
    rel = {name: m["reliability"] for name, m in out["strategies"].items()
           if (m.get("reliability") or {}).get("mtbi_hours") is not None}
    if rel:   # the figures `fleet report` gives of a real fleet's history, from the carrier's own
        lines.append("as `fleet report` reads the history the ladder kept: incidents per node-day, mean time "
                     "between incidents (h), repair p50/p90 automatic and manual (h), holds that found nothing:")

        def num(v, fmt="{:.2f}"):
            return "-" if v is None else fmt.format(v)

        for name, r in rel.items():
            lines.append(f"  {name}: {num(r['incidents_per_node_day'], '{:.4f}')}, {num(r['mtbi_hours'], '{:.0f}')}, "
                         f"{num(r['ttr_automatic_p50_h'])}/{num(r['ttr_automatic_p90_h'])} automatic, "
                         f"{num(r['ttr_manual_p50_h'])}/{num(r['ttr_manual_p90_h'])} manual, "
                         f"{num(r['false_hold_share'], '{:.0%}')}")
    lines.append("goodput: the work kept over the fleet's GPU-hours; avail: node-hours in service over node-hours.")
    return "\n".join(lines)


def simulation_text(result: dict[str, Any], nodes: int) -> list[str]:
    """The lines `maintain simulate` prints, from the JSON it gives with --json: the strategies side by side,
    then domains, the deadline, failures and the evidence gate's trials where the run had them."""
    from ..common.hostlist import fold

    out: list[str] = []
    node_count, hours, deadline_h = nodes, result.get("hours"), result.get("deadline_h")
    domain_size = "domains" in result["assumptions"]
    replay_rates = "failures" in result["assumptions"]
    seeds = "gate" in result
    a = result["assumptions"]
    out.append(f"job history: {a['job_history']}")
    out.append(f"{a['fleet']}, rollout at {a['rollout_at_h']:g} h, at most {a['max_unavailable_nodes']} node(s) out, "
               f"{a['upgrade_minutes']:g} min per node; time limits {a['time_limits']}")
    if result["strategies"]:
        out.append(f"{'strategy':<12} {'makespan h':>10} {'GPU-h lost':>11} {'killed':>6} {'wait+ mean h':>12} "
                   f"{'wait+ p95 h':>11} {'peak out':>8}")
    for name, m in result["strategies"].items():
        makespan = "not done" if m["makespan_h"] is None else f"{m['makespan_h']:.2f}"
        out.append(f"{name:<12} {makespan:>10} {m['gpu_hours_lost']:>11.1f} {m['jobs_killed']:>6} "
                   f"{m['wait_added_mean_h']:>12.3f} {m['wait_added_p95_h']:>11.3f} {m['peak_nodes_out']:>8}")
    if hours and result["strategies"]:
        out.append(f"stopped {hours:g} h after the rollout's start: "
                   + ", ".join(f"{name} {m['nodes_upgraded']} of {node_count} nodes upgraded"
                               + ("" if m["done"] else " (not done)") for name, m in result["strategies"].items()))
    waiting = [(name, m) for name, m in result["strategies"].items() if not hours and m["makespan_h"] is None]
    if waiting:  # nothing left to happen, and not done: the rollout waits on an admin (an unjudged gate)
        out.append("not done when nothing was left to happen (see `maintain status` on a real rollout): "
                   + ", ".join(f"{name} {m['nodes_upgraded']} of {node_count} nodes upgraded" for name, m in waiting))
    if domain_size and result["strategies"]:
        out.append(f"{'strategy':<12} {'domains':>7} {'mixed-driver domains max':>24} {'domains in service min':>22}")
        for name, m in result["strategies"].items():
            out.append(f"{name:<12} {m['domains']:>7} {m['mixed_driver_domains_max']:>24} "
                       f"{m['domains_in_service_min']:>22}")
    if deadline_h:
        out.append(f"deadline {deadline_h:g} h; work the jobs that must stop early hold at the rollout (lower bound): "
                   f"{result['work_lost_lower_bound_gpu_h']:.1f} GPU-h")
        for name, m in result["strategies"].items():
            out.append(f"{name:<14} done by deadline: {'yes' if m['done_by_deadline'] else 'NO':<3}  work lost "
                       f"{m['work_lost_gpu_h']:>8.1f} GPU-h  jobs preempted {m['jobs_preempted']:>4}  of them "
                       f"would have ended in time {m['jobs_preempted_that_would_end_in_time']}")
    if replay_rates and result["strategies"]:
        f = a["failures"]
        out.append(f"failures from the rollout's start to the replay's end: {f['failure_per_1000_node_days']:g} per "
                   f"1,000 node-days, "
                   f"{f['soft_per_node_day']:g} soft per node-day, x{f['driver_effect']:g} on upgraded nodes "
                   f"(seed {f['seed']}, gate {f['gate']})")
        for name, m in result["strategies"].items():
            x = m["failures"]
            out.append(f"{name:<14} node failures {x['node_failures']:>4} ({x['node_failures_in_rollout']} in the "
                       f"rollout)  jobs failed {x['jobs_failed']:>4} ({x['jobs_failed_in_rollout']})  work lost "
                       f"{x['work_lost_gpu_h']:>9.1f} GPU-h  soft events {x['soft_events']:>5}"
                       + (f"  rollout {x['rollout']}" if x.get("rollout") else ""))
    if seeds:
        g = result["gate"]
        u = g["upgraded_at_halt"]
        o, x = g["outcomes"], g["makespan_p50_vs_ungated"]
        out.append(f"evidence gate over {g['seeds']} seed(s): finished {o['finished']:.0%}, halted {o['halted']:.0%}, "
                   f"waiting for an admin {o['waiting']:.0%}, unfinished {o['unfinished']:.0%} (ungated halted "
                   f"{g['halted_ungated']:.0%}); upgraded at halt p50 "
                   f"{u['p50'] if u['p50'] is None else format(u['p50'], '.1%')}, p90 "
                   f"{u['p90'] if u['p90'] is None else format(u['p90'], '.1%')}; makespan p50 x ungated "
                   f"{x['finished']} (finished), {x['all']} (all); {g['cpu_s_per_seed']} s CPU per seed")
    for j in result["gating_jobs"][:3]:
        out.append(f"gating job {j['job_id']} on {fold(j['nodes'])}: runs until +{j['end_h']} h")
    out.append(f"jobs used {a['jobs_used']}; lines skipped {a['lines_skipped'] or 'none'}; "
               f"dropped {a['jobs_dropped'] or 'none'}")
    return out


def one_job_text(out: dict[str, Any]) -> list[str]:
    """`fleet simulate-faults --one-job`: the job, and its ETTR beside Daly's."""
    a, m = out["assumptions"], out["strategies"]["none"]
    return [f"one job of {a['gpus']} GPUs on {a['nodes']} node(s), {a['days']:g} days; node MTBF "
            f"{a['node_mtbf_h']:g} h (the job's {a['job_mtbf_h']:g} h), checkpoint every {a['checkpoint_every_h']:g} h, "
            f"restart {a['restart_minutes']:g} min",
            f"strategy none: ETTR {m['ettr']:.4f} ({m['failures']} failures, {m['work_h']:g} h of work in "
            f"{m['wall_h']:g} h); Daly {out['daly_ettr']:.4f}"]


def cases_text(rows: list[dict[str, Any]]) -> list[str]:
    """`fleet cases`: one line a case, then what it asks of you."""
    if not rows:
        return ["no open cases"]
    out = [f"{'node':<12} {'class':<16} {'attempts':>8}  {'first':<25} {'last':<25} status"]
    for r in rows:
        out.append(f"{r['node']:<12} {r['class']:<16} {r['attempts']:>8}  {r['first']:<25} {r['last']:<25} "
                   f"{r['status']}" + (f"  ({r['reason']})" if r["reason"] else ""))
        out.append(f"{'':<12} -> {r['todo']}")
    return out


def domains_text(source: str, rows: list[dict[str, Any]]) -> list[str]:
    """`fleet domains`: each failure domain, its nodes and those out of service."""
    if not rows:
        return ["no failure domains: no [[domain]] in the config, no Slurm blocks, no NVLink domain published"]
    return [f"{len(rows)} failure domain(s), from {source}"] + [
        f"  {r['domain']:<24} {r['count']:>4} node(s) {r['nodes']}" + (f"  out: {r['out']}" if r["out"] else "")
        for r in rows]


def history_text(node: str, seen: dict[str, list[dict]]) -> list[str]:
    """`history`: the node's runs, findings, then the ladder's steps."""
    runs, finds, perf = seen["runs"], seen["findings"], seen["performance"]
    out = [f"{node}: {len(runs)} run(s), {len(finds)} finding(s), {len(perf)} measurement(s), "
           f"{len(seen['actions'])} action(s) of the remediation ladder"]
    for r in runs[:20]:
        out.append(f"  {r['time']}  {r['hook']:<11} {r['verdict']:<6} job {r['job_id'] or '-':<8} driver {r['driver']}")
    for f in finds[:20]:
        where = "node" if f["gpu"] is None else f"gpu{f['gpu']}"
        out.append(f"  run {f['run_id']:<5} {f['severity']:<6} {f['check']:<12} {where:<5} {f['message']}"
                   + (f"  (job {f['job_id']})" if f["job_id"] else ""))
    return out + ladder_text(seen)


def xid_text(row: dict[str, Any]) -> str:
    """`xid`: one GPU Xid event (the row --json gives), with its NVLink5 marks."""
    label = f"{row['xid']}.{row['subcode']}" if row.get("subcode") is not None else str(row["xid"])
    fatal = row.get("fatal")
    marks = "".join(f" ({m})" for m in ((("Fatal" if fatal else "Nonfatal") if fatal is not None else ""),
                                         (f"caused by Xid {row['caused_by']}" if row.get("caused_by") else ""),
                                         ("partial line" if row.get("partial") else "")) if m)
    return (f"{row['line']:>6}  Xid {label:<6} {row['pci'] or '-':<12} {row['severity']:<6} {row['action']:<16} "
            f"{row['name']}{marks}")


def sxid_text(row: dict[str, Any]) -> str:
    """`xid`: one NVSwitch SXid event (the row --json gives)."""
    switch = row["switch"] if row["switch"] is not None else "?"
    return (f"{row['line']:>6}  SXid {row['sxid']:<5} nvswitch{switch:<4} {row['severity']:<6} {row['action']:<16} "
            f"{row['name']} ({'Fatal' if row['fatal'] else 'Non-fatal'})")


def job_text(job: str, record: dict[str, Any]) -> list[str]:
    """What `slurm-gpufleet job JOBID` prints: one line when there is nothing to say."""
    nodes = record.get("n", {}) if isinstance(record.get("n"), dict) else {}
    requeues = record.get("rq", []) if isinstance(record.get("rq"), list) else []
    if not nodes and not requeues and not record.get("fl"):
        return [f"job {job}: nothing happened to its GPUs that slurm-gpufleet saw"]
    out = [f"job {job}:"]
    for rq in requeues:
        if isinstance(rq, list) and len(rq) >= 2:
            out.append(f"  requeued: {rq[0]} failed it ({rq[1]})" + (f"; {rq[2]}" if len(rq) > 2 else ""))
    if record.get("held"):
        out.append(f"  held: {record['held']}")
    for flag in record.get("fl", []) if isinstance(record.get("fl"), list) else []:
        if isinstance(flag, list) and len(flag) >= 3:
            where = f"{flag[0]} gpu {flag[1]}" if flag[1] is not None else f"{flag[0]}"
            out.append(f"  {where}: flagged {flag[2].replace('_', ' ')} while the job ran (in-job detector)")
    for node in sorted(nodes):
        part = nodes[node] if isinstance(nodes[node], dict) else {}
        for gpu, xid in part.get("x", []):
            out.append(f"  {node} gpu {gpu}: Xid {xid}{_xid_name(xid)}")
        for sxid in part.get("s", []):
            out.append(f"  {node}: NVSwitch SXid {sxid}")
        for gpu, what in sorted(part.get("m", {}).items()):
            out.append(f"  {node} gpu {gpu}: memory errors {what}")
        for gpu, pct in sorted(part.get("t", {}).items()):
            out.append(f"  {node} gpu {gpu}: throttled in {pct}% of the job's windows")
        for gpu, what in sorted(part.get("fb", {}).items()):
            out.append(f"  {node} gpu {gpu}: NVLink fabric {what}")
        if part.get("ix"):
            out.append(f"  {node}: IMEX {part['ix']}")
        for what in part.get("f", []):
            out.append(f"  {node}: {what}")
        if part.get("a"):
            out.append(f"  {node}: then {part['a']}")
    return out


def _xid_name(xid: Any) -> str:
    from ..catalogs import xid_info

    info = xid_info(xid) if isinstance(xid, int) else None
    return f" ({info.name})" if info else ""


FAULT_COLORS = {"none": "#999999", "drain-on-any": "#e69f00", "two-tier": "#cc79a7", "gpufleet": "#0072b2",
                "gpufleet-reboot-first": "#56b4e9", "gpufleet-no-suspect": "#009e73"}


def faults_html(out: dict[str, Any], series: dict[str, dict[str, list]]) -> str:
    """--plot: the figures, GPUs in service over time and the ETTR of the jobs ended by each day, per
    strategy (the first seed's run), on one hours axis."""
    import html as html_lib

    from ..simulators.plots import series_svg

    t_max = max([t for sr in series.values() for t, _ in sr["capacity"][-1:] + sr["ettr"][-1:]]
                + [out["assumptions"]["days"] * 24]) or 1.0
    low = min([g for sr in series.values() for _, g in sr["capacity"]] or [0])
    capacity = series_svg({k: v["capacity"] for k, v in series.items()}, t_max, "hours", colors=FAULT_COLORS,
                          v_min=low * 0.95)  # the dips show; the axis says where it starts
    ettr = series_svg({k: v["ettr"] for k, v in series.items()}, t_max, "hours", colors=FAULT_COLORS, step=False,
                      v_min=min([v for sr in series.values() for _, v in sr["ettr"]] or [0.0]), y_fmt="{:.4f}")
    text = html_lib.escape(fleet_text(out))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>slurm-gpufleet: what failures cost</title>
<style>body{{font:14px system-ui,sans-serif;margin:24px}}pre{{font-size:12px;overflow-x:auto}}</style></head><body>
<h1>What failures cost, per strategy</h1><pre>{text}</pre>
<h2>GPUs in service</h2>{capacity}
<h2>ETTR of the jobs ended by then</h2>{ettr}
<p>Series from the run of seed {out["assumptions"]["seed"]}; the table above is the mean over
{out["assumptions"].get("seeds", 1)} seed(s).</p></body></html>"""


# ---------------------------------------------------------------- fleet: slow GPUs, lemons, remedies
def stragglers_text(summary: dict[str, dict], found: list) -> list[str]:
    """`fleet stragglers`: each GPU model's peers and spread, then every GPU slower than its peers."""
    lines = [f"{model}: {m['peers']} GPU(s)" + (f", median {m['median']:.0f} GB/s, MAD {m['mad']:.1f}"
                                                 if m["judged"] else " (too few peers to judge)")
             for model, m in summary.items()]
    lines += [f"  SLOW {o.key:<20} {o.value:.0f} GB/s  -{o.drop_pct:.1f}%  z {o.z:.1f}" for o in found]
    return lines + ([] if found else ["  no stragglers"])


def instep_text(jobs: list, nodes_sampled: int, flags: list) -> list[str]:
    """`fleet stragglers --running`: the nodes (or GPUs) apart from their running job."""
    lines = [f"{len(jobs)} multi-node job(s) sampled on {nodes_sampled} node(s)"]
    for f in flags:
        gpu = f" gpu{f.gpu}" if f.gpu is not None else ""
        lines.append(f"  SLOW job {f.job} {f.node}{gpu}: {f.signature} since "
                     f"{time.strftime('%H:%M:%S', time.localtime(f.t_first))} "
                     + ", ".join(f"{k} {v}" for k, v in f.evidence.items()))
    return lines + ([] if flags else ["  no node apart from its job"])


def timings_text(result) -> list[str]:
    """`fleet stragglers --timings`: the workers slower than their peers, what is job-wide, what was not
    judged."""
    lines = [f"{result.rows} timed operation(s)"]
    lines += [f"  SLOW rank {f.rank} on {f.node} gpus {f.gpus}: stage {f.stage} {f.op} {f.times_slower:.2f}x "
              f"its peers, {'clearly ' if f.kind == 'intermittent' else ''}slower in {f.steps_slower} of "
              f"{f.steps} steps{' (intermittent)' if f.kind == 'intermittent' else ''}" for f in result.flags]
    lines += [f"  job-wide ({j['kind']}): stage {j['stage']} {j['op']}"
              + (f" ranks {','.join(j['ranks'])} {j['times']:.2f}x" if "ranks" in j else "") + f": {j['why']}"
              for j in result.job_wide]
    lines += [f"  not judged: {note}" for note in result.not_judged]
    return lines + ([] if result.flags else ["  no worker apart from its peers"])


def lemons_text(jobs: list, nodes_sampled: int, flags: list, step, lemon_jobs: int, dry_run: bool) -> list[str]:
    """`fleet lemons`: the flags recorded, each node's score, the open cases, the drains."""
    from ..common.hostlist import fold

    lines = [f"{len(jobs)} multi-node job(s) sampled on {nodes_sampled} node(s); {len(flags)} flag(s), "
             f"{step.new_flags} new" + (" (dry run)" if dry_run else "")]
    lines += [f"  {node}: flagged in {n} job(s) of {lemon_jobs}" for node, n in sorted(step.scores.items())]
    lines += [f"  case {c.node}: {c.state}" + (f", {c.detail}" if c.detail else "") for c in step.cases.values()]
    lines += [f"drained: {fold(step.drained)}"] if step.drained else []
    return lines + [f"  {note}" for note in step.notes]


def repaired_text(marked: list[str], dry_run: bool, validates: bool) -> str:
    """`fleet repaired`: the nodes handed back (or that would be)."""
    from ..common.hostlist import fold

    if dry_run:
        return f"{fold(marked)}: would be marked validate after repair"
    return f"{fold(marked)}: validate after repair" + (
        " (a validation run, then back to work)" if validates else
        " (back to work after clean runs: validation_command is \"\")")


def sweep_text(step) -> str:
    """`fleet sweep`: the nodes due, sweeping, submitted and cancelled."""
    from ..common.hostlist import fold

    return (f"due: {fold(step.due) or 'none'}; sweeping: {fold(step.running) or 'none'}"
            + (f"; submitted: {', '.join(f'{n} (job {j})' for n, j in step.submitted.items())}"
               if step.submitted else "") + (f"; cancelled stale: {', '.join(step.cancelled)}"
                                             if step.cancelled else ""))


# ---------------------------------------------------------------- one node: reboot check, compatibility, advice
def reboot_check_text(release: str, module, driver: str) -> str:
    """`reboot-check` when the next boot brings the driver back."""
    return (f"next boot kernel {release} has nvidia {module.version if module else '?'}"
            f"{' (' + module.flavour + ')' if module and module.flavour else ''}: a reboot brings {driver} back")


def compat_text(driver: str, result, safe: str | None) -> list[str]:
    """`compat`: the branch, what is incompatible, notes, the CVEs it is exposed to, and the answer."""
    lines = [f"driver {driver}: branch R{result.branch} ({result.branch_type or 'unknown type'}, "
             f"end of life {result.branch_eol or 'unknown'}), CUDA up to {result.max_cuda or '?'}"]
    lines += [f"  INCOMPATIBLE: {p}" for p in result.problems]
    lines += [f"  note: {n}" for n in result.notes]
    if result.cves:
        worst = max(result.cves, key=lambda c: c["cvss"] or 0)
        lines.append(f"  exposed to {len(result.cves)} CVE(s) of NVIDIA's bulletins, worst {worst['id']} "
                     f"({worst['severity']} {worst['cvss']}); "
                     + (f"first safe on R{result.branch}: {safe}" if safe else f"R{result.branch} has no fix"))
    return lines + ["compatible" if result.compatible else "not compatible"]


def checkpoint_text(job_gpus: int, a) -> list[str]:
    """`advise checkpoint`: the job's MTBF and the interval that loses the least work."""
    lines = [f"{job_gpus} GPUs, per-GPU MTBF {a.gpu_mtbf_h:.0f} h ({a.mtbf_source}) -> job MTBF {a.job_mtbf_h:.2f} h",
             f"checkpoint every {a.interval_s / 60:.1f} min (Daly; Young {a.interval_young_s / 60:.1f} min); "
             f"expected lost {a.expected_lost_fraction * 100:.1f}% of the run"]
    if a.interval_s_range:
        lines.append(f"90% range from the failure count: job MTBF {a.job_mtbf_h_range[0]:.2f}-"
                     f"{a.job_mtbf_h_range[1]:.2f} h, interval {a.interval_s_range[0] / 60:.1f}-"
                     f"{a.interval_s_range[1] / 60:.1f} min")
    return lines


# ---------------------------------------------------------------- rollouts, the breaker, install
def rollout_status_text(rollout: str | None, state: str, counts: dict[str, int], note: str | None) -> str:
    """`maintain status`: the rollout, its state and its nodes per state."""
    return (f"rollout {rollout or '-'}: {state} ({', '.join(f'{k} {v}' for k, v in counts.items())})"
            + (f"; {note}" if note else ""))


def breaker_text(record: dict | None, threshold, window_s: float) -> str:
    """`breaker status`."""
    if record:
        return (f"OPEN since {record.get('opened_at', '?')} (tripped by {record.get('node', '?')}): "
                f"{record.get('why', '')}; `slurm-gpufleet breaker reset` closes it")
    return f"closed (threshold {threshold} within {window_s:g} s)"


def install_text(written: list[tuple[str, str]], refused: list[str], trust: str | None, root: bool,
                 conf_path: str) -> list[str]:
    """`install`: what it wrote (or would), what the trust rule would refuse, whether every path is trusted
    (`trust`: None where it was not judged, "" where it holds, else the first refusal), and where the
    slurm.conf lines are."""
    lines = [f"{what:<14} {path}" for what, path in written]
    lines += [f"{'would refuse':<14} {line}" for line in refused]
    if trust is not None:
        lines.append(f"{'trusted':<14} every path above: owned by {'root' if root else 'you'}, writable by no one "
                     "else" if not trust else f"{'refused':<14} {trust}")
    return lines + [f"\nAdd to slurm.conf (also in {conf_path}), then `scontrol reconfigure`:\n"]


def breaker_reset_text(path: str, was_open: bool) -> str:
    """`breaker reset`."""
    return f"breaker closed ({path} removed)" if was_open else "breaker was already closed"


def approved_text(rollout: str, stage, who: str) -> str:
    """`maintain approve`."""
    return f"rollout {rollout}: stage {stage} approved by {who}"

