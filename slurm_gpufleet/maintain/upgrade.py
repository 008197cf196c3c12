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


def run(script: str, timeout_s: float, lock_file: str | None = None) -> CommandResult:
    """The command in its own process group, killed whole at the timeout.

    `lock_file`: the node's lock, taken before the command starts and held by its process group's leader
    until the command ends, whatever happens to this process: a command left running by an `apply`
    killed with -9 is waited for by the next run, never started a second time beside itself.  The lock
    is taken before the fork, so no moment exists where a command runs unrecorded; the script itself
    runs without the lock's descriptor, so a daemon it starts (slurmd after an upgrade) never holds it."""
    deadline = time.monotonic() + timeout_s
    lock = _take_lock(lock_file, deadline) if lock_file else None
    if lock == -1:
        return CommandResult(False, -1, f"an earlier upgrade command ({lock_file}) still runs after {timeout_s:g} s")
    # the leader keeps the lock's descriptor and waits for the script, which runs without it; `; exit`
    # keeps bash from replacing itself with the script (which would drop the lock at once)
    argv = (["/bin/bash", "-c", f'/bin/bash -c "$0" {lock}>&-; exit $?', script] if lock is not None
            else ["/bin/bash", "-c", script])
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                pass_fds=(lock,) if lock is not None else ())
    finally:
        if lock is not None:
            os.close(lock)  # the leader's copy holds the lock from here on
    try:
        out, _ = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, _ = proc.communicate()
        return CommandResult(False, -1, f"timed out after {timeout_s:g} s\n{(out or '')[-2000:]}")
    return CommandResult(proc.returncode == 0, proc.returncode, (out or "")[-4000:])


def _take_lock(path: str, deadline: float) -> int:
    """The lock's descriptor, once no earlier command holds it; -1 at the deadline."""
    import fcntl

    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                return -1
            time.sleep(0.5)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
