"""`slurm-gpufleet install`: what a node needs so that slurmd, which runs programs with no PATH and (for
the health check) no SLURM_CONF, can run ours: three wrappers with an absolute interpreter, a config
skeleton, the upgrade template sample and the slurm.conf lines for those paths.

Idempotent: a wrapper or the slurm.conf lines are rewritten only when their text changed; the config and
the template are the site's once written, so they are never overwritten.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

HOOKS = {"slurm-gpufleet-healthcheck": "healthcheck_main", "slurm-gpufleet-prolog": "prolog_main",
         "slurm-gpufleet-epilog": "epilog_main"}


@dataclass(frozen=True)
class Item:
    path: Path
    text: str
    mode: int
    keep_existing: bool  # the site's file once written: never overwrite


def _wrapper(name: str, func: str, python: str, config: Path, slurm_conf: str | None, version: str) -> str:
    env = [f"export SLURM_GPUFLEET_CONFIG={shlex.quote(str(config))}"]
    if slurm_conf:
        env.append(f"export SLURM_CONF={shlex.quote(slurm_conf)}")
    # -P: no script directory or cwd on sys.path (slurmd's cwd is not ours to trust)
    code = f"import sys; from slurm_gpufleet.hooks import {func}; sys.exit({func}())"
    return ("#!/bin/sh\n"
            f"# {name}: written by `slurm-gpufleet install` ({version}).  slurmd runs it with no PATH,\n"
            "# so the interpreter and the config are absolute; rerun the installer to change them.\n"
            + "\n".join(env) + "\n"
            f"exec {shlex.quote(python)} -P -c {shlex.quote(code)} \"$@\"\n")


# where the packaged defaults run the project's own programs (policy: validation_command, sweep_command,
# lemon_check); an install under another prefix points them there
DEFAULT_SBIN = "/usr/local/sbin"


def prefixed_commands(sbin: str) -> dict[str, str]:
    """The [slurm] commands whose defaults run a program of this project from DEFAULT_SBIN, pointed at
    `sbin` instead ({} where it is DEFAULT_SBIN): a config written for another prefix whose validation ran
    /usr/local/sbin failed every remedied node's validation (exit 127)."""
    from dataclasses import fields

    from ..policy import SlurmSettings

    sbin = sbin.rstrip("/")
    if sbin == DEFAULT_SBIN:
        return {}
    defaults = SlurmSettings()
    out = {}
    for f in fields(SlurmSettings):
        value = getattr(defaults, f.name)
        if isinstance(value, str) and value.startswith(DEFAULT_SBIN + "/"):
            program, _, args = value.partition(" ")  # a command line: the program quoted for its shell
            out[f.name] = " ".join(filter(None, (shlex.quote(sbin + program[len(DEFAULT_SBIN):]), args)))
    return out


def config_skeleton(sample: str, commands: dict[str, str] | None = None) -> str:
    """The sample config with every setting commented out: an empty policy is the safe default."""
    out = ["# slurm-gpufleet config skeleton, written by `slurm-gpufleet install`.  Every setting below is",
           "# commented out, so this file gives the safe defaults; uncomment and edit what your site needs.",
           "# `slurm-gpufleet check --config THIS_FILE` reports any mistake as FILE:LINE.", ""]
    for line in sample.splitlines():
        out.append(line if not line.strip() or line.lstrip().startswith("#") else f"#{line}")
    if commands:
        out += ["", "# This install's programs (`slurm-gpufleet install --prefix`): the commands the ladder, the",
                "# idle sweeps and the lemon check run, under its prefix", "[slurm]"]
        out += [f"{key} = {_toml_string(value)}" for key, value in sorted(commands.items())]
    return "\n".join(out) + "\n"


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# HealthCheckTimeout arrived in Slurm 26.05 (24.11 has none; 22.05 refuses unknown keys in slurm.conf).
# slurmd kills a run that passes it (SIGTERM, "health_check poll timeout"): a run killed before its
# watchdog fires (read_timeout_s) never drains a hung node and publishes nothing, so a rollout waiting
# for the node's summary times out.  Seen on 26.05 with 2 busy cores: interval 5, limit 4, runs of 4.8 s.
HEALTH_CHECK_TIMEOUT_SINCE = (26, 5)
SLURM_HEALTH_CHECK_LIMIT_S = 60  # 26.05's default, and the fixed limit before it
# after read_timeout_s the watchdog drains: the node, the fleet (breaker) and the write, 5 s each at
# most, and the interpreter's start before the watchdog runs
WATCHDOG_DRAIN_S = 20


