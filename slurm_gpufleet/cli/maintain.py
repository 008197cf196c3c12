"""The `maintain` commands: plan, apply, approve, status, resume, abort, rollback, simulate."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import click

from ..common import exitcodes
from ..maintain.strategy import SIMULATED, STRATEGIES
from .common import (
    Finite,
    _actuator,
    _backend,
    _cache_dir,
    _domains,
    _fail,
    _fleet,
    _load_policy,
    _write_atomic,
    cli,
    config_opt,
    config_option,
    fleet_opt,
    json_option,
    read_history,
)


@cli.group()
def maintain() -> None:
    """Staged driver upgrades between jobs: plan, apply, status, resume, abort, rollback."""


def _maintain_policy(policy_file: str | None, config: str | None, read_only: bool = False):
    return _load_policy(policy_file or config, trusted=not read_only, read_only=read_only)


@maintain.command("plan")
@click.option("--target-driver", metavar="VERSION", help="The driver to roll out, e.g. 580.159.04.")
@click.option("--target-kernel", metavar="RELEASE",
              help="The kernel to boot, in the same drain (e.g. 6.1.0-31-amd64): validated from the node's summary.")
@click.option("--target-firmware", multiple=True, metavar="[MODEL:]COMPONENT=VERSION",
              help="Firmware in the same drain, per GPU model as the fleet names it, e.g. "
                   "'NVIDIA H200:vbios=96.00.AF.00.01' (repeat it; a node whose model has none is left out; "
                   "without MODEL: every node); the template is told to power-cycle the node.")
@click.option("--nodes", "nodeset", required=True, metavar="NODESET", help="Slurm host list, e.g. gpu[001-128].")
@click.option("--strategy", type=click.Choice(list(STRATEGIES)), default="reservation", show_default=True,
              help="reservation: MAINT reservations placed when the nodes' jobs end; reboot-asap: scontrol reboot ASAP.")
@config_opt(help="Config with [maintain] and node groups (as for apply, status...).")
@click.option("--policy", "policy_file", metavar="FILE", hidden=True, help="Old name of --config.")
@fleet_opt(help="Plan against a saved fleet (JSON) instead of Slurm.")
@click.option("--out", metavar="PLAN.json", help="Write the plan for `maintain apply`.")
@click.option("--html", "html_out", metavar="FILE", help="Write an HTML report with a timeline per node group.")
@click.option("--force", is_flag=True, help="Plan even when the compatibility gate refuses (and say so).")
@click.option("--deadline", metavar="DURATION|DATE",
              help="Every node done by then (72h, 3d, 2026-12-04T18:00): the running jobs that cannot end in "
                   "time are named, with what is done to each and when.")
@click.option("--stop-jobs", type=click.Choice(["earliest", "latest"]), default="earliest", show_default=True,
              help="With --deadline, when a job without a checkpoint that cannot end in time stops: at the start "
                   "(least work lost when time limits are tight) or at the last moment (loose time limits).")
@click.option("--max-unavailable", default=None, metavar="N|P%",
              help="Budget: nodes out at once (default: the config's [maintain] max_unavailable), as for simulate.")
@json_option
def maintain_plan(target_driver: str | None, target_kernel: str | None, target_firmware: tuple[str, ...], nodeset: str, strategy: str, policy_file: str | None, config: str | None,
                  fleet_file: str | None, out: str | None, html_out: str | None, force: bool, deadline: str | None,
                  stop_jobs: str, max_unavailable: str | None, as_json: bool) -> None:
    """Plan a rollout: compatibility gate, canary, growing waves within the budget, placed between jobs.

    With --deadline, the jobs that would hold a node past its last possible slot are stopped early, the
    ones that lose the least work first: checkpoint-and-requeue where the job says it can (docs/rollouts.md,
    "Deadline rollouts"), else requeue, else cancel; every other job is waited for.

    A bundle (--target-driver, --target-kernel, --target-firmware, at least one) moves in one drain per
    node; rollback returns each node's recorded bundle.

    Exit 0 with a plan, 1 when the gate refuses (without --force), 2 on bad input or a deadline that
    cannot be kept.
    """
    from ..maintain import report
    from ..maintain.planner import PlanError, make_plan

    policy = _with_budget(_maintain_policy(policy_file, config, read_only=bool(fleet_file)), max_unavailable)
    target_driver, target_kernel, firmware, firmware_by_model = _targets(policy, target_driver, target_kernel,
                                                                         target_firmware)
    from ..common.hostlist import expand

    try:
        names = expand(nodeset)
    except ValueError as exc:
        _fail(f"--nodes: {exc}", exitcodes.USAGE)
    if not names:
        _fail(f"--nodes {nodeset!r} names no node: give a Slurm host list, e.g. gpu[001-128]", exitcodes.USAGE)
    fleet_state = _fleet(policy, fleet_file)
    now = fleet_state.taken_at if fleet_file else time.time()
    until = None
    if deadline:
        from ..maintain.deadline import DeadlineError, parse_deadline

        try:
            until = parse_deadline(deadline, now)
        except DeadlineError as exc:
            _fail(str(exc), exitcodes.USAGE)
        if not fleet_file:  # whether each job may be requeued: read only for a deadline plan
            flags = _backend(policy).requeue_flags()
            for job in fleet_state.jobs:
                job.requeue = flags.get(job.job_id)
    domains = _domains(policy, None if fleet_file else _backend(policy),
                       [(n.name, n.fabric_domain) for n in fleet_state.nodes.values()])
    try:
        plan = make_plan(fleet_state, target_driver, names, policy, strategy=strategy, force=force,
                         now=now, deadline=until, stop_jobs=stop_jobs, kernel=target_kernel, firmware=firmware,
                         domains=domains, firmware_by_model=firmware_by_model)
    except (PlanError, ValueError) as exc:
        _fail(str(exc), exitcodes.USAGE)
    data = plan.to_dict()
    if out:
        _write_atomic(out, json.dumps(data, indent=1) + "\n")
    if html_out:
        _write_atomic(html_out, report.html(plan))
    click.echo(json.dumps(data, indent=1) if as_json else report.text(plan))
    sys.exit(exitcodes.UNHEALTHY if plan.refused else exitcodes.OK)


def _targets(policy, target_driver: str | None, target_kernel: str | None, target_firmware: tuple[str, ...]):
    """(driver, kernel, firmware, firmware by model): the command line's targets, else the config's [bundle]
    whole (one source per plan, never a mix); each checked, or exit 2."""
    from ..catalogs.bundle import parse_firmware_targets, target_problem

    try:
        firmware, firmware_by_model = parse_firmware_targets(target_firmware)
    except ValueError as exc:
        _fail(str(exc), exitcodes.USAGE)
    given = bool(target_driver or target_kernel or firmware or firmware_by_model)
    if not given and policy.bundle is not None:
        # the site's standard bundle, whole; the command line's targets, when given, replace it whole: one
        # source per plan, never a mix
        b = policy.bundle
        target_driver, target_kernel, firmware, firmware_by_model = b.driver, b.kernel, dict(b.firmware), \
            {m: dict(fw) for m, fw in b.firmware_by_model.items()}
        click.echo(f"targets from [bundle] in {policy.path}", err=True)
    elif given and policy.bundle is not None:
        click.echo(f"targets from the command line; [bundle] in {policy.path} not used", err=True)
    if not (target_driver or target_kernel or firmware or firmware_by_model):
        _fail("nothing to roll out: give --target-driver, --target-kernel or --target-firmware, or a [bundle] in "
              "the config", exitcodes.USAGE)
    for part, version in (("driver", target_driver), ("kernel", target_kernel),
                          *[(c, ver) for fw in (firmware, *firmware_by_model.values()) for c, ver in fw.items()]):
        if version and target_problem(part, version):
            _fail(f"--target-{part if part in ('driver', 'kernel') else 'firmware'}: "
                  f"{target_problem(part, version)}", exitcodes.USAGE)
    return target_driver, target_kernel, firmware, firmware_by_model


def _with_budget(policy, max_unavailable: str | None):
    """The policy with `--max-unavailable` in place of its [maintain] max_unavailable (plan and simulate)."""
    from dataclasses import replace

    from ..policy import parse_budget

    if max_unavailable is None:
        return policy
    try:
        budget = parse_budget(max_unavailable)
    except ValueError as exc:
        _fail(f"--max-unavailable {exc}", exitcodes.USAGE)
    return replace(policy, maintain=replace(policy.maintain, max_unavailable=budget))


def _runner(config: str | None):
    from ..common.progress import Progress
    from ..maintain.runner import Runner
    from ..maintain.store import Store

    policy = _load_policy(config, trusted=True)
    with _rollout_errors(policy.maintain.db):
        store = Store(policy.maintain.db)
    return Runner(store, _backend(policy), policy, Progress(sys.stderr)), store


@contextlib.contextmanager
def _rollout_errors(db: str):
    """What ends `apply`, `resume`, `abort` and `rollback` early, each as one line with its exit code."""
    import sqlite3

    from ..maintain.runner import RolloutError
    from ..slurm import SlurmError

    try:
        yield
    except RolloutError as exc:
        _fail(str(exc), exitcodes.USAGE)
    except SlurmError as exc:
        _fail(f"{exc}; the rollout's state is saved: `maintain resume` continues it", exitcodes.UNHEALTHY)
    except sqlite3.Error as exc:  # a full disk, an I/O error, a read-only file system
        _fail(f"the rollout's state cannot be written to {db} ({exc}); it stays as last saved and every step "
              "is repeatable: fix that, then `maintain resume`", exitcodes.UNHEALTHY)


def _require_rights(config: str | None) -> None:
    from ..maintain.runner import can_change_slurm

    policy = _load_policy(config, trusted=True)
    ok, why = can_change_slurm(policy.slurm.scontrol)
    if not ok:
        _fail(f"maintain needs the right to change Slurm: {why}", exitcodes.USAGE)


def _finish(state: str, as_json: bool, store, runner, rollout_id: str | None = None, ok=("done", "rolled_back",
                                                                                         "aborted"), note: str = "") -> None:
    """The rollout's end, named by its own id (the latest one where the command has none); exit 0 only in
    the states `ok` (apply: done alone), with no node failed."""
    r = store.rollout(rollout_id) if rollout_id else store.rollout()
    counts = store.counts(r["id"]) if r else {}
    if as_json:
        click.echo(json.dumps({"rollout": r["id"] if r else None, "state": state, "nodes": counts,
                               **({"note": note} if note else {})}))
    else:
        from .output import rollout_status_text

        click.echo(rollout_status_text(r["id"] if r else None, state, counts, note))
    sys.exit(exitcodes.OK if state in ok and not counts.get("failed") else exitcodes.UNHEALTHY)


@maintain.command("apply")
@click.argument("plan_file", metavar="PLAN.json", type=click.Path(dir_okay=False, exists=True))
@config_option
@json_option
def maintain_apply(plan_file: str, config: str | None, as_json: bool) -> None:
    """Run a plan in the foreground until the rollout ends; exit 0 only when every node is done."""
    from ..maintain.planner import Plan, PlanError

    try:
        from ..common.shapes import load_json

        plan = Plan.from_dict(load_json(plan_file))
    except (OSError, ValueError, TypeError, PlanError) as exc:
        _fail(f"{plan_file}: not a plan: {exc}", exitcodes.USAGE)
    if plan.refused:
        _fail(f"{plan_file}: the compatibility gate refused this plan; re-plan with --force to override",
              exitcodes.USAGE)
    _require_rights(config)
    _preflight(plan_file, plan, config)
    runner, store = _runner(config)
    _check_soak(runner)
    before = store.rollout(plan.id)
    with _rollout_errors(runner.s.db):
        state = runner.apply(plan.to_dict())
    # a plan applied again after its rollout ended: that rollout, its state, and nothing done now
    note = f"this plan's rollout had ended already ({before['state']}): nothing was done now" \
        if before is not None and before["state"] in ("done", "rolled_back", "aborted") else ""
    _finish(state, as_json, store, runner, rollout_id=plan.id, ok=("done",), note=note)


def _preflight(plan_file: str, plan, config: str | None) -> None:
    """What `apply` checks before it records anything: the plan file is one only root could have written
    (it decides what root does to the fleet), Slurm answers within 5 s, and it has every node of the plan.
    Exit 2, nothing recorded."""
    from ..policy.trust import problem
    from ..slurm import SlurmError, get_backend

    refused = problem(plan_file)
    if refused:
        _fail(f"refused: {refused.line()}; write the plan where only root can (maintain plan --out "
              "/var/lib/slurm-gpufleet/plan.json) and apply it from there", exitcodes.USAGE)
    policy = _load_policy(config, trusted=True)
    wanted = [row["node"] for row in plan.to_dict().get("nodes", [])]
    try:
        backend = get_backend(policy.slurm.backend, policy.slurm.scontrol, timeout=5.0, cache_dir=_cache_dir(policy))
        here = {n.name for n in backend.nodes()} if wanted else set()
    except SlurmError as exc:
        _fail(f"Slurm does not answer ({exc}); nothing recorded: apply again once `scontrol ping` answers",
              exitcodes.USAGE)
    missing = [n for n in wanted if n not in here]
    if missing:
        from ..common.hostlist import fold_short

        made = time.strftime("%Y-%m-%d %H:%M", time.localtime(plan.created))
        _fail(f"{plan_file}: {len(missing)} of its {len(wanted)} node(s) are not in this cluster: "
              f"{fold_short(missing, 60)} (the plan was made {made}, from another cluster or a saved fleet?); "
              "nothing recorded", exitcodes.USAGE)


def _check_soak(runner) -> None:
    """An evidence gate's soak must outlast a health check: the counters it judges come from one."""
    from ..slurm import SlurmError

    s = runner.s
    if s.gate != "evidence" or not hasattr(runner.engine.slurm, "health_check_interval"):
        return
    try:
        interval = runner.engine.slurm.health_check_interval()
    except SlurmError as exc:
        _fail(f"cannot read HealthCheckInterval for the evidence gate: {exc}", exitcodes.USAGE)
    if interval and s.gate_min_soak_s < interval:
        _fail(f"gate_min_soak_s {s.gate_min_soak_s} is shorter than HealthCheckInterval {interval}: the gate "
              "would judge counters no health check has published yet", exitcodes.USAGE)


