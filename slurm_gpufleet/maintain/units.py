"""One unit per node state: what a node in that state does next, and what Slurm should show for it.

Each unit reads the step's view of the world (one read of the fleet, the plan, the node's row) and returns
an `Outcome` (the move it wants, fields to keep, a command to start), a list of effects (the Slurm state
it wants for the node: the typed effects of slurm/effects.py, and `Leave`, the node out of the rollout's
reservations) and `notes`, what the row keeps of what it saw (a store write, never an effect).  No unit calls another unit, the engine, the store or Slurm: the engine
checks each move against the direction's table in `states.TRANSITIONS`, applies it, lets the node's new
state's unit look again at the same read (so one step takes a node as far as that read allows), then
folds every effect into batched writes.  The model is k8s-operator-libs' `ApplyState` calling one
`Process<State>` per state.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, field
from typing import Any

from ..catalogs.bundle import Bundle, first_difference, restricted, unread, unread_parts
from ..judging import summary
from ..slurm import effects as E
from ..slurm.base import NodeInfo
from ..slurm.ownership import MAINTAIN, ROLLOUT_RESERVATION_PREFIX, owns
from ..slurm.reasons import MAINTAIN as MAINTAIN_WORDS
from ..slurm.reasons import ours
from . import states as S
from .plan import Plan
from .schedule import waves_as_stages
from .strategy import Strategy
from .upgrade import CommandResult, UpgradeError, render
from .world import World

STEER = 1000  # Weight added to nodes waiting for their turn: Slurm prefers lower-weight nodes for new jobs

# job states that are a failed validation (squeue's long names)
JOB_ENDED_BADLY = {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "PREEMPTED",
                   "DEADLINE", "REVOKED", "SPECIAL_EXIT"}

# What every upgraded node must share with the canary: the kernel it booted, the module flavour (open or
# proprietary), the GSP firmware, GB200's CDMM mode where the driver reports it
COMPARED = {"kern": "kernel", "modf": "module flavour", "gsp": "GSP firmware", "cdmm": "CDMM mode"}
# a node validated with a part it could never read (kept in its row's `validated`): returned, and said so
UNVERIFIED = "unverified"


# ----------------------------------------------------------------------------- what units return
@dataclass
class Outcome:
    move: S.NodeState | None = None
    detail: str = ""
    fields: dict[str, Any] = field(default_factory=dict)     # kept with the move
    note: dict[str, Any] = field(default_factory=dict)       # kept without a move
    launch: tuple[str, float] | None = None                  # the site's command to start: script, timeout
    submit: tuple[str, str] | None = None                    # a validation job: reservation, partition
    audit: list[tuple[str, str]] = field(default_factory=list)  # (event, detail)
    event: str | None = None


def move(state: S.NodeState, detail: str = "", **fields: Any) -> Outcome:
    return Outcome(state, detail, fields)


def fail(why: str) -> Outcome:
    return Outcome(S.FAILED, why, {"error": why})


@dataclass(frozen=True)
class Leave:
    """The node out of every reservation of the rollout that holds it (the step updates or deletes them)."""

    node: str


def _hold(v: StepView, info: NodeInfo) -> E.Reserve:
    """Held in a reservation of ours from now (MAINT reservations may overlap its slot): one a step, the
    nodes held in it batched."""
    return E.Reserve(f"{ROLLOUT_RESERVATION_PREFIX}{v.rid}_h{int(v.world.now)}", (info.name,), v.world.now, 24 * 60)


# ----------------------------------------------------------------------------- the step's view
@dataclass
class StepView:
    """What every unit may read: one read of the fleet, the plan, the rows.  Units never change it; the
    engine keeps `state` and the rows current as it applies moves."""

    rid: str
    plan: Plan
    s: Any                                   # MaintainSettings
    world: World
    rows: list[dict[str, Any]]
    direction: S.Direction
    strategy: Strategy
    results: dict[str, CommandResult] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)
    state: dict[str, str] = field(default_factory=dict)
    gate_allowed: float = float("inf")     # the highest stage the evidence gate lets start (schedule.boundary)
    # what the rollout waits for an admin for (halted; the gate's bounded soak found it worse), and since
    # when: nothing more begins, and its slots are given up until it runs on (reconcile._slots)
    waiting: tuple[str, float] | None = None

    def __post_init__(self) -> None:
        self.state = {r["node"]: r["state"] for r in self.rows}
        waves = self.plan.waves
        self.canary, self.stage_nodes = waves_as_stages(waves)
        # node -> the gate stage it goes in (the canary's is 0; with no canary, the first wave's)
        first = 1 if self.canary else 0
        self.stage_index = {n: k + first for k, members in enumerate(self.stage_nodes) for n in members}
        self.stage_index.update({n: 0 for n in self.canary})
        self.order: dict[str, int] = {}
        for w in waves:
            for n in w.nodes:
                self.order.setdefault(n, len(self.order))
        self.mine = self.world.of_rollout(self.rid)
        self.members = {n for r in self.mine.values() for n in r.nodes}  # in a reservation of this rollout
        now = self.world.now
        self.in_slot = {n for r in self.mine.values() if r.start is not None and r.start <= now for n in r.nodes}
        self.domain_of = {n: d for d, nodes in self.plan.domains.items() for n in nodes}
        self.whole_domain = self.plan.budget.whole_domain

    def reason(self, words: str) -> str:
        """A reason this rollout sets ("maintain <id> <words> [gpufleet]"): the health check leaves it alone."""
        return ours(f"{MAINTAIN_WORDS} {self.rid} {words}")

    def mates(self, node: str) -> list[str]:
        """The other nodes of this rollout in the node's domain (none without domains)."""
        domain = self.domain_of.get(node)
        if domain is None:
            return []
        return [n for n in self.plan.domains[domain] if n != node and n in self.state]

    def domain_ready(self, node: str) -> bool:
        """whole_domain: every other node of its domain still on its way is drained and empty, so that no
        node of the domain runs the new driver while another one still runs a job on the old one."""
        if not self.whole_domain:
            return True
        for n in self.mates(node):
            st = self.state[n]
            if st == S.PENDING:
                return False
            info = self.world.nodes.get(n)
            if st == S.RESERVED and (info is None or not info.drained or self.busy(n)):
                return False
        return True

    def domain_settled(self, node: str) -> bool:
        """whole_domain: every node of its domain is through (a domain returns to service as one)."""
        return not self.whole_domain or all(self.state[n] in S.FINAL for n in self.mates(node))

    def info(self, row: dict[str, Any]) -> NodeInfo | None:
        return self.world.nodes.get(row["node"])

    def busy(self, node: str) -> bool:
        return node in self.world.free_at

    def ours(self, info: NodeInfo) -> bool:
        """Drained by a rollout (ours: only one runs at a time), not by an admin or the health check."""
        return info.drained and owns(info, MAINTAIN)

    def held_by_other(self, node: str) -> str | None:
        """Why someone else holds the node now (an admin's drain, the health check's, another reservation),
        or None: a rollout leaves such a node alone (unless upgrade_held_nodes)."""
        from ..slurm.ownership import may_drain

        info = self.world.nodes.get(node)
        if info is None:
            return None
        other = next((r.name for r in self.world.reservations.values()
                      if not r.name.startswith(ROLLOUT_RESERVATION_PREFIX) and node in r.nodes), None)
        if other:
            return f"reservation {other}"
        if not may_drain(info, MAINTAIN):
            return info.reason or f"{info.state} by someone else"
        return None

    def holding(self, node: str) -> str | None:
        """A reservation of this rollout that holds `node` now (begun, not ended)."""
        now = self.world.now
        return next((name for name, r in sorted(self.mine.items()) if node in r.nodes
                     and (r.start is None or r.start <= now) and (r.end is None or r.end > now)), None)

    @property
    def backward(self) -> bool:
        return self.direction in (S.Direction.ROLLBACK, S.Direction.TURN_BACK)

    def driver(self, row: dict[str, Any]) -> str:
        """The driver this node is on its way to, in this direction (a bundle without a driver keeps it)."""
        if self.backward or not self.plan.target_driver:
            return row["previous_driver"]
        return self.plan.target_driver

    def bundle(self, row: dict[str, Any]) -> Bundle:
        """What the node must show once this direction is done with it: its driver, and every other part
        the plan moves (forward: the target's; back: the node's recorded bundle's)."""
        target = self.plan.target_for(row["node"])
        if self.backward:
            back = restricted(self.plan.previous_bundle(row["node"]), target)
            return Bundle(self.driver(row), back.kernel, back.firmware)
        return Bundle(self.driver(row), target.kernel, dict(target.firmware))

    def canary_reference(self, node: str) -> dict[str, Any] | None:
        """What the first validated canary showed of COMPARED, or None (a canary itself, or none yet)."""
        if node in self.canary:
            return None
        canary = set(self.canary)
        return next((json.loads(r["validated"]) for r in self.rows if r["node"] in canary and r.get("validated")),
                    None) or None

    def differs_from_canary(self, node: str, seen: dict[str, Any]) -> str | None:
        """How this node's post-upgrade state differs from the first validated canary's, or None.  A value
        the node could not read is not known yet (`unread_from_canary`), never a difference."""
        ref = self.canary_reference(node)
        if not ref:
            return None
        diffs = [f"{label} {seen[key]} != canary's {ref[key]}" for key, label in COMPARED.items()
                 if key in ref and not unread(ref[key]) and not unread(seen.get(key)) and seen[key] != ref[key]]
        return "; ".join(diffs) or None

    def unread_from_canary(self, node: str, seen: dict[str, Any]) -> list[str]:
        """What the canary showed that this node's summary has no readable value for."""
        ref = self.canary_reference(node) or {}
        return [label for key, label in COMPARED.items()
                if key in ref and not unread(ref[key]) and unread(seen.get(key))]