def detect_slurm_version(scontrol: str | None = None) -> str | None:
    """`scontrol --version` of this machine's Slurm ("26.05.5"), or None where there is none."""
    import shutil
    import subprocess

    exe = scontrol or shutil.which("scontrol") or "/usr/bin/scontrol"
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = out.split()
    return words[-1] if words and words[-1][:1].isdecimal() else None


# `--extra` node filtering (SchedulerParameters=extra_constraints) came with Slurm 23.11
EXTRA_CONSTRAINTS_SINCE = (23, 11)


# HealthCheckNodeState's words (slurm.conf(5)), joined by commas; the *_ONLY ones stand alone and came with
# the release beside them (25.11 in its release notes, 26.05 in its man page)
NODE_STATES = ("ALLOC", "ANY", "CYCLE", "IDLE", "MIXED", "NONDRAINED_IDLE")
ONLY_STATES = {"START_ONLY": (25, 11), "REBOOT_ONLY": (26, 5)}


def only_states(slurm_version: str | None) -> list[str]:
    """The *_ONLY node states the release has (none where the release is not known)."""
    release = _release(slurm_version)
    return [name for name, since in ONLY_STATES.items() if len(release) == 2 and release >= since]


def node_state_problem(node_state: str, slurm_version: str | None) -> str | None:
    """Why Slurm would refuse this HealthCheckNodeState, or None."""
    words = node_state.upper().split(",")
    unknown = [w for w in words if w not in NODE_STATES and w not in ONLY_STATES]
    if unknown or not node_state:
        return (f"HealthCheckNodeState {node_state!r}: {', '.join(map(repr, unknown)) or 'empty'} is none of "
                f"{', '.join(NODE_STATES + tuple(ONLY_STATES))}")
    only = [w for w in words if w in ONLY_STATES]
    if only and len(words) > 1:
        return f"HealthCheckNodeState {node_state!r}: {only[0]} stands alone"
    release = _release(slurm_version)
    if only and len(release) == 2 and only[0] not in only_states(slurm_version):
        since = ".".join(f"{x:02d}" if i else str(x) for i, x in enumerate(ONLY_STATES[only[0]]))
        return f"HealthCheckNodeState {only[0]} came with Slurm {since}; this is Slurm {slurm_version}"
    return None


def node_state_notes(node_state: str) -> list[str]:
    """What an admin should know of the node state chosen: a *_ONLY state stops the periodic runs."""
    if node_state.upper() not in ONLY_STATES:
        return []
    return [f"HealthCheckNodeState={node_state.upper()}: slurmd runs the health check only when it starts"
            + (" after a reboot" if node_state.upper() == "REBOOT_ONLY" else "")
            + ", never every HealthCheckInterval: nodes the ladder holds are resumed, re-checked and validated "
              "only by periodic runs, so run slurm-gpufleet-healthcheck from a timer of your own as well"]


def _release(slurm_version: str | None) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in (slurm_version or "").split(".")[:2])
    except ValueError:
        return ()


def accounting_notes(scontrol: str | None = None) -> list[str]:
    """Where the per-job record cannot be written: the epilog runs `sacctmgr` (and `slurm-gpufleet job`
    `sacct`) from the directory `scontrol` is in, on every compute node."""
    import shutil

    exe = scontrol or shutil.which("scontrol")
    if not exe:
        return ["no scontrol on this machine: the job record needs sacct and sacctmgr beside it on every node"]
    where = os.path.dirname(os.path.realpath(exe))
    missing = [name for name in ("sacct", "sacctmgr") if not os.access(os.path.join(where, name), os.X_OK)]
    return [f"{' and '.join(missing)} not in {where} beside scontrol: the job record (AdminComment, in "
            f"slurmdbd's accounting) is not written where they are missing"] if missing else []


def health_check_limit(interval: int, read_timeout_s: float, slurm_version: str | None
                       ) -> tuple[int | None, list[str]]:
    """The HealthCheckTimeout to write (None: Slurm's default serves), and what an admin should know.

    A run needs read_timeout_s + WATCHDOG_DRAIN_S; Slurm wants the limit under the interval.  Where both
    cannot hold, the run's need wins: Slurm then logs an error and may start a run while one is still
    going, which a killed run's silence would be worse than."""
    import math

    need = math.ceil(read_timeout_s) + WATCHDOG_DRAIN_S
    under = interval - 1
    notes = []
    release = _release(slurm_version)
    timeout = None  # before 26.05 there is no key; from it, the default serves where it covers the need
    if len(release) == 2 and release >= HEALTH_CHECK_TIMEOUT_SINCE and not need <= SLURM_HEALTH_CHECK_LIMIT_S <= under:
        timeout = max(need, min(under, SLURM_HEALTH_CHECK_LIMIT_S))  # the most room under the interval, or the need
    limit = timeout or SLURM_HEALTH_CHECK_LIMIT_S
    if need > limit:  # before 26.05: a fixed 60 s
        notes.append(f"Slurm {slurm_version or '(unknown release)'} kills a health check after "
                     f"{SLURM_HEALTH_CHECK_LIMIT_S} s: read_timeout_s {read_timeout_s:g} leaves the watchdog "
                     f"no time to drain a hung node (keep read_timeout_s under {limit - WATCHDOG_DRAIN_S} s)")
    if need >= interval:
        notes.append(f"HealthCheckInterval {interval} s is shorter than a hung run may take "
                     f"(read_timeout_s {read_timeout_s:g} + {WATCHDOG_DRAIN_S} s to drain): runs may overlap"
                     + ("; HealthCheckTimeout is set above the interval, and Slurm logs an error for it"
                        if timeout is not None and timeout >= interval else ""))
    return timeout, notes


