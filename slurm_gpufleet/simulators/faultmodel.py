"""The fault model of `fleet simulate-faults`: the strategies and what each runs, the failure classes and
their rates (data/failure_classes.toml, or a site's file), and the faults drawn from them at random."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

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
    from ..catalogs import failure_classes_data

    where = path or "data/failure_classes.toml"
    base = failure_classes_data()
    data = _site_file(path, base) if path else base
    classes = [_failure_class(where, row, base) for row in data.get("class", [])]
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
    domain = _domain_model(where, data, base, names)
    return FaultModel(tuple(classes), float(fa), times, path or "data/failure_classes.toml (Llama 3 rates)", domain)


def _site_file(path: str, base: dict[str, Any]) -> dict[str, Any]:
    """A site's rates file over the packaged classes: a class it names overrides the packaged one key by key."""
    import tomllib

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
    return data


def _failure_class(where: str, row: dict[str, Any], base: dict[str, Any]) -> FailureClass:
    """One [[class]] row, checked (its rate, shares, effect, who sees it, finding and keywords)."""
    from ..judging.findings import ACTIONS, RANK

    known = {c["name"] for c in base["class"]}
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
    return FailureClass(name, row.get("what", name), float(row["rate"]), row["effect"],
                                tuple(row["seen_by"]), row.get("severity", "high"), (check, severity, action),
                                reset, reboot, float(row.get("precursor_share", 0.0)), row.get("source", ""),
                                tuple(w.strip().lower() for w in words))


def _domain_model(where: str, data: dict[str, Any], base: dict[str, Any], names: list[str]) -> DomainModel:
    """[domain]: the classes a switch-side fault takes a whole domain with, its share and repair time."""
    from ..judging.findings import ACTIONS, RANK

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
    return DomainModel(tuple(d.get("classes", [])), float(share), (check, severity, action), float(hours),
                       d.get("source", ""))


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
