"""What to do about a node, decided from its verdict, its Slurm state and its own history.  Pure.

Rules an admin can rely on:
* a node drained, down or rebooting by anyone else is never touched, and its reason never replaced;
* we resume only nodes whose reason carries our prefix (or the "Prolog error"/"Epilog error" drain our
  own prolog/epilog caused), and only after `clean_runs_to_resume` clean runs in a row;
* the remediation ladder (remedy/ladder.py, data/remediation.toml), cheapest first: a fault a GPU reset
  fixes gets one reset of its idle GPUs (the node drained first, so no job lands during it; a busy node
  is drained and waits for its jobs), then `scontrol reboot ASAP` once per boot (nextstate=DOWN and a
  validation run before it returns, where `validation_command` is set: remedy/carrier.py); still
  there after `reboots_before_drain` reboots, it becomes a drain for hardware inspection;
* attempts are counted per failure class: the `max_attempts`-th within `attempt_window_s` is not
  remedied again, the node is drained for repair, and only an admin resumes it;
* `mode` per node group: "observe" decides and publishes but touches nothing (remedy/carrier.py),
  "quarantine" drains where a reset or reboot would have been tried, "full" does everything;
* look before rebooting: a reboot into a kernel with no module for this driver would lose the GPUs, so
  that reboot becomes a drain naming the kernel (from the host facts the node's read gathered).

remedy/carrier.py carries the action out through the actuator (ownership and the drain breaker apply
there); remedy/table.py holds the states and moves every action makes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from ..judging.findings import Finding
from ..slurm import reasons
from ..slurm.actions import fault_key, fault_words, make_reason, worst
from ..slurm.base import NodeInfo
from ..slurm.ownership import HEALTH, HOOK, left_alone, owner, rack_of_reason


@dataclass
class NodeHistory:
    """What the node's own history says, as the decision needs it."""

    clean_runs: int = 0                  # healthcheck runs with verdict ok/warn in a row, this one included
    hook_failure: bool = False           # our prolog/epilog failed since we last resumed the node
    # fault key -> boot ids (Slurm BootTime) at which we asked for a reboot for it
    reboot_boots: dict[str, list[str]] = field(default_factory=dict)
    # fault key -> boot ids at which its GPUs were reset, in the current episode (since the last clean run)
    resets: dict[str, list[str]] = field(default_factory=dict)
    # failure class -> attempts within the attempt window (since its case last closed), this one included
    # when it is running
    attempts: dict[str, int] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)   # classes whose attempt is under way
    # the open suspect hold (history.open_suspect): class, fault, reason, since, passes, last_pass
    suspect: dict | None = None


@dataclass(frozen=True)
class Ladder:
    """The remediation settings decide needs ([slurm] and the node group's `mode`)."""

    reboots_before_drain: int = 2
    max_attempts: int = 3
    attempt_window_s: float = 7 * 86400
    mode: str = "full"
    # the suspect rung: the classes that take it (data/remediation.toml [suspect]), its re-check interval
    # and the clean re-checks that release it
    suspect_classes: tuple[str, ...] = ()
    suspect_recheck_s: float = 600.0
    suspect_passes: int = 3
    cool_off_s: float = 1800.0

    @classmethod
    def of(cls, settings, mode: str = "full", suspect: bool = True) -> Ladder:
        """The ladder of the [slurm] settings and a node group's mode; `suspect`: with the rung for the
        classes the ladder data marks."""
        return cls(settings.reboots_before_drain, settings.max_attempts, settings.attempt_window_s, mode,
                   suspect_classes() if suspect else (), settings.suspect_recheck_min * 60, settings.suspect_passes,
                   settings.cool_off_min * 60)


def suspect_classes() -> tuple[str, ...]:
    """The classes the ladder data marks for the suspect rung."""
    from ..catalogs import remediation_data

    return tuple(remediation_data().get("suspect", {}).get("classes", []))


class Kind(StrEnum):
    """What an action asks of Slurm: one handler each in the carrier's table (remedy/carrier.py).  A kind
    is its own word in the history and the logs (a StrEnum: "drain" == Kind.DRAIN)."""

    DRAIN = "drain"
    SET_REASON = "set_reason"
    RESUME = "resume"
    REBOOT = "reboot"
    RESET = "reset"
    VALIDATE = "validate"
    SUSPECT = "suspect"            # hold it in its own reservation
    SUSPECT_PASS = "suspect_pass"  # a clean re-check counted
    RELEASE = "release"            # the hold ends
    FAIL = "fail"                  # the prolog's: it fails, slurmd drains the node
    NONE = "none"


@dataclass
class Action:
    """What the health check asks of Slurm for a node, and why."""

    kind: Kind
    reason: str = ""
    why: str = ""
    fault: str | None = None
    finding: Finding | None = None   # what a reset or reboot remedies (its class, its GPUs)
    rung: str = ""                   # the ladder's rung this action is: reset, reboot, suspect, cool_off, repair
    resume_after_s: int | None = None  # a cool-off drain: Slurm resumes the node by itself after this

    def __post_init__(self) -> None:
        self.kind = Kind(self.kind)   # a word no handler carries is refused here, not at the write


