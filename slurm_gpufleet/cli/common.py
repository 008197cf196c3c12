"""What every command shares: the one-line failure, the config, the shared options, the top group, and
the readers of a fleet, its Slurm backend and its state."""

from __future__ import annotations

import os
import sys

import click

from ..common import exitcodes
from ..readers.report import ReportError

INTERNAL_ERROR = 70  # EX_SOFTWARE: a bug in slurm-gpufleet, never a verdict


def _fail(message: str, code: int) -> None:
    click.echo(f"slurm-gpufleet: error: {message}", err=True)
    sys.exit(code)


def _load_policy(config: str | None, trusted: bool = False, read_only: bool = False):
    """trusted: the command runs programs or writes state as root (maintain, breaker): a config, template,
    program or state path others could write is refused in one line, exit 2 (slurm_gpufleet/policy/trust.py), the
    config judged before it is parsed.  read_only: the command runs nothing and writes nothing as root
    (`plan --fleet`, `fleet --fleet`, `simulate`): an untrusted config is read, with one warning line."""
    from ..policy import PolicyError, config_path, load_policy
    from ..policy.trust import problem, refusals

    path, required = config_path(config)
    if path is not None and not required and not os.path.exists(path):
        path = None
    if trusted and not read_only and path is not None:
        first = problem(path)  # before a byte of it is parsed
        if first:
            _fail(f"refused: {first.line()}", exitcodes.USAGE)
    try:
        policy = load_policy(path)
    except PolicyError as exc:
        _fail(str(exc), exitcodes.USAGE)
    if trusted or read_only:
        refused = refusals(policy, own_judged=trusted and not read_only and path is not None)
        if refused and read_only:
            click.echo(f"slurm-gpufleet: warning: {refused[0].line()} (read only here: nothing runs as root)",
                       err=True)
        elif refused:
            _fail(f"refused: {refused[0].line()}", exitcodes.USAGE)
    return policy


class Finite(click.FloatRange):
    """A number option: a finite number within its range.  NaN passes every comparison and an infinity
    no bound (`--days nan` hung a simulation), so both are refused in one line, exit 2, as any value out
    of range is."""

    name = "number"

    def convert(self, value, param, ctx):
        import math

        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


# options every command that has them spells the same way, with the same help
JSON_HELP = "Print one JSON object (machine output; the text is for people)."
CONFIG_HELP = "Config file (default $SLURM_GPUFLEET_CONFIG, then /etc/slurm-gpufleet/gpufleet.toml, else safe defaults)."
FLEET_HELP = "A saved fleet (JSON, `fleet save`) instead of asking Slurm."


def json_opt(help: str = JSON_HELP):
    """--json: one JSON object (the help may say what the object holds)."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def config_opt(help: str = CONFIG_HELP, name: str = "config"):
    """--config FILE (the help may say which part of the config the command reads)."""
    return click.option("--config", name, metavar="FILE", help=help)


def fleet_opt(help: str = FLEET_HELP):
    """--fleet FILE: a saved fleet instead of Slurm."""
    return click.option("--fleet", "fleet_file", metavar="FILE", help=help)


json_option = json_opt()
config_option = config_opt()



def _group_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """`fleet cases --config F` as `fleet --config F cases`: the group's commands read the group's config."""
    if value is not None:
        ctx.ensure_object(dict)["config"] = value


# on a group's commands: the same --config, given after the command name
group_config_option = click.option("--config", metavar="FILE", help=CONFIG_HELP, expose_value=False,
                                   callback=_group_config)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="slurm-gpufleet")
def cli() -> None:
    """GPU health checks for Slurm nodes, and the data behind them."""


def _gather_or_exit(report: str | None, kmsg: str | None, level: str, timeout: float, live_kmsg: bool = True,
                    host_root: str | None = None, ib_sysfs: str | None = None, ibstat: str | None = None):
    """Read GPU state under the watchdog; one line and exit 3 (nothing readable) or 2 (no such file)."""
    from ..common import watchdog
    from ..judging.pipeline import Source, gather

    if live_kmsg and kmsg is None and not report and os.access("/dev/kmsg", os.R_OK):
        kmsg = "/dev/kmsg"  # a live check of this node: its own kernel log too
    timer = watchdog.start(timeout, "reading GPU state", exitcodes.NO_STATE)
    try:
        return gather(Source(report=report, kernel_log=kmsg, level=level, host_root=host_root, ib_sysfs=ib_sysfs,
                             ibstat=ibstat))
    except ReportError as exc:
        named = report is None or report in str(exc) or bool(kmsg and kmsg in str(exc))
        _fail(str(exc) if named else f"{report}: {exc}", exitcodes.NO_STATE)
    except OSError as exc:
        _fail(f"{exc.filename or ''}: {exc.strerror or exc}", exitcodes.USAGE)
    finally:
        if timer:
            watchdog.cancel()   # the timer and its backstop process


def _read_or_exit(path: str):
    from ..readers.report import read_report_file

    try:
        return read_report_file(path)
    except ReportError as exc:
        _fail(f"{path}: {exc}", exitcodes.NO_STATE)
    except OSError as exc:
        _fail(f"{path}: {exc.strerror or exc}", exitcodes.USAGE)


def _state_dir_of(config: str) -> str:
    """The state directory the installed programs will use: the config's, or the packaged default."""
    from ..policy import PolicyError, default_policy, load_policy

    try:
        return (load_policy(config) if os.path.exists(config) else default_policy()).slurm.state_dir
    except PolicyError:
        return default_policy().slurm.state_dir