def slurm_conf_lines(bin_dir: str, interval: int, node_state: str = "ANY", reboot_program: str | None = None,
                     slurm_version: str | None = None, read_timeout_s: float | None = None) -> str:
    """The slurm.conf lines that wire us in, for the Slurm release that will read them."""
    import jinja2

    from ..common.version import __version__
    from ..policy import SlurmSettings

    read = SlurmSettings().read_timeout_s if read_timeout_s is None else read_timeout_s
    timeout, _ = health_check_limit(interval, read, slurm_version)
    env = jinja2.Environment(loader=jinja2.PackageLoader("slurm_gpufleet", "templates"),
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    return env.get_template("slurm.conf.j2").render(
        version=__version__, bin_dir=bin_dir.rstrip("/"), interval=interval, node_state=node_state.upper(),
        reboot_program=reboot_program, health_check_timeout=timeout, slurm_version=slurm_version,
        read_timeout_s=f"{read:g}", drain_s=WATCHDOG_DRAIN_S, only_states=only_states(slurm_version),
        extra_constraints=len(_release(slurm_version)) != 2 or _release(slurm_version) >= EXTRA_CONSTRAINTS_SINCE)


def plan_install(prefix: str, python: str, config: str | None = None, slurm_conf: str | None = None,
                 interval: int = 300, reboot_program: str | None = None,
                 slurm_version: str | None = None, read_timeout_s: float | None = None,
                 node_state: str = "ANY") -> list[Item]:
    from ..common.version import __version__

    root = Path(prefix)
    sbin, etc = root / "sbin", root / "etc"
    config_path = Path(config) if config else etc / "gpufleet.toml"
    templates = resources.files("slurm_gpufleet").joinpath("templates")
    items = [Item(sbin / name, _wrapper(name, func, python, config_path, slurm_conf, __version__), 0o755, False)
             for name, func in HOOKS.items()]
    items.append(Item(config_path, config_skeleton(templates.joinpath("gpufleet.toml.sample").read_text(),
                                                   prefixed_commands(str(sbin))), 0o644, True))
    items.append(Item(etc / "upgrade.sh.j2", templates.joinpath("upgrade.sh.j2").read_text(), 0o644, True))
    lines = slurm_conf_lines(str(sbin), interval, node_state, reboot_program, slurm_version, read_timeout_s)
    items.append(Item(etc / "slurm.conf.gpufleet", lines, 0o644, False))
    return items


def apply_install(items: list[Item], dry_run: bool) -> list[tuple[str, Path]]:
    """Write what differs; returns (what, path) with what in wrote / would write / unchanged / kept."""
    report = []
    for item in items:
        exists = item.path.exists()
        if exists and item.keep_existing:
            report.append(("kept (exists)", item.path))
            continue
        if exists and item.path.read_text() == item.text and (item.path.stat().st_mode & 0o777) == item.mode:
            report.append(("unchanged", item.path))
            continue
        if dry_run:
            report.append(("would write", item.path))
            continue
        _make_dirs(item.path.parent)
        from ..common.safefile import write_file

        write_file(str(item.path), item.text, mode=item.mode)
        os.chmod(item.path, item.mode)   # as given, whatever the umask
        report.append(("wrote", item.path))
    return report


def make_state_dir(path: str, dry_run: bool) -> list[tuple[str, Path]]:
    """The programs' state directory, root's alone (0700) when this install makes it; one that exists is
    left as it is (trust.py judges it)."""
    state = Path(path)
    if state.exists():
        return [("kept (exists)", state)]
    if dry_run:
        return [("would make", state)]
    _make_dirs(state.parent)
    state.mkdir(mode=0o700)
    state.chmod(0o700)
    return [("made", state)]


def _make_dirs(path: Path) -> None:
    """Directories that pass the trust rule (trust.py) whatever the umask: 0755, the caller's own."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for d in reversed(missing):
        d.mkdir(mode=0o755)
        d.chmod(0o755)