def decide(node: NodeInfo, verdict: str, findings: list[Finding], history: NodeHistory,
           clean_runs_to_resume: int, reboots_before_drain: int | None = None, host=None, driver: str | None = None,
           *, ladder: Ladder | None = None, gpus_idle: bool = False, now: float | None = None,
           rack_due: bool = False) -> Action:
    """host: the node's HostFacts (readers/host.py), when read; driver: the driver it runs; gpus_idle: no
    process on the GPUs a reset of the worst finding would take (remedy/ladder.reset_targets); now: the
    clock (a suspect's re-checks are timed by it; None: every run is one); rack_due: the worst finding is
    a rack-level one its rack-mates hold too, so that the node's drain escalates its rack
    (remedy/escalation.due_with): the rack's fault, no rung of the node's own."""
    from .ladder import is_repair

    ladder = ladder or Ladder()
    if reboots_before_drain is not None:
        ladder = replace(ladder, reboots_before_drain=reboots_before_drain)
    # whose the node is, by the one rule every actor reads (ownership.owner: a down node is someone
    # else's unless it is back from the reboot we asked for)
    whose = owner(node)
    ours = whose == HEALTH or (whose == HOOK and history.hook_failure)
    held = node.drained or node.down or node.rebooting
    if held and not ours:
        return Action("none", why=left_alone(node))
    if node.rebooting:
        return Action("none", why="our reboot is pending")
    if held and is_repair(node.reason):
        return Action("none", why="drained for repair: an admin resumes it")
    if history.suspect is not None and not held:
        held_as = _suspect(verdict, findings, history.suspect, ladder, now)
        if held_as is not None:
            return held_as

    if verdict in ("ok", "warn"):
        coming = next((f for f in findings if f.action == "wait"), None)
        if held and coming is not None:
            return Action("none", why=f"Slurm shows it {coming.message}: judged once it has registered")
        if held:
            if history.clean_runs >= clean_runs_to_resume:
                from .returning import is_validate

                if is_validate(node.reason):  # returning.py: back to work only through a validation run
                    return Action("validate", why=f"{history.clean_runs} clean runs in a row: validation run next")
                return Action("resume", why=f"{history.clean_runs} clean runs in a row")
            return Action("none", why=f"clean run {history.clean_runs} of {clean_runs_to_resume} before resume")
        return Action("none", why="healthy")

    if verdict == "reboot":
        return _reboot_rungs(node, ours, findings, history, ladder, host, driver, gpus_idle, rack_due)
    return _drain_rungs(node, ours, held, findings, history, ladder)


def _reboot_rungs(node: NodeInfo, ours: bool, findings: list[Finding], history: NodeHistory, ladder: Ladder, host,
                  driver: str | None, gpus_idle: bool, rack_due: bool) -> Action:
    """A reset- or reboot-fixable fault: the cap of attempts, the reboots it survived, the rack's fault,
    quarantine, a reset (idle GPUs, or drained until they are), else a reboot after looking at the next
    boot."""
    from .ladder import class_of, repair_reason, rungs_for

    f = worst(findings, "reboot")
    key, cls, rungs = fault_key(f), class_of(f), rungs_for(f.action)
    boots = history.reboot_boots.get(key, [])
    started = cls in history.running or key in history.resets or bool(boots)
    attempt = history.attempts.get(cls, 0) + (not started)
    if not started and attempt >= ladder.max_attempts:
        reason = repair_reason(cls, attempt, ladder.max_attempts, ladder.attempt_window_s, fault_words(f))
        return replace(_drain(node, ours, reason, f"{cls}: attempt {attempt} of {ladder.max_attempts} within "
                              f"the window: not remedied again, drained for repair", key), rung="repair", finding=f)
    survived = len({b for b in boots if b != node.boot_time})
    if "reboot" not in rungs:
        return _drain(node, ours, make_reason(f), f"{f.message}: no remedy on its ladder, hardware inspection", key)
    if survived >= ladder.reboots_before_drain:
        reason = make_reason(f, f" after {survived} reboots")
        return replace(_drain(node, ours, reason, f"{f.message} survived {survived} reboots: hardware inspection",
                              key), rung="repair", finding=f)
    if node.boot_time is not None and node.boot_time in boots:
        return Action("none", why="reboot already requested in this boot", fault=key)
    if rack_due:
        return _drain(node, ours, make_reason(f), f"{f.message}: its rack-mates hold it too: the rack's "
                      f"fault, drained for the rack's escalation, not reset or rebooted", key)
    if ladder.mode == "quarantine":
        return _drain(node, ours, make_reason(f), f"quarantine mode: drained, not reset or rebooted ({f.message})",
                      key)
    if "reset" in rungs and key not in history.resets and not boots:
        if gpus_idle and node.state == "IDLE":
            return Action("reset", reason=make_reason(f), why=f"reset-fixable, GPUs idle: {f.message}", fault=key,
                          finding=f, rung="reset")
        # a reset needs the GPUs idle: no new job lands meanwhile, the running ones go on
        return _drain(node, ours, make_reason(f), f"reset-fixable: {f.message}; reset when the node is idle", key)
    from ..judging.checks.kernel import reboot_problem

    problem = reboot_problem(host, driver) if host is not None else None
    if problem:
        return _drain(node, ours, reasons.ours(problem), f"not rebooted ({make_reason(f)}): {problem}", key)
    return Action("reboot", reason=make_reason(f), why=f"reset-fixable: {f.message}", fault=key, finding=f,
                  rung="reboot")


