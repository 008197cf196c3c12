"""The one way the tool writes a file (slurm_gpufleet/common/safefile.py), and the writers that go through it: a
planted symbolic link of another user's is never written through, a device or a FIFO is written as a
stream and never replaced by a file, a regular file is replaced whole."""

from __future__ import annotations

import os
import stat
import threading

import pytest
from support import run_cli

from slurm_gpufleet.common.safefile import UnsafeTarget, write_file

ROOT = os.geteuid() == 0


def _planted(tmp_path, name="out.json"):
    """A file of root's (the victim) and, in a world-writable sticky folder, another user's link to it."""
    victim = tmp_path / "victim"
    victim.write_text("root's own\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    link = shared / name
    link.symlink_to(victim)
    os.lchown(link, 65534, 65534)   # nobody's link
    return victim, link


@pytest.mark.skipif(not ROOT, reason="planting another user's link needs root")
def test_another_user_s_link_is_never_written_through(tmp_path):
    victim, link = _planted(tmp_path)
    with pytest.raises(UnsafeTarget):
        write_file(str(link), "x")
    assert victim.read_text() == "root's own\n" and link.is_symlink()
    # a link of this user's own is followed: the file it names is replaced whole
    own = tmp_path / "own-link"
    own.symlink_to(victim)
    write_file(str(own), "new\n")
    assert victim.read_text() == "new\n" and own.is_symlink()


def test_a_device_or_a_fifo_is_written_as_a_stream_never_replaced(tmp_path):
    write_file("/dev/null", "gone\n")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()))
    reader.start()
    write_file(str(fifo), "through the pipe\n")
    reader.join(5)
    assert got == ["through the pipe\n"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_regular_file_is_replaced_whole_and_an_exclusive_write_keeps_the_first(tmp_path):
    path = tmp_path / "state" / "breaker.json"
    assert write_file(str(path), "first", mode=0o600, make_dirs=True, exclusive=True)
    assert not write_file(str(path), "second", exclusive=True)
    assert path.read_text() == "first" and stat.S_IMODE(path.stat().st_mode) == 0o600
    write_file(str(path), "third")
    assert path.read_text() == "third"
    assert sorted(p.name for p in path.parent.iterdir()) == ["breaker.json"], "no temporary left"


@pytest.mark.skipif(not ROOT, reason="planting another user's link needs root")
def test_the_cli_refuses_an_output_through_a_planted_link_in_one_line(tmp_path):
    from support import H200

    victim, link = _planted(tmp_path)
    r = run_cli("snapshot", "--nvidia-smi-q", str(H200 / "nvidia-smi-q.xml"), "-o", str(link))
    assert victim.read_text() == "root's own\n"
    assert r.returncode == 2 and r.stderr.count(b"\n") == 1 and b"symbolic link of another user's" in r.stderr, \
        (r.returncode, r.stderr)


def test_the_cli_says_in_one_line_where_an_output_cannot_go(tmp_path):
    from support import H200

    report = str(H200 / "nvidia-smi-q.xml")
    r = run_cli("snapshot", "--nvidia-smi-q", report, "-o", str(tmp_path / "missing" / "out.json"))
    assert r.returncode == 2 and r.stderr.count(b"\n") == 1 and b"cannot write" in r.stderr, r.stderr
    r = run_cli("snapshot", "--nvidia-smi-q", report, "-o", "/dev/null")
    assert r.returncode == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode), r.stderr
