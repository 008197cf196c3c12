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
