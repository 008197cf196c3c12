"""The exit-code table is the contract (`exitcodes.BY_COMMAND`, docs/reference/exit-codes.md): every command
is in it, ends with 0 on --help and 2 on an option it does not have, and its own code names only codes
its row lists."""

from __future__ import annotations

import inspect
import re

import click
import pytest
from click.testing import CliRunner

from slurm_gpufleet import exitcodes
from slurm_gpufleet.cli import cli
from slurm_gpufleet.docgen import _commands


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
