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


def config_skeleton(sample: str) -> str:
    """The sample config with every setting commented out: an empty policy is the safe default."""
    out = ["# slurm-gpufleet config skeleton, written by `slurm-gpufleet install`.  Every setting below is",
           "# commented out, so this file gives the safe defaults; uncomment and edit what your site needs.",
           "# `slurm-gpufleet check --config THIS_FILE` reports any mistake as FILE:LINE.", ""]
    for line in sample.splitlines():
        out.append(line if not line.strip() or line.lstrip().startswith("#") else f"#{line}")
    return "\n".join(out) + "\n"


# HealthCheckTimeout arrived in Slurm 26.05 (24.11 has none; 22.05 refuses unknown keys in slurm.conf)
HEALTH_CHECK_TIMEOUT_SINCE = (26, 5)


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


def slurm_conf_lines(bin_dir: str, interval: int, node_state: str = "ANY", reboot_program: str | None = None,
                     slurm_version: str | None = None) -> str:
    """The slurm.conf lines that wire us in, for the Slurm release that will read them."""
    import jinja2

    from . import __version__

    timeout = None
    try:
        release = tuple(int(x) for x in (slurm_version or "").split(".")[:2])
    except ValueError:
        release = ()
    if len(release) == 2 and release >= HEALTH_CHECK_TIMEOUT_SINCE and interval <= 60:
        timeout = max(1, interval - 1)  # only where the default (60 s) would not stay under the interval
    env = jinja2.Environment(loader=jinja2.PackageLoader("slurm_gpufleet", "templates"),
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    return env.get_template("slurm.conf.j2").render(
        version=__version__, bin_dir=bin_dir.rstrip("/"), interval=interval, node_state=node_state,
        reboot_program=reboot_program, health_check_timeout=timeout, slurm_version=slurm_version)


def plan_install(prefix: str, python: str, config: str | None = None, slurm_conf: str | None = None,
                 interval: int = 300, reboot_program: str | None = None,
                 slurm_version: str | None = None) -> list[Item]:
    from . import __version__

    root = Path(prefix)
    sbin, etc = root / "sbin", root / "etc"
    config_path = Path(config) if config else etc / "gpufleet.toml"
    templates = resources.files("slurm_gpufleet").joinpath("templates")
    items = [Item(sbin / name, _wrapper(name, func, python, config_path, slurm_conf, __version__), 0o755, False)
             for name, func in HOOKS.items()]
    items.append(Item(config_path, config_skeleton(templates.joinpath("gpufleet.toml.sample").read_text()),
                      0o644, True))
    items.append(Item(etc / "upgrade.sh.j2", templates.joinpath("upgrade.sh.j2").read_text(), 0o644, True))
    lines = slurm_conf_lines(str(sbin), interval, "ANY", reboot_program, slurm_version)
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
        item.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = item.path.with_name(f".{item.path.name}.tmp{os.getpid()}")
        tmp.write_text(item.text)
        tmp.chmod(item.mode)
        os.replace(tmp, item.path)
        report.append(("wrote", item.path))
    return report
