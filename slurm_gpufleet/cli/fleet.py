"""The `fleet` commands: the fleet's summary, stragglers, cases, repairs, the sweep, domains, the fault
simulator, lemons and the report."""

from __future__ import annotations

import json
import os
import sys
import time

import click

from ..common import exitcodes
from .common import (
    Finite,
    _actuator,
    _backend,
    _domains,
    _fail,
    _fleet,
    _load_policy,
    _write_atomic,
    cli,
    config_opt,
    fleet_opt,
    group_config_option,
    json_opt,
    json_option,
)


@cli.group(invoke_without_command=True)
@config_opt(help="Policy file (node groups, their pinned driver and firmware).")
@fleet_opt(help="A saved fleet (JSON) instead of asking Slurm.")
@json_option
@click.option("--textfile", metavar="PATH", help="Also write Prometheus metrics (nodes silent or erroring) for "
                                                 "node_exporter's textfile collector.")
@click.pass_context
def fleet(ctx: click.Context, config: str | None, fleet_file: str | None, as_json: bool,
          textfile: str | None) -> None:
    """Per node group: drivers, GPU models, firmware, verdicts, and nodes off the group's standard; the
    nodes that cannot be checked (the tool's own faults) and those silent for too long.

    Read from what every node's health check publishes to Slurm (one `scontrol show nodes`).
    """
    ctx.ensure_object(dict)
    ctx.obj.update(config=config, fleet_file=fleet_file, as_json=as_json)
    if ctx.invoked_subcommand is not None:
        return
    from ..maintain.inventory import inventory
    from .output import inventory_text

    policy = _load_policy(config, read_only=bool(fleet_file))
    interval = None
    if not fleet_file:
        from ..slurm import SlurmError

        try:  # how often slurmd runs the health check: a node checked rarely is silent only after 3 of them
            interval = _backend(policy).health_check_interval()
        except (SlurmError, AttributeError):
            interval = None
    inv = inventory(_fleet(policy, fleet_file), policy, interval)
    if textfile:
        from ..records.metrics import write_fleet_textfile

        try:
            write_fleet_textfile(textfile, inv)
        except OSError as exc:
            _fail(f"{textfile}: {exc.strerror or exc}", exitcodes.USAGE)
    click.echo(json.dumps(inv, indent=1) if as_json else inventory_text(inv))


@fleet.command("stragglers")
@group_config_option
@click.option("--results", metavar="FILE", help="JSON lines {node, gpu, model, mem_bw_gbps} instead of Slurm.")
@click.option("--history-dir", metavar="DIR", help="Latest measurements from node history databases.")
@click.option("--drain", is_flag=True, help="Drain the slow nodes (needs [slurm] drain_stragglers = true).")
@click.option("--telemetry", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="In-job detection over recorded samples: JSON lines {t, job, node, gpu, sm_clock_mhz, power_w, "
                   "sm_util, throttle}; prints {\"flags\": [...]}.  Exit 0 no flag, 1 flags, 2 unreadable, 3 no "
                   "sample.")
@click.option("--running", is_flag=True, help="The nodes of each running multi-node job against the job's other "
                                             "nodes, from what their in-job samplers published (one read).")
@click.option("--timings", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="The job's own per-rank timings (CSV or JSON Lines: rank, dp, stage, step, op, start, duration, "
                   "node, gpus): each worker against its data-parallel peers.  Exit 0 no flag, 1 flags, 2 "
                   "unreadable, 3 no row.")
