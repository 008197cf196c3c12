"""What a node publishes to Slurm beside its state: the driver and CUDA features a job can --constraint
on, and the summary in its Extra (or Comment), written only when it says something new or its heartbeat
is due."""

from __future__ import annotations

import json
import os
import time

from ..judging.summary import parse as parse_summary
from ..judging.summary import published_at
from ..policy import SlurmSettings


def driver_features(prefix: str, driver: str | None, cuda: str | None) -> list[str]:
    """gpufleet_drv580, gpufleet_drv580.159.04, gpufleet_cuda13.0: what a job can --constraint on."""
    out = []
    if driver:
        out += [f"{prefix}drv{driver.split('.')[0]}", f"{prefix}drv{driver}"]
    if cuda:
        out.append(f"{prefix}cuda{cuda}")
    return out


def _feature_fields(info, prefix: str, driver: str | None, cuda: str | None) -> dict[str, str]:
    """Our features, when they changed; every feature without our prefix stays as the site set it."""
    want = driver_features(prefix, driver, cuda)
    if not want:
        return {}  # nothing readable: keep what the node had rather than pretend it has no driver
    if sorted(f for f in info.features if f.startswith(prefix)) == sorted(want) and \
            sorted(f for f in info.active_features if f.startswith(prefix)) == sorted(want):
        return {}
    available = [f for f in info.features if not f.startswith(prefix)] + want
    active = [f for f in info.active_features if not f.startswith(prefix)] + want
    return {"availablefeatures": ",".join(available), "activefeatures": ",".join(active)}


def _older_than_slurmd(old: dict, info) -> bool:
    """Published before this slurmd started: the first check after a restart or a reboot always
    publishes, even unchanged (an upgrade repeated after a crash installs the same driver again, and a
    rollout validates only from a summary newer than its command)."""
    if info.slurmd_start is None:
        return False
    published = published_at(old)
    return published is None or published < info.slurmd_start


_OTHERS = object()  # the field holds someone else's text


def _shown(info, field: str) -> dict | object | None:
    """The field's summary as Slurm shows it: ours parsed, None when empty, _OTHERS for foreign text."""
    current = info.extra if field == "extra" else info.comment
    if not current:
        return None
    old = parse_summary(current)
    return _OTHERS if old is None else old


_UNREAD = object()


def heartbeat(settings: SlurmSettings) -> float:
    """This node's heartbeat (summary.heartbeat_s) at the fleet size slurm.conf gives (kept, not parsed)."""
    from ..judging.summary import heartbeat_s
    from .quiet import fleet_size

    return heartbeat_s(settings, fleet_size(settings.state_dir,
                                            os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"))


def _news(info, field: str, data: dict, shown=_UNREAD, heartbeat_s: float | None = None) -> str | None:
    """The summary to write, or None: someone else's text is never overwritten, and an unchanged
    summary is written only once per slurmd start, or again once it is `heartbeat_s` old (its `t`
    renewed, so that `fleet` tells a node that stopped checking from one with nothing new).  `shown`:
    what _shown read already, if it did."""
    if shown is _UNREAD:
        shown = _shown(info, field)
    if shown is _OTHERS:
        return None
    if shown is not None:
        same = {k: v for k, v in shown.items() if k != "t"} == {k: v for k, v in data.items() if k != "t"}
        at = published_at(shown)
        aged = heartbeat_s is not None and (at is None or time.time() - at >= heartbeat_s)
        if same and not _older_than_slurmd(shown, info) and not aged:
            return None
    return json.dumps(data, separators=(",", ":"))


