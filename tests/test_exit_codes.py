"""The exit-code table is the contract (`exitcodes.BY_COMMAND`, docs/reference/exit-codes.md): every command
is in it, ends with 0 on --help and 2 on an option it does not have, and its own code names only codes
its row lists."""

from __future__ import annotations

import inspect
import re

import click
import pytest
from click.testing import CliRunner

from slurm_gpufleet.cli import cli
from slurm_gpufleet.cli.docgen import _commands
from slurm_gpufleet.common import exitcodes


def _command(name: str) -> click.Command:
    cmd = cli
    for part in name.split():
        cmd = cmd.commands[part]
    return cmd


def test_every_row_names_a_command_and_only_shared_codes():
    names = set(_commands())
    assert set(exitcodes.BY_COMMAND) <= names, set(exitcodes.BY_COMMAND) - names
    shared = {exitcodes.OK, exitcodes.UNHEALTHY, exitcodes.USAGE, exitcodes.NO_STATE}
    assert all(set(codes) <= shared for codes in exitcodes.BY_COMMAND.values())


@pytest.mark.parametrize("name", _commands())
def test_each_command_ends_with_a_code_of_its_row(name):
    runner = CliRunner()
    assert runner.invoke(cli, [*name.split(), "--help"]).exit_code == 0
    bad = runner.invoke(cli, [*name.split(), "--no-such-option"])
    assert bad.exit_code == exitcodes.USAGE and exitcodes.USAGE in exitcodes.of(name)
    # the codes its own body exits with, by name: each one in its row
    src = inspect.getsource(_command(name).callback)
    used = {getattr(exitcodes, c) for c in re.findall(r"exitcodes\.([A-Z_]+)", src) if c.isupper()}
    used |= {int(c) for c in re.findall(r"sys\.exit\((\d)\)", src)}
    assert used <= set(exitcodes.of(name)), (name, used - set(exitcodes.of(name)))


NUMBERS = ["nan", "inf", "-inf", "-1", "0", "1" + "0" * 400, "1e400", "x", "", "5"]


@pytest.mark.parametrize("name", _commands())
def test_every_number_option_of_every_command_is_a_code_of_its_row(name, tmp_path):
    """Each number option given NaN, infinities, -1, 0, 401 digits, a word and nothing: a code of the command's
    row, never a traceback.  A value the option takes runs the command only where it writes nothing and
    simulates nothing (the others are given only what their options refuse)."""
    cmd = _command(name)
    # the commands that act, and the simulators (a value they take runs a whole simulation: their own tests
    # cover those): given only what their options refuse
    acting = name in ("install", "maintain apply", "maintain resume", "maintain abort", "maintain rollback",
                      "maintain approve", "breaker reset", "fleet repaired", "fleet sweep", "fleet lemons",
                      "maintain simulate", "fleet simulate-faults")
    config = tmp_path / "gpufleet.toml"   # Slurm's programs not there: nothing reaches a cluster
    config.write_text(f'[slurm]\nscontrol = "{tmp_path}/bin/scontrol"\nstate_dir = "{tmp_path}/state"\n')
    runner, seen = CliRunner(), []
    for opt in [p for p in cmd.params if isinstance(p, click.Option) and not p.is_flag]:
        if not isinstance(opt.type, click.types.IntParamType | click.types.FloatParamType):
            continue
        for value in NUMBERS:
            try:
                opt.type.convert(value, opt, None)
                taken = True
            except click.BadParameter:
                taken = False
            if taken and acting:
                continue
            r = runner.invoke(cli, [*name.split(), opt.opts[0], value], env={"SLURM_GPUFLEET_CONFIG": str(config)})
            seen.append(r.exit_code)
            assert r.exit_code in exitcodes.of(name) and (r.exception is None or isinstance(r.exception, SystemExit)), \
                (name, opt.opts[0], value, r.exit_code, repr(r.exception), r.output[-300:])
            if not taken:
                assert r.exit_code == exitcodes.USAGE, (name, opt.opts[0], value, r.output)


# what a path option may be given: nothing there, a directory, an empty file, bytes that are no document,
# a device; what a text option may be given: nothing, a long word, another script, a shell's expansion
PATHS = ["missing/file", "", "empty", "junk", "/dev/null"]
TEXTS = ["", "x" * 5000, "\u2603\u00fc\uff11", "$(reboot)", "-1", "a,b,,c[1-99999999]"]
# the commands that act, and the simulators: given only what their options refuse
ACTING = ("install", "maintain apply", "maintain resume", "maintain abort", "maintain rollback", "maintain approve",
          "breaker reset", "fleet repaired", "fleet sweep", "fleet lemons", "maintain simulate",
          "fleet simulate-faults")


def _word_options(cmd: click.Command) -> list[click.Option]:
    return [p for p in cmd.params if isinstance(p, click.Option) and not p.is_flag
            and not isinstance(p.type, click.types.IntParamType | click.types.FloatParamType | click.Choice)]


def _values(opt: click.Option, tmp_path) -> list[str]:
    if isinstance(opt.type, click.Path) or opt.name in ("config", "out", "o", "html", "plot", "textfile", "db",
                                                        "fleet", "policy", "sacct", "rates", "fault_log",
                                                        "results", "history_dir"):
        (tmp_path / "empty").write_bytes(b"")
        (tmp_path / "junk").write_bytes(b"\x00\xff{[<?xml \n" * 40)
        return [str(tmp_path / v) if v and not v.startswith("/") else (str(tmp_path) if v == "" else v)
                for v in PATHS]
    return TEXTS


@pytest.mark.parametrize("name", _commands())
def test_junk_in_every_path_and_long_text_in_every_text_option_is_a_code_of_its_row(name, tmp_path):
    """The fast tier's share: junk bytes in each path, 5,000 characters in each text."""
    _words_harness(name, tmp_path, {"junk", "x" * 5000})


@pytest.mark.slow
@pytest.mark.parametrize("name", _commands())
def test_every_path_and_text_option_of_every_command_is_a_code_of_its_row(name, tmp_path):
    """Each path option given a missing file, a directory, an empty file, junk bytes and a device; each text
    option nothing, 5,000 characters, other scripts' digits, a shell's expansion, a number, a host list of
    100 million: a code of the command's row, never a traceback.  The commands that act and the simulators
    are given only what click itself refuses."""
    _words_harness(name, tmp_path, None)


def _words_harness(name: str, tmp_path, only: set[str] | None) -> None:
    cmd = _command(name)
    config = tmp_path / "gpufleet.toml"   # Slurm's programs not there: nothing reaches a cluster
    config.write_text(f'[slurm]\nscontrol = "{tmp_path}/bin/scontrol"\nstate_dir = "{tmp_path}/state"\n')
    runner, seen = CliRunner(), 0
    for opt in _word_options(cmd):
        for value in _values(opt, tmp_path):
            if only is not None and not any(value == o or value.endswith("/" + o) for o in only):
                continue
            try:
                opt.type.convert(value, opt, None)
                taken = True
            except click.BadParameter:
                taken = False
            if taken and name in ACTING:
                continue
            r = runner.invoke(cli, [*name.split(), opt.opts[0], value], env={"SLURM_GPUFLEET_CONFIG": str(config)})
            seen += 1
            assert r.exit_code in exitcodes.of(name) and (r.exception is None or isinstance(r.exception, SystemExit)), \
                (name, opt.opts[0], value[:80], r.exit_code, repr(r.exception), r.output[-300:])
            if not taken:
                assert r.exit_code == exitcodes.USAGE, (name, opt.opts[0], value, r.output)
    assert seen or only is not None or name in ACTING or not _word_options(cmd), name
