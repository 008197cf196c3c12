"""The `slurm-gpufleet` command: a thin click layer over the library, one module per command group
(`node`: the commands about one node; `fleet`; `maintain`), with what they share in `common`."""

from __future__ import annotations

import os
import sys

import click

from . import fleet, fleet_simulate, maintain, node, slurm_setup  # noqa: F401  (each registers its commands on the top group)
from .common import INTERNAL_ERROR, cli

__all__ = ["cli", "main"]


def main() -> None:
    try:
        cli.main(standalone_mode=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # one line, never a traceback, unless asked for
        if os.environ.get("SLURM_GPUFLEET_DEBUG"):
            raise
        click.echo(f"slurm-gpufleet: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(INTERNAL_ERROR)