@maintain.command("approve")
@click.argument("rollout")
@click.option("--why", required=True, metavar="TEXT", help="Why the next stage may start without a decision (logged).")
@config_option
def maintain_approve(rollout: str, why: str, config: str | None) -> None:
    """Let the stage an evidence gate holds start: at the soak's bound (gate_max_soak_h) a canary worse
    than the control at gate_confidence, short of the halt line, waits for this (gate_on_timeout =
    "wait"); meanwhile the rollout holds no node beyond those under way.  Logged with who and why.  Exit
    0, 2 when there is no such rollout or no gate waiting."""
    import getpass

    from ..maintain.store import Store

    _require_rights(config)
    policy = _load_policy(config, trusted=True)
    with _rollout_errors(policy.maintain.db):
        store = Store(policy.maintain.db)
        r = store.rollout(rollout)
        if r is None:
            _fail(f"no rollout {rollout}", exitcodes.USAGE)
        state = store.gate(rollout)
        if state is None or state.get("boundary") is None:
            _fail(f"rollout {rollout} has no evidence gate holding a stage", exitcodes.USAGE)
        who = os.environ.get("SUDO_USER") or getpass.getuser()
        state["approved"][str(state["boundary"])] = f"{who}: {why}"
        store.set_gate(rollout, state, time.time(), [("gate approved", f"stage {state['boundary']} by {who}: {why}")])
    from .output import approved_text

    click.echo(approved_text(rollout, state["boundary"], who))


