"""The commands that wire slurm-gpufleet into Slurm: `slurm-conf` (the slurm.conf lines, checked against
the release), `install` (the three programs slurmd runs) and `breaker` (the fleet-wide drain breaker's
status and reset)."""

from __future__ import annotations

import json
import os
import sys

import click

from ..common import exitcodes
from .common import (
    _fail,
    _load_policy,
    _state_dir_of,
    cli,
    config_opt,
    config_option,
    json_option,
)


@cli.command("slurm-conf")
@click.option("--bin-dir", default="/usr/local/sbin", show_default=True, metavar="DIR",
              help="Where slurm-gpufleet-healthcheck, -prolog and -epilog are installed.")
@click.option("--interval", type=click.IntRange(1), default=300, show_default=True,
              help="HealthCheckInterval in seconds.")
@click.option("--node-state", default="ANY", show_default=True,
              help="HealthCheckNodeState (START_ONLY from Slurm 25.11, REBOOT_ONLY from 26.05 stop the periodic runs).")
@click.option("--reboot-program", metavar="PATH", help="RebootProgram (printed as a hint when not given).")
@click.option("--slurm-version", metavar="X.Y", help="The Slurm release that reads the lines (default: this "
                                                     "machine's `scontrol --version`).")
@config_opt(help="The config the programs read, for its read_timeout_s "
                                               "(default: $SLURM_GPUFLEET_CONFIG, then /etc/slurm-gpufleet).")
def slurm_conf(bin_dir: str, interval: int, node_state: str, reboot_program: str | None,
               slurm_version: str | None, config: str | None) -> None:
    """Print the slurm.conf lines that wire slurm-gpufleet into Slurm."""
    from ..hooks.install import detect_slurm_version, slurm_conf_lines

    if not bin_dir.startswith("/"):
        _fail("--bin-dir must be absolute: slurmd runs these programs with no PATH", exitcodes.USAGE)
    version = slurm_version or detect_slurm_version()
    _node_state_of(node_state, version)
    read = _read_timeout_of(config)
    click.echo(slurm_conf_lines(bin_dir, interval, node_state, reboot_program, version, read), nl=False)
    _health_check_notes(interval, read, version, node_state)
    _warn_unmatched_groups(config)


def _warn_unmatched_groups(config: str | None) -> None:
    """A [[group]] whose host list matches no node of slurm.conf ($SLURM_CONF, else /etc/slurm/slurm.conf):
    a typo that applies its settings nowhere (an observe-only group's nodes then act in full mode)."""
    from ..policy import PolicyError, config_path, load_policy

    path, _ = config_path(config)
    if path is None or not os.path.exists(path):
        return
    try:
        unmatched = load_policy(path).unmatched_groups_in_slurm_conf()
    except PolicyError:
        return  # said above (_read_timeout_of)
    for name, nodes in unmatched or []:
        click.echo(f"warning: group {name} (nodes = \"{nodes}\") matches no node of slurm.conf: its settings "
                   "apply nowhere (a typo in its host list?)", err=True)


def _read_timeout_of(config: str | None) -> float:
    """The read_timeout_s the health check will run with: its config's, if one is there, else the default."""
    from ..policy import PolicyError, SlurmSettings, config_path, load_policy

    path, _ = config_path(config)
    if path is None or not os.path.exists(path):
        return SlurmSettings().read_timeout_s
    try:
        return load_policy(path).slurm.read_timeout_s
    except PolicyError as exc:
        click.echo(f"note: {exc}; the slurm.conf lines assume the default read_timeout_s", err=True)
        return SlurmSettings().read_timeout_s


def _node_state_of(node_state: str, version: str | None) -> None:
    """A HealthCheckNodeState Slurm would refuse is a usage error, before anything is printed or written."""
    from ..hooks.install import node_state_problem

    problem = node_state_problem(node_state, version)
    if problem:
        _fail(problem, exitcodes.USAGE)


def _health_check_notes(interval: int, read_timeout_s: float, version: str | None, node_state: str = "ANY") -> None:
    from ..hooks.install import accounting_notes, health_check_limit, node_state_notes

    for note in (health_check_limit(interval, read_timeout_s, version)[1] + node_state_notes(node_state)
                 + accounting_notes()):
        click.echo(f"note: {note}", err=True)


@cli.group()
def breaker() -> None:
    """The fleet-wide drain circuit breaker: `status`, and `reset` once the cause is understood."""