@json_opt(help="JSON (as `fleet --json stragglers`).")
@click.pass_context
def fleet_stragglers(ctx: click.Context, results: str | None, history_dir: str | None, drain: bool,
                     telemetry: str | None, running: bool, timings: str | None, as_json: bool) -> None:
    """Slow GPUs per model: robust outliers (median/MAD) among at least N peers, never a fixed number.
    With --running or --telemetry: the nodes of each running job compared with that job's other nodes
    (instep.py); with --timings: each worker of a job against the workers doing the same work
    (slowgpus/timings.py).  These flags feed no drain here (`fleet lemons` takes them)."""
    ctx.ensure_object(dict)
    if as_json:
        ctx.obj["as_json"] = True
    if timings:
        _timings(timings, bool(ctx.obj.get("as_json")))
    if telemetry:
        _instep_telemetry(telemetry, _load_policy((ctx.obj or {}).get("config")))
    if running:
        _instep_running(ctx.obj)
    from ..slowgpus.fleet import drains, from_history, from_published, from_results_file, stragglers
    from ..slurm import SlurmError

    opts = ctx.obj or {}
    policy = _load_policy(opts.get("config"))
    backend = None
    try:
        if results:
            samples = from_results_file(results)
        elif history_dir:
            samples = from_history(history_dir)
        else:
            backend = _backend(policy)
            samples = from_published(backend)
    except SlurmError as exc:
        _fail(f"cannot read the fleet: {exc}", exitcodes.USAGE)
    except (OSError, ValueError, KeyError) as exc:
        _fail(f"cannot read the results: {exc}", exitcodes.USAGE)
    found, summary = stragglers(samples, policy.slurm)
    drained: list[str] = []
    breaker_blocked: list[str] = []
    if drain:
        if not policy.slurm.drain_stragglers:
            _fail("--drain needs drain_stragglers = true in [slurm] (opt-in)", exitcodes.USAGE)
        backend = backend or _backend(policy)
        from ..common.hostlist import fold
        from ..slurm.ownership import STRAGGLER

        try:  # one read of the fleet: each node's state, and the breaker's count
            fleet = backend.nodes()
        except SlurmError as exc:
            _fail(f"cannot read the fleet: {exc}", exitcodes.USAGE)
        pairs, unknown = drains(found, {i.name: i for i in fleet})
        for node in unknown:
            click.echo(f"{node}: not in Slurm, not drained", err=True)
        try:
            done = _actuator(backend, STRAGGLER, policy, fleet=fleet).drain_each(pairs)
        except SlurmError as exc:
            _fail(f"could not drain: {exc}", exitcodes.USAGE)
        drained = done.done
        for node, why in done.left.items():
            click.echo(f"{node}: {why}", err=True)
        if done.blocked:
            click.echo(f"not drained, the drain breaker is open ({done.breaker}): {fold(done.blocked)}", err=True)
        breaker_blocked = done.blocked
    out = {"models": summary, "stragglers": [o.__dict__ for o in found], "drained": drained,
           "breaker_blocked": breaker_blocked}
    if opts.get("as_json"):
        click.echo(json.dumps(out, indent=1))
    else:
        from .output import stragglers_text

        click.echo("\n".join(stragglers_text(summary, found)))
    sys.exit(exitcodes.UNHEALTHY if found else exitcodes.OK)


def _instep_running(opts: dict) -> None:
    """Exit 0 no flag, 1 flags, 2 Slurm unreadable."""
    from ..slurm import SlurmError

    policy = _load_policy(opts.get("config"))
    try:
        nodes = _backend(policy).nodes()
    except SlurmError as exc:
        _fail(f"cannot read the fleet: {exc}", exitcodes.USAGE)
    from ..slowgpus.sampler import flags_of_published

    flags, jobs, published = flags_of_published(nodes, policy.slurm)
    if opts.get("as_json"):
        click.echo(json.dumps({"jobs": jobs, "nodes_sampled": len(published), "flags": [f.to_dict() for f in flags]},
                              indent=1))
    else:
        from .output import instep_text

        click.echo("\n".join(instep_text(jobs, len(published), flags)))
    sys.exit(exitcodes.UNHEALTHY if flags else exitcodes.OK)


@fleet.command("save")
@group_config_option
@click.option("-o", "--out", "out", required=True, metavar="FLEET.json", help="Where to write the saved fleet.")
@click.pass_context
def fleet_save(ctx: click.Context, out: str) -> None:
    """Save the fleet as Slurm shows it now, for offline planning (`maintain plan --fleet FLEET.json`,
    `fleet --fleet FLEET.json`): every node with what its health check published, the running jobs and the
    reservations, in one read of each (docs/rollouts.md, "Offline planning")."""
    from ..maintain.fleet import FleetState
    from ..slurm import SlurmError

    policy = _load_policy(ctx.obj["config"])
    try:
        state = FleetState.from_backend(_backend(policy))
    except SlurmError as exc:
        _fail(f"cannot read the fleet from Slurm: {exc}", exitcodes.USAGE)
    try:
        _write_atomic(out, json.dumps(state.to_dict(), indent=1) + "\n")
    except OSError as exc:
        _fail(f"{out}: {exc.strerror or exc}", exitcodes.USAGE)
    click.echo(f"saved {len(state.nodes)} node(s), {len(state.jobs)} running job(s), "
               f"{len(state.reservations)} reservation(s) to {out}", err=True)