@maintain.command("status")
@config_option
@json_option
def maintain_status(config: str | None, as_json: bool) -> None:
    """The latest rollout: state, counts per node state, every node, the last events."""
    from ..maintain.status import rollout_status
    from ..maintain.store import Store
    from .output import status_text

    policy = _load_policy(config, trusted=True)
    if not os.path.exists(policy.maintain.db):
        _fail(f"no rollout yet ({policy.maintain.db} does not exist)", exitcodes.USAGE)
    data = rollout_status(Store(policy.maintain.db), policy.maintain)
    if data is None:
        _fail("no rollout yet", exitcodes.USAGE)
    if as_json:
        click.echo(json.dumps(data, indent=1))
        return
    for line in status_text(data):
        click.echo(line)


for _name, _help in (("resume", "Continue the unfinished rollout (after a crash, or after a halt once fixed)."),
                     ("abort", "Stop the rollout: release nodes not yet upgraded, delete its reservations."),
                     ("rollback", "Return every upgraded node to its previous driver through the same path.")):
    def _make(name: str):
        @config_option
        @json_option
        def command(config: str | None, as_json: bool) -> None:
            _require_rights(config)
            runner, store = _runner(config)
            with _rollout_errors(runner.s.db):
                state = getattr(runner, name)()
            _finish(state, as_json, store, runner)
        return command

    maintain.command(_name, help=_help)(_make(_name))