# ----------------------------------------------------------------------------- what a node showed
def held_before(row: dict[str, Any]) -> bool:
    """Someone else had drained or downed the node when the rollout took it (upgrade_held_nodes)."""
    prior = json.loads(row["prior"] or "{}")
    return "DRAIN" in prior.get("flags", []) or prior.get("state") == "DOWN"


def rebooted(info: NodeInfo, row: dict[str, Any]) -> bool:
    """Since we took the node or started its command (`row`): its boot time changed, or its slurmd
    registered again.  A registration is new when it differs from the one seen then; without that
    record (a row from before it was kept), one in the second the command began or later counts (Slurm
    shows whole seconds).  A reboot that emptied the node (reboot-asap) in the very second its upgrade
    starts is then not taken for the upgrade's own."""
    boot_before = row["boot"]
    if info.boot_time and boot_before and _boot_moved(info.boot_time, boot_before):
        return True
    if info.slurmd_start is None:
        return False
    seen = row.get("registered")
    if seen is not None:
        return info.slurmd_start > seen
    return info.slurmd_start >= math.floor(row["started"] or 0)


# Slurm's BootTime is "now - uptime" as the slurmd computes it at each registration, in whole seconds: a
# slurmd restarted without a reboot (a package upgrade, a restart by hand) can show a boot a second away
# from the one before.  A real reboot moves it by far more than this.
BOOT_TIME_JITTER_S = 2.0