@breaker.command("status")
@config_option
@json_option
def breaker_status(config: str | None, as_json: bool) -> None:
    """Exit 0 when closed, 1 when open (no node is drained by the health check until reset)."""
    from ..slurm import breaker as brk

    settings = _load_policy(config, trusted=True).slurm
    record = brk.state(settings.breaker_path)
    out = {"open": record is not None, "file": settings.breaker_path,
           "threshold": settings.breaker_threshold, "window_s": settings.breaker_window_s, **(record or {})}
    if as_json:
        click.echo(json.dumps(out))
    else:
        from .output import breaker_text

        click.echo(breaker_text(record, settings.breaker_threshold, settings.breaker_window_s))
    sys.exit(exitcodes.UNHEALTHY if record else exitcodes.OK)


@breaker.command("reset")
@config_option
def breaker_reset(config: str | None) -> None:
    """Close the breaker: the health check may drain again."""
    from ..slurm import breaker as brk

    path = _load_policy(config, trusted=True).slurm.breaker_path
    try:
        was_open = brk.reset(path)
    except OSError as exc:
        _fail(f"{path}: {exc.strerror or exc}", exitcodes.USAGE)
    from .output import breaker_reset_text

    click.echo(breaker_reset_text(path, was_open))


@cli.command("install")
@click.option("--prefix", required=True, metavar="DIR", help="Where to install, e.g. /opt/gpufleet (absolute).")
@click.option("--dry-run", is_flag=True, help="Say what would be written; write nothing.")
@click.option("--python", "python", metavar="PATH", help="Interpreter the wrappers run (default: this one).")
@config_opt(help="Config the programs read (default: PREFIX/etc/gpufleet.toml).")
@click.option("--slurm-conf", metavar="FILE", help="Export SLURM_CONF in the wrappers (a slurm.conf outside /etc).")
@click.option("--interval", type=click.IntRange(1), default=300, show_default=True, help="HealthCheckInterval.")
@click.option("--node-state", default="ANY", show_default=True,
              help="HealthCheckNodeState (ANY,CYCLE spreads the runs over the interval instead of all at once; "
                   "START_ONLY from Slurm 25.11, REBOOT_ONLY from 26.05 stop the periodic runs).")
@click.option("--reboot-program", metavar="PATH", help="RebootProgram for the slurm.conf lines.")
@click.option("--slurm-version", metavar="X.Y", help="The Slurm release that reads the slurm.conf lines "
                                                     "(default: this machine's `scontrol --version`).")
def install(prefix: str, dry_run: bool, python: str | None, config: str | None, slurm_conf: str | None,
            interval: int, node_state: str, reboot_program: str | None, slurm_version: str | None) -> None:
    """Write the three programs slurmd runs (wrappers with an absolute interpreter), a commented config
    skeleton, the upgrade template sample and the slurm.conf lines for these paths.  Idempotent; an
    existing config or template is never overwritten."""
    from ..hooks.install import apply_install, detect_slurm_version, plan_install

    for label, value in (("--prefix", prefix), ("--python", python), ("--config", config),
                         ("--slurm-conf", slurm_conf), ("--reboot-program", reboot_program)):
        if value is not None and not value.startswith("/"):
            _fail(f"{label} must be an absolute path: slurmd runs these programs with no PATH and another cwd",
                  exitcodes.USAGE)
    version = slurm_version or detect_slurm_version()
    _node_state_of(node_state, version)
    read = _read_timeout_of(config or os.path.join(prefix, "etc", "gpufleet.toml"))
    items = plan_install(prefix, python or sys.executable, config, slurm_conf, interval, reboot_program,
                         version, read, node_state)
    from ..hooks.install import make_state_dir
    from ..policy.trust import problem

    # what slurmd will run as root, and the config it reads, must be root's alone (trust.py); so must the
    # interpreter the wrappers name and the package it imports (this one's, when it is this interpreter)
    judged = [str(item.path) for item in items] + [python or sys.executable]
    if not python or os.path.realpath(python) == os.path.realpath(sys.executable):
        judged.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    refused = [r for r in (problem(p) for p in judged) if r]
    if refused and not dry_run:
        _fail(f"refused: {refused[0].line()}", exitcodes.USAGE)
    state_dir = _state_dir_of(config or os.path.join(prefix, "etc", "gpufleet.toml"))
    try:
        report = apply_install(items, dry_run)
        report += make_state_dir(state_dir, dry_run)
    except OSError as exc:
        _fail(f"{getattr(exc, 'filename', None) or prefix}: {exc.strerror or exc}", exitcodes.USAGE)
    trust = None
    if not dry_run:
        left = [r for r in (problem(p) for p in [*judged, state_dir]) if r]
        trust = left[0].line() if left else ""
    conf = items[-1]
    from .output import install_text

    would_refuse = list(dict.fromkeys(f"{r.where}: {r.why}" for r in refused))
    click.echo("\n".join(install_text(report, would_refuse, trust, os.geteuid() == 0, conf.path)))
    click.echo(conf.text, nl=False)
    _health_check_notes(interval, read, version, node_state)


