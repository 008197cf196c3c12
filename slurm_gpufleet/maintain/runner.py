"""Carry a plan out through Slurm, one wave at a time, one durable state at a time.

`apply` and `resume` run the same loop: every node's state is read from the store and that state's work
is (re)done, so a `kill -9` at any point followed by `resume` converges.  Reservations are named after
the rollout and wave, so a resumed run finds the ones it made.  Nodes that were not ours (drained, down
or reserved by someone else) are recorded before anything is touched and given back as they were.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..hostlist import fold
from ..policy import Policy
from ..slurm.base import SlurmError
from . import states as S
from .planner import RESERVATION_PREFIX
from .store import Store
from .upgrade import UpgradeError, render, run


class RolloutError(RuntimeError):
    pass


@dataclass
class Progress:
    """Counts per state on one rewritten line on a terminal, plain lines otherwise."""

    stream: Any = sys.stderr

    def __post_init__(self) -> None:
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def event(self, rollout: str, node: str | None, text: str, counts: dict[str, int]) -> None:
        total = sum(counts.values()) or 1
        finished = sum(counts.get(s, 0) for s in S.FINAL)
        summary = " ".join(f"{s}={counts[s]}" for s in S.NODE_STATES if counts.get(s))
        if self.tty:
            bar = "#" * int(30 * finished / total)
            self.stream.write(f"\r[{bar:<30}] {finished}/{total} {summary} | {node or ''} {text}"[:160].ljust(160))
            self.stream.flush()
        else:
            self.stream.write(f"{time.strftime('%H:%M:%S')} {rollout} {node or '-'}: {text} ({summary})\n")
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


class Runner:
    def __init__(self, store: Store, backend, policy: Policy, progress: Progress | None = None,
                 sleep: Callable[[float], None] = time.sleep, validator: Callable[[str, str], tuple[bool, str]] | None = None):
        self.store = store
        self.slurm = backend
        self.policy = policy
        self.s = policy.maintain
        self.progress = progress or Progress()
        self.sleep = sleep
        self.validator = validator or self._validate

    # -- entry points ----------------------------------------------------------------------------
    def apply(self, plan: dict[str, Any]) -> str:
        existing = self.store.rollout(plan["id"])
        active = self.store.active()
        if active and active["id"] != plan["id"]:
            raise RolloutError(f"rollout {active['id']} is {active['state']}: finish it first "
                               "(maintain resume, rollback or abort)")
        if existing is None:
            self.store.create_rollout(plan)
        elif existing["state"] in S.ROLLOUT_FINAL:
            return existing["state"]
        return self.resume(plan["id"])

    def resume(self, rollout_id: str | None = None) -> str:
        r = self.store.rollout(rollout_id) if rollout_id else self.store.active()
        if r is None:
            raise RolloutError("no rollout to resume")
        rid = r["id"]
        if r["state"] in S.ROLLOUT_FINAL:
            return r["state"]
        if r["state"] == S.R_ROLLING_BACK:
            return self.rollback(rid)
        if r["state"] == S.R_HALTED:
            self.store.set_rollout_state(rid, S.R_RUNNING)
        plan = json.loads(r["plan"])
        self._steer(rid)
        try:
            for wave in plan["waves"]:
                if self._failed(rid) > self.s.max_failures:
                    return self._halt(rid)
                self._wave(rid, plan, wave)
            if self._failed(rid) > self.s.max_failures:
                return self._halt(rid)
        finally:
            self.progress.close()
        self._delete_reservations(rid)
        self._unsteer_all(rid)
        self.store.set_rollout_state(rid, S.R_DONE)
        return S.R_DONE

    def abort(self, rollout_id: str | None = None) -> str:
        r = self.store.rollout(rollout_id) if rollout_id else self.store.active()
        if r is None:
            raise RolloutError("no rollout to abort")
        rid = r["id"]
        for row in self.store.nodes(rid):
            if row["state"] in (S.PENDING, S.RESERVED):
                if row["state"] == S.RESERVED:
                    self._release(rid, row["node"], "aborted before its upgrade")
                self.store.set_node(rid, row["node"], S.SKIPPED, "aborted before its upgrade")
            elif row["state"] in (S.UPGRADING, S.RETURNING, S.VALIDATING, S.ROLLING_BACK):
                self._set_reason(row["node"], f"{S.MAINT_REASON} {rid} aborted mid-upgrade: check the node")
                self.store.set_node(rid, row["node"], S.FAILED, "aborted mid-upgrade", error="aborted mid-upgrade")
        self._delete_reservations(rid)
        self._unsteer_all(rid)
        self.store.set_rollout_state(rid, S.R_ABORTED)
        return S.R_ABORTED

    def rollback(self, rollout_id: str | None = None) -> str:
        r = self.store.rollout(rollout_id) if rollout_id else (self.store.active() or self.store.rollout())
        if r is None:
            raise RolloutError("no rollout to roll back")
        rid = r["id"]
        if r["state"] != S.R_ROLLING_BACK:
            self.store.set_rollout_state(rid, S.R_ROLLING_BACK)
        plan = json.loads(r["plan"])
        for row in self.store.nodes(rid):  # not yet upgraded: just give them back
            if row["state"] in (S.PENDING, S.RESERVED):
                if row["state"] == S.RESERVED:
                    self._release(rid, row["node"], "rollback before its upgrade")
                self.store.set_node(rid, row["node"], S.SKIPPED, "rolled back before its upgrade")
        self._delete_reservations(rid)
        try:
            for row in self.store.nodes(rid):
                node, state = row["node"], row["state"]
                previous = row["previous_driver"]
                if state in (S.DONE, S.FAILED, S.UPGRADING, S.RETURNING, S.VALIDATING) or (
                        state == S.ROLLING_BACK):
                    if not previous:
                        self.store.set_node(rid, node, S.FAILED, "no previous driver recorded",
                                            error="no previous driver recorded")
                        continue
                    self._drain(rid, node, f"{S.MAINT_REASON} {rid} rolling back to {previous}")
                    if state != S.ROLLING_BACK:
                        self.store.set_node(rid, node, S.ROLLING_BACK, f"back to {previous}")
                    self._upgrade_and_validate(rid, plan, self.store.node(rid, node), previous, action="rollback")
        finally:
            self.progress.close()
        self._unsteer_all(rid)
        self.store.set_rollout_state(rid, S.R_ROLLED_BACK)
        return S.R_ROLLED_BACK

    # -- one wave --------------------------------------------------------------------------------
    def _wave(self, rid: str, plan: dict[str, Any], wave: dict[str, Any]) -> None:
        rows = {r["node"]: r for r in self.store.nodes(rid) if r["wave"] == wave["index"]}
        resv = f"{RESERVATION_PREFIX}{rid}_w{wave['index']}"
        if all(r["state"] in S.FINAL for r in rows.values()):
            self._delete_reservation(resv)  # a crash may have come between the last node and this
            return
        # failed nodes stay out of service: they eat into the budget of every later wave
        room = plan["budget"]["max_unavailable"] - self._failed(rid)
        todo = [n for n in wave["nodes"] if rows[n]["state"] not in S.FINAL]
        if room < 1:
            return
        todo = todo[:room]
        for node in todo:
            if rows[node]["state"] == S.PENDING:
                self._take(rid, node, rows[node])
        take = [n for n in todo if self.store.node(rid, n)["state"] == S.RESERVED]
        if plan["strategy"] == "reservation" and take:
            self._ensure_reservation(rid, resv, take)
        elif plan["strategy"] == "reboot-asap" and take:
            # a reservation from now holds the nodes (22.05 allows only nextstate=DOWN|RESUME, and a resumed
            # node must not take new jobs before its upgrade); `scontrol reboot ASAP` empties and reboots them
            self._ensure_reservation(rid, resv, take, now=True)
            for node in take:
                if not self.store.node(rid, node).get("boot"):
                    self._reboot_asap(rid, node, plan["target_driver"])
        deadline = time.monotonic() + 365 * 86400
        while time.monotonic() < deadline:
            busy = self._busy_nodes()
            open_nodes = 0
            for node in todo:
                row = self.store.node(rid, node)
                if row["state"] == S.RESERVED:
                    if self._empty(row, plan["strategy"], busy):
                        self._drain(rid, node, f"{S.MAINT_REASON} {rid} upgrading to {plan['target_driver']}")
                        self.store.set_node(rid, node, S.UPGRADING, f"to {plan['target_driver']}")
                        row = self.store.node(rid, node)
                    else:
                        open_nodes += 1
                        continue
                if row["state"] == S.UPGRADING and node in busy:
                    open_nodes += 1  # a job slipped in before the drain: it finishes first, never killed
                    continue
                if row["state"] in (S.UPGRADING, S.RETURNING, S.VALIDATING):
                    self._upgrade_and_validate(rid, plan, row, plan["target_driver"], action="upgrade")
            if open_nodes == 0:
                break
            self.sleep(self.s.poll_s)
        self._delete_reservation(resv)
        if any(self.store.node(rid, n)["state"] not in S.FINAL for n in wave["nodes"]):
            self._wave(rid, plan, wave)  # the rest of a wave that the budget split

    def _take(self, rid: str, node: str, row: dict[str, Any]) -> None:
        """Record the node's state before we touch it; leave it alone if it is someone else's now."""
        info = self.slurm.node(node)
        others = {n: r.name for r in self.slurm.reservations() if not r.name.startswith(RESERVATION_PREFIX)
                  for n in r.nodes}
        prior = {"state": info.state, "flags": sorted(info.flags), "reason": info.reason,
                 "reason_user": info.reason_user, "reservation": others.get(node), "boot": info.boot_time}
        held = (info.drained or info.down or info.rebooting or node in others) and not \
            info.reason.startswith(S.MAINT_REASON)
        if held and not self.s.upgrade_held_nodes:
            self._unsteer(rid, node)
            self.store.set_node(rid, node, S.SKIPPED, f"held by someone else: {info.reason or prior['reservation']}",
                                prior=json.dumps(prior))
            return
        self.store.set_node(rid, node, S.RESERVED, "", prior=json.dumps(prior))
        self._tick(rid, node, "reserved")

    def _upgrade_and_validate(self, rid: str, plan: dict[str, Any], row: dict[str, Any], driver: str,
                              action: str) -> None:
        node = row["node"]
        state = row["state"]
        done_state = S.DONE if action == "upgrade" else S.ROLLED_BACK
        if state in (S.UPGRADING, S.ROLLING_BACK):
            values = {"node": node, "target_driver": driver, "previous_driver": row["previous_driver"],
                      "action": action, "rollout": rid,
                      "reservation": f"{RESERVATION_PREFIX}{rid}_w{row['wave']}"}
            try:
                script = render(self.s.upgrade_template, **values)
            except UpgradeError as exc:
                return self._fail(rid, node, str(exc))
            self._tick(rid, node, f"{action} to {driver}")
            result = run(script, self.s.upgrade_timeout_s)
            self.store.audit(rid, node, f"{action} command rc={result.rc}", result.output)
            if not result.ok:
                return self._fail(rid, node, f"{action} command failed (rc {result.rc})")
            self.store.set_node(rid, node, S.RETURNING, "waiting for slurmd")
            state = S.RETURNING
        if state == S.RETURNING:
            if not self._wait_return(node):
                return self._fail(rid, node, f"did not come back within {self.s.return_timeout_s} s")
            self.store.set_node(rid, node, S.VALIDATING, f"expecting driver {driver}")
            state = S.VALIDATING
        if state == S.VALIDATING:
            ok, why = self.validator(node, driver)
            if not ok:
                return self._fail(rid, node, f"validation failed: {why}")
            self._release(rid, node, f"{action} to {driver} validated")
            self.store.set_node(rid, node, done_state, f"driver {driver}")
            self._tick(rid, node, f"{done_state} ({driver})")

    # -- Slurm side --------------------------------------------------------------------------------
    def _busy_nodes(self) -> set[str]:
        return {n for job in self.slurm.running_jobs() for n in job.nodes}

    def _empty(self, row: dict[str, Any], strategy: str, busy: set[str]) -> bool:
        node = row["node"]
        if node in busy:
            return False
        info = self.slurm.node(node)
        if strategy == "reboot-asap":
            return not info.rebooting and info.boot_time != row.get("boot") and not info.down
        # the reservation has started (MAINTENANCE flag) or the node sits idle inside it
        return "MAINTENANCE" in info.flags or "RESERVED" in info.flags or info.state == "IDLE"

    def _ensure_reservation(self, rid: str, name: str, nodes: list[str], now: bool = False) -> None:
        if any(r.name == name for r in self.slurm.reservations()):
            return
        free_at = {}
        for job in self.slurm.running_jobs():
            for n in job.nodes:
                end = job.end_time if job.end_time is not None else float("inf")
                free_at[n] = max(free_at.get(n, 0.0), end)
        start = max([free_at.get(n, 0.0) for n in nodes] + [time.time()])
        if start == float("inf") or now:
            start = time.time()  # a job without a time limit: reserve now, the node empties when it ends
        minutes = max(60, (self.s.upgrade_timeout_s + self.s.return_timeout_s + self.s.validate_timeout_s) // 60 * 2)
        self.slurm.create_reservation(name, nodes, start, minutes)
        self.store.audit(rid, None, "reservation", f"{name} on {fold(nodes)} from "
                                                   f"{time.strftime('%H:%M:%S', time.localtime(start))}")

    def _delete_reservation(self, name: str) -> None:
        if any(r.name == name for r in self.slurm.reservations()):
            try:
                self.slurm.delete_reservation(name)
            except SlurmError as exc:
                # a reservation in use cannot go; it expires on its own
                self.store.audit(name.split("_")[1], None, "reservation not deleted", str(exc))

    def _delete_reservations(self, rid: str) -> None:
        for r in self.slurm.reservations():
            if r.name.startswith(f"{RESERVATION_PREFIX}{rid}_"):
                self._delete_reservation(r.name)

    def _reboot_asap(self, rid: str, node: str, driver: str) -> None:
        info = self.slurm.node(node)
        self.slurm.reboot_asap(node, f"{S.MAINT_REASON} {rid} emptying for {driver}", next_state="RESUME")
        self.store.set_node(rid, node, S.RESERVED, "reboot ASAP asked", boot=info.boot_time or "unknown")

    def _drain(self, rid: str, node: str, reason: str) -> None:
        info = self.slurm.node(node)
        if info.drained and not info.reason.startswith(S.MAINT_REASON):
            return  # someone else's drain (upgrade_held_nodes): keep their reason
        if info.drained:
            self.slurm.set_reason(node, reason)
        else:
            self.slurm.drain(node, reason)

    def _set_reason(self, node: str, reason: str) -> None:
        try:
            info = self.slurm.node(node)
            if info.drained and info.reason.startswith(S.MAINT_REASON):
                self.slurm.set_reason(node, reason)
        except SlurmError:
            pass

    def _release(self, rid: str, node: str, why: str) -> None:
        """Give the node back the way we found it: resume only what we drained."""
        row = self.store.node(rid, node)
        prior = json.loads(row["prior"] or "{}")
        info = self.slurm.node(node)
        was_drained = "DRAIN" in prior.get("flags", []) or prior.get("state") == "DOWN"
        if info.drained and info.reason.startswith(S.MAINT_REASON) and not was_drained:
            self.slurm.resume(node)
        elif was_drained and info.reason.startswith(S.MAINT_REASON) and prior.get("reason"):
            self.slurm.set_reason(node, prior["reason"])
        self._unsteer(rid, node)
        self.store.audit(rid, node, "released", why)

    # Steering: while a rollout runs, nodes still waiting for their turn get a higher scheduling Weight, so
    # new jobs land on nodes already upgraded (or outside the rollout) instead of on the next waves'
    # nodes, where a long job would hold back the rest of the rollout.  Each node's weight is recorded
    # before it changes and restored when the node is released or the rollout ends.
    STEER = 1000

    def _steer(self, rid: str) -> None:
        steered = []
        for row in self.store.nodes(rid):
            if row["state"] not in (S.PENDING, S.RESERVED):
                continue
            node = row["node"]
            info = self.slurm.node(node)
            if row["weight"] is None:
                if info.drained or info.down or info.rebooting:
                    continue  # someone else's node right now: not ours to change
                self.store.set_weight(rid, node, info.weight or 1)
                row = self.store.node(rid, node)
            if info.weight != row["weight"] + self.STEER:
                self.slurm.set_weight(node, row["weight"] + self.STEER)
                steered.append(node)
        if steered:
            self.store.audit(rid, None, "steer", f"weight +{self.STEER} on {len(steered)} node(s) until their turn")

    def _unsteer(self, rid: str, node: str) -> None:
        row = self.store.node(rid, node)
        if row["weight"] is not None:
            self.slurm.set_weight(node, row["weight"])
            self.store.set_weight(rid, node, None)

    def _unsteer_all(self, rid: str) -> None:
        for row in self.store.nodes(rid):
            if row["weight"] is not None:
                self._unsteer(rid, row["node"])

    def _fail(self, rid: str, node: str, why: str) -> None:
        self._set_reason(node, f"{S.MAINT_REASON} {rid} failed: {why}"[:120])
        self.store.set_node(rid, node, S.FAILED, why, error=why)
        self._tick(rid, node, f"FAILED: {why}")

    def _wait_return(self, node: str) -> bool:
        deadline = time.monotonic() + self.s.return_timeout_s
        self.sleep(min(2.0, self.s.poll_s))
        while time.monotonic() < deadline:
            try:
                info = self.slurm.node(node)
                if not info.down and "NOT_RESPONDING" not in info.flags and not info.rebooting:
                    return True
            except SlurmError:
                pass
            self.sleep(min(self.s.poll_s, 2.0))
        return False

    def _validate(self, node: str, driver: str) -> tuple[bool, str]:
        """The health check, on the node's own GPU state: driver == target and nothing reboot/drain-worthy."""
        from ..engine import evaluate
        from ..hooks import read_node
        from ..snapshot import known

        try:
            snap = read_node(self.policy.slurm, node) if self.policy.slurm.gpu_state_dir else \
                _remote_snapshot(node, self.s.validate_timeout_s)
        except Exception as exc:
            return False, f"no readable GPU state: {type(exc).__name__}: {exc}"
        report = evaluate(snap, self.policy, host=node)
        have = known(snap.driver_version)
        if have != driver:
            return False, f"driver {have or 'unreadable'} != {driver}"
        if report.verdict in ("reboot", "drain"):
            worst = max(report.findings, key=lambda f: ("ok", "warn", "reboot", "drain").index(f.severity))
            return False, f"verdict {report.verdict}: {worst.message}"
        return True, f"driver {have}, verdict {report.verdict}"

    def _failed(self, rid: str) -> int:
        return self.store.counts(rid).get(S.FAILED, 0)

    def _halt(self, rid: str) -> str:
        self.store.set_rollout_state(rid, S.R_HALTED)
        self._tick(rid, None, f"HALTED after {self._failed(rid)} failure(s)")
        if self.s.auto_rollback:
            return self.rollback(rid)
        return S.R_HALTED

    def _tick(self, rid: str, node: str | None, text: str) -> None:
        self.progress.event(rid, node, text, self.store.counts(rid))


def _remote_snapshot(node: str, timeout_s: float):
    """Run the check on the node itself (srun into the maintenance reservation) and read its snapshot."""
    import subprocess

    from ..readers import read_report

    argv = ["srun", "--nodelist", node, "--ntasks=1", "--time=10", "--job-name=gpufleet-validate",
            sys.executable, "-m", "slurm_gpufleet.cli", "snapshot", "--level", "quick"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        raise RuntimeError(f"srun on {node}: {(out.stderr or out.stdout).strip()[-200:]}")
    return read_report(out.stdout)


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
