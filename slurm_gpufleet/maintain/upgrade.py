"""The site's upgrade command: a jinja2 template rendered per node, every substituted value shell-quoted."""

from __future__ import annotations

import functools
import shlex
import subprocess
from dataclasses import dataclass


class UpgradeError(RuntimeError):
    pass


def render(template_path: str, **values: object) -> str:
    import jinja2

    try:
        with open(template_path, encoding="utf-8") as fh:
            source = fh.read()
    except OSError as exc:
        raise UpgradeError(f"{template_path}: cannot read the upgrade template: {exc.strerror or exc}") from None
    try:
        return _compile(source).render(**values)
    except jinja2.TemplateError as exc:
        raise UpgradeError(f"{template_path}: {exc}") from None


@functools.lru_cache(maxsize=8)
def _compile(source: str):
    """Compiled once per template text (a 12,500-node rollout renders it 12,500 times)."""
    import jinja2

    # finalize quotes every {{ value }}: a node name or version can never become shell syntax
    env = jinja2.Environment(finalize=lambda v: shlex.quote("" if v is None else str(v)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(source)


@dataclass
class Result:
    ok: bool
    rc: int
    output: str


def run(script: str, timeout_s: float) -> Result:
    try:
        proc = subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or "") if isinstance(exc.stdout, str) else ""
        return Result(False, -1, f"timed out after {timeout_s:g} s\n{out[-2000:]}")
    return Result(proc.returncode == 0, proc.returncode, (proc.stdout + proc.stderr)[-4000:])