def _boot_moved(now: str, before: str) -> bool:
    a, b = _boot_epoch(now), _boot_epoch(before)
    return now != before if a is None or b is None else abs(a - b) > BOOT_TIME_JITTER_S


def _boot_epoch(text: str) -> float | None:
    """A boot as the backends give it (ISO local time), or as a store from before kept it (epoch digits)."""
    if text.isdecimal():
        return float(text)
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def responding(info: NodeInfo) -> bool:
    return not info.down and "NOT_RESPONDING" not in info.flags and not info.rebooting


# ----------------------------------------------------------------------------- the units
class Unit:
    state: S.NodeState

    def advance(self, v: StepView, row: dict[str, Any]) -> Outcome | None:
        return None

    def effects(self, v: StepView, row: dict[str, Any], info: NodeInfo) -> list:
        return []

    def notes(self, v: StepView, row: dict[str, Any], info: NodeInfo) -> dict[str, Any]:
        """What the row keeps of what this read showed (a store write, not a Slurm one)."""
        return {}


def _drain_reason(v: StepView, row: dict[str, Any], info: NodeInfo) -> E.Drain:
    verb = "rolling back to" if v.backward else "upgrading to"
    return E.Drain((info,), v.reason(f"{verb} {v.bundle(row).label()}"))


