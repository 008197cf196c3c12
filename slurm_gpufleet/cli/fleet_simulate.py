"""`slurm-gpufleet fleet simulate-faults`: what the checks save, per strategy, on the bundled job history
or a site's own fault log (simulators/faultsim.py), and the one-job form (`--one-job-gpus`)."""

from __future__ import annotations

import json

import click

from ..common import exitcodes
from ..simulators.faultmodel import ALL_STRATEGIES as FAULT_STRATEGIES
from .common import (
    Finite,
    _fail,
    _load_policy,
    _write_atomic,
    group_config_option,
    json_option,
    read_history,
)
from .fleet import fleet


@fleet.command("simulate-faults")
@group_config_option
@click.option("--one-job", "one_job_gpus", type=click.IntRange(1, 1_000_000), metavar="GPUS",
              help="One job of GPUS GPUs with exponential node failures (--node-mtbf-hours): the simulator core "
                   "against Daly's formula.  Without it: the fleet mode.")
@click.option("--node-mtbf-hours", type=Finite(min=0, min_open=True), metavar="M",
              help="(--one-job) Each node fails at exponential times of this mean.")
@click.option("--checkpoint-every", "checkpoint_every_h", type=Finite(min=0, min_open=True),
              metavar="HOURS", help="Every job checkpoints this often (fleet mode: 1 h unless given).")
@click.option("--restart-minutes", type=Finite(min=0), default=None, metavar="R",
              help="A restarted run's time before it makes progress again (one job: 0, fleet: 10; Meta: 5-20).")
@click.option("--days", type=Finite(min=0, max=3650, min_open=True), default=None, metavar="D",
              help="How long (one job: 30; fleet: the history's span).")
@click.option("--strategy", "strategies", multiple=True,
              type=click.Choice(FAULT_STRATEGIES),
              help="What to compare (fleet mode: the first four unless given; one job: none).  none: Slurm's "
                   "NODE_FAIL alone; drain-on-any: NHC-like; two-tier: Meta's; gpufleet: this project's checks and "
                   "ladder; gpufleet-reboot-first: the same ladder without its reset rung; gpufleet-no-suspect: "
                   "without its suspect rung.")
@click.option("--seed", type=int, default=0, show_default=True, metavar="S",
              help="The random seed of the failure draws (a run with the same seed gives the same figures).")
@click.option("--seeds", type=click.IntRange(1, 1000), default=1, show_default=True, metavar="N",
              help="(fleet) Run seeds S..S+N-1 and give the mean of every figure.")
@click.option("--sacct", "sacct_file", metavar="FILE", help="(fleet) A job history from sacct (default: the bundled "
                                                            "Helios trace).")
@click.option("--nodes", "node_count", type=click.IntRange(1, 20_000), default=300, show_default=True,
              help="(fleet) Nodes in the simulated fleet (with --fault-log, at least the log's).")
@click.option("--gpus-per-node", type=click.IntRange(1, 16), default=8, show_default=True, help="GPUs per simulated node.")
@click.option("--rates", "rates_file", metavar="FILE", help="(fleet) Failure classes and rates in the form of "
              "slurm_gpufleet/data/failure_classes.toml (default: that file, Llama 3's rates).")
@click.option("--health-check-interval", "hc_interval_s", type=Finite(min=1), default=300.0,
              show_default=True, metavar="SECONDS", help="(fleet) HealthCheckInterval (Meta: 5 min).")
@click.option("--lemon-share", type=Finite(0, 1), default=0.0, show_default=True,
              help="(fleet) The share of nodes that fail --lemon-factor times as often (a lemon tail).")
@click.option("--lemon-factor", type=Finite(min=1, max=1000), default=1.0, show_default=True,
              help="A lemon tail: this share of the nodes (--lemon-share) fails this many times as often.")
@click.option("--big-job", "big_job_gpus", type=click.IntRange(0, 1_000_000), default=1024, show_default=True,
              metavar="GPUS", help="(fleet) A stream of training jobs of GPUS GPUs beside the history, one every "
                                   "--big-job-hours, each running that long (the ETTR of jobs of 1,024 GPUs or "
                                   "more); 0: none.")
@click.option("--big-job-hours", type=Finite(min=1, max=24 * 365), default=24.0, show_default=True,
              metavar="H", help="(fleet) How long each job of the --big-job stream runs, and how often one comes.")
@click.option("--domain-size", type=click.IntRange(0, 1024), default=0, show_default=True, metavar="N",
              help="(fleet) NVLink domains of N consecutive nodes (18: an NVL72 rack): a share of faults is "
                   "switch-side and takes its domain whole (rack-correlated events); 0: none.")
@click.option("--switch-share", type=Finite(0, 1), default=None, metavar="S",
              help="(fleet, --domain-size) The share of the domain classes' faults that are switch-side (default: "
                   "the rates file's [domain] switch_share, 0.1, an assumption).")
@click.option("--plot", "plot_file", metavar="FILE.html", help="(fleet) GPUs in service and ETTR over time, per "
                                                               "strategy.")
@click.option("--fault-log", "fault_log_file", metavar="FILE",
              help="(fleet) Replay your own cluster's faults instead of drawing them: a CSV with the header "
                   "node,start,end,class,detail (hours since the log's start, or ISO 8601 times), or the output of "
                   "`sacctmgr -P show event format=NodeName,TimeStart,TimeEnd,State,Reason`.  --nodes adds nodes "
                   "that never faulted; the history repeats to cover the log's span.")
