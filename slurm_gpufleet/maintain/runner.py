"""Carry a plan out through Slurm in the foreground: `maintain apply`, `resume`, `abort`, `rollback`.

All decisions are the engine's (`reconcile.py`); this drives its steps, shows progress and owns the upgrade
pool.  Every node's state is in the store, so a `kill -9` at any point followed by `resume` converges.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from ..common.progress import Progress
from ..policy import Policy
from ..slurm.base import SlurmError
from . import states as S
from .executor import Executor, PoolExecutor
from .plan import Plan
from .reconcile import Engine
from .store import Store


class RolloutError(RuntimeError):
    pass


class Runner:
    """Drives the engine in the foreground: a step, then `poll_s` of sleep, until the rollout ends."""

    def __init__(self, store: Store, backend, policy: Policy, progress: Progress | None = None,
                 sleep: Callable[[float], None] = time.sleep, executor: Executor | None = None,
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.s = policy.maintain
        self.progress = progress or Progress()
        self.sleep = sleep
        self.engine = Engine(store, backend, policy, executor, clock=clock, on_event=self._event)

    # -- entry points ----------------------------------------------------------------------------
    def _event(self, rollout: str, node: str | None, text: str, counts: dict[str, int]) -> None:
        finished = sum(counts.get(s, 0) for s in S.FINAL)
        summary = " ".join(f"{s}={counts[s]}" for s in S.NODE_STATES if counts.get(s))
        self.progress.event(finished, sum(counts.values()) or 1, summary, f"{node or ''} {text}",
                            f"{rollout} {node or '-'}: {text}")

    def apply(self, plan: dict[str, Any]) -> str:
        existing = self.store.rollout(plan["id"])
        active = self.store.active()
        if active and active["id"] != plan["id"]:
            raise RolloutError(self._held(active, plan))
        if existing is None:
            self.store.create_rollout(plan)
        elif existing["state"] in S.ROLLOUT_FINAL:
            return existing["state"]
        return self.resume(plan["id"])

    def _held(self, active: dict[str, Any], plan: dict[str, Any]) -> str:
        from ..common.hostlist import fold

        theirs = {r["node"] for r in self.store.nodes(active["id"]) if r["state"] not in S.FINAL}
        mine = {n for w in plan["waves"] for n in w["nodes"]}
        both = theirs & mine
        who = f", applied by {active['holder']}" if active.get("holder") else ""
        what = f"nodes {fold(both)} are held by" if both else "one rollout at a time:"
        return (f"{what} rollout {active['id']} ({active['state']}{who}): "
                "finish it first (maintain resume, rollback or abort)")

    def resume(self, rollout_id: str | None = None) -> str:
        r = self.store.rollout(rollout_id) if rollout_id else self.store.active()
        if r is None:
            raise RolloutError("no rollout to resume")
        if r["state"] in S.ROLLOUT_FINAL:
            return r["state"]
        if self.store.abort_requested(r["id"]):
            return self.abort(r["id"])  # asked while Slurm was away: carried out, never resumed instead
        if r["state"] == S.R_HALTED:
            self.store.set_rollout_state(r["id"], S.R_RUNNING, "resumed")
        return self._drive(r["id"])

    def abort(self, rollout_id: str | None = None) -> str:
        """Stop the rollout.  While Slurm does not answer, the abort is recorded first: this command
        retries it every poll for up to slurm_outage_s, and any `apply` or `resume` of the rollout (one
        running now included) carries it out at its next step once Slurm is back."""
        r = self.store.rollout(rollout_id) if rollout_id else self.store.active()
        if r is None:
            raise RolloutError("no rollout to abort")
        if r["state"] in S.ROLLOUT_FINAL:
            return r["state"]
        outage_since: float | None = None
        while True:
            try:
                return self.engine.abort(r["id"])
            except SlurmError as exc:
                now = time.monotonic()
                if outage_since is None:
                    outage_since = now
                    self.store.audit(r["id"], None, self.store.ABORT_REQUESTED,
                                     f"Slurm does not answer ({exc}); carried out once it does")
                    self.progress.say(f"abort of {r['id']} recorded; Slurm does not answer ({exc}): retrying "
                                      f"every {self.s.poll_s:g} s for up to {self.s.slurm_outage_s:g} s")
                if now - outage_since > self.s.slurm_outage_s:
                    raise SlurmError(f"{exc}; the abort is recorded and `maintain abort` or `resume` carries it "
                                     "out once Slurm answers") from None
                self.sleep(self.s.poll_s)

    def rollback(self, rollout_id: str | None = None) -> str:
        r = self.store.rollout(rollout_id) if rollout_id else (self.store.active() or self.store.rollout())
        if r is None:
            raise RolloutError("no rollout to roll back")
        if r["state"] != S.R_ROLLING_BACK:
            self.engine.start_rollback(r["id"])
        return self._drive(r["id"])

    def _drive(self, rid: str) -> str:
        import socket
        import uuid

        holder = f"{socket.gethostname()}:{os.getpid()}#{uuid.uuid4().hex[:6]}"  # this run, of this process
        stale_s = max(60.0, 10 * self.s.poll_s)
        other = self.store.acquire(rid, holder, time.time(), stale_s)
        if other:
            raise RolloutError(f"rollout {rid} is being applied by {other}: wait for it, or stop it first")
        try:
            return self._steps(rid, holder)
        finally:
            try:
                self.store.release(rid, holder)
            except sqlite3.Error:  # a full disk: the lease lapses by itself (this pid is gone)
                pass

    def _steps(self, rid: str, holder: str) -> str:
        if self.engine.executor is None:
            budget = Plan.from_dict(json.loads(self.store.rollout(rid)["plan"])).budget.max_unavailable
            run_dir = os.path.join(os.path.dirname(os.path.abspath(self.s.db)), "upgrades-running")
            self.engine.executor = PoolExecutor(self.s.max_parallel_upgrades or budget, run_dir)
        outage_since: float | None = None
        try:
            while True:
                try:
                    # an abort recorded by `maintain abort` while Slurm was away ends this apply here
                    state = self.engine.abort(rid) if self.store.abort_requested(rid) else self.engine.step(rid)
                except SlurmError as exc:
                    # slurmctld restarting, a failover, a network blip: the state is in the store, every
                    # step is repeatable; wait and step again, up to slurm_outage_s
                    now = time.monotonic()
                    outage_since = outage_since or now
                    self.store.audit(rid, None, "slurm unreachable, retrying", str(exc))
                    if now - outage_since > self.s.slurm_outage_s:
                        raise
                    self.sleep(self.s.poll_s)
                    continue
                outage_since = None
                self.store.heartbeat(rid, holder, time.time())
                if state in S.ROLLOUT_FINAL:
                    break
                if time.monotonic() - self.progress.last >= self.s.progress_s:
                    self.progress.say(waiting_for(self.store, rid, self.engine.clock()))
                # halted: no new node is taken; what is under way finishes (or fails) first
                if state == S.R_HALTED and self.engine.in_flight(rid) == 0:
                    break
                self.sleep(self.s.poll_s)
        finally:
            self.progress.close()
            if isinstance(self.engine.executor, PoolExecutor):
                self.engine.executor.shutdown()  # waits for commands under way: their processes are ours
        stats = self.engine.stats
        if stats:
            self.store.audit(rid, None, "slurm calls", f"{len(stats)} step(s); per step: "
                                                       f"{max(s.reads for s in stats)} reads, writes max "
                                                       f"{max(s.writes for s in stats)}, mean "
                                                       f"{sum(s.writes for s in stats) / len(stats):.2f}; "
                                                       f"{sum(s.reservations for s in stats)} reservation(s) made")
        return state


def can_change_slurm(scontrol: str) -> tuple[bool, str]:
    """Only root or Slurm's own user can drain nodes and create reservations."""
    if os.geteuid() == 0:
        return True, "root"
    import pwd
    import subprocess

    me = pwd.getpwuid(os.geteuid()).pw_name
    try:
        out = subprocess.run([scontrol, "show", "config"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"cannot read Slurm's config: {exc}"
    slurm_user = next((line.split("=", 1)[1].strip().split("(")[0] for line in out.splitlines()
                       if line.strip().startswith("SlurmUser")), "")
    if me == slurm_user:
        return True, me
    return False, f"running as {me}; changing Slurm (drain, reservations) needs root or SlurmUser ({slurm_user or '?'})"


def waiting_for(store: Store, rid: str, now: float) -> str:
    """What a rollout that changed nothing since the last line waits for: the nodes under way and their
    state, else the next node's slot (from the plan) and when it begins."""
    from ..common.hostlist import fold_short

    rows = store.nodes(rid)
    busy: dict[str, list[str]] = {}
    for r in rows:
        if r["state"] not in S.FINAL and r["state"] != S.PENDING:
            busy.setdefault(r["state"], []).append(r["node"])
    done = sum(1 for r in rows if r["state"] in S.FINAL)
    head = f"{rid}: {done}/{len(rows)} done; waiting for "
    if busy:
        return head + "; ".join(f"{fold_short(nodes, 40)} {state}" for state, nodes in busy.items())
    plan = json.loads(store.rollout(rid)["plan"])
    pending = {r["node"] for r in rows if r["state"] == S.PENDING}
    slots = sorted((n.get("slot_start") or now, n["node"]) for n in plan.get("nodes", []) if n["node"] in pending)
    if not slots:
        return head + "the rollout to settle"
    at, node = slots[0]
    when = time.strftime("%Y-%m-%d %H:%M %z", time.localtime(at))
    return head + (f"{node}'s slot at {when}" if at > now else f"{node} to be taken (its slot began {when})")