@maintain.command("simulate")
@click.option("--sacct", "sacct_file", metavar="FILE",
              help="Job history: sacct --parsable2 -o JobIDRaw,User,Submit,Start,End,Elapsed,NNodes,AllocTRES,State[,Timelimit]"
                   " (plain or .gz).  Default: the bundled Helios trace (15,000 real jobs).")
@click.option("--nodes", "node_count", type=click.IntRange(1, 100_000), default=150, show_default=True,
              help="Nodes in the simulated fleet.")
@click.option("--gpus-per-node", type=click.IntRange(1, 64), default=8, show_default=True, help="GPUs per simulated node.")
@click.option("--strategy", "strategies", multiple=True,
              type=click.Choice(SIMULATED),
              help="Repeat to compare; default: gpufleet, reboot-asap and drain-all side by side (with "
                   "--deadline: gpufleet and wait-then-kill).")
@click.option("--rollout-at", type=Finite(min=0), default=240.0, show_default=True, metavar="HOURS",
              help="When the rollout starts, in hours from the first submission.")
@click.option("--max-unavailable", default=None, metavar="N|P%", help="Budget (default: the policy's).")
@config_opt(name="policy_file", help="Config whose [maintain] table shapes the waves.")
@click.option("--policy", "policy_file", metavar="FILE", hidden=True, help="Old name of --config.")
@click.option("--time-limit-assumption", default="runtime-ceil-hour", show_default=True,
              help="For histories without Timelimit: runtime-ceil-hour, factor:X, or partition:D-HH:MM:SS.")
