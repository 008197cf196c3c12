"""`slurm-gpufleet fleet simulate-faults`: what failures cost jobs, on the simulator core of
`maintain simulate` (simulators/rollout.py: its jobs, checkpoints, requeues and restarts; failures.py: its
failure draws).

Built so far: the one-job mode, the core checked against an analytic result.  One job of GPUS GPUs runs
for DAYS days; each of its nodes fails at exponential times of mean M hours (every class alike, nothing
to detect: strategy `none`, Slurm's NODE_FAIL alone); a failure ends the run, the job is requeued at once
on a spare and starts again after RESTART minutes from its last checkpoint.  The effective training time
ratio (ETTR) is the work kept over the time taken.  Daly (2006) gives its expectation for a job whose
failures have mean M_job = M / nodes, checkpoint interval t, checkpoint cost C (0 here) and restart R:

    E[T] = M_job e^{R/M_job} (e^{(t+C)/M_job} - 1) W / t,   ETTR = W / E[T]

(J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps", Future
Generation Computer Systems 22(3), 2006; bench/daly_check.py runs the grid).

The fleet mode (`fleet_faults`): the bundled Helios history (or `--sacct`) on a simulated fleet, with
failures drawn per class at the rates of data/failure_classes.toml (Llama 3's table; `--rates FILE` for
others), found by the mechanisms each strategy has, and handled as each strategy does; the gpufleet
strategies run the product's own remedy carrier (remedy/carrier.py), actuator and history on the
in-memory Slurm (simulators/simslurm.py): `_Lab`.
Strategies compared:

* `none`: Slurm's NODE_FAIL alone; a node whose GPU fails stays in service, and every job placed there
  crashes, until an admin finds it (`admin_hours`);
* `drain-on-any`: NHC-like, the periodic health check drains on any finding, warnings included (false
  drains on application Xids), and an admin reboots or repairs;
* `two-tier`: Meta's: checks every HealthCheckInterval and before and after each job, high severity
  drains and requeues at once, low severity (the classes' `severity`) drains and lets the running jobs
  end (a warning never drains); an admin reboots or repairs.  A low-severity fault degrades a node
  without ending its jobs, for every strategy: what differs is how soon new jobs stop landing there;
* `gpufleet`: the health check, prolog and epilog, and the ladder: reset, reboot, repair, capped per
  class, validation before return; a node drained for inspection gets an admin's repair after
  `admin_hours` + `repair_hours`, then `fleet repaired`.

Rack-correlated events (`--domain-size N`, `--switch-share S`; [domain] of the data file): a share of
the faults of the domain classes are switch-side and strike every node of their domain at once; only a
switch-tray swap fixes them.  The gpufleet strategy escalates as the product does: the carrier's own
rack escalation (remedy/escalation.escalate over the run's [[domain]]s) after a tray's drain, the domain
drained whole and its repair under way at once; the others find each tray, and an admin finds the switch.

The breaker is the actuator's (slurm/breaker.py), in front of the gpufleet strategy's drains, reboots
and escalations, with no gate of the simulator's own; tripped, it drains nothing until a person resets
it (`admin_hours`).

Not modelled: precursors (no class has a known share: all 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

STRATEGIES_ONE_JOB = ("none",)


def daly_ettr(job_mtbf_s: float, checkpoint_s: float, restart_s: float, cost_s: float = 0.0) -> float:
    """Daly's expected ETTR (W / E[T]) for exponential failures of mean `job_mtbf_s`."""
    m = job_mtbf_s
    return checkpoint_s / (m * math.exp(restart_s / m) * (math.exp((checkpoint_s + cost_s) / m) - 1))


def one_job(gpus: int, node_mtbf_h: float, checkpoint_every_h: float, restart_min: float, days: float,
            seed: int = 0, gpus_per_node: int = 8) -> dict[str, Any]:
    """The one-job mode's figures (strategy `none`), and Daly's ETTR for the same inputs."""
    from .failures import Hazards, Rates
    from .rollout import SimJob, Simulator

    if gpus < 1 or node_mtbf_h <= 0 or checkpoint_every_h <= 0 or restart_min < 0 or days <= 0:
        raise ValueError("GPUS, the MTBF, the checkpoint interval and the days must be positive, the restart >= 0")
    nodes = math.ceil(gpus / gpus_per_node)
    horizon = days * 86400
    job = SimJob("1", 0.0, run=horizon * 10, limit=horizon * 10, nodes=nodes, gpn=min(gpus, gpus_per_node))
    sim = Simulator([job], nodes, gpus_per_node)
    sim.checkpoint_every_s = checkpoint_every_h * 3600
    sim.restart_s = restart_min * 60
    sim.until = horizon
    # failure_rate is per 1,000 node-days; a repair of 0 h: a spare takes the failed node's place at once
    sim.hazards = Hazards(Rates(1000 * 24 / node_mtbf_h, 0.0, repair_h=0.0), seed, exact=True, max_requeue=10**9)
    sim.hazards_from = 0.0
    sim.run()
    work = sim.progress(job)
    job_mtbf_s = node_mtbf_h * 3600 / nodes
    return {
        "strategies": {"none": {
            "ettr": round(work / horizon, 4),
            "failures": sim.hazards.node_failures,
            "work_h": round(work / 3600, 3), "wall_h": round(horizon / 3600, 3),
            "work_lost_gpu_h": round(sim.failed_work_gpu_s / 3600, 3)}},
        "daly_ettr": round(daly_ettr(job_mtbf_s, sim.checkpoint_every_s, sim.restart_s), 4),
        "assumptions": {"mode": "one job", "gpus": gpus, "nodes": nodes, "node_mtbf_h": node_mtbf_h,
                        "job_mtbf_h": round(job_mtbf_s / 3600, 4), "checkpoint_every_h": checkpoint_every_h,
                        "checkpoint_cost_s": 0, "restart_minutes": restart_min, "days": days, "seed": seed,
                        "failures": "exponential per node; the job requeued at once on a spare, restarting "
                                    "from its last checkpoint after the restart"},
    }


# ------------------------------------------------------------------ the fleet mode
STRATEGIES = ("none", "drain-on-any", "two-tier", "gpufleet")   # compared unless --strategy says
# the ladder without its reset rung (reboot first): what the reset tier is worth, by the same decide
VARIANTS = ("gpufleet-reboot-first", "gpufleet-no-suspect")
MECHANISMS = {"none": (), "drain-on-any": ("healthcheck",), "two-tier": ("healthcheck", "prolog", "epilog"),
              "gpufleet": ("healthcheck", "prolog", "epilog"), "gpufleet-reboot-first": ("healthcheck", "prolog", "epilog"),
              "gpufleet-no-suspect": ("healthcheck", "prolog", "epilog")}
ALL_STRATEGIES = tuple(MECHANISMS)   # every one --strategy takes
EFFECTS = ("gpu", "node", "job", "link")
SEEN_BY = ("healthcheck", "prolog", "epilog")
CRASH_S = 60.0        # a job placed on a node with a failed GPU dies this soon (CUDA init or its first step)
EPILOG_S = 5.0        # the epilog of a crashed job runs this long after the crash