@fleet.command("cases")
@group_config_option
@json_opt(help="One JSON object (as `fleet --json cases`).")
@click.pass_context
def fleet_cases(ctx: click.Context, as_json: bool) -> None:
    """The remediation ladder's open cases: per node and failure class, the attempts within the window
    (`max_attempts` in `attempt_window_s`), the first and last, the status and what it asks of you:
    `validation_failed` (drained for repair after its validation run failed: its output is kept on the
    node, `<state_dir>/validation-JOB.out`), `repair` (drained for repair: the cap, or a fault that
    survived its reboots; `fleet repaired NODE` or a resume closes the case), `config` (drained for a
    configuration no rung fixes: a driver off its pins, ECC off, a compute mode, Slurm's own view of the
    node; it returns once its checks run clean), `suspect` (held in its own
    reservation, re-checked), `unverified` (back in service, its validation job's outcome not known: it
    left Slurm before it was read and its output on the node says no exit), `running` (a reset, reboot
    or validation under way) or `watch` (remedied, still counted).  What needs you first, then the most
    recent.  Read from what every node publishes (one read of the fleet)."""
    from ..maintain.fleet import FleetNode
    from ..remedy.ladder import CASE_FIELDS, fleet_cases
    from ..slurm import SlurmError

    policy = _load_policy(ctx.obj["config"], read_only=bool(ctx.obj["fleet_file"]))
    if ctx.obj["fleet_file"]:
        nodes = list(_fleet(policy, ctx.obj["fleet_file"]).nodes.values())
    else:
        try:  # the nodes alone: one read, no jobs or reservations
            nodes = [FleetNode.from_info(i) for i in _backend(policy).nodes()]
        except SlurmError as exc:
            _fail(f"cannot read the nodes from Slurm: {exc}", exitcodes.USAGE)
    rows = fleet_cases(nodes, policy.slurm.state_dir)
    if as_json or ctx.obj["as_json"]:
        click.echo(json.dumps({"fields": list(CASE_FIELDS), "cases": rows}, indent=1))
        return
    from .output import cases_text

    click.echo("\n".join(cases_text(rows)))


@fleet.command("repaired")
@group_config_option
@click.argument("nodeset")
@click.option("--dry-run", is_flag=True, help="Say what would be marked; write nothing.")
@click.pass_context
def fleet_repaired(ctx: click.Context, nodeset: str, dry_run: bool) -> None:
    """Hand nodes back after a repair: each node drained by the health check (for repair, or any fault of
    ours) gets the reason `validate after repair [gpufleet]`, and its health check returns it to work only
    through a validation run in a maintenance reservation of its own (`validation_command`; where that is
    "", after its clean runs).  Nodes someone else drained are not touched.  Exit 1 when any was left."""

    from ..common.hostlist import expand, fold
    from ..remedy.handback import hand_back
    from ..slurm import SlurmError
    from ..slurm.ownership import HEALTH

    try:
        wanted = expand(nodeset)
    except ValueError as exc:
        _fail(str(exc), exitcodes.USAGE)
    if not wanted:
        _fail("no nodes given", exitcodes.USAGE)
    policy = _load_policy(ctx.obj["config"])
    backend = _backend(policy)
    try:
        nodes = {i.name: i for i in backend.nodes()}
    except SlurmError as exc:
        _fail(f"cannot read the nodes from Slurm: {exc}", exitcodes.USAGE)
    unknown = [n for n in wanted if n not in nodes]
    if unknown:
        _fail(f"{len(unknown)} node(s) not in Slurm: {fold(unknown)}", exitcodes.USAGE)
    actuator = _actuator(backend, HEALTH, policy)
    try:
        done = hand_back(actuator, [nodes[n] for n in wanted], dry_run)
    except SlurmError as exc:
        _fail(f"not marked: {exc}", exitcodes.USAGE)
    from .output import repaired_text

    if dry_run:
        if done.marked:
            click.echo(repaired_text(done.marked, True, bool(policy.slurm.validation_command)))
        for name, why in done.left.items():
            click.echo(f"{name}: {why}", err=True)
        if done.free:
            click.echo(f"{fold(done.free)}: not drained, nothing to do", err=True)
        return
    if done.marked:
        click.echo(repaired_text(done.marked, False, bool(policy.slurm.validation_command)))
    for node, why in done.left.items():
        click.echo(f"{node}: {why}", err=True)
    if done.free:
        click.echo(f"{fold(done.free)}: not drained, nothing to do", err=True)
    if done.left:
        sys.exit(1)