class Pending(Unit):
    """Waiting for its turn (the window admits it: `take`); steered away from new jobs meanwhile."""

    state = S.PENDING

    def take(self, v: StepView, row: dict[str, Any]) -> Outcome:
        """Record the node's state before we touch it; leave it alone if it is someone else's now."""
        info = v.info(row)
        if info is None:
            return move(S.SKIPPED, "not in Slurm any more")
        other = next((r.name for r in v.world.reservations.values()
                      if not r.name.startswith(ROLLOUT_RESERVATION_PREFIX) and row["node"] in r.nodes), None)
        prior = {"state": info.state, "flags": sorted(info.flags), "reason": info.reason,
                 "reason_user": info.reason_user, "reservation": other, "boot": info.boot_time}
        held = v.held_by_other(row["node"])
        if held and not v.s.upgrade_held_nodes:
            return move(S.SKIPPED, f"held by someone else: {held}")
        return move(S.RESERVED, "", prior=json.dumps(prior), boot=info.boot_time or "unknown", started=v.world.now,
                    registered=info.slurmd_start)

    def effects(self, v, row, info):
        """Nodes waiting for their turn get a higher Weight, so new jobs land on upgraded nodes first."""
        weight = self._weight(v, row, info)
        return [E.Weight((info.name,), weight + STEER)] if weight is not None and info.weight != weight + STEER else []

    def notes(self, v, row, info):
        """The Weight the node had before we steered it, kept to give back."""
        return {"weight": self._weight(v, row, info)} if row["weight"] is None and self._weight(v, row, info) else {}

    @staticmethod
    def _weight(v, row, info) -> int | None:
        if v.direction != S.Direction.FORWARD:
            return None
        if row["weight"] is not None:
            return row["weight"]
        if info.drained or info.down or info.rebooting:
            return None  # someone else's node right now: not ours to change
        return info.weight or 1


class Reserved(Unit):
    """Taken: wait until Slurm shows it drained (or, reboot-asap, rebooted) and empty."""

    state = S.RESERVED

    def advance(self, v, row):
        info = v.info(row)
        if info is None:
            return fail("not in Slurm any more")
        target = v.bundle(row).label()
        if v.strategy.reboot_to_empty:
            back = rebooted(info, row)
            if back and responding(info) and not v.busy(row["node"]) and v.domain_ready(row["node"]):
                return move(S.UPGRADING, f"to {target} (rebooted empty)", started=None)
            if back and info.down and v.world.now - (info.slurmd_start or v.world.now) > v.s.return_timeout_s:
                return fail(f"down after its reboot: {info.reason or info.state}")
            return None
        if info.drained and not v.busy(row["node"]) and v.domain_ready(row["node"]):
            # drained by us, or by an admin (upgrade_held_nodes); and its domain with it (whole_domain)
            return move(S.UPGRADING, f"to {target}", started=None)
        return None

    def effects(self, v, row, info):
        if not v.strategy.reboot_to_empty:
            return [_drain_reason(v, row, info)]
        # held in a reservation from now, emptied by `scontrol reboot ASAP`
        out: list = []
        if not any(info.name in r.nodes for r in v.world.ours.values()):
            out.append(_hold(v, info))
        if not info.rebooting and not rebooted(info, row):
            out.append(E.Reboot((info,), v.reason(f"emptying for {v.bundle(row).label()}")))
        return out


class Command(Unit):
    """Once Slurm shows the node drained by us and empty, the site's command runs in the pool; its result
    moves the node on."""

    action = "upgrade"

    def advance(self, v, row):
        node = row["node"]
        info = v.info(row)
        driver = v.driver(row)
        result = v.results.get(node)
        if result is not None:
            audit = [(f"{self.action} command rc={result.rc}", result.output)]
            if not result.ok:  # its last line says why (e.g. `slurm-gpufleet reboot-check` before the reboot)
                last = next((line.strip() for line in reversed(result.output.splitlines()) if line.strip()), "")
                if not last:
                    out = fail(f"{self.action} command failed (rc {result.rc})")
                else:  # the Slurm reason carries the why (`next boot kernel ... has no nvidia ... module`)
                    out = Outcome(S.FAILED, f"{self.action} command failed (rc {result.rc}): {last[:200]}",
                                  {"error": last[:200]})
            else:
                out = move(S.RETURNING, "waiting for the reboot")
            out.audit = audit
            return out
        if node in v.running or info is None or not info.drained or v.busy(node):
            return None  # running; or not drained yet; or a job slipped in before the drain (it finishes, never killed)
        bundle = v.bundle(row)
        values = {"node": node, "target_driver": driver, "previous_driver": row["previous_driver"],
                  "target_kernel": bundle.kernel, "target_firmware": dict(bundle.firmware),
                  "previous": v.plan.previous_bundle(node).to_dict(),
                  # firmware is activated by a power cycle (HGX, NVSwitch trays), not by a reboot
                  "power_cycle": bool(bundle.firmware),
                  "action": self.action, "rollout": v.rid,
                  "reservation": next((r for r, res in v.world.ours.items() if node in res.nodes), "")}
        try:
            script = render(v.s.upgrade_template, **values)
        except UpgradeError as exc:
            return fail(str(exc))
        return Outcome(note={"started": v.world.now, "boot": info.boot_time or "unknown",
                             "registered": info.slurmd_start},
                       launch=(script, float(v.s.upgrade_timeout_s)),
                       event=f"{self.action} to {bundle.label()} started")

    def effects(self, v, row, info):
        return [_drain_reason(v, row, info)]


