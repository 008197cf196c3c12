"""The evidence gate: is the new driver worse than the old one, judged canary against control over the
same hours?  Pure: counts and exposures in, a decision out.

Per signal (soft and hard Xid events, ECC events, health-check verdicts worse than warn, jobs that ended
FAILED or NODE_FAIL, HBM rows newly remapped), the canary cohort (nodes upgraded and back in service) and the control cohort (nodes
of the same GPU models not yet upgraded, in service) each accumulate events and node-hours.  The test is
Wald's sequential probability ratio test on the events' split between the cohorts: given that an event
happened in a step, it is the canary's with probability p = r*Tc / (r*Tc + Tk), where Tc and Tk are the
cohorts' node-hours in that step and r the rate ratio.  H0: r = 1 + `margin` (not worse by more than
the margin; default 0), H1: r = `worse_ratio`.  The
unknown base rate cancels out (no prior, no history needed), and the test is valid when looked at after
every step, which is how the engine looks (Wald 1945).  Errors are split across signals (Bonferroni):
each signal is tested at alpha = beta = (1 - confidence) / number of signals.

A GPU model with no control peers in the rollout (every node of it upgraded at once, or a model the
rest of the fleet lacks) has no split to test.  Its canary events are judged against the fleet's recorded
rate for that model on the drivers being replaced (kept by the rollout store from every gated step's
control nodes): Poisson counts with H0 rate = the recorded rate, H1 = `worse_ratio` times it, the same
sequential test, its log likelihood ratio added to the signal's.  The recorded rate is taken as
(events + 1/2) / node-hours, and only from at least MIN_HISTORY_NODE_HOURS: a rate read off too little
history would halt good drivers.

A signal decides `worse` (the rollout halts), `not_worse` (it rules H1 out), or `open`.  The gate passes
when no signal is worse, at least one rules H1 out, and every signal that saw at least `min_events`
events rules it out too (a signal with almost no events can never decide, and must not hold the fleet
forever).  The soak is bounded: where nothing decides by then, `worse_at_confidence` (a one-sided mid-p
test of the canary's share) says whether the canary is worse at `confidence`; only then does the stage
wait for an admin (gate.step).

Kayenta (Netflix) compares canary and a baseline deployed at the same time; Google's canary analysis
judges against a concurrent control.  This is that, with a test made for counts that are mostly zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..common.stats import binomial_upper_tail
from ..policy import SIGNALS

MIN_HISTORY_NODE_HOURS = 100.0
CANARY, CONTROL = "canary", "control"
WORSE, NOT_WORSE, OPEN = "worse", "not_worse", "open"


@dataclass
class SignalEvidence:
    """One signal's running totals and its log likelihood ratio (H1 against H0)."""

    canary_events: int = 0
    canary_hours: float = 0.0
    control_events: int = 0
    control_hours: float = 0.0
    llr: float = 0.0
    history_events: int = 0      # canary events judged against the recorded rate (no control peers)
    history_hours: float = 0.0

    history_expected: float = 0.0  # the events the recorded rate expects in history_hours

    def add(self, canary_events: int, canary_hours: float, control_events: int, control_hours: float,
            ratio: float, null_ratio: float = 1.0) -> None:
        """One step's events and node-hours; H0: the canary's rate is `null_ratio` times the control's (1
        plus the gate's margin), H1: `ratio` times.  Events in a step without exposure on both sides carry
        no information about the split and are counted, not tested."""
        self.canary_events += canary_events
        self.control_events += control_events
        self.canary_hours += canary_hours
        self.control_hours += control_hours
        if canary_hours <= 0 or control_hours <= 0 or not (canary_events or control_events):
            return
        p0 = null_ratio * canary_hours / (null_ratio * canary_hours + control_hours)
        p1 = ratio * canary_hours / (ratio * canary_hours + control_hours)
        self.llr += canary_events * math.log(p1 / p0) + control_events * math.log((1 - p1) / (1 - p0))

    def add_against_history(self, canary_events: int, canary_hours: float, rate: float, ratio: float,
                            null_ratio: float = 1.0) -> None:
        """One step of canary nodes that have no control peers, against the recorded rate per node-hour."""
        self.canary_events += canary_events
        self.canary_hours += canary_hours
        self.history_events += canary_events
        self.history_hours += canary_hours
        if canary_hours > 0:
            self.history_expected += rate * canary_hours
            self.llr += canary_events * math.log(ratio / null_ratio) - (ratio - null_ratio) * rate * canary_hours

    def worse_p(self, null_ratio: float = 1.0) -> float | None:
        """One-sided mid-p value of "the canary is no worse than `null_ratio` times the control" (or the
        fleet's record, for canary hours without control peers): small when the canary is worse.  The
        bounded soak's rule reads it (Gate.worse_at_confidence); None without exposure to judge.  Mid-p
        (Lancaster 1961: half the probability of the count seen) because the counts are a handful: the
        exact tail's level is then well under the one asked for, and a driver 3x worse goes on."""
        if self.control_hours > 0 and self.canary_hours > 0:
            n = self.events - self.history_events
            k = self.canary_events - self.history_events
            if n <= 0:
                return 1.0
            tc = self.canary_hours - self.history_hours
            if tc <= 0:
                return 1.0
            p0 = null_ratio * tc / (null_ratio * tc + self.control_hours)
            return (binomial_upper_tail(k, n, p0) + binomial_upper_tail(k + 1, n, p0)) / 2
        if self.history_expected > 0:
            mean = null_ratio * self.history_expected
            return (poisson_upper_tail(self.history_events, mean) + poisson_upper_tail(self.history_events + 1, mean)) / 2
        return None

    @property
    def events(self) -> int:
        return self.canary_events + self.control_events

    def rate_ratio(self) -> float | None:
        if self.canary_hours <= 0 or self.control_hours <= 0 or self.control_events == 0:
            return None
        return (self.canary_events / self.canary_hours) / (self.control_events / self.control_hours)

    def decision(self, alpha: float, beta: float) -> str:
        if self.llr >= math.log((1 - beta) / alpha):
            return WORSE
        if self.llr <= math.log(beta / (1 - alpha)):
            return NOT_WORSE
        return OPEN

    def p_value(self) -> float | None:
        """One-sided exact p-value of "the canary is no worse" (H0: r = 1) given the events' split, for the
        reader (Kayenta's users asked for it); the decision is the sequential test's, not this."""
        n = self.events
        if n == 0 or self.canary_hours <= 0 or self.control_hours <= 0:
            return None
        p0 = self.canary_hours / (self.canary_hours + self.control_hours)
        return binomial_upper_tail(self.canary_events, n, p0)

    def to_dict(self) -> dict[str, Any]:
        """Unrounded: the engine keeps it every step (half a second of a node is 0.00014 node-h)."""
        return {"canary_events": self.canary_events, "canary_node_hours": self.canary_hours,
                "control_events": self.control_events, "control_node_hours": self.control_hours, "llr": self.llr,
                "history_events": self.history_events, "history_node_hours": self.history_hours,
                "history_expected": self.history_expected}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SignalEvidence:
        return cls(d["canary_events"], d["canary_node_hours"], d["control_events"], d["control_node_hours"],
                   d["llr"], d.get("history_events", 0), d.get("history_node_hours", 0.0),
                   d.get("history_expected", 0.0))