def _drain_rungs(node: NodeInfo, ours: bool, held: bool, findings: list[Finding], history: NodeHistory,
                 ladder: Ladder) -> Action:
    """A drain-severity fault: a cool-off hold (heat), a suspect hold (an uncertain class), else a drain."""
    from .ladder import class_of, repair_reason, rungs_for

    f = worst(findings, "drain")
    if not held and ladder.mode == "full" and rungs_for(f.action)[:1] == ("cool_off",):
        cls, key = class_of(f), fault_key(f)
        attempt = history.attempts.get(cls, 0) + 1
        if attempt >= ladder.max_attempts:
            reason = repair_reason(cls, attempt, ladder.max_attempts, ladder.attempt_window_s, fault_words(f))
            return replace(_drain(node, ours, reason, f"{cls}: hold {attempt} of {ladder.max_attempts} within the "
                                  f"window: not cooled off again, drained for repair", key), rung="repair", finding=f)
        # a transient: held a while, and back by itself (ResumeAfter) even if no check runs again
        return Action("drain", reason=make_reason(f), why=f"cool-off {attempt} of {ladder.max_attempts - 1}: "
                      f"{f.message}; back after {ladder.cool_off_s / 60:g} min", fault=key, finding=f,
                      rung="cool_off", resume_after_s=max(1, int(ladder.cool_off_s)))
    if not held and ladder.mode == "full" and class_of(f) in ladder.suspect_classes and history.suspect is None:
        # uncertain: kept from new jobs in a reservation of its own while its running job finishes, re-checked
        return Action("suspect", reason=make_reason(f), why=f"suspect: {f.message}; its running job finishes, no new "
                      f"job lands; re-checked every {ladder.suspect_recheck_s / 60:g} min", fault=fault_key(f),
                      finding=f, rung="suspect")
    return _drain(node, ours, make_reason(f), f.detail or f.message, fault_key(f))


def _suspect(verdict: str, findings: list[Finding], held: dict, ladder: Ladder, now: float | None) -> Action | None:
    """A node held as a suspect: a clean re-check every suspect_recheck_s counts, suspect_passes of them
    release it; a re-check that finds its fault drains it for repair.  Another class's fault is not the
    suspect's: None, and the ladder takes it as it would any (the carrier ends the hold)."""
    from .ladder import class_of

    due = now is None or now - max(held["since"], held["last_pass"] or 0.0) >= ladder.suspect_recheck_s
    if verdict in ("ok", "warn"):
        if not due:
            return Action("none", why=f"suspect, clean: {held['passes']} of {ladder.suspect_passes} re-checks passed")
        if held["passes"] + 1 >= ladder.suspect_passes:
            return Action("release", why=f"suspect: {held['passes'] + 1} clean re-checks: back in service",
                          fault=held["fault"], rung="suspect")
        return Action("suspect_pass", why=f"suspect: re-check {held['passes'] + 1} of {ladder.suspect_passes} clean",
                      fault=held["fault"], rung="suspect")
    f = worst(findings)
    if f is None or class_of(f) != held["class"]:
        return None
    if not due:
        return Action("none", why=f"suspect: {f.message}; re-checked every {ladder.suspect_recheck_s / 60:g} min",
                      fault=held["fault"])
    reason = reasons.ours(f"{reasons.REPAIR} {held['class']} suspect re-check failed: {fault_words(f)}")
    return Action("drain", reason=reason, why=f"suspect: {f.message} still there at its re-check: drained for repair",
                  fault=fault_key(f), finding=f, rung="repair")


def _drain(node: NodeInfo, ours: bool, reason: str, why: str, key: str) -> Action:
    if node.drained and ours:
        if rack_of_reason(node.reason) is not None:  # the rack's reason stands until the rack comes back whole
            return Action("none", why=f"held by its rack's escalation ({why})", fault=key)
        if reasons.same(node.reason, reason):
            return Action("none", why="already drained by us for this", fault=key)
        return Action("set_reason", reason=reason, why=why, fault=key)
    return Action("drain", reason=reason, why=why, fault=key)
