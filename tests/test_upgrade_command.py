"""The site's upgrade command as `apply` runs it: one process group, killed whole at the timeout, and
never started twice beside itself when an `apply` killed with -9 left one running."""

from __future__ import annotations

import os
import subprocess
import threading
import time

from slurm_gpufleet.maintain.upgrade import run


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_command_left_by_a_killed_apply_is_waited_for_not_run_beside(tmp_path):
    pid_file = tmp_path / "n1.pgid"
    marker = tmp_path / "first-ended"
    # what a killed apply leaves: its command still running, in its own group, named in the pid file
    orphan = subprocess.Popen(["/bin/bash", "-c", f"sleep 2; touch {marker}"], start_new_session=True)
    pid_file.write_text(f"{orphan.pid}\n")
    threading.Thread(target=orphan.wait, daemon=True).start()  # reaped as init reaps a real orphan
    started = time.monotonic()
    result = run(f"test -e {marker} && echo after-the-first", 30, str(pid_file))
    assert result.ok and result.output.strip() == "after-the-first", result
    assert time.monotonic() - started >= 1.5
    assert not pid_file.exists()  # removed once the command ended


def test_a_daemon_the_command_started_does_not_count_as_the_command(tmp_path):
    pid_file = tmp_path / "n1.pgid"
    # like the upgrade that restarts slurmd: the daemon leaves the group (setsid) and outlives the command
    first = run("setsid sleep 30 < /dev/null > /dev/null 2>&1 &", 30, str(pid_file))
    assert first.ok
    started = time.monotonic()
    assert run("true", 30, str(pid_file)).ok
    assert time.monotonic() - started < 5
    subprocess.run(["pkill", "-f", "^sleep 30$"], check=False)


def test_timeout_kills_the_whole_group(tmp_path):
    pid_file = tmp_path / "n1.pgid"
    result = run(f"sleep 60 & echo $! > {tmp_path}/child; wait", 1, str(pid_file))
    assert not result.ok and result.output.startswith("timed out after 1 s")
    child = int((tmp_path / "child").read_text())
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{child}") or "Z" in open(f"/proc/{child}/stat").read().split()[2]


def test_a_stale_pid_file_does_not_block(tmp_path):
    pid_file = tmp_path / "n1.pgid"
    dead = subprocess.Popen(["true"], start_new_session=True)
    dead.wait()
    pid_file.write_text(f"{dead.pid}\n")
    started = time.monotonic()
    assert run("true", 30, str(pid_file)).ok
    assert time.monotonic() - started < 2 and not _alive(dead.pid)
