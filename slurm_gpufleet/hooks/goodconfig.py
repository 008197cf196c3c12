"""The last config that loaded, kept by the programs Slurm runs: a config that stops loading (a typo, a
half-copied file) narrows nothing away, the programs go on with the last good one and say so; where
there is none, `[slurm]` is read from the broken file as far as it parses."""

from __future__ import annotations

import logging
import os

from ..judging.summary import write_private
from ..policy import Policy, PolicyError, SlurmSettings, default_policy, load_policy

log = logging.getLogger("slurm-gpufleet")

# the last config that loaded, kept by the programs Slurm runs so that a config that stops loading (a typo,
# a half-copied file) narrows nothing away: they go on with it, and say so
LAST_GOOD_CONFIG = "last-good-config.toml"


def keep_good_config(path: str, state_dir: str) -> None:
    """A copy of the config that just loaded, where it differs from the kept one (one small read a run)."""
    kept = os.path.join(state_dir, LAST_GOOD_CONFIG)
    try:
        with open(path, "rb") as fh:
            text = fh.read()
        try:
            with open(kept, "rb") as fh:
                if fh.read() == text:
                    return
        except OSError:
            pass
        write_private(kept, text)
    except OSError as exc:
        log.warning("the config that loaded not kept in %s: %s", state_dir, exc)


def last_good_policy(path: str | None, error: str) -> tuple[Policy, str]:
    """The policy to run on when `path` does not load: the copy of the last one that did (in the state
    directory the broken file names, where it still says, else the default one), or else the packaged
    defaults in observe mode, with the file's [slurm] where that part still loads.  Never wider than before:
    a group that no longer parses keeps the mode it had, and with nothing kept nothing is changed in Slurm."""
    from ..policy.trust import problem

    state_dir, slurm = _slurm_of_broken(path)
    kept = os.path.join(state_dir, LAST_GOOD_CONFIG)
    if os.path.exists(kept) and problem(kept) is None:
        try:
            return load_policy(kept), f"the last config that loaded ({kept})"
        except PolicyError as exc:
            log.error("the kept config %s does not load either: %s", kept, exc)
    policy = default_policy()
    policy.slurm = slurm
    policy.defaults = {"mode": "observe"}
    return policy, "the packaged defaults in observe mode (no config has loaded here yet)"


def _slurm_of_broken(path: str | None) -> tuple[str, SlurmSettings]:
    """The state directory and [slurm] settings a config that does not load still gives, where they do."""
    import tomllib

    from ..policy import SLURM_VALIDATORS, _KeyLines, _site_section

    default = SlurmSettings()
    if not path:
        return default.state_dir, default
    try:
        with open(path, "rb") as fh:
            text = fh.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return default.state_dir, default
    try:
        data = tomllib.loads(text)
    except (ValueError, RecursionError):  # not TOML at all: its state_dir line, where one is plain
        import re

        said = re.search(r'(?m)^[ \t]*state_dir[ \t]*=[ \t]*"(/[^"\n]*)"[ \t]*$', text)
        return (said.group(1) if said else default.state_dir), default
    table = data.get("slurm") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        return default.state_dir, default
    try:
        slurm = SlurmSettings(**_site_section({"slurm": table}, "slurm", SLURM_VALIDATORS, path, _KeyLines(text)))
        return slurm.state_dir, slurm
    except (PolicyError, TypeError, ValueError):
        pass
    state_dir = table.get("state_dir")
    good = isinstance(state_dir, str) and os.path.isabs(state_dir)
    return (state_dir if good else default.state_dir), default