class Upgrading(Command):
    state = S.UPGRADING
    action = "upgrade"


class RollingBack(Command):
    state = S.ROLLING_BACK
    action = "rollback"


class Returning(Unit):
    """Back means rebooted (boot time changed, or slurmd registered again since the command began) and
    responding; merely up is not enough."""

    state = S.RETURNING

    def advance(self, v, row):
        info = v.info(row)
        since = row["updated"] or v.world.now
        back = info is not None and rebooted(info, row)
        if back and responding(info):
            return move(S.VALIDATING, "rebooted; waiting for its health check")
        if v.world.now - since > v.s.return_timeout_s:
            if not back:
                return fail(f"never rebooted within {v.s.return_timeout_s} s of its upgrade")
            return fail(f"did not come back within {v.s.return_timeout_s} s")
        return None

    def effects(self, v, row, info):
        return [_drain_reason(v, row, info)]


class Validating(Unit):
    """From what the node's own health check published after the reboot: never by entering the node."""

    state = S.VALIDATING

    def advance(self, v, row):
        info = v.info(row)
        back = v.direction == S.Direction.ROLLBACK
        data = summary.from_node(info) if info is not None else None
        checked = summary.published_at(data) if data else None
        # made after the command began and after the slurmd start that marked the reboot: the summary
        # from before it (even one of the same second) is not this boot's
        fresh = checked is not None and checked >= math.floor(row["started"] or 0) and (
            info.slurmd_start is None or checked >= math.floor(info.slurmd_start))
        if data is not None and fresh:
            block = v.domain_of.get(row["node"]) if v.world.blocks is not None else None
            if block is not None and row["node"] not in v.world.blocks.get(block, ()):
                # `scontrol update` or a power-down can drop a node from its block: segment jobs then miss it
                now_in = next((b for b, nodes in v.world.blocks.items() if row["node"] in nodes), None)
                return fail(f"validation failed: not back in its block {block} "
                            f"(Slurm's topology shows it in {now_in or 'no block'})")
            differs = first_difference(v.bundle(row), data)  # the first part of the bundle not in place, named
            if differs:
                return fail(f"validation failed: {differs}" + (f" ({data['f']})" if data.get("f") else ""))
            if data.get("v") not in ("ok", "warn"):
                return fail(f"validation failed: verdict {data.get('v')}" + (f": {data['f']}" if data.get("f") else ""))
            if data.get("cb"):   # Slurm shows it coming back (NOT_RESPONDING after the reboot): not yet an answer
                if v.world.now - (row["updated"] or v.world.now) <= v.s.validate_timeout_s:
                    return None
                return fail(f"validation failed: Slurm still shows it coming back after {v.s.validate_timeout_s} s"
                            + (f" ({data['w']})" if data.get("w") else ""))
            seen = {k: data[k] for k in COMPARED if not unread(data.get(k))}
            # a value the node could not read yet (a module not loaded at the first check after the boot) is
            # not a mismatch: read again at the next steps; still unread at the bound, the node is `unverified`
            unknown = unread_parts(v.bundle(row), data) + ([] if back else v.unread_from_canary(row["node"], seen))
            if unknown and v.world.now - (row["updated"] or v.world.now) <= v.s.validate_timeout_s:
                return None
            warned = data.get("w") if data.get("v") == "warn" and isinstance(data.get("w"), str) else ""
            bundle = v.bundle(row)
            named = [t for t in (bundle.driver, bundle.kernel) if t and t in warned]
            if named:  # "next boot kernel ... has nvidia OLD, not TARGET": the upgrade is not what boots next
                return fail(f"validation failed: a warning names the target {named[0]}: {warned}")
            if not back:
                differs = v.differs_from_canary(row["node"], seen)
                if differs:
                    return fail(f"validation failed: {differs}")
            validated = json.dumps({**seen, **({UNVERIFIED: unknown} if unknown else {})}, sort_keys=True)
            checked_text = f"{v.bundle(row).named()}, verdict {data.get('v')} at {data.get('t')}" + (
                f" ({warned})" if warned else "") + (f"; {UNVERIFIED}: {', '.join(unknown)} not read" if unknown else "")
            if back:
                return move(S.ROLLED_BACK, checked_text, validated=validated)
            if v.s.validation_job and not held_before(row):  # a node someone else held goes back to them untested
                return move(S.TESTING, f"{checked_text}; validation job next", validated=validated, job=None)
            return move(S.DONE, checked_text, validated=validated)
        if v.world.now - (row["updated"] or v.world.now) > v.s.validate_timeout_s:
            return fail(f"validation failed: no health check published within {v.s.validate_timeout_s} s "
                        "of the reboot")
        return None

    def effects(self, v, row, info):
        return [_drain_reason(v, row, info)]