# the most faults and false alarms one run draws: a year of 12,500 nodes at Llama 3's rates is about 35,000
MAX_DRAWN = 2_000_000


class RatesError(ValueError):
    """A failure-classes file that cannot be used: one line, exit 2."""


@dataclass(frozen=True)
class FailureClass:
    name: str
    what: str
    rate: float                  # per 1,000 node-days
    effect: str
    seen_by: tuple[str, ...]
    severity: str
    finding: tuple[str, str, str]
    fixed_by_reset: float
    fixed_by_reboot: float
    precursor_share: float
    source: str
    keywords: tuple[str, ...] = ()   # how a fault log's text names it (--fault-log)


@dataclass(frozen=True)
class DomainModel:
    """Rack-correlated events ([domain] of data/failure_classes.toml)."""

    classes: tuple[str, ...]     # the classes a share of whose faults are switch-side
    switch_share: float
    finding: tuple[str, str, str]
    switch_repair_hours: float
    source: str


@dataclass(frozen=True)
class FaultModel:
    classes: tuple[FailureClass, ...]
    false_alarm_rate: float      # per node-day
    times: dict[str, float]
    source: str
    domain: DomainModel | None = None


def _number(where: str, label: str, v: Any) -> float:
    """A rates file's number: finite and >= 0.  A boolean, a text, NaN (which made a run hang) or an
    infinity is refused in one line, never carried into the draws."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not -1e300 < v < 1e300 or not math.isfinite(v) \
            or v < 0:
        raise RatesError(f"{where}: {label} must be a finite number >= 0, not {v!r}")
    return float(v)


def load_model(path: str | None = None) -> FaultModel:
    """The packaged classes (data/failure_classes.toml), or a site's file of the same form: a class it
    names overrides the packaged one key by key, and every class it does not name is kept."""
    import tomllib

    from ..catalogs import failure_classes_data
    from ..judging.findings import ACTIONS, RANK

    where = path or "data/failure_classes.toml"
    base = failure_classes_data()
    if path:
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise RatesError(f"{path}: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise RatesError(f"{path}: not TOML: {exc}") from None
        given = data.get("class", [])
        if not isinstance(given, list) or not all(isinstance(r, dict) for r in given):
            raise RatesError(f"{path}: 'class' must be an array of tables ([[class]])")
        if not all(isinstance(r.get("name"), str) for r in given):
            raise RatesError(f"{path}: every [[class]] needs a name (a string)")
        named = {r.get("name"): r for r in given}
        if len(named) != len(given):
            raise RatesError(f"{path}: a class is given twice")
        unknown = [n for n in named if n not in {c["name"] for c in base["class"]}]
        if unknown:
            raise RatesError(f"{path}: unknown failure class {unknown[0]!r} (known: "
                             f"{', '.join(sorted(c['name'] for c in base['class']))})")
        data = {**base, **data, "class": [{**c, **named.get(c["name"], {})} for c in base["class"]]}
    else:
        data = base
    known = {c["name"] for c in base["class"]}
    classes = []
    for row in data.get("class", []):
        name = row.get("name")
        if name not in known:
            raise RatesError(f"{where}: unknown failure class {name!r} (known: {', '.join(sorted(known))})")
        base_row = next(c for c in base["class"] if c["name"] == name)
        row = {**base_row, **row}
        fixed = row.get("fixed_by", {})
        if not isinstance(fixed, dict):
            raise RatesError(f"{where}: class {name}: fixed_by must be a table {{ reset = R, reboot = B }}")
        row["rate"] = _number(where, f"class {name}: rate", row["rate"])
        reset = _number(where, f"class {name}: fixed_by.reset", fixed.get("reset", 0.0))
        reboot = _number(where, f"class {name}: fixed_by.reboot", fixed.get("reboot", 0.0))
        row["precursor_share"] = _number(where, f"class {name}: precursor_share", row.get("precursor_share", 0.0))
        if reset + reboot > 1 or row.get("precursor_share", 0.0) > 1:
            raise RatesError(f"{where}: class {name}: shares above 1 (fixed_by.reset + fixed_by.reboot = "
                             f"{reset + reboot:g}, precursor_share = {row.get('precursor_share', 0.0):g})")
        seen = row["seen_by"]
        if not isinstance(row["effect"], str) or row["effect"] not in EFFECTS or not isinstance(seen, list) \
                or not all(isinstance(w, str) for w in seen) or not set(seen) <= set(SEEN_BY):
            raise RatesError(f"{where}: class {name}: effect must be one of {', '.join(EFFECTS)}, seen_by of "
                             f"{', '.join(SEEN_BY)}")
        finding = row["finding"]
        if not isinstance(finding, list) or len(finding) != 3 or not all(isinstance(w, str) for w in finding):
            raise RatesError(f"{where}: class {name}: finding must be [check, severity, action] (strings)")
        check, severity, action = finding
        if severity not in RANK or action not in ACTIONS:
            raise RatesError(f"{where}: class {name}: finding {row['finding']!r}: unknown severity or action")
        words = row.get("keywords", [])
        if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
            raise RatesError(f"{where}: class {name}: keywords must be a list of words")
        classes.append(FailureClass(name, row.get("what", name), float(row["rate"]), row["effect"],
                                    tuple(row["seen_by"]), row.get("severity", "high"), (check, severity, action),
                                    reset, reboot, float(row.get("precursor_share", 0.0)), row.get("source", ""),
                                    tuple(w.strip().lower() for w in words)))
    names = [c.name for c in classes]
    if len(set(names)) != len(names):
        raise RatesError(f"{where}: a class is given twice")
    for table in ("false_alarm", "times", "domain"):
        if not isinstance(data.get(table, {}), dict):
            raise RatesError(f"{where}: '{table}' must be a table ([{table}])")
    fa = _number(where, "false_alarm.rate_per_node_day", data.get("false_alarm", {}).get("rate_per_node_day", 0.0))
    # the packaged [times] (data/failure_classes.toml), key by key under a rates file's own
    unknown_times = set(data.get("times", {})) - set(base["times"])
    if unknown_times:
        raise RatesError(f"{where}: times: unknown key(s) {', '.join(sorted(unknown_times))} (known: "
                         f"{', '.join(sorted(base['times']))})")
    times = {k: _number(where, f"times.{k}", v) for k, v in {**base["times"], **data.get("times", {})}.items()}
    d = {**base.get("domain", {}), **data.get("domain", {})}
    share = _number(where, "domain.switch_share", d.get("switch_share", 0.0))
    hours = _number(where, "domain.switch_repair_hours", d.get("switch_repair_hours", 0.0))
    if share > 1:
        raise RatesError(f"{where}: domain.switch_share must be a number from 0 to 1, not {share!r}")
    unknown = set(d.get("classes", [])) - set(names)
    if unknown:
        raise RatesError(f"{where}: domain.classes: unknown failure class(es) {', '.join(sorted(unknown))}")
    check, severity, action = d.get("finding", ["fabric", "reboot", "reset_gpu"])
    if severity not in RANK or action not in ACTIONS:
        raise RatesError(f"{where}: domain.finding {d.get('finding')!r}: unknown severity or action")
    domain = DomainModel(tuple(d.get("classes", [])), float(share), (check, severity, action), float(hours),
                         d.get("source", ""))
    return FaultModel(tuple(classes), float(fa), times, path or "data/failure_classes.toml (Llama 3 rates)", domain)


@dataclass
class Fault:
    t: float
    node: int
    cls: FailureClass
    level: str                   # what fixes it: reset, reboot or repair
    phase: float = 0.0           # where in the health check's interval it falls (the same for every strategy)
    detected_at: float | None = None
    how: str = ""
    resolved_by: str = ""
    hit: bool = False            # it struck a node in service (one out of service has nothing to fail)
    domain: int | None = None    # a switch-side fault: the index of the domain it took whole
    until: float | None = None   # a logged fault (--fault-log): the node is unusable until then, whatever is done


def switch_class(model: FaultModel) -> FailureClass:
    """The failure class of a switch-side fault on each tray of its domain: seen by the GPU checks (the
    trays' fabric state), fixed by nothing on a node's ladder."""
    d = model.domain
    assert d is not None
    return FailureClass("switch", "NVLink switch tray (whole domain)", 0.0, "gpu", SEEN_BY, "high", d.finding,
                        0.0, 0.0, 0.0, d.source)


def draw_faults(model: FaultModel, nodes: int, horizon_s: float, seed: int, lemon_share: float = 0.0,
                lemon_factor: float = 1.0, domain_size: int = 0,
                switch_share: float | None = None) -> tuple[list[Fault], list[tuple[float, int]]]:
    """Every failure and false alarm of a run, drawn once so that every strategy meets the same ones.  With
    `domain_size`, a `switch_share` of the faults of the domain classes are switch-side: the fault strikes
    every node of its domain (domains of `domain_size` consecutive nodes) at once."""
    import random

    from .failures import poisson

    days = horizon_s / 86400
    k_max = max(lemon_factor, 1.0)
    expected = nodes * days * (sum(c.rate for c in model.classes) / 1000 * k_max + model.false_alarm_rate)
    if expected > MAX_DRAWN:   # a rate of 1e300 would draw for ever: bounded before a single draw
        raise RatesError(f"these rates would draw about {expected:,.3g} faults and false alarms over {nodes:,} "
                         f"nodes and {days:g} days; at most {MAX_DRAWN:,} are simulated")
    rng = random.Random(seed)
    side = random.Random(f"{seed} switch-side")  # its own stream: the same faults are drawn with or without domains
    lemons = set(rng.sample(range(nodes), round(lemon_share * nodes))) if lemon_share > 0 else set()
    faults: list[Fault] = []
    alarms: list[tuple[float, int]] = []
    d = model.domain
    share = (d.switch_share if d else 0.0) if switch_share is None else switch_share
    correlated = set(d.classes) if d and domain_size > 0 and share > 0 else set()
    switch = switch_class(model) if correlated else None
    for i in range(nodes):
        k = lemon_factor if i in lemons else 1.0
        for c in model.classes:
            for _ in range(poisson(rng, c.rate / 1000 * days * k)):
                u = rng.random()
                level = "reset" if u < c.fixed_by_reset else "reboot" if u < c.fixed_by_reset + c.fixed_by_reboot \
                    else "repair"
                t, phase = rng.uniform(0, horizon_s), rng.random()
                if c.name in correlated and side.random() < share:
                    dom = i // domain_size
                    for j in range(dom * domain_size, min(nodes, (dom + 1) * domain_size)):
                        # each tray's check falls at its own moment of the interval
                        faults.append(Fault(t, j, switch, "rack", (phase + (j - i) * 0.618) % 1.0, domain=dom))
                    continue
                faults.append(Fault(t, i, c, level, phase))
        for _ in range(poisson(rng, model.false_alarm_rate * days)):
            alarms.append((rng.uniform(0, horizon_s), i))
    faults.sort(key=lambda f: (f.t, f.node))
    return faults, sorted(alarms)


def _fault_run(strategy: str, model: FaultModel, jobs: list, nodes: int, gpus_per_node: int, horizon_s: float,
               faults: list[Fault], alarms: list[tuple[float, int]], *, hc_interval_s: float, checkpoint_every_h: float,
               restart_min: float, seed: int, big_jobs: frozenset[str], settings=None,
               domain_size: int = 0, watch=None) -> dict[str, Any]:
    """One strategy's replay: the same jobs, faults and false alarms as every other strategy."""
    import copy

    from ..remedy.decide import Ladder
    from .failures import MAX_BATCH_REQUEUE
    from .rollout import Controller, Simulator

    times = model.times
    mech = MECHANISMS[strategy]
    switch_repair_s = (model.domain.switch_repair_hours if model.domain else 0.0) * 3600
    from ..policy import SlurmSettings

    # the product's ladder, its suspect rung included (gpufleet-no-suspect: without it)
    ladder = Ladder.of(settings or SlurmSettings(), suspect=strategy != "gpufleet-no-suspect")
    carried = strategy.startswith("gpufleet")   # the product's own carrier on the in-memory Slurm
    faults = [copy.copy(f) for f in faults]

    class Sim(Simulator):
        def __init__(self, *a):
            super().__init__(*a)
            self.first_start: dict[str, float] = {}
            self.done_at: dict[str, float] = {}
            self.active_fault: dict[int, Fault] = {}    # node -> its fault, until it is back in service
            self.restarts_gpu_s = 0.0
            self.black_hole_crashes = 0
            self.lost_jobs = 0
            self.ran_s: dict[str, float] = {}           # job -> seconds it ran (its waits are the rest)

        def stop(self, job, requeue, failed=False):
            if job.start is not None:
                self.ran_s[job.id] = self.ran_s.get(job.id, 0.0) + self.now - job.start
            super().stop(job, requeue, failed)

        def _start(self, job, placed):
            for i in placed:
                f = self.active_fault.get(i)
                if f and f.detected_at is None and "prolog" in mech and "prolog" in f.cls.seen_by \
                        and f.cls.effect == "gpu":
                    ctl.detect(self, f, "prolog")  # the prolog fails: the job waits for other nodes
                    return
            self.first_start.setdefault(job.id, self.now)
            if job.gen > 0:
                self.restarts_gpu_s += self.restart_s * job.gpn * len(placed)
            super()._start(job, placed)
            if any(i in self.active_fault and self.active_fault[i].cls.effect in ("gpu", "link")
                   and self.active_fault[i].cls.severity != "low" for i in placed):
                self.push(self.now + CRASH_S, "tick", ("crash", (job, job.gen)))

        def _end(self, job):
            if job.start is not None:
                self.ran_s[job.id] = self.ran_s.get(job.id, 0.0) + self.now - job.start
            super()._end(job)
            self.done_at[job.id] = self.now

    class Ctl(Controller):
        # the rollout's measures, taken at every event over every node (Simulator._advance), are not this
        # simulator's: it keeps its own (out_by, out_since, peak_out) where a node changes
        active = False

        def __init__(self):
            super().__init__(0, 0.0)
            self.out_by: dict[str, float] = {"failures": 0.0, "remedies": 0.0, "false_drains": 0.0}
            self.out_since: dict[int, tuple[float, str]] = {}
            self.resolved = {"reset": 0, "reboot": 0, "repair": 0, "suspect": 0, "rack": 0}
            self.rack_fix_at: dict[int, float] = {}    # domain -> when its switch-tray swap is done
            self.breaker_trips = 0
            self.escalated: set[int] = set()            # domains drained whole by the rack escalation
            self.rack_escalations = 0
            self.repairing: set[int] = set()             # nodes whose admin repair is under way
            self.peak_out = 0                             # the most nodes out of service at once
            self.false_drains = 0
            self.ladder_log: list[tuple[int, str, str, str]] = []   # (node, class, from, to): the carrier's moves
            self.next_check: dict[int, float] = {}       # node -> its next health check, while under remedy
            self.fault_boot: dict[int, int] = {}          # node -> its boot when its fault struck
            self.breaker_open = False
            self.lab = None

        def start(self, sim):
            self.started = True
            if carried:
                self.lab = _Lab(sim, settings, model, ladder, strategy, domain_size)

        def on_tick(self, sim, payload):
            kind, data = payload
            getattr(self, "_" + kind)(sim, data)

        def on_change(self, sim, freed=None):
            """No rollout here: a job's end changes nothing of ours (a reboot asked for ends at its own
            event, `rebooted`)."""

        def _slot(self, sim, name):
            """A reservation's start: the validation reservations start when made."""

        # -- what happens --------------------------------------------------------------------------
        def _fault(self, sim, f: Fault):
            n = sim.nodes[f.node]
            if f.node in sim.active_fault or (n.drained and f.until is None):
                return  # a node out of service, or already failed: nothing runs there to fail
            f.hit = True   # a logged fault strikes a node out of service too: it is unusable until its end
            if f.until is not None:
                sim.push(f.until, "tick", ("expire", f))
            if f.cls.severity != "low":   # a low-severity fault (Meta's low tier) degrades; its jobs go on
                self._crash_jobs(sim, f.node)
            if f.cls.effect == "job":
                return
            sim.active_fault[f.node] = f
            self.fault_boot[f.node] = n.boot
            if f.cls.effect == "node":  # slurmd is gone: Slurm's NODE_FAIL, whatever the strategy
                self.detect(sim, f, "slurm")
                return
            visible = f.cls.effect == "gpu"
            if visible and "healthcheck" in mech and "healthcheck" in f.cls.seen_by:
                sim.push(sim.now + f.phase * hc_interval_s, "tick", ("detect", (f, "healthcheck")))
            sim.push(sim.now + times["admin_hours"] * 3600, "tick", ("detect", (f, "admin")))

        def _crash_jobs(self, sim, i: int) -> bool:
            crashed = False
            for job_id in list(sim.nodes[i].running):
                job = sim.by_id[job_id]
                job.requeues += 1
                requeue = job.requeues <= MAX_BATCH_REQUEUE
                sim.stop(job, requeue, failed=True)
                if not requeue:  # held by Slurm after MaxBatchRequeue requeues: it ends here, unfinished
                    sim.lost_jobs += 1
                    sim.done_at[job.id] = sim.now
                crashed = True
            return crashed

        def _crash(self, sim, data):
            job, gen = data
            if job.gen != gen or job.start is None:
                return
            bad = [i for i in job.placed if i in sim.active_fault]
            if not bad:
                return
            sim.black_hole_crashes += 1
            for i in bad:
                self._crash_jobs(sim, i)
                f = sim.active_fault.get(i)
                if f and f.detected_at is None and "epilog" in mech and "epilog" in f.cls.seen_by and f.cls.effect == "gpu":
                    sim.push(sim.now + EPILOG_S, "tick", ("detect", (f, "epilog")))

        def _detect(self, sim, data):
            f, how = data
            self.detect(sim, f, how)

        def detect(self, sim, f: Fault, how: str) -> None:
            if f.detected_at is not None or sim.active_fault.get(f.node) is not f:
                return
            f.detected_at, f.how = sim.now, how
            if strategy.startswith("gpufleet") and how not in ("slurm", "admin"):
                if f.domain is not None and f.domain in self.escalated:
                    return   # held by its rack's escalation: nothing more to drain
                if f.cls.severity != "low":
                    self._crash_jobs(sim, f.node)   # the GPU's fault ends its jobs, whatever drains the node
                self._check(sim, f.node, how)   # the carrier: its ladder, its breaker, its rack escalation
                return
            self._take(sim, f.node, "failures")
            if f.cls.severity != "low":
                # a high-severity drain: its jobs are requeued at once; a low-severity one lets them end
                self._crash_jobs(sim, f.node)
            # an admin looks, reboots where a reboot can help, else sends it for repair
            wait = times["admin_hours"] * 3600 if how != "admin" else 0.0
            if f.level == "rack":  # the admin finds the switch tray: one swap for the whole domain
                self._rack_repair(sim, f.domain, sim.now + wait)
            elif f.level in ("reset", "reboot"):
                self._after(sim, f, wait + times["reboot_minutes"] * 60, "reboot")
            else:
                self._after(sim, f, self._repair_in(sim, f, wait), "repair")

        def _repair_in(self, sim, f: Fault, wait: float) -> float:
            """How long a repair takes from now, an admin looking after `wait`: `repair_hours`, or for a logged
            fault until its logged end (and no sooner than the admin looks)."""
            if f.until is not None:
                return max(wait, f.until - sim.now)
            return wait + times["repair_hours"] * 3600

        def _expire(self, sim, f: Fault) -> None:
            """A logged fault's end: the node is usable again.  The gpufleet strategies' next check finds it
            clean (or the admin's repair, under way, ends now); the others' repair was set for this end."""
            if not carried or sim.active_fault.get(f.node) is not f or f.how in ("slurm", "admin"):
                return   # (one Slurm or an admin took out: their repair, set for this end, brings it back)
            from ..remedy.table import SUSPECT

            # gone while the node was held as a suspect: the hold's re-checks return it
            self._fixed(sim, f, "suspect" if self.lab.where(sim.nodes[f.node]) == SUSPECT else "repair")
            if f.node not in self.repairing:
                self._next(sim, f.node)

        # -- rack-correlated events (--domain-size) ----------------------------------------------------
        def _escalated(self, sim, i: int) -> None:
            """The carrier's rack escalation drained node i's domain whole (its members hold the rack's
            reason in the in-memory Slurm): their jobs end, the switch-tray swap is under way."""
            from ..remedy.table import RACK

            dom = sim.active_fault[i].domain if i in sim.active_fault else None
            if dom is None or dom in self.escalated or self.lab.where(sim.nodes[i]) != RACK:
                return
            self.escalated.add(dom)
            self.rack_escalations += 1
            for j in self._domain_nodes(sim, dom):
                self._crash_jobs(sim, j)
                self._sync(sim, j)
            self._rack_repair(sim, dom, sim.now + times["admin_hours"] * 3600)

        def _domain_nodes(self, sim, dom: int) -> range:
            return range(dom * domain_size, min(len(sim.nodes), (dom + 1) * domain_size))

        def _rack_repair(self, sim, dom: int, admin_at: float) -> None:
            """The switch-tray swap, once per domain: done `switch_repair_hours` after an admin looks."""
            if dom in self.rack_fix_at:
                return
            done = admin_at + switch_repair_s
            self.rack_fix_at[dom] = done
            sim.push(done, "tick", ("rack_fixed", dom))

        def _rack_fixed(self, sim, dom: int) -> None:
            self.rack_fix_at.pop(dom, None)
            self.escalated.discard(dom)
            for j in self._domain_nodes(sim, dom):
                g = sim.active_fault.get(j)
                if g is not None and g.domain == dom:
                    self._back(sim, g, "rack")
                elif g is None:
                    self._return(sim, j)   # drained whole by the escalation, its own GPUs fine

        # -- the gpufleet strategies: the product's carrier on the in-memory Slurm ---------------------
        def _check(self, sim, i: int, hook: str = "healthcheck") -> None:
            """One run of the node's check (health check, prolog or epilog): what the node shows now,
            judged, decided and carried out by remedy/carrier.py through the actuator."""
            n = sim.nodes[i]
            f = sim.active_fault.get(i)
            if f is not None and f.domain is not None and f.domain in self.escalated:
                return  # held by its rack's escalation: its repair is the rack's
            lab = self.lab
            info = lab.slurm.node(n.name)   # a reboot that is due ends at this read
            if f is not None and n.boot != self.fault_boot.get(i, n.boot) and f.level in ("reset", "reboot"):
                self._fixed(sim, f, "reboot")  # the reboot cleared it
                f = None
            moves = lab.run(n, hook, info, f, lambda: self._reread(sim, i))
            self.ladder_log += [(i, f.cls.name if f else "", a, b) for a, b, _ in moves]
            if lab.blocked:
                self._tripped(sim)
            self._escalated(sim, i)
            self._sync(sim, i)
            self._next(sim, i)

        def _reread(self, sim, i: int):
            """The GPUs read again after the reset: a fault a reset fixes is gone."""
            f = sim.active_fault.get(i)
            if f is not None and f.level == "reset":
                self._fixed(sim, f, "reset")
                f = None
            return self.lab.report(sim.nodes[i], f)

        def _fixed(self, sim, f: Fault, how: str) -> None:
            f.resolved_by = how
            self.resolved[how] += 1
            sim.active_fault.pop(f.node, None)

        def _next(self, sim, i: int) -> None:
            """The node's next check while it is under remedy (time is skipped where nothing changes):
            every health-check interval; a node drained for repair waits for the admin's repair."""
            from ..remedy import table as T

            n = sim.nodes[i]
            where = self.lab.where(n)
            f = sim.active_fault.get(i)
            if where == T.OTHERS:
                return  # someone else's (Slurm's NODE_FAIL, an admin's): the admin's path has it
            if where == T.REPAIR or (where == T.DRAINED and f is not None and (f.cls.finding[1] == "drain" or any(
                    r["rung"] == "repair" for r in self.lab.history.pending_remedies(n.name)))):
                # drained for repair, or for a finding no rung remedies: an admin looks, then repairs
                if i not in self.repairing:
                    self.repairing.add(i)
                    sim.push(sim.now + (self._repair_in(sim, f, times["admin_hours"] * 3600) if f is not None else
                                        (times["admin_hours"] + times["repair_hours"]) * 3600), "tick", ("repaired", i))
                return
            if where in (T.IN_SERVICE, T.OTHERS) and i not in sim.active_fault:
                return
            at = sim.now + hc_interval_s
            if self.next_check.get(i, math.inf) > sim.now:
                if i in self.next_check and self.next_check[i] <= at:
                    return
            self.next_check[i] = at
            sim.push(at, "tick", ("check_due", i))

        def _check_due(self, sim, i: int) -> None:
            if self.next_check.get(i) == sim.now:
                del self.next_check[i]
                self._check(sim, i)

        def _repaired(self, sim, i: int) -> None:
            """The admin's repair is done: the fault is gone, and `fleet repaired` sends the node back
            through its validation run."""
            self.repairing.discard(i)
            f = sim.active_fault.get(i)
            if f is not None:
                self._fixed(sim, f, "repair")
            self.lab.repaired(sim.nodes[i])
            self._sync(sim, i)
            self._next(sim, i)

        def _rebooted(self, sim, name: str) -> None:
            self._check(sim, self.lab.position[name])

        def _validation(self, sim, job_id: str) -> None:
            self._check(sim, self.lab.position[self.lab.slurm.jobs_[job_id][1]])

        def _tripped(self, sim) -> None:
            """The actuator's breaker held a drain back: open until a person resets it, within admin_hours."""
            if not self.breaker_open:
                self.breaker_open = True
                self.breaker_trips += 1
                sim.push(sim.now + times["admin_hours"] * 3600, "tick", ("breaker_reset", None))

        def _breaker_reset(self, sim, _) -> None:
            from ..slurm import breaker

            breaker.reset(self.lab.settings.breaker_path)
            self.breaker_open = False
            for i in list(sim.active_fault):
                self._next(sim, i)

        def _sync(self, sim, i: int) -> None:
            """Out of service as the in-memory Slurm shows it: drained, down, rebooting or in its own
            validation reservation."""
            n = sim.nodes[i]
            if n.out(sim.now) and i not in self.out_since:
                self.out_since[i] = (sim.now, "failures")
                self.peak_out = max(self.peak_out, len(self.out_since))
            elif not n.out(sim.now) and i in self.out_since:
                since, cause = self.out_since.pop(i)
                self.out_by["remedies" if cause == "failures" else cause] += (sim.now - since) * n.gpus

        def _after(self, sim, f: Fault, delay: float, how: str) -> None:
            sim.push(sim.now + delay, "tick", ("back", (f, how)))

        def _back(self, sim, f: Fault | tuple, how: str | None = None):
            if isinstance(f, tuple):
                f, how = f
            f.resolved_by = how
            self.resolved[how] += 1
            sim.active_fault.pop(f.node, None)
            self._return(sim, f.node)

        def _alarm(self, sim, i: int):
            n = sim.nodes[i]
            if strategy != "drain-on-any" or n.drained or i in sim.active_fault:
                return  # a warning: a severity-aware check publishes it and drains nothing
            self.false_drains += 1
            self._take(sim, i, "false_drains", kill=False)
            sim.push(sim.now + times["false_drain_hours"] * 3600, "tick", ("release", i))

        def _release(self, sim, i: int):
            if i not in sim.active_fault:
                self._return(sim, i)

        def _take(self, sim, i: int, cause: str, kill: bool = True) -> None:
            n = sim.nodes[i]
            if carried:   # slurmd gone, or an admin's find: Slurm's own DOWN, not ours
                n.down, n.reason, n.reason_time = True, "Not responding", sim.now
                sim.nodes_changed()
                self._sync(sim, i)
                return
            if not n.drained:
                n.drained = True
                self.out_since[i] = (sim.now, cause)
                self.peak_out = max(self.peak_out, len(self.out_since))
                sim.nodes_changed()

        def _return(self, sim, i: int) -> None:
            n = sim.nodes[i]
            if carried:
                info = self.lab.slurm.node(n.name)
                if info.down and not info.drained:  # Slurm's own DOWN: the admin's repair brings it back
                    n.down, n.reason, n.reason_time = False, "", None
                    sim.nodes_changed()
                else:  # the rack back whole: its members resumed, ours to resume
                    self.lab.actuator.resume([info])
                self._sync(sim, i)
                # its next health check finds it clean: its episode ends there, so the reboots of this fault
                # do not count against the next one (time is skipped only where nothing is recorded)
                at = sim.now + hc_interval_s
                self.next_check[i] = at
                sim.push(at, "tick", ("check_due", i))
                return
            if n.drained:
                since, cause = self.out_since.pop(i, (sim.now, "failures"))
                self.out_by["remedies" if cause == "failures" else cause] += (sim.now - since) * n.gpus
                n.drained = False
                sim.nodes_changed()

    sim = Sim(jobs, nodes, gpus_per_node)
    sim.watch = watch
    ctl = Ctl()
    sim.checkpoint_every_s = checkpoint_every_h * 3600
    sim.restart_s = restart_min * 60
    sim.until = horizon_s
    for f in faults:
        sim.push(f.t, "tick", ("fault", f))
    for t, i in alarms:
        sim.push(t, "tick", ("alarm", i))
    sim.push(0.0, "rollout", None)
    sim.run(ctl, rollout_at=None)
    end = min(sim.now, horizon_s)
    for i, (since, cause) in list(ctl.out_since.items()):   # still out at the end
        ctl.out_by["remedies" if cause == "failures" else cause] += (end - since) * sim.nodes[i].gpus
    return _figures(sim, ctl, faults, end, big_jobs)


class _Lab:
    """What the gpufleet strategies run on: the in-memory Slurm (simulators/simslurm.py) over the simulated
    nodes, the product's actuator (ownership, the breaker) on it, one history file for the fleet on the
    simulated clock, and the carrier (remedy/carrier.py) run as the hooks run it.  The node's GPUs are
    what its fault shows: the fault's finding, or nothing once fixed; a reset takes no simulated time of
    its own (the node waits in its drain for the next check)."""

    def __init__(self, sim, settings, model: FaultModel, ladder, strategy: str, domain_size: int = 0):
        import dataclasses
        import os
        import tempfile

        from ..policy import DomainSpec, Policy, SlurmSettings
        from ..records.history import History
        from ..slurm.actuator import make_actuator
        from ..slurm.ownership import HEALTH
        from .simslurm import SimSlurm

        self.sim = sim
        self.dir = tempfile.TemporaryDirectory(prefix="gpufleet-faultsim-")
        base = settings or SlurmSettings()
        # the site's settings, their files kept in a directory of the run's own
        self.settings = dataclasses.replace(base, state_dir=self.dir.name,
                                            breaker_file=os.path.join(self.dir.name, "breaker.json"))
        # the domains of --domain-size as a site's [[domain]]s: the carrier's rack escalation reads them
        names = [n.name for n in sim.nodes]
        self.policy = Policy(slurm=self.settings, domains=tuple(
            DomainSpec(f"rack{d}", tuple(names[d * domain_size:(d + 1) * domain_size]))
            for d in range(math.ceil(len(names) / domain_size)))) if domain_size else Policy(slurm=self.settings)
        self.ladder = ladder
        self.slurm = SimSlurm(sim, validation_s=model.times["validation_minutes"] * 60)
        self.slurm.reboot_s = model.times["reboot_minutes"] * 60
        self.history = History(os.path.join(self.dir.name, "fleet.db"), clock=lambda: sim.now)
        self.history.conn.execute("PRAGMA synchronous = OFF")  # a scratch file: no fsync per row
        # the fleet's nodes in one file (a node's own file holds one): each node's rows found by its name
        for table in ("runs", "actions", "reboots", "remedies", "case_closes", "validations", "suspects"):
            self.history.conn.execute(f"create index if not exists [sim_{table}_node] on [{table}] (node)")
        self.actuator = make_actuator(self.slurm, HEALTH, self.settings, clock=lambda: sim.now, modes=ladder.mode)
        self.position = {n.name: i for i, n in enumerate(sim.nodes)}
        self.blocked = False
        # the ladder without its reset rung: the same finding under the reboot-first action
        self.action_of = (lambda a: "reboot_node" if a == "reset_gpu" else a) \
            if strategy == "gpufleet-reboot-first" else (lambda a: a)

    def finding(self, f: Fault):
        from ..judging.findings import Finding

        check, severity, action = f.cls.finding
        return Finding(check, severity, self.action_of(action), 0, f.cls.what)

    def report(self, node, f: Fault | None):
        from ..judging.findings import verdict
        from ..judging.pipeline import Report
        from ..readers.snapshot import Gpu, NodeSnapshot, Process

        findings = [self.finding(f)] if f is not None and f.cls.effect == "gpu" else []
        busy = [Process(0, "job")] if node.running else []
        snap = NodeSnapshot(host=node.name, gpus=[Gpu(k, processes=list(busy)) for k in range(node.gpus)],
                            source="simulated")
        return Report(verdict(findings), findings, snap)

    def run(self, node, hook: str, info, f: Fault | None, reread) -> list[tuple[str, str, str]]:
        """The hooks' act without the summary: record the run, step, carry; the carrier's moves."""
        from ..remedy.carrier import Carrier, GpuReset
        from ..remedy.ladder import ResetResult

        report = self.report(node, f)
        self.history.record_run(node.name, hook, report.verdict, report.findings)
        carrier = Carrier(node.name, self.policy, self.history, self.slurm, self.actuator, self.ladder, GpuReset(
            run=lambda gpus, timeout: ResetResult(True, "reset (simulated)", 0.0), reread=reread))
        try:
            done = carrier.carry(carrier.step(hook, info, report), hook)
        finally:
            carrier.close()
        if done.action.kind == "fail":
            # the failed prolog: slurmd drains the node ("Prolog error"), and the prolog's helper puts the
            # carrier's reason in its place through the actuator (hooks/prolog.replace_hook_reason)
            shown = self.slurm.node(node.name)
            if not (shown.drained or shown.down or shown.rebooting):
                from ..remedy.escalation import reason_after_prolog

                self.slurm.prolog_failed(node.name)
                reason_after_prolog(self.actuator, self.policy.domains, self.slurm.node(node.name),
                                    done.action.reason, modes=self.ladder.mode)
        from ..slurm import breaker

        # held back by the breaker: this node's write, or its rack's escalation after it
        self.blocked = bool(done.blocked) or breaker.state(self.settings.breaker_path) is not None
        return carrier.moves

    def where(self, node):
        from ..remedy.table import state_of

        return state_of(self.slurm.node(node.name), validating=self.history.open_validation(node.name) is not None,
                        suspect=self.history.open_suspect(node.name) is not None)

    def repaired(self, node) -> None:
        """`fleet repaired` (the product's remedy.handback): a validation run before the node returns."""
        from ..remedy.handback import hand_back

        hand_back(self.actuator, [self.slurm.node(node.name)])


def _figures(sim, ctl, faults: list[Fault], end: float, big_jobs: frozenset[str]) -> dict[str, Any]:
    from .trials import percentile

    def unfinished(job) -> bool:
        """Held after MaxBatchRequeue: its user still waits for the rest of its work."""
        return job.id in sim.done_at and job.start is None and job.saved < job.run

    def kept(job) -> float:
        """The job's work done by the end (seconds of its run, kept or still running)."""
        if unfinished(job):
            return job.saved
        if job.id in sim.done_at:
            return job.run
        return min(job.run, job.saved + (max(0.0, end - job.start - sim._restart(job)) if job.start is not None
                                         else 0.0))

    def ettr(ids) -> float | None:
        """Work done over the time from submit to the end (or the job's end): the queue wait, and the wait
        after each failure for nodes to run again on, count.  Every job counts, finished or not: one held
        unfinished after MaxBatchRequeue is counted as one still waiting at the end is (nobody releases it
        in the simulation), its kept work over its time from submit to the end."""
        work = elapsed = 0.0
        for jid in ids:
            job = sim.by_id[jid]
            stop = end if unfinished(job) else sim.done_at.get(jid, end)
            if stop <= job.submit:
                continue
            g = job.gpn * job.nodes
            work += kept(job) * g
            elapsed += (stop - job.submit) * g
        return round(work / elapsed, 4) if elapsed else None

    started = [j.id for j in sim.jobs if j.submit < end]   # every job submitted (those still waiting too)
    # for --plot: GPUs in service, and the ETTR of the jobs ended by each day (hours on both axes)
    capacity = [(0.0, sum(n.gpus for n in sim.nodes))] + [(t / 3600, g) for t, g in sim.capacity]
    ettr_by_day = []
    # the jobs that ended by each day (one held unfinished has not: it waits to the end, as ettr() counts it)
    ended = sorted((sim.done_at[j], j) for j in started if j in sim.done_at and not unfinished(sim.by_id[j]))
    work = elapsed = 0.0
    k = 0
    for day in range(1, int(end // 86400) + 1):   # the jobs ended by each day, added as they end
        while k < len(ended) and ended[k][0] <= day * 86400:
            job = sim.by_id[ended[k][1]]
            if ended[k][0] > job.submit:
                work += kept(job) * job.gpn * job.nodes
                elapsed += (ended[k][0] - job.submit) * job.gpn * job.nodes
            k += 1
        if elapsed:
            ettr_by_day.append((day * 24.0, round(work / elapsed, 4)))
    found = [f for f in faults if f.detected_at is not None]
    latency_min = [(f.detected_at - f.t) / 60 for f in found if f.cls.effect == "gpu"]
    resolved = sum(ctl.resolved.values())
    fleet_gpu_s = sum(n.gpus for n in sim.nodes) * end
    node_h_out = sum(ctl.out_by.values()) / 3600 / sim.nodes[0].gpus
    big = [sim.by_id[j] for j in started if j in big_jobs]
    return {
        "ettr": ettr(started),
        "ettr_1024": ettr([j for j in started if j in big_jobs]),
        "jobs_1024": len(big),
        # how long the jobs of 1,024 GPUs or more waited, from submit: for nodes enough in service
        "waiting_1024_h": round(max(0.0, sum(sim.done_at.get(j.id, end) - j.submit - sim.ran_s.get(j.id, 0.0)
                                    - (end - j.start if j.start is not None and j.id not in sim.done_at else 0.0)
                                    for j in big)) / 3600, 1) if big else None,
        "goodput": round(sum(kept(sim.by_id[j]) * sim.by_id[j].gpn * sim.by_id[j].nodes for j in started)
                         / fleet_gpu_s, 4) if fleet_gpu_s else None,
        "availability": round(1 - node_h_out * 3600 / (len(sim.nodes) * end), 4) if end else None,
        "peak_nodes_out": ctl.peak_out,
        "gpu_hours_lost": {
            "failures": round((sim.failed_work_gpu_s + sim.restarts_gpu_s) / 3600, 1),
            "remedies": round(ctl.out_by["remedies"] / 3600, 1),
            "false_drains": round(ctl.out_by["false_drains"] / 3600, 1)},
        "node_hours_out": round(node_h_out, 1),
        "fault_to_drain_min": {"p50": _round(percentile(latency_min, 0.5)), "p90": _round(percentile(latency_min, 0.9)),
                               "gpu_faults_found": len(latency_min)},
        "resolved": {k: round(v / resolved, 3) if resolved else 0.0 for k, v in ctl.resolved.items()},
        "faults": sum(f.hit for f in faults),
        "jobs_failed": sim.jobs_failed, "black_hole_crashes": sim.black_hole_crashes, "jobs_lost": sim.lost_jobs,
        "false_drains": ctl.false_drains, "rack_escalations": ctl.rack_escalations,
        "breaker_trips": ctl.breaker_trips,
        # the figures `fleet report` gives of a real fleet, from the carrier's own history (reliability.py)
        "reliability": _reliability(ctl.lab, sim, end),
        "_series": {"capacity": capacity, "ettr": ettr_by_day},
        "_moves": list(ctl.ladder_log),   # the carrier's moves (node, class, from, to), in order
        # the ladder's rungs as the nodes' history recorded them, in order (node, rung)
        "_rungs": [(r["node"], r["rung"]) for r in ctl.lab.history._query(
            "select node, rung from remedies order by id", [])] if ctl.lab is not None else [],
    }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


_NO_RELIABILITY = dict.fromkeys(("incidents_per_node_day", "mtbi_hours", "ttr_automatic_p50_h", "ttr_automatic_p90_h",
                                 "ttr_manual_p50_h", "ttr_manual_p90_h", "false_hold_share"))


def _reliability(lab, sim, end: float) -> dict[str, Any]:
    """A strategy that runs the product's carrier: its history's reliability figures; the others keep no
    history of their own (every figure None)."""
    if lab is None:
        return dict(_NO_RELIABILITY)
    from ..records.reliability import of_history

    return of_history(lab.history, [n.name for n in sim.nodes], 0.0, end)


def fleet_faults(trace, *, nodes: int, gpus_per_node: int, days: float | None, strategies: tuple[str, ...],
                 model: FaultModel, hc_interval_s: float, checkpoint_every_h: float, restart_min: float, seed: int,
                 lemon_share: float = 0.0, lemon_factor: float = 1.0, big_job_gpus: int = 0,
                 assumption: str = "runtime-ceil-hour", settings=None, seeds: int = 1, domain_size: int = 0,
                 switch_share: float | None = None, fault_log=None, progress=None,
                 big_job_hours: float = 24.0) -> dict[str, Any]:
    """The fleet mode: the trace's jobs on `nodes` nodes for `days`, the same faults for every strategy;
    with `seeds` > 1 every figure is the mean over seeds seed..seed+seeds-1 (faults drawn are summed).

    fault_log: a faultlog.FaultLog to replay instead of drawing failures: its nodes are the fleet's first
    (`nodes` adds nodes that never faulted), its span the horizon (`days` cuts it), and the history
    repeats to cover it.  progress(strategy, seed, now_s, horizon_s): told about once a second."""
    from .rollout import SimJob, sim_jobs

    jobs, dropped = sim_jobs(trace, gpus_per_node, assumption)
    span = max((j.submit + j.run for j in jobs), default=0.0)
    if fault_log is not None:
        nodes = max(nodes, len(fault_log.nodes))
        horizon = min(days * 86400, fault_log.span_s) if days else fault_log.span_s
        jobs = _repeated(jobs, span, horizon)
    else:
        horizon = days * 86400 if days else span
    jobs = [j for j in jobs if j.submit < horizon and j.nodes <= nodes]
    big: frozenset[str] = frozenset()
    if big_job_gpus:
        need = math.ceil(big_job_gpus / gpus_per_node)
        if need > nodes:
            raise ValueError(f"--big-job {big_job_gpus} needs {need} nodes of {gpus_per_node} GPUs; the fleet has {nodes}")
        # a stream of training jobs beside the history, for the figures of jobs of 1,024 GPUs or more: one
        # submitted every big_job_hours, each running that long (a job waits while the one before runs)
        period = big_job_hours * 3600
        stream = [SimJob(f"big-{k + 1}", k * period, run=period, limit=period * 1.5, nodes=need,
                         gpn=min(big_job_gpus, gpus_per_node)) for k in range(max(1, math.ceil(horizon / period)))]
        jobs = stream + jobs
        big = frozenset(j.id for j in stream)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in strategies}
    by_class: dict[str, int] = {}
    alarms_drawn = rack_events = 0
    if domain_size and (model.domain is None or not model.domain.classes):
        raise ValueError("--domain-size: the rates file names no [domain] classes")
    for s in range(seed, seed + seeds):
        faults, alarms = draw_faults(model, nodes, horizon, s, lemon_share, lemon_factor, domain_size, switch_share)
        if fault_log is not None:   # the log's faults instead of the draws; the false alarms stay drawn
            faults = logged_faults(fault_log, model, horizon, s)
        alarms_drawn += len(alarms)
        for f in faults:
            by_class[f.cls.name] = by_class.get(f.cls.name, 0) + 1
        rack_events += len({(f.t, f.domain) for f in faults if f.domain is not None})
        for name in strategies:
            run_jobs = [SimJob(j.id, j.submit, j.run, j.limit, j.nodes, j.gpn) for j in jobs]
            runs[name].append(_fault_run(
                name, model, run_jobs, nodes, gpus_per_node, horizon, faults, alarms, hc_interval_s=hc_interval_s,
                checkpoint_every_h=checkpoint_every_h, restart_min=restart_min, seed=s, big_jobs=big,
                settings=settings, domain_size=domain_size,
                watch=(lambda sim, name=name, s=s: progress(name, s, sim.now, horizon)) if progress else None))
    series = {name: rs[0]["_series"] for name, rs in runs.items()}   # the first seed's, for --plot
    for rs in runs.values():
        for r in rs:
            r.pop("_series")
            r.pop("_moves")
            r.pop("_rungs")
    out: dict[str, Any] = {"strategies": {name: _mean(rs) for name, rs in runs.items()}, "_series": series}
    out["assumptions"] = {
        "mode": "fleet", "nodes": nodes, "gpus_per_node": gpus_per_node, "days": round(horizon / 86400, 2),
        "jobs": len(jobs), "jobs_dropped": dict(dropped), "seed": seed, "seeds": seeds, "rates": model.source,
        "faults_drawn": by_class, "false_alarms_drawn": alarms_drawn,
        "health_check_interval_s": hc_interval_s, "checkpoint_every_h": checkpoint_every_h,
        "restart_minutes": restart_min, "lemon_share": lemon_share, "lemon_factor": lemon_factor,
        "big_jobs": {"gpus": big_job_gpus, "hours": big_job_hours, "jobs": len(big),
                     "stream": "one submitted every `hours`, each running that long, beside the history"}
        if big_job_gpus else None,
        "times": dict(model.times),
        "domain_size": domain_size,
        "switch_share": (model.domain.switch_share if model.domain else 0.0) if switch_share is None else switch_share,
        "switch_events_drawn": rack_events,
        "not_modelled": "precursors (0 for every class: no source)"
                        + ("" if domain_size else ", rack-correlated events (--domain-size)"),
    }
    if fault_log is not None:
        out["assumptions"]["fault_log"] = {
            "form": fault_log.form, "faults": len(fault_log.faults), "nodes_in_log": len(fault_log.nodes),
            "span_days": round(fault_log.span_s / 86400, 2),
            "replayed": "each logged fault leaves its node unusable from its start to its end, whatever the "
                        "strategy (nothing on the node fixes it sooner); the strategies differ in how soon jobs "
                        "stop landing there, the work jobs lose and the remedies they add; the history repeats "
                        "to cover the log's span"}
    return out


def _repeated(jobs: list, span: float, horizon: float) -> list:
    """The history again and again, each copy `span` later, until it covers the horizon."""
    from .rollout import SimJob

    if span <= 0 or horizon <= span:
        return jobs
    out = list(jobs)
    for k in range(1, math.ceil(horizon / span)):
        out += [SimJob(f"{j.id}#{k}", j.submit + k * span, j.run, j.limit, j.nodes, j.gpn) for j in jobs
                if j.submit + k * span < horizon]
    return out


def logged_faults(log, model: FaultModel, horizon_s: float, seed: int) -> list[Fault]:
    """A fault log's rows as the simulator's faults: the log's nodes are the fleet's first, in order; the
    class is what the rates file's keywords name; each lasts until its logged end."""
    import random

    from .faultlog import class_of

    by_name = {c.name: c for c in model.classes}
    index = {node: i for i, node in enumerate(log.nodes)}
    rng = random.Random(f"{seed} fault log")   # where in the health check's interval each falls
    return [Fault(f.start_s, index[f.node], by_name[class_of(f.text, model.classes)], "repair", rng.random(),
                  until=min(f.end_s, horizon_s))
            for f in log.faults if f.start_s < horizon_s]


def _mean(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every number the mean over the runs (None where no run has one); one run is itself."""
    if len(runs) == 1:
        return runs[0]
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = _mean([r[key] for r in runs])
        else:
            values = [r[key] for r in runs if isinstance(r[key], int | float)]
            out[key] = round(sum(values) / len(values), 4) if values else None
    return out