@json_option
def fleet_simulate_faults(one_job_gpus: int | None, node_mtbf_hours: float | None, checkpoint_every_h: float | None,
                          restart_minutes: float | None, days: float | None, strategies: tuple[str, ...], seed: int,
                          seeds: int, sacct_file: str | None, node_count: int, gpus_per_node: int, rates_file: str | None,
                          hc_interval_s: float, lemon_share: float, lemon_factor: float, big_job_gpus: int,
                          big_job_hours: float,
                          domain_size: int, switch_share: float | None, plot_file: str | None,
                          fault_log_file: str | None, as_json: bool) -> None:
    """What failures cost jobs, and what the health checks save, on the simulator core of `maintain
    simulate`.  Fleet mode: a job history on a simulated fleet with failures drawn per class (Llama 3's
    rates), found and handled by each strategy; per strategy the effective training time ratio (ETTR),
    GPU-hours lost to failures, remedies and false drains, node-hours out of service, fault-to-drain time
    and how faults were resolved.  --one-job: one job against Daly's formula."""
    ctx = click.get_current_context()
    if one_job_gpus is not None:
        flag = {p.name: p.opts[0] for p in ctx.command.params}
        fleet_only = [flag[p] for p in FLEET_ONLY
                      if ctx.get_parameter_source(p) is not click.core.ParameterSource.DEFAULT]
        if fleet_only:  # never accepted and ignored: a run that says what it did not do
            _fail(f"{', '.join(fleet_only)}: for the fleet mode, not --one-job", exitcodes.USAGE)
        _simulate_one_job(one_job_gpus, node_mtbf_hours, checkpoint_every_h, restart_minutes, days, strategies, seed,
                          as_json)
        return
    if node_mtbf_hours is not None:
        _fail("--node-mtbf-hours is for --one-job; the fleet mode draws failures per class (--rates FILE)",
              exitcodes.USAGE)
    if switch_share is not None and not domain_size:
        _fail("--switch-share needs --domain-size N (the nodes a switch-side fault takes together)", exitcodes.USAGE)
    from ..simulators.faultmodel import STRATEGIES, RatesError, load_model
    from ..simulators.faultsim import fleet_faults

    try:
        model = load_model(rates_file)
    except RatesError as exc:
        _fail(str(exc), exitcodes.USAGE)
    fault_log = _fault_log(fault_log_file)
    fleet_nodes = max(node_count, len(fault_log.nodes)) if fault_log is not None else node_count
    left_out = None
    if big_job_gpus > fleet_nodes * gpus_per_node and \
            ctx.get_parameter_source("big_job_gpus") is click.core.ParameterSource.DEFAULT:
        left_out = (f"note: no job of {big_job_gpus:,} GPUs fits {fleet_nodes} nodes of {gpus_per_node} GPUs: the "
                    "--big-job stream is left out")
        big_job_gpus = 0
    label, trace = read_history(sacct_file)
    from ..common.progress import Progress

    progress = Progress(quiet_s=2.0, every_s=1.0)  # a long simulation says how far it is, from 2 s on
    try:
        out = fleet_faults(trace, nodes=node_count, gpus_per_node=gpus_per_node, days=days,
                           strategies=strategies or STRATEGIES, model=model, hc_interval_s=hc_interval_s,
                           checkpoint_every_h=checkpoint_every_h or 1.0,
                           restart_min=10.0 if restart_minutes is None else restart_minutes, seed=seed,
                           lemon_share=lemon_share, lemon_factor=lemon_factor, big_job_gpus=big_job_gpus,
                           big_job_hours=big_job_hours,
                           settings=_load_policy((ctx.obj or {}).get("config"), read_only=True).slurm, seeds=seeds,
                           domain_size=domain_size, switch_share=switch_share, fault_log=fault_log,
                           progress=lambda strategy, seed, now_s, horizon_s: progress(
                               int(now_s // 86400), max(1, round(horizon_s / 86400)),
                               f"simulate-faults: {strategy}, seed {seed}, days"))
    except ValueError as exc:
        progress.close()
        _fail(str(exc), exitcodes.USAGE)
    progress.close()
    out["assumptions"]["history"] = label
    if left_out:
        click.echo(left_out, err=True)
    series = out.pop("_series")
    if plot_file:
        from .output import faults_html

        try:
            _write_atomic(plot_file, faults_html(out, series))
        except OSError as exc:
            _fail(f"{plot_file}: {exc.strerror or exc}", exitcodes.USAGE)
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    from .output import fleet_text

    click.echo(fleet_text(out))


def _fault_log(path: str | None):
    """The site's fault log (--fault-log), or None; a log that cannot be read: exit 2."""
    if not path:
        return None
    from ..simulators.faultlog import FaultLogError, read

    try:
        return read(path)
    except FaultLogError as exc:
        _fail(str(exc), exitcodes.USAGE)


# simulate-faults' options of the fleet mode alone (parameter names): --one-job refuses them
FLEET_ONLY = ("sacct_file", "node_count", "gpus_per_node", "rates_file", "hc_interval_s", "lemon_share",
              "lemon_factor", "big_job_gpus", "big_job_hours", "domain_size", "switch_share", "plot_file", "seeds",
              "fault_log_file")


def _simulate_one_job(gpus: int, node_mtbf_hours: float | None, checkpoint_every_h: float | None,
                      restart_minutes: float | None, days: float | None, strategies: tuple[str, ...], seed: int,
                      as_json: bool) -> None:
    from ..simulators.faultsim import one_job

    if node_mtbf_hours is None or checkpoint_every_h is None:
        _fail("--one-job needs --node-mtbf-hours M and --checkpoint-every HOURS", exitcodes.USAGE)
    if set(strategies) - {"none"}:
        _fail("--one-job compares no strategies: its failures need no finding (--strategy none)", exitcodes.USAGE)
    out = one_job(gpus, node_mtbf_hours, checkpoint_every_h, restart_minutes or 0.0, days or 30.0, seed)
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    from .output import one_job_text

    click.echo("\n".join(one_job_text(out)))