@click.option("--upgrade-minutes", type=click.IntRange(1, 1440), default=None, help="Per node (default: the policy's).")
@click.option("--deadline", "deadline_text", default=None, metavar="DURATION",
              help="Every node done this long after the rollout starts (72h, 3d; a bare number is hours, as for "
                   "`maintain plan --deadline`); jobs may be stopped early.")
@click.option("--checkpoint-every", "checkpoint_every_h", type=Finite(min=0, min_open=True), default=None,
              metavar="HOURS", help="Every job checkpoints this often, and says so in its comment.")
@click.option("--domain-size", type=click.IntRange(1, 100_000), default=None, metavar="N",
              help="Every N consecutive nodes form a failure domain (an NVLink rack); --config gives "
                   "whole_domain and the domain budget.")
@click.option("--failure-rate", type=Finite(min=0), default=None, metavar="R",
              help="Hard node failures per 1,000 node-days (Meta RSC-1: 6.5), in the replay from the rollout's "
                   "start and in the --seeds trials.")
@click.option("--soft-rate", type=Finite(min=0), default=None, metavar="S",
              help="Soft events per node-day (default with a failure rate: 0.18, NCSA Delta's Xid 31).")
@click.option("--driver-effect", type=Finite(min=0, min_open=True), default=1.0, show_default=True,
              metavar="K", help="Upgraded nodes' failure and soft rates times K.")
@click.option("--seeds", type=click.IntRange(1, 10_000), default=None, metavar="N",
              help="N random draws of failures with the evidence gate (and 10 without): JSON `gate`.")
@click.option("--replay/--no-replay", default=True, show_default=True,
              help="--no-replay: only the --seeds trials, without the full replay of each strategy.")
@click.option("--jobs", "jobs", type=click.IntRange(1, 1024), default=None, metavar="N",
              help="Run the strategies' replays and the seeds in N processes (default: the cores this may use).")
@click.option("--slurm-array", "slurm_array", metavar="PARTITION", default=None,
              help="Run the --seeds trials as one Slurm job array on PARTITION (each task writes its JSON under "
                   "the current directory, which the partition's nodes must see; the command waits and merges "
                   "them into the same output as a local run).")
@click.option("--hours", type=Finite(min=0, min_open=True), default=None, metavar="H",
              help="Stop every replay H hours after the rollout's start, whatever is left (a week of a "
                   "large fleet: 168); each strategy then says how many nodes it upgraded by then.")