@fleet.command("sweep")
@group_config_option
@click.option("--dry-run", is_flag=True, help="Say which nodes are due; submit and cancel nothing.")
@json_option
@click.pass_context
def fleet_sweep(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    """One step of the idle sweeps (run it every few minutes, e.g. from a systemd timer): nodes of groups
    with `sweep_interval_h`, idle `sweep_idle_min` and not swept within the interval, get the deep check as
    a job in `sweep_partition`, whose jobs any user job preempts (docs/slurm.md, "Idle sweeps"); at most
    `sweep_max_nodes` at once.  One read of the nodes, one of the sweep jobs."""
    from ..remedy.sweep import run_step
    from ..slurm import SlurmError

    policy = _load_policy(ctx.obj["config"])
    if not policy.slurm.sweep_partition and not dry_run:
        _fail("no sweep_partition in [slurm]: a sweep job must run where any user job preempts it (docs/slurm.md, "
              "\"Idle sweeps\")", exitcodes.USAGE)
    try:
        step = run_step(_backend(policy), policy, dry_run=dry_run)
    except SlurmError as exc:
        _fail(f"cannot read the nodes or the sweep jobs from Slurm: {exc}", exitcodes.USAGE)
    if as_json or ctx.obj["as_json"]:
        from dataclasses import asdict

        click.echo(json.dumps(asdict(step), indent=1))
    else:
        from .output import sweep_text

        click.echo(sweep_text(step))
        for e in step.errors:
            click.echo(e, err=True)
    if step.errors:
        sys.exit(1)


@fleet.command("domains")
@group_config_option
@json_opt(help="One JSON object (as `fleet --json domains`).")
@click.pass_context
def fleet_domains(ctx: click.Context, as_json: bool) -> None:
    """The failure domains (NVLink racks, Slurm blocks) and where they come from: the config's [[domain]],
    else Slurm's topology blocks, else the NVLink domain each node's GPUs registered in, as its health
    check publishes it (cluster UUID and clique).  Per domain: its nodes, and those out of service."""
    from ..common.hostlist import fold

    policy = _load_policy(ctx.obj["config"])
    fleet_file = ctx.obj["fleet_file"]
    state = _fleet(policy, fleet_file)
    domains = _domains(policy, None if fleet_file else _backend(policy),
                       [(n.name, n.fabric_domain) for n in state.nodes.values()])
    rows = [{"domain": d, "nodes": fold(members), "count": len(members),
             "out": fold([n for n in members if n in state.nodes and state.nodes[n].held])}
            for d, members in domains.members.items()]
    if as_json or ctx.obj["as_json"]:
        click.echo(json.dumps({"source": domains.source, "domains": rows}, indent=1))
        return
    from .output import domains_text

    click.echo("\n".join(domains_text(domains.source, rows)))


@fleet.command("lemons")
@group_config_option
@click.option("--dry-run", is_flag=True, help="Say what this step would reserve, submit, drain and release; "
                                              "record nothing, change nothing.")
@click.option("--textfile", metavar="PATH", help="Also write Prometheus metrics (flags, lemon scores, cases) "
                                                 "for node_exporter's textfile collector.")
@click.option("--timings", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="Also a job's own per-rank timings (as `fleet stragglers --timings`): its slow workers' nodes "
                   "are flagged for that job, beside the samplers' flags.")
@click.option("--job", "timings_job", metavar="JOBID", help="The job the --timings file is of.")
@json_opt(help="One JSON object (as `fleet --json lemons`).")
@click.pass_context
def fleet_lemons(ctx: click.Context, dry_run: bool, textfile: str | None, timings: str | None,
                 timings_job: str | None, as_json: bool) -> None:
    """One step of the lemon record (run it every minute or so, e.g. from a systemd timer): the in-job
    detector over the running multi-node jobs (one read of the fleet); each flag recorded once per node and
    job; a node flagged in `lemon_jobs` distinct jobs is held in a maintenance reservation and its deep
    check queued there; a confirmed check drains it through the breaker, a clean one clears its score.

    Exit codes: 0 no node confirmed this step, 1 a lemon confirmed (drained, or held by the breaker),
    2 Slurm unreadable or a write failed, or a usage or config error.
    """
    import sqlite3

    from ..common.hostlist import fold
    from ..slowgpus.lemon_step import run_step
    from ..slowgpus.lemon_store import LemonStore
    from ..slurm import SlurmError

    opts = ctx.obj or {}
    as_json = as_json or bool(opts.get("as_json"))
    policy = _load_policy(opts.get("config"), trusted=True)
    s = policy.slurm
    backend = _backend(policy)
    try:
        nodes = backend.nodes()
    except SlurmError as exc:
        _fail(f"cannot read the fleet: {exc}", exitcodes.USAGE)
    from ..slowgpus.sampler import flags_of_published

    flags, jobs, published = flags_of_published(nodes, policy.slurm)
    if timings:
        if not timings_job:
            _fail("--timings needs --job JOBID: the job the timings are of", exitcodes.USAGE)
        from ..slowgpus.timings import as_instep_flags

        result, rows = _read_timings(timings)
        flags += as_instep_flags(result, timings_job, max(r.start for r in rows))
        jobs = sorted({*jobs, timings_job})
    try:
        store = LemonStore(s.lemon_path)
    except (OSError, sqlite3.Error) as exc:
        _fail(f"{s.lemon_path}: {exc}", exitcodes.USAGE)
    try:
        step = run_step(backend, s, store, nodes, flags, time.time(), dry_run, modes=policy.mode_of)
    except SlurmError as exc:
        _fail(f"cannot read Slurm's reservations or jobs: {exc}", exitcodes.USAGE)
    errors = step.errors
    out = {"jobs": jobs, "nodes_sampled": len(published), "flags": [f.to_dict() for f in flags],
           "new_flags": step.new_flags, "scores": step.scores, "lemon_jobs": s.lemon_jobs,
           "cases": [_case_dict(c) for c in step.cases.values()], "reserved": step.reserved,
           "submitted": step.submitted, "drained": step.drained, "breaker_blocked": step.breaker_blocked,
           "released": step.released, "notes": step.notes, "errors": errors, "dry_run": dry_run}
    if textfile:
        from ..records.metrics import write_lemon_textfile

        try:
            write_lemon_textfile(textfile, flags, step.scores, list(step.cases.values()), s.lemon_jobs)
        except OSError as exc:
            errors.append(f"{textfile}: {exc.strerror or exc}")
    store.close()
    if as_json:
        click.echo(json.dumps(out, indent=1))
    else:
        from .output import lemons_text

        click.echo("\n".join(lemons_text(jobs, len(published), flags, step, s.lemon_jobs, dry_run)))
        if step.breaker_blocked:
            click.echo(f"not drained, the drain breaker is open: {fold(step.breaker_blocked)}", err=True)
    for e in errors:
        click.echo(f"slurm-gpufleet: {e}", err=True)
    if errors:
        sys.exit(exitcodes.USAGE)
    sys.exit(exitcodes.UNHEALTHY if step.drained or step.breaker_blocked else exitcodes.OK)


def _case_dict(c) -> dict:
    return {"node": c.node, "state": c.state, "jobs": c.jobs, "opened": c.opened, "check_job": c.check_job,
            "attempts": c.attempts, "detail": c.detail, "closed": c.closed}


def _read_timings(path: str):
    """The judged timings file, or one line and exit 2 (unreadable) or 3 (no row)."""
    from ..slowgpus.timings import TimingsError, judge, read_file

    try:
        rows, bad = read_file(path)
    except OSError as exc:
        _fail(f"{path}: {exc.strerror or exc}", exitcodes.USAGE)
    except TimingsError as exc:
        _fail(f"{path}: not a timings file: {exc}", exitcodes.NO_STATE if str(exc) == "no rows" else exitcodes.USAGE)
    _skipped(path, [f"{path}: {why}, skipped" for why in bad], "rows", bool(rows))
    result = judge(rows)
    result.skipped = bad
    return result, rows


def _skipped(path: str, lines: list[str], what: str, any_read: bool) -> None:
    """The malformed lines of an input file, the first 20 named and the rest counted; one line and exit 3
    where none was read."""
    for line in lines[:20]:
        click.echo(line, err=True)
    if len(lines) > 20:
        click.echo(f"{path}: {len(lines) - 20} more lines skipped", err=True)
    if not any_read:
        _fail(f"{path}: no {what}" + (f" ({len(lines)} malformed line(s) skipped)" if lines else ""), exitcodes.NO_STATE)


def _timings(path: str, as_json: bool) -> None:
    result, _ = _read_timings(path)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
    else:
        from .output import timings_text

        click.echo("\n".join(timings_text(result)))
    sys.exit(exitcodes.UNHEALTHY if result.flags else exitcodes.OK)


def _instep_telemetry(path: str, policy) -> None:
    """Exit 0 no flag, 1 flags, 2 unreadable file, 3 no sample in it.  The config's in-job settings
    (`instep_window_s`, `instep_windows`) judge, as they judge the running jobs."""
    from ..slowgpus.instep import Settings, detect, parse_telemetry

    try:
        with click.open_file(path, encoding="utf-8", errors="replace") as fh:
            samples, bad = parse_telemetry(fh)
    except OSError as exc:
        _fail(f"{path}: {exc.strerror or exc}", exitcodes.USAGE)
    _skipped(path, [f"{path}:{number}: not a sample, skipped" for number in bad], "samples", bool(samples))
    flags = detect(samples, Settings(window_s=policy.slurm.instep_window_s, windows=policy.slurm.instep_windows))
    click.echo(json.dumps({"flags": [f.to_dict() for f in flags], "samples": len(samples), "skipped": len(bad)},
                          indent=1))
    sys.exit(exitcodes.UNHEALTHY if flags else exitcodes.OK)


@fleet.command("report")
@group_config_option
@click.option("--history-dir", required=True, metavar="DIR", help="Directory of node history databases.")
@click.option("--out", metavar="FILE.html", help="Also write the HTML report (health over time, performance "
                                                 "outliers, reliability).")
@click.option("--days", type=Finite(min=0, max=3650, min_open=True), default=30.0, show_default=True,
              help="The window the reliability figures cover, ending now.")
@click.option("--textfile", metavar="PATH", help="Also write the reliability figures as Prometheus metrics.")
@json_opt(help="The reliability figures as JSON.")
@click.pass_context
def fleet_report(ctx: click.Context, history_dir: str, out: str | None, days: float, textfile: str | None,
                 as_json: bool) -> None:
    """The fleet's reliability per node group from the nodes' histories: incidents per node-day, mean time
    between incidents, time to repair (automatic and manual), holds that found nothing, nodes out by cause,
    the remedies that worked; with --out, the HTML report."""
    from ..records.reliability import report
    from .output import reliability_text

    policy = _load_policy((ctx.obj or {}).get("config"))
    if not os.path.isdir(history_dir):
        _fail(f"{history_dir}: not a directory of node histories", exitcodes.USAGE)
    now = time.time()
    rel = report(history_dir, policy, now - days * 86400, now)
    if out:
        from ..slowgpus.report import fleet_html

        _write_atomic(out, fleet_html(history_dir, policy, rel))
    if textfile:
        from ..records.metrics import write_reliability_textfile

        try:
            write_reliability_textfile(textfile, rel)
        except OSError as exc:
            _fail(f"{textfile}: {exc.strerror or exc}", exitcodes.USAGE)
    click.echo(json.dumps(rel, indent=1) if as_json or (ctx.obj or {}).get("as_json") else reliability_text(rel))
