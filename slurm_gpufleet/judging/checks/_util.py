"""Small helpers shared by the checks."""

from __future__ import annotations

from collections.abc import Iterator

from ...readers.snapshot import Gpu, NodeSnapshot, known


def readable_gpus(snap: NodeSnapshot) -> Iterator[Gpu]:
    """GPUs that answered: a lost GPU is the inventory check's business, not every other domain's."""
    return (g for g in snap.gpus if not g.lost)


def num(value: object) -> int | float | None:
    v = known(value)
    return v if isinstance(v, int | float) and not isinstance(v, bool) else None


def grew(now: object, before: object) -> int | None:
    """How much a counter grew since the previous snapshot (None when either is unknown or it reset)."""
    a, b = num(now), num(before)
    if a is None or b is None or a < b:
        return None
    return int(a - b)


def previous_gpu(prev: NodeSnapshot | None, gpu: Gpu) -> Gpu | None:
    if prev is None:
        return None
    for g in prev.gpus:
        if known(g.uuid) and g.uuid == gpu.uuid:
            return g
    return prev.gpu_by_pci(known(gpu.pci_bus_id))


def current_boot(snap: NodeSnapshot, events) -> int:
    """The boot a kernel log's events count in: the log's last (a boot with no event is clean), or, for a
    snapshot that does not say how many boots its log spanned, the latest event's."""
    return max(e.boot for e in events) if snap.boots_seen <= 1 else snap.boots_seen - 1