@click.option("--plot", "plot_file", metavar="FILE.html", help="Capacity in service over time, and the waves.")
@json_option
def maintain_simulate(sacct_file: str | None, node_count: int, gpus_per_node: int, strategies: tuple[str, ...],
                      rollout_at: float, max_unavailable: str | None, policy_file: str | None,
                      time_limit_assumption: str, upgrade_minutes: int | None, deadline_text: str | None,
                      checkpoint_every_h: float | None, domain_size: int | None, failure_rate: float | None,
                      soft_rate: float | None, driver_effect: float, seeds: int | None, replay: bool,
                      jobs: int | None, slurm_array: str | None, hours: float | None, plot_file: str | None,
                      as_json: bool) -> None:
    """Replay a job history on a simulated fleet and compare rollout strategies (same planner code).
    A run that takes more than a few seconds says how far it is on stderr."""
    from ..common.progress import Progress
    from ..maintain.pool import default_jobs
    from ..maintain.sacct import assume_limit
    from ..simulators.rollout import simulate

    jobs = jobs or default_jobs()
    progress = Progress()
    if not replay and not seeds:
        _fail("--no-replay leaves only the --seeds trials: give --seeds N", exitcodes.USAGE)
    if not replay and plot_file:
        _fail("--plot draws the replay: not with --no-replay", exitcodes.USAGE)
    if slurm_array is not None and not seeds:
        _fail("--slurm-array runs the --seeds trials: give --seeds N", exitcodes.USAGE)
    if slurm_array is not None and not slurm_array.strip():
        _fail("--slurm-array: give a partition name", exitcodes.USAGE)

    policy = _with_budget(_load_policy(policy_file, read_only=True), max_unavailable)
    budget = policy.maintain.max_unavailable
    try:
        assume_limit(3600, time_limit_assumption)
    except (ValueError, TypeError):
        _fail(f"--time-limit-assumption {time_limit_assumption!r}: use runtime-ceil-hour, factor:X or partition:LIMIT",
              exitcodes.USAGE)
    history_label, trace = read_history(sacct_file)
    deadline_h = None
    if deadline_text is not None:
        from ..maintain.deadline import DeadlineError, parse_simulated_deadline

        try:
            deadline_h = parse_simulated_deadline(deadline_text)
        except DeadlineError as exc:
            _fail(str(exc), exitcodes.USAGE)
    if "wait-then-kill" in strategies and deadline_h is None:
        _fail("--strategy wait-then-kill needs --deadline DURATION (72h, 3d)", exitcodes.USAGE)
    from ..maintain.deadline import DeadlineError
    from ..maintain.strategy import compared_by_default
    from ..simulators.failures import rates_of

    default = compared_by_default(deadline=deadline_h is not None)
    try:
        rates = rates_of(failure_rate, soft_rate, driver_effect, seeds)
    except ValueError as exc:
        _fail(str(exc), exitcodes.USAGE)
    replay_rates = rates if rates and (rates.failure_rate or rates.soft_rate) else None
    try:
        result = simulate(trace, nodes=node_count, gpus_per_node=gpus_per_node,
                          strategies=(strategies or default) if replay else (), rollout_at_h=rollout_at,
                          max_unavailable=budget, policy=policy, assumption=time_limit_assumption,
                          upgrade_minutes=upgrade_minutes, deadline_h=deadline_h,
                          checkpoint_every_h=checkpoint_every_h, domain_size=domain_size, rates=replay_rates,
                          jobs=jobs, progress=progress, hours=hours)
    except DeadlineError as exc:
        _fail(str(exc), exitcodes.USAGE)
    results = result.pop("_results")
    running, sim_policy = result.pop("_running"), result.pop("_policy")
    if seeds and rates:
        result["gate"] = _gate_trials(policy, running, node_count, gpus_per_node, sim_policy, rates, seeds,
                                      rollout_at, jobs, progress, slurm_array)
    result["assumptions"]["job_history"] = history_label
    result["gating_jobs"] = next((r.gating_jobs for r in results.values() if r.gating_jobs), [])
    if plot_file:
        from ..simulators.plots import simulation_html

        _write_atomic(plot_file, simulation_html(result, results))
    if as_json:
        click.echo(json.dumps(result, indent=1))
        return
    from .output import simulation_text

    click.echo("\n".join(simulation_text(result, node_count)))


def _gate_trials(policy, running, node_count: int, gpus_per_node: int, sim_policy, rates, seeds: int,
                 rollout_at: float, jobs: int, progress, slurm_array: str | None):
    """The --seeds trials of the evidence gate: here, in `jobs` processes, or as one Slurm job array."""
    from ..simulators.trials import gate_trials

    runner = None
    if slurm_array:
        from ..maintain.pool import in_slurm_array
        from ..slurm.ownership import MAINTAIN

        backend = _backend(policy)
        actuator = _actuator(backend, MAINTAIN, policy)   # the simulation's array jobs are the maintain command's

        def runner(calls, say, what):
            return in_slurm_array(calls, slurm_array, actuator, backend, os.getcwd(), say, what)
    from ..maintain.pool import ArrayError
    from ..slurm import SlurmError

    try:
        return gate_trials(running, node_count, gpus_per_node, sim_policy, rates, seeds,
                           rollout_at * 3600, jobs=jobs, progress=progress, runner=runner)
    except (ArrayError, SlurmError) as exc:  # only the job array talks to Slurm here
        _fail(str(exc), exitcodes.USAGE)
