"""The Slurm changes a reconcile step wants, batched: each distinct change is one call over a host list."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..common.hostlist import fold
from ..slurm import effects as E
from ..slurm.base import SlurmError

# never left to a later step: a job that starts on a waiting node before its slot's MAINT reservation
# exists may run past the slot (days), and a deadline plan's job called a step late may cost the deadline.
# A rollout makes its slot reservations once (at most schedule.MAX_RESERVATIONS of them).  A node leaving
# a reservation of ours (or the reservation going with its last node) is capacity given back, as a begun
# slot let go is: a node done but still in a begun MAINT reservation is out of service and fills the
# budget, so under the cap the window would wait on its own leftovers (one call per reservation, at most
# schedule.MAX_RESERVATIONS).
UNCAPPED = (E.JobComment, E.Signal, E.Requeue, E.Cancel, E.Reserve, E.Reshape, E.Release)


@dataclass
class Writes:
    """The Slurm changes a step wants, grouped so that each distinct change is one call over a host list.

    Every one of them is derived again at the next step from the nodes' states and what Slurm shows, so a
    step may make only the first `cap` of them (most urgent first) and leave the rest to the next."""

    # the node-state and job changes asked for, as typed effects: one effect per distinct change (its kind,
    # reason, weight or job), its nodes or jobs gathered (`add`)
    changes: dict[tuple, E.Effect] = field(default_factory=dict)
    update: dict[str, list[str]] = field(default_factory=dict)                         # reservation -> nodes
    delete: set[str] = field(default_factory=set)
    # begun slots given up (Slurm cannot move them): deleted, uncapped, in the step that remakes them later
    given_up: set[str] = field(default_factory=set)
    # begun slots that let their waiting nodes go, keeping the nodes already taken: uncapped, as given_up
    shrunk: dict[str, list[str]] = field(default_factory=dict)                         # reservation -> nodes
    create: dict[str, E.Reserve] = field(default_factory=dict)    # name -> the reservation, its nodes gathered
    postpone: dict[str, float] = field(default_factory=dict)                          # reservation -> new start
    errors: list[str] = field(default_factory=list)

    def add(self, effect: E.Effect) -> None:
        """An effect joins the step's one call for that change: a node-state effect (Drain, SetReason,
        Resume, Reboot, Weight) of the same reason or weight gathers its nodes, a Requeue or Cancel its jobs,
        a Reserve of the same name its nodes; a job's comment or signal is the last one asked."""
        if isinstance(effect, E.Reserve):
            held = self.create.get(effect.name)
            self.create[effect.name] = effect if held is None else \
                dataclasses.replace(held, nodes=held.nodes + effect.nodes)
            return
        key = (type(effect), getattr(effect, "reason", None), getattr(effect, "weight", None),
               getattr(effect, "next_state", None), getattr(effect, "job_id", None))
        held = self.changes.get(key)
        if held is not None and hasattr(effect, "nodes"):
            effect = dataclasses.replace(held, nodes=held.nodes + effect.nodes)
        elif held is not None and hasattr(effect, "job_ids"):
            effect = dataclasses.replace(held, job_ids=held.job_ids + effect.job_ids)
        self.changes[key] = effect

    def _changes(self, kind: type) -> list[E.Effect]:
        """This step's effects of one kind: node-state effects in the order their first node asked, each over
        its nodes once, by name; a job's effects by job id; a batch of jobs by id."""
        def by_name(nodes: tuple) -> tuple:
            once = {getattr(n, "name", n): n for n in reversed(nodes)}   # a node asked twice: its first
            return tuple(once[name] for name in sorted(once))

        found = [e for (k, *_), e in self.changes.items() if k is kind]
        if found and hasattr(found[0], "job_ids"):
            return [dataclasses.replace(e, job_ids=tuple(sorted(set(e.job_ids)))) for e in found]
        if found and hasattr(found[0], "job_id"):
            return sorted(found, key=lambda e: e.job_id)
        return [dataclasses.replace(e, nodes=by_name(e.nodes)) for e in found]

    def effects(self) -> list[E.Effect]:
        """The step's writes as typed effects, most urgent first: give capacity back, stop new jobs on nodes
        we take, then the rest.  Node-state effects carry the nodes as this step's read showed them."""
        out: list[E.Effect] = []
        out += self._changes(E.Resume)  # capacity back first: a node done and one taken are never both out for long
        out += self._changes(E.Drain)
        out += self._changes(E.Reboot)
        out += [E.Reshape(name, tuple(sorted(n))) for name, n in sorted(self.update.items()) if name not in self.shrunk]
        out += [E.Reshape(name, tuple(sorted(n))) for name, n in sorted(self.shrunk.items())
                if name not in self.given_up]
        # a slot about to begin for a domain that cannot go yet: before it holds nodes out of service
        out += [E.Postpone(name, start) for name, start in sorted(self.postpone.items())]
        out += [E.Release(name) for name in sorted(self.delete | self.given_up)]
        out += self._changes(E.SetReason)
        out += [dataclasses.replace(r, nodes=tuple(sorted(r.nodes))) for r in sorted(self.create.values(),
                                                                                      key=lambda r: r.start)]
        out += self._changes(E.Weight)
        # a deadline plan's jobs: the owner told first, then the checkpoint signal, then the stop
        out += self._changes(E.JobComment) + self._changes(E.Signal) + self._changes(E.Requeue)
        out += self._changes(E.Cancel)
        return [e for e in out if not isinstance(e, E.NODE_STATE) or e.nodes]

    def __bool__(self) -> bool:
        """Whether the step wants any write at all."""
        return bool(self.changes or self.update or self.shrunk or self.postpone or self.delete or self.given_up
                    or self.create)

    def flush(self, actuator: Any, cap: int | None = None) -> int:
        """Every write goes through the actuator (ownership: only what a rollout may touch; its own
        reservation prefix), node states with the nodes as this step's read showed them.  The cap bounds
        node changes and postponed slots; new reservations, nodes leaving reservations (and reservations
        deleted) and a deadline plan's few job calls always go (UNCAPPED)."""
        from ..slurm.actuator import Applied

        self.made: list[tuple[str, str]] = []
        self.carried: list[E.Effect] = []   # the effects Slurm took (a call that raised is not here)
        effects = self.effects()
        capped = [e for e in effects if not isinstance(e, UNCAPPED)]
        for effect in capped[:cap] + [e for e in effects if isinstance(e, UNCAPPED)]:
            try:
                done = actuator.apply(effect)[0]
                if isinstance(done, Applied):
                    self.errors += done.errors + [f"{n}: {why}" for n, why in done.left.items()]
                self.carried.append(effect)
            except SlurmError as exc:  # derived again next step; said in the audit log
                self.errors.append(f"{effect.label}: {exc}")
            self.made.append((effect.label, _detail(effect)))
        return len(self.made)

    @property
    def reservation_calls_made(self) -> int:
        """Reservations made, changed or deleted: never capped (the cap counts the rest)."""
        return sum(1 for method, _ in getattr(self, "made", [])
                   if method in ("create_reservation", "update_reservation", "delete_reservation"))

    @property
    def reservations_made(self) -> int:
        return sum(1 for method, _ in getattr(self, "made", []) if method == "create_reservation")


def _detail(effect: E.Effect) -> str:
    """An effect's arguments as the audit log shows them: host lists folded."""
    parts = []
    for f in dataclasses.fields(effect):
        value = getattr(effect, f.name)
        if f.name == "nodes":
            value = [getattr(n, "name", n) for n in value]
        if value is None and f.name == "fields":
            continue
        parts.append(fold(value) if isinstance(value, (list, tuple)) else str(value))
    return " ".join(parts)
