"""Rack escalation: when the fault is the rack's, drain the rack.

A GB200/GB300 NVL72 rack is one NVLink domain: a switch-tray fault takes every compute tray of it at
once, and a job on a rack with one bad switch fails wherever in the rack it lands.  After the health
check drains a node for a fabric or NVLink finding, it looks at the node's failure domain (the config's
[[domain]], Slurm's topology blocks, or the NVLink domain the nodes publish: slurm/domains.discover)
and drains the whole domain with one owned reason naming the trigger when either

* `rack_escalate_nodes` of its nodes were drained by us for fabric or NVLink findings within
  `rack_escalate_window_s`; or
* the same fabric fault shows on 2 or more of its trays at once (a switch-side signature).

The breaker counts an escalation by its nodes, and as one domain among the racks (slurm/breaker.would_trip_domain).  The domain comes
back as one: a member whose own checks pass waits until every member the escalation drained passes too,
then all of them are resumed in one write.  IMEX findings are the job's and never escalate.

Pure decisions (`trigger`, `ready_to_resume`) and one function each that reads and writes through the
actuator; a Slurm call only on this path, which a fabric drain starts.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from ..judging.summary import from_node, published_at
from ..slurm.base import NodeInfo
from ..slurm.ownership import HEALTH, owner, rack_of_reason
from ..slurm.reasons import RACK, ours, words_of

log = logging.getLogger("slurm-gpufleet")

# the checks whose drains can be the rack's fault
RACK_CHECKS = ("fabric", "nvlink")
_FAULT = re.compile(rf"^(?P<check>{'|'.join(RACK_CHECKS)}) (?:gpu\d+|node) (?P<what>.+)$")


@dataclass
class Trigger:
    domain: str
    why: str           # what the reason says
    nodes: list[str]   # the members whose drains made it


# the ladder's words around a fault's: a tray on its reset or reboot rung ("validate after reboot: fabric
# gpu0 ...") or drained after its reboots ("... after 2 reboots") holds the same fault as its rack-mates
_RUNG_WORDS = re.compile(r"^validate after (?:reset|reboot): | after \d+ reboots?$")


def fault_of(reason: str) -> tuple[str, str] | None:
    """(check, what) of one of our fabric/NVLink holds: the same fault on two trays reads the same."""
    m = _FAULT.match(_RUNG_WORDS.sub("", words_of(reason) or ""))
    return (m.group("check"), m.group("what")) if m else None


def trigger(domain: str, members: list[NodeInfo], min_nodes: int, window_s: float, now: float) -> Trigger | None:
    """Pure: does this domain's state call for draining it whole?"""
    recent = [(n, fault_of(n.reason)) for n in members
              if owner(n) == HEALTH and n.reason_time is not None and now - n.reason_time <= window_s]
    faulty = [(n, f) for n, f in recent if f is not None]
    by_fault: dict[tuple[str, str], list[str]] = {}
    for n, f in faulty:
        by_fault.setdefault(f, []).append(n.name)
    same = max(((f, names) for f, names in by_fault.items() if f[0] == "fabric" and len(names) >= 2),
               key=lambda x: len(x[1]), default=None)
    if same is not None:
        return Trigger(domain, f"switch-side: {same[1][0]} and {len(same[1]) - 1} more tray(s) {same[0][1]}",
                       sorted(same[1]))
    if len(faulty) >= min_nodes:
        names = sorted(n.name for n, _ in faulty)
        return Trigger(domain, f"{len(faulty)} trays with fabric/NVLink faults in {window_s:g} s, first {names[0]}",
                       names)
    return None


def reason_for(t: Trigger) -> str:
    return ours(f"{RACK} {t.domain} {t.why}")


def escalate(actuator, policy_domains, node: str, modes="full") -> str | None:
    """After `node` was drained for a fabric/NVLink finding: drain its domain whole if the domain calls
    for it, through the caller's actuator (its backend, settings and clock).  Returns what was done, for
    the log; never raises for Slurm's sake (the node's own drain stands either way).  `modes`: each
    member's node-group mode (policy.Policy.mode_of): an observe member is left as it is."""
    from ..slurm.base import SlurmError

    settings, clock = actuator.settings, actuator.clock
    found = _fleet_domain(actuator.backend, policy_domains, node)
    if found is None:
        return None
    fleet, domains, domain = found
    by_name = {n.name: n for n in fleet}
    members = [by_name[m] for m in domains.members[domain] if m in by_name]
    escalated = [n for n in members if rack_of_reason(n.reason) == domain]
    if escalated:
        return _join(actuator.seeing(fleet, modes), domain, escalated[0].reason, strays(members))
    t = trigger(domain, members, settings.rack_escalate_nodes, settings.rack_escalate_window_s, clock())
    if t is None:
        return None
    reason = reason_for(t)
    try:
        done = actuator.seeing(fleet, modes).drain_domain(domain, members, reason, len(domains.members))
    except SlurmError as exc:
        log.error("rack escalation of %s failed: %s", domain, exc)
        return f"rack {domain} not drained: {exc}"
    if done.breaker:
        log.critical("ALERT rack %s not drained, the breaker is open: %s", domain, done.breaker)
        return f"rack {domain} not drained: breaker open ({done.breaker})"
    log.critical("ALERT rack escalation: %s drained whole (%s): %s", domain, ", ".join(done.done + done.reason_set),
                 reason)
    return f"rack {domain} drained: {reason}"


