"""The site's upgrade command: a jinja2 template rendered per node, every substituted value shell-quoted."""

from __future__ import annotations

import functools
import os
import shlex
import signal
import subprocess
import time
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
class CommandResult:
    ok: bool
    rc: int
    output: str


def run(script: str, timeout_s: float, pid_file: str | None = None) -> CommandResult:
    """The command in its own process group, killed whole at the timeout.  `pid_file` names that group
    while it runs: a command left running by an `apply` killed with -9 is waited for by the next run,
    never started a second time beside itself."""
    deadline = time.monotonic() + timeout_s
    if pid_file:
        while _group_alive(pid_file):
            if time.monotonic() > deadline:
                return CommandResult(False, -1, f"an earlier upgrade command ({pid_file}) still runs after {timeout_s:g} s")
            time.sleep(0.5)
    proc = subprocess.Popen(["/bin/bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, stdin=subprocess.DEVNULL, start_new_session=True)
    if pid_file:
        _write_pid(pid_file, proc.pid)
    try:
        out, _ = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, _ = proc.communicate()
        return CommandResult(False, -1, f"timed out after {timeout_s:g} s\n{(out or '')[-2000:]}")
    finally:
        if pid_file and proc.returncode is not None:
            _remove(pid_file)
    return CommandResult(proc.returncode == 0, proc.returncode, (out or "")[-4000:])


def _group_alive(pid_file: str) -> bool:
    try:
        with open(pid_file, encoding="ascii") as fh:
            pgid = int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    try:
        os.killpg(pgid, 0)  # a daemon the command started (setsid) has left the group: it does not count
    except ProcessLookupError:
        _remove(pid_file)
        return False
    except PermissionError:
        return True
    return True


def _write_pid(path: str, pid: int) -> None:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(path, "w", encoding="ascii") as fh:
        fh.write(f"{pid}\n")


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
