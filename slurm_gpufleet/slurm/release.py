"""Which Slurm release runs here, learned once: `scontrol --version` forks a process, and the health check
runs every few minutes on every node.  The answer is kept in the node's state directory, keyed by the
scontrol binary (its path, size and modification time): a Slurm upgrade installs a new binary, and the
next run asks again.  Without a writable cache it simply asks every run."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from .base import SlurmError

CACHE_NAME = "slurm-release.json"


def parse_release(text: str) -> tuple[int, int]:
    """`slurm 22.05.8` -> (22, 5); `slurm-wlm 24.11.1`, `slurm 26.05.0-0rc1` too."""
    try:
        version = text.split()[-1]
        major, minor = (int(x) for x in version.split("-")[0].split(".")[:2])
    except (IndexError, ValueError):
        raise SlurmError(f"cannot read a Slurm release from {text.strip()[:60]!r}") from None
    return major, minor


def _key(scontrol: str) -> str | None:
    try:
        st = os.stat(scontrol)
    except OSError:
        return None
    return f"{os.path.realpath(scontrol)}:{st.st_size}:{st.st_mtime_ns}"


def slurm_release(scontrol: str, cache_dir: str | None, ask: Callable[[], str]) -> tuple[int, int]:
    key = _key(scontrol)
    path = os.path.join(cache_dir, CACHE_NAME) if cache_dir else None
    if path and key:
        try:
            with open(path, encoding="utf-8") as fh:
                cached = json.load(fh)
            if cached.get("key") == key:
                return int(cached["release"][0]), int(cached["release"][1])
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            pass
    release = parse_release(ask())
    if path and key:
        try:
            from ..common.safefile import write_file

            os.makedirs(cache_dir, mode=0o700, exist_ok=True)
            write_file(path, json.dumps({"key": key, "release": list(release)}), mode=0o600)
        except OSError:
            pass  # asked again next run
    return release
