"""The site's upgrade command as `apply` runs it: one process group, killed whole at the timeout, and
never started twice beside itself when an `apply` killed with -9 left one running."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time

import pytest
from support import REPO

from slurm_gpufleet.maintain.upgrade import run


@pytest.mark.slow   # waits out a killed apply's command (about 2 s)
def test_a_command_left_by_a_killed_apply_is_waited_for_not_run_beside(tmp_path):
    lock = tmp_path / "run" / "n1.lock"
    started, ended = tmp_path / "first-started", tmp_path / "first-ended"
    # what a killed apply leaves: its command still running, the process that ran it gone (kill -9)
    killed = subprocess.Popen([sys.executable, "-c", "import sys; from slurm_gpufleet.maintain.upgrade import run; "
                               "run(sys.argv[1], 30, sys.argv[2])",
                               f"touch {started}; sleep 2; touch {ended}", str(lock)], cwd=REPO)
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    killed.kill()
    killed.wait()
    result = run(f"test -e {ended} && echo after-the-first", 30, str(lock))
    assert result.ok and result.output.strip() == "after-the-first", result


def test_the_lock_is_held_from_before_the_command_starts(tmp_path):
    """No moment where a command runs unrecorded: the lock is taken before the fork."""
    lock = tmp_path / "n1.lock"
    holder = threading.Thread(target=run, args=("sleep 1.5", 30, str(lock)))
    holder.start()
    time.sleep(0.2)
    fd = os.open(lock, os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    holder.join()
    assert run("true", 1, str(lock)).ok  # released with the command


@pytest.mark.slow  # 3-5 s, among the fast tier's slowest: run in the slow tier
def test_a_command_still_holding_the_lock_at_the_timeout_is_a_failure_not_an_overlap(tmp_path):
    lock = tmp_path / "n1.lock"
    holder = threading.Thread(target=run, args=("sleep 3", 30, str(lock)))
    holder.start()
    time.sleep(0.2)
    result = run("echo second", 1, str(lock))
    holder.join()
    assert not result.ok and "still runs after 1 s" in result.output and "second" not in result.output


def test_a_daemon_the_command_started_does_not_hold_the_lock(tmp_path):
    lock = tmp_path / "n1.lock"
    # like the upgrade that restarts slurmd: the daemon leaves the group (setsid) and outlives the command
    first = run("setsid sleep 30 < /dev/null > /dev/null 2>&1 &", 30, str(lock))
    assert first.ok
    started = time.monotonic()
    assert run("true", 30, str(lock)).ok
    assert time.monotonic() - started < 5
    subprocess.run(["pkill", "-f", "^sleep 30$"], check=False)


def test_timeout_kills_the_whole_group(tmp_path):
    lock = tmp_path / "n1.lock"
    result = run(f"sleep 60 & echo $! > {tmp_path}/child; wait", 1, str(lock))
    assert not result.ok and result.output.startswith("timed out after 1 s")
    child = int((tmp_path / "child").read_text())
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{child}") or "Z" in open(f"/proc/{child}/stat").read().split()[2]
    assert run("true", 1, str(lock)).ok


def test_the_scripts_exit_code_and_output_are_its_own_under_the_lock(tmp_path):
    result = run("echo out; exit 7", 30, str(tmp_path / "n1.lock"))
    assert (result.ok, result.rc, result.output) == (False, 7, "out\n")
