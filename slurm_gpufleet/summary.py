"""The GPU summary a node's health check publishes to Slurm (its Extra, or its Comment): one JSON object
marked `"gpufleet": 1`, with `t`, the UTC time of the check.  Written by `hooks.summary`; read by a
rollout's validation, `fleet`, the straggler view and the health check itself (it writes only news).

Light on purpose (json and time only): the health check imports it on every run.
"""

from __future__ import annotations

import calendar
import json
import time
from typing import Any

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_MINUTES_FORMAT = "%Y-%m-%dT%H:%MZ"  # what older versions published


def stamp(at: float | None = None) -> str:
    return time.strftime(TIME_FORMAT, time.gmtime(at))


def parse(text: str | None) -> dict[str, Any] | None:
    """Our summary, or None: empty, not JSON, or someone else's text."""
    if not text or not text.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) and "gpufleet" in data else None


def from_node(info: Any) -> dict[str, Any] | None:
    """The summary a node carries: its Extra first, then its Comment."""
    for text in (info.extra, info.comment):
        data = parse(text)
        if data is not None:
            return data
    return None


def published_at(data: dict[str, Any]) -> float | None:
    """The summary's `t` as epoch seconds, or None where it cannot be read."""
    text = str(data.get("t") or "")
    for fmt in (TIME_FORMAT, _MINUTES_FORMAT):
        try:
            return float(calendar.timegm(time.strptime(text, fmt)))
        except ValueError:
            continue
    return None