class Testing(Unit):
    """The validation job, submitted once Slurm shows the node out of the drain and held by a reservation
    of ours; its end state decides."""

    state = S.TESTING

    def advance(self, v, row):
        node = row["node"]
        info = v.info(row)
        if info is None:
            return fail("not in Slurm any more")
        seen = v.world.validation.get(node)
        job = row["job"]
        out = Outcome()
        if job is None and seen is not None:
            job = seen[0]  # submitted just before a crash: found again, not submitted twice
            out.note = {"job": job}
        if job is None:
            reservation = v.holding(node)
            if reservation and not info.drained and not v.busy(node):
                out.submit = (reservation, info.partitions[0] if info.partitions else "")
        else:
            state = seen[1] if seen and seen[0] == job else None
            if state == "COMPLETED":
                return move(S.DONE, f"validation job {job} completed")
            if state in JOB_ENDED_BADLY:
                return fail(f"validation job {job} ended {state}")
            if state is None:
                return fail(f"validation job {job} is gone from Slurm with no result")
        limit = v.s.validation_job_timeout_s + v.s.validate_timeout_s
        if v.world.now - (row["updated"] or v.world.now) > limit:
            return fail(f"validation job did not finish within {limit} s")
        return out

    def effects(self, v, row, info):
        # out of the drain only once Slurm shows it held by a reservation of ours
        if v.holding(row["node"]) is None:
            return [_hold(v, info)]
        if v.ours(info):
            return [E.Resume((info,))]
        return []


class Final(Unit):
    """Done, failed, skipped, rolled back: failed nodes stay drained with our reason; the others are given
    back as found (resumed only if we drained them; someone else's drain gets its own reason back).  A
    node waiting for a rollback's window (back_pending) is shown as a done one: in service; the window
    moves it (schedule.admit_back), not this unit."""

    def __init__(self, state: S.NodeState):
        self.state = state

    def effects(self, v, row, info):
        out: list = []
        if self.state == S.FAILED:
            out.append(E.Drain((info,), v.reason(f"failed: {row['error'] or 'see maintain status'}")))
        elif self.state in (S.DONE, S.BACK_PENDING) and row["prior"] and v.ours(info) \
                and not v.domain_settled(row["node"]):
            # its domain returns as one: held until every other node of it is through
            return [E.Drain((info,), v.reason(f"done, waiting for domain {v.domain_of[row['node']]}"))]
        elif row["prior"] and v.ours(info):
            prior = json.loads(row["prior"] or "{}")
            if held_before(row):
                if prior.get("reason"):
                    out.append(E.SetReason((info,), prior["reason"]))
            else:
                out.append(E.Resume((info,)))
        if info.name in v.members:
            out.append(Leave(info.name))
        if row["weight"] is not None and info.weight != row["weight"]:
            out.append(E.Weight((info.name,), row["weight"]))
        return out

    def notes(self, v, row, info):
        """The Weight given back, and Slurm shows it: nothing more to restore."""
        return {"weight": None} if row["weight"] is not None and info.weight == row["weight"] else {}


UNITS: dict[str, Unit] = {u.state: u for u in (
    Pending(), Reserved(), Upgrading(), RollingBack(), Returning(), Validating(), Testing(),
    *(Final(s) for s in (S.DONE, S.FAILED, S.SKIPPED, S.ROLLED_BACK, S.BACK_PENDING)))}
assert set(UNITS) == set(S.NODE_STATES), "every state has its unit"