def poisson_upper_tail(k: int, mean: float) -> float:
    """P(X >= k) for X ~ Poisson(mean)."""
    if k <= 0:
        return 1.0
    if mean <= 0:
        return 0.0
    below = sum(math.exp(i * math.log(mean) - mean - math.lgamma(i + 1)) for i in range(k))
    return max(0.0, 1.0 - below)


@dataclass
class Gate:
    signals: tuple[str, ...] = SIGNALS
    worse_ratio: float = 2.0
    confidence: float = 0.95
    min_events: int = 5
    margin: float = 0.0          # "not worse" means no more than 1 + margin times the control's rate
    evidence: dict[str, SignalEvidence] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for s in self.signals:
            self.evidence.setdefault(s, SignalEvidence())

    @property
    def alpha(self) -> float:
        return (1 - self.confidence) / len(self.signals)

    def add(self, events: dict[str, dict[str, int]], hours: dict[str, float]) -> None:
        """events: signal -> cohort -> count in this step; hours: cohort -> node-hours in this step."""
        for s in self.signals:
            e = events.get(s, {})
            self.evidence[s].add(e.get(CANARY, 0), hours.get(CANARY, 0.0), e.get(CONTROL, 0),
                                 hours.get(CONTROL, 0.0), self.worse_ratio, self.null_ratio)

    def add_against_history(self, events: dict[str, int], hours: float, rates: dict[str, float | None]) -> None:
        """Canary nodes of a model with no control peers: events per signal in this step, their node-hours,
        the recorded rate per signal (None: too little history, counted, not tested)."""
        for s in self.signals:
            rate = rates.get(s)
            if rate is not None:
                self.evidence[s].add_against_history(events.get(s, 0), hours, rate, self.worse_ratio,
                                                     self.null_ratio)
            else:
                self.evidence[s].add(events.get(s, 0), hours, 0, 0.0, self.worse_ratio, self.null_ratio)

    @property
    def null_ratio(self) -> float:
        """H0 of the sequential test: the canary no worse than this times the control."""
        return 1.0 + self.margin

    def boundaries(self) -> tuple[float, float]:
        """Wald's two boundaries on each signal's log likelihood ratio: (not worse at or below, worse at
        or above)."""
        a = self.alpha
        return math.log(a / (1 - a)), math.log((1 - a) / a)

    def worse_at_confidence(self) -> list[str]:
        """The signals whose canary is worse than 1 + margin times the control at `confidence`, though the
        sequential test has not reached its "worse" line: what the bounded soak waits on an admin for
        (gate.step).  Each signal is tested at 1 - confidence, not at its Bonferroni share: a wrong
        call here waits (and the wait ends on its own once the canary's hours bring it back), where the
        sequential test's halts; a driver 3x worse is then held after a few canary nodes instead of
        let through to the next wave (bench/gate_trials.py)."""
        out = []
        for s in self.signals:
            p = self.evidence[s].worse_p(self.null_ratio)
            if p is not None and p < 1 - self.confidence:
                out.append(s)
        return out

    def decisions(self) -> dict[str, str]:
        return {s: self.evidence[s].decision(self.alpha, self.alpha) for s in self.signals}

    def verdict(self) -> tuple[str, str]:
        """(worse | not_worse | open, why)."""
        d = self.decisions()
        worse = [s for s, v in d.items() if v == WORSE]
        if worse:
            s = worse[0]
            e = self.evidence[s]
            against = f"control {e.control_events} in {e.control_hours:.1f} node-h"
            if e.history_hours:
                against += f" and the fleet's recorded rate for {e.history_hours:.1f} node-h without control peers"
            return WORSE, f"{s}: canary {e.canary_events} event(s) in {e.canary_hours:.1f} node-h against {against}"
        ruled_out = [s for s, v in d.items() if v == NOT_WORSE]
        blocking = [s for s, v in d.items() if v == OPEN and self.evidence[s].events >= self.min_events]
        if ruled_out and not blocking:
            return NOT_WORSE, f"ruled out on {', '.join(ruled_out)}"
        if blocking:
            return OPEN, f"undecided on {', '.join(blocking)}"
        return OPEN, "too few events on every signal"

    def report(self) -> dict[str, Any]:
        d = self.decisions()
        out = {}
        for s in self.signals:
            e = self.evidence[s]
            ratio = e.rate_ratio()
            p = e.p_value()
            shown = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in e.to_dict().items()}
            out[s] = {**shown, "ratio": None if ratio is None else round(ratio, 3),
                      "p_value": None if p is None else round(p, 4), "decision": d[s]}
        return out

    def to_dict(self) -> dict[str, Any]:
        return {s: e.to_dict() for s, e in self.evidence.items()}

    def load(self, data: dict[str, Any]) -> None:
        for s, d in data.items():
            if s in self.evidence:
                self.evidence[s] = SignalEvidence.from_dict(d)