def reason_after_prolog(actuator, policy_domains, info: NodeInfo, reason: str, modes="full") -> str | None:
    """A failed prolog's node, which slurmd drained as "Prolog error": our reason in its place, through
    the actuator, and a fabric fault the prolog caught counted for its rack too.  Returns what the rack
    escalation did, if anything (hooks/prolog.replace_hook_reason and the fault simulator both)."""
    actuator.set_reason([info], reason)
    if fault_of(reason) is None:
        return None
    return escalate(actuator, policy_domains, info.name, modes=modes)


def strays(members: list[NodeInfo]) -> list[NodeInfo]:
    """Pure: members of an escalated domain that our own check drained for a fabric/NVLink fault under their
    own reason: a tray whose check read it before the rack's drain and wrote after it.  They take the
    domain's reason, so the rack comes back as one."""
    return [n for n in members if n.drained and owner(n) == HEALTH and rack_of_reason(n.reason) is None
            and fault_of(n.reason) is not None]


def _join(actuator, domain: str, reason: str, late: list[NodeInfo]) -> str | None:
    from ..slurm.base import SlurmError

    if not late:
        return None  # already escalated: its members carry the domain's reason
    try:
        done = actuator.set_reason(late, reason)
    except SlurmError as exc:
        log.error("rack %s: %s not given its reason: %s", domain, ", ".join(n.name for n in late), exc)
        return None
    return f"rack {domain} drained: {', '.join(done.done)} given its reason" if done.done else None


def _fleet_domain(backend, policy_domains, node: str):
    """One read of the fleet (and of Slurm's topology where no [[domain]] is configured): (the fleet, its
    domains, the node's domain), or None where Slurm cannot be read or the node is in no domain."""
    from ..slurm.base import SlurmError
    from ..slurm.domains import discover, fabric_domain

    try:
        fleet = backend.nodes()
        topology = None if policy_domains else backend.topology()
    except SlurmError as exc:
        log.warning("rack escalation not judged: %s", exc)
        return None
    domains = discover(policy_domains, topology, [(n.name, fabric_domain(from_node(n))) for n in fleet])
    domain = domains.of.get(node)
    return None if domain is None else (fleet, domains, domain)


def due_with(backend, policy_domains, settings, info: NodeInfo, reason: str, now: float) -> bool:
    """Would `info`'s domain be drained whole were the node held for `reason` now?  A rack-level fault
    found on a tray whose rack-mates hold it too is the rack's: the tray is not reset or rebooted for it
    (remedy/decide.py).  One read of the fleet, on this path alone; False where it cannot be read."""
    from dataclasses import replace

    found = _fleet_domain(backend, policy_domains, info.name)
    if found is None:
        return False
    fleet, domains, domain = found
    held = replace(info, flags=info.flags | {"DRAIN"}, reason=reason, reason_time=now)
    names = set(domains.members[domain])
    members = [held if n.name == info.name else n for n in fleet if n.name in names]
    return trigger(domain, members, settings.rack_escalate_nodes, settings.rack_escalate_window_s, now) is not None


def ready_to_resume(domain: str, members: list[NodeInfo], drained_at: float | None,
                    clean_now: str | None = None) -> list[NodeInfo] | None:
    """Pure: the members to resume together once every one the escalation drained published a clean
    check (ok or warn) after the escalation; None while any has not.  `clean_now`: the member whose
    clean run is deciding this (its summary goes out in the same write)."""
    ours = [n for n in members if rack_of_reason(n.reason) == domain and n.drained]
    for n in ours:
        if n.name == clean_now:
            continue
        data = from_node(n) or {}
        at = published_at(data)
        if data.get("v") not in ("ok", "warn") or at is None or (drained_at is not None and at < drained_at):
            return None
    return ours


def resume_domain(actuator, policy_domains, info: NodeInfo, modes="full") -> str:
    """A rack-escalated node whose own checks pass: resume the whole domain when every member passes.
    One write over the members, with no fields: the deciding node's summary is its own, published apart."""
    from ..slurm.base import SlurmError

    backend = actuator.backend
    from ..slurm.domains import discover, fabric_domain

    domain = rack_of_reason(info.reason)
    try:
        fleet = backend.nodes()
        topology = None if policy_domains else backend.topology()
    except SlurmError as exc:
        return f"waiting: {exc}"
    found = discover(policy_domains, topology, [(n.name, fabric_domain(from_node(n))) for n in fleet])
    names = set(found.members.get(domain or "", [])) | {n.name for n in fleet if rack_of_reason(n.reason) == domain}
    members = [n for n in fleet if n.name in names]
    ready = ready_to_resume(domain or "", members, info.reason_time, clean_now=info.name)
    if ready is None:
        return f"waiting for every member of rack {domain} to pass its checks"
    done = actuator.seeing(modes=modes).resume(ready)
    return f"rack {domain} resumed: {', '.join(done.done)}" if done.done else f"rack {domain} not resumed"