def _cache_dir(policy) -> str | None:
    """The state directory when this user may write it (an admin's CLI run as root; not an ordinary user)."""
    d = policy.slurm.state_dir
    return d if os.access(d if os.path.isdir(d) else os.path.dirname(d) or ".", os.W_OK) else None


def _backend(policy):
    """Slurm through the config's programs: never one a config others could write names."""
    from ..policy.trust import refusals
    from ..slurm import SlurmError, get_backend

    refused = refusals(policy)
    if refused:
        _fail(f"refused: {refused[0].line()}", exitcodes.USAGE)
    try:
        return get_backend(policy.slurm.backend, policy.slurm.scontrol, cache_dir=_cache_dir(policy))
    except SlurmError as exc:
        _fail(str(exc), exitcodes.USAGE)


def _actuator(backend, actor: str, policy, **kwargs):
    """The command's write power: its actor's actuator, held to each node's own group mode (and, for an
    unplanned actor, the breaker of `[slurm]`)."""
    from ..slurm.actuator import make_actuator

    return make_actuator(backend, actor, policy.slurm, modes=policy.mode_of, **kwargs)


def read_history(sacct_file: str | None):
    """(its label, the trace): the site's sacct file, else the bundled Helios history."""
    from ..common.datafiles import HELIOS_LABEL, HELIOS_SACCT, open_text
    from ..maintain.sacct import SacctError, read_sacct

    history_label = sacct_file or HELIOS_LABEL
    sacct_file = sacct_file or str(HELIOS_SACCT)
    try:
        with open_text(sacct_file) as fh:
            trace = read_sacct(fh)
    except OSError as exc:
        _fail(f"{sacct_file}: {exc.strerror or exc}", exitcodes.USAGE)
    except SacctError as exc:
        _fail(f"{sacct_file}: {exc}", exitcodes.USAGE)
    return history_label, trace


def _fleet(policy, fleet_file: str | None):
    from ..maintain.fleet import FleetState
    from ..slurm import SlurmError

    if fleet_file:
        try:
            return FleetState.from_file(fleet_file)
        except (OSError, ValueError, TypeError) as exc:
            _fail(f"{fleet_file}: not a fleet file: {exc}", exitcodes.USAGE)
    try:
        return FleetState.from_backend(_backend(policy))
    except SlurmError as exc:
        _fail(f"cannot read the fleet from Slurm: {exc}", exitcodes.USAGE)


def _domains(policy, backend, nodes=None):
    """The failure domains (slurm/domains.discover): the config's [[domain]] rows, else Slurm's blocks
    (topology/block), else the NVLink domains the nodes publish (`nodes`, the caller's one read)."""
    from ..slurm import SlurmError
    from ..slurm.domains import discover, from_config

    if policy.domains or backend is None:
        return discover(policy.domains, None, nodes)
    try:
        return discover((), backend.topology(), nodes)
    except SlurmError as exc:
        _fail(f"cannot read Slurm's topology: {exc}", exitcodes.USAGE)
    return from_config(())


def _write_atomic(path: str, text: str) -> None:
    """An output file the command was asked for (`--out`, `-o`, `--html`, `--plot`), written whole
    (safefile.write_file); one that cannot be written is a bad option: one line, exit 2."""
    from ..common.safefile import write_file

    try:
        write_file(path, text)
    except OSError as exc:
        _fail(f"cannot write {path}: {exc.strerror or exc}", exitcodes.USAGE)
