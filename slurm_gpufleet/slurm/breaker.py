"""A fleet-wide drain circuit breaker: one mistake (a bad config, a driver bug, a broken reader) must not
turn into a fleet outage.  The model is NVSentinel's, which trips when half the GPU nodes were cordoned
within 5 minutes and stays open until a person resets it.

Before our health check, hooks or `fleet stragglers --drain` drain a node (and only then: nothing on the
success path), the actuator (slurm/actuator.py) reads the fleet once and counts the nodes drained for a
fault by us (the health check's and the stragglers' drains) within `breaker_window_s`, fleet-wide and in
each of the node's partitions.  If this drain would pass `breaker_threshold` (nodes, or a percentage of the
fleet / partition), the breaker opens: the node is not drained, its published summary says "breaker
open", an alert line goes to the log, `slurm-gpufleet metrics` exports it, and it stays open until
`slurm-gpufleet breaker reset`.

The open state is a small JSON file (`[slurm] breaker_file`, default in `state_dir`).  Put it on storage
every node shares and one reset closes it fleet-wide; node-local, each node still trips from the same
fleet-wide count, and `clush -a slurm-gpufleet breaker reset` closes them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from .base import NodeInfo
from .ownership import HEALTH, STRAGGLER, owner, rack_of_reason

log = logging.getLogger("slurm-gpufleet")


@dataclass
class Trip:
    scope: str      # "fleet" or "partition <name>"
    drained: int    # nodes drained by us within the window, this one included
    limit: int      # the most the threshold allows
    total: int      # nodes in the scope
    unit: str = "nodes"

    def text(self, window_s: float) -> str:
        return (f"{self.drained} of {self.total} {self.unit} in the {self.scope} drained by gpufleet within "
                f"{window_s:g} s (limit {self.limit})")


def limit_of(threshold: int | str, total: int) -> int:
    """The breaker's limit over `total`: a share rounds down, it guards (amounts.count_of)."""
    from ..common.amounts import count_of

    return count_of(threshold, total, round_up=False)


def would_trip(fleet: list[NodeInfo], node: str, threshold: int | str, window_s: float,
               now: float | None = None) -> Trip | None:
    """Would draining `node` now pass the threshold?  Pure: the fleet as one read of Slurm shows it.
    Every node out counts, a rack escalation's by its nodes (remedy/escalation.py): racks drained whole and
    single drains together never pass the node fraction."""
    now = time.time() if now is None else now
    recent = _recent(fleet, now, window_s) - {node}
    me = next((n for n in fleet if n.name == node), None)
    scopes = [("fleet", [n.name for n in fleet])]
    for p in (me.partitions if me else []):
        scopes.append((f"partition {p}", [n.name for n in fleet if p in n.partitions]))
    for scope, members in scopes:
        drained = len(recent & set(members)) + 1
        limit = limit_of(threshold, len(members))
        if drained > limit:
            return Trip(scope, drained, limit, len(members))
    return None


def _recent(fleet: list[NodeInfo], now: float, window_s: float) -> set[str]:
    """The nodes we drained for a fault within the window (the health check's, the stragglers', a rack's)."""
    return {n.name for n in fleet if owner(n) in (HEALTH, STRAGGLER) and n.reason_time is not None
            and now - n.reason_time <= window_s}


def would_trip_domain(fleet: list[NodeInfo], domain: str, domains: int, threshold: int | str, window_s: float,
                      now: float | None = None, members: list[str] | None = None) -> Trip | None:
    """Would escalating `domain` now pass the threshold?  Counted in nodes first: the nodes we drained
    within the window and the domain's `members`, against the threshold of the fleet's nodes (a rack is
    as many nodes as it has); then in domains: the racks drained whole within the window, this one
    included, against the threshold of the `domains` there are."""
    now = time.time() if now is None else now
    recent = _recent(fleet, now, window_s)
    if members is not None:
        out = recent | set(members)
        limit = limit_of(threshold, len(fleet))
        if len(out) > limit:
            return Trip("fleet", len(out), limit, len(fleet))
    racks = {rack_of_reason(n.reason) for n in fleet if owner(n) == HEALTH and n.reason_time is not None
             and now - n.reason_time <= window_s} - {None, domain}
    limit = limit_of(threshold, max(domains, 1))
    if len(racks) + 1 > limit:
        return Trip("fleet", len(racks) + 1, limit, domains, unit="failure domains")
    return None


def state(path: str) -> dict[str, Any] | None:
    """The open breaker's record, or None when it is closed (no file, or an unreadable one is open)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {"why": "unreadable breaker file"}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"why": f"unreadable breaker file {path}: treated as open"}


def open_(path: str, node: str, why: str) -> None:
    record = {"opened_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "node": node, "why": why}
    from ..common.safefile import write_file

    # the first to trip keeps its record
    write_file(path, json.dumps(record), mode=0o600, make_dirs=True, exclusive=True)


@contextlib.contextmanager
def counting_lock(path: str, timeout_s: float = 10.0):
    """Nodes that drain at the same moment count one after another: each one's drain is in Slurm
    before the next one reads the fleet.  An flock next to the breaker file, so it serialises the whole
    fleet when that file is on shared storage, and the node's own hooks otherwise."""
    import fcntl

    try:
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        # the state directory read-only or full: counted without the lock rather than a fault never drained
        log.warning("breaker: no counting lock (%s: %s): counted without it", f"{path}.lock", exc.strerror or exc)
        yield False
        return
    deadline = time.monotonic() + timeout_s
    locked = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break  # counted without the lock rather than never drained
                time.sleep(0.05)
        yield locked
    finally:
        if locked:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def reset(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