def expected_events_needed(worse_ratio: float, confidence: float, signals: int) -> float:
    """The base-rate events a canary must expect for the sequential test to call a `worse_ratio` times
    worse driver "worse", on average: with the driver that bad, each expected base event moves the log
    likelihood ratio by r ln r - r + 1 (Poisson counts), and "worse" is at ln((1 - beta) / alpha).  At
    the defaults (r = 2, 0.95 over 6 signals) about 12.4."""
    alpha = (1 - confidence) / max(1, signals)
    r = worse_ratio
    return math.log((1 - alpha) / alpha) / (r * math.log(r) - r + 1)


def exposure_s(signals: tuple[str, ...], worse_ratio: float, confidence: float, canary_nodes: int,
               rates: dict[str, float] | None = None) -> float | None:
    """How long `canary_nodes` in service take to expect `expected_events_needed` events on the densest
    gated signal at a healthy fleet's rates (per node-day, data/base_rates.toml): the evidence the gate
    needs before the next stage.  None without a canary or without a rate for any gated signal."""
    from ..catalogs import base_rates

    rates = base_rates() if rates is None else rates
    densest = max((rates[s] for s in signals if rates.get(s)), default=0.0)
    if canary_nodes <= 0 or densest <= 0:
        return None
    return expected_events_needed(worse_ratio, confidence, len(signals)) / (canary_nodes * densest) * 86400


def recorded_rate(events: int, node_hours: float) -> float | None:
    """The rate per node-hour a canary without control peers is judged against, or None: too little
    history to judge by."""
    if node_hours < MIN_HISTORY_NODE_HOURS:
        return None
    return (events + 0.5) / node_hours
