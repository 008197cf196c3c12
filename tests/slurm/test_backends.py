"""One contract, every backend, against the real slurmctld."""

from __future__ import annotations

import os

import pytest

from slurm_gpufleet.slurm import SlurmError
from slurm_gpufleet.slurm.commands import CommandBackend
from slurm_gpufleet.slurm.pyslurm_backend import PyslurmBackend, pyslurm_usable


@pytest.fixture(params=["commands", "pyslurm"])
def backend(request, mc):
    # the real scontrol (or libslurm) of the mini-cluster: it finds the cluster through SLURM_CONF
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = mc.env["SLURM_CONF"]
    try:
        scontrol = mc.run("which", "scontrol").stdout.strip()
        if request.param == "pyslurm":
            usable, why = pyslurm_usable(scontrol)
            if not usable:
                pytest.skip(f"pyslurm backend not usable here: {why}")
            yield PyslurmBackend(scontrol)
        else:
            yield CommandBackend(scontrol)
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved


def test_backend_contract(backend, mc):
    info = backend.node("n1")
    assert (info.name, info.state, info.drained, info.gres) == ("n1", "IDLE", False, "gpu:h200:8")
    assert info.boot_time

    backend.drain("n1", "gpufleet: memory gpu2 row remapping failed")
    info = backend.node("n1")
    assert info.drained and info.reason == "gpufleet: memory gpu2 row remapping failed" and info.reason_user == "root"

    backend.set_reason("n1", "gpufleet: memory gpu2 row remapping failed after 2 reboots")
    assert backend.node("n1").reason.endswith("after 2 reboots")

    backend.set_field("n1", "extra", '{"gpufleet":1,"v":"drain"}')
    backend.set_field("n1", "comment", "rack 12")
    info = backend.node("n1")
    assert (info.extra, info.comment) == ('{"gpufleet":1,"v":"drain"}', "rack 12")

    backend.resume("n1")
    mc.wait(lambda: mc.state("n1") == "IDLE", 10, "n1 idle")
    assert not backend.node("n1").drained

    backend.reboot_asap("n2", "gpufleet: memory gpu0 row remap pending")
    mc.wait(lambda: mc.state("n2") == "IDLE" and os.path.exists(mc.dir / "log" / "reboots.log"), 30, "n2 rebooted")

    with pytest.raises(SlurmError):
        backend.node("nosuchnode")


@pytest.fixture
def release_env(mc):
    """The mini-cluster's SLURM_CONF and PATH (its release's commands) for backends made in the test."""
    saved = {k: os.environ.get(k) for k in ("SLURM_CONF", "PATH")}
    os.environ.update(SLURM_CONF=mc.env["SLURM_CONF"], PATH=mc.env["PATH"])
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def test_what_differs_by_release_is_handled(mc, release_env):
    """Each Slurm release's differences, named (run on 22.05, 24.11 and 26.05: SLURM_RELEASE)."""
    version = mc.run("scontrol", "--version").stdout.split()[-1]
    release = tuple(int(x) for x in version.split(".")[:2])
    backend = CommandBackend(mc.run("which", "scontrol").stdout.strip())
    # `scontrol --json` from 23.02: one node is read from JSON there and from the text on 22.05, the same
    assert backend.has_json() == (release >= (23, 2))
    mc.run("scontrol", "update", "nodename=n3", "state=drain", "reason=gpufleet: release check")
    try:
        from slurm_gpufleet.slurm.commands import parse_node_text

        one = backend.node("n3")
        text = parse_node_text(mc.run("scontrol", "show", "node", "n3").stdout)
        for field in ("name", "state", "drained", "reason", "reason_user", "gres", "partitions", "weight", "extra"):
            assert getattr(one, field) == getattr(text, field), (field, getattr(one, field), getattr(text, field))
        assert one.slurmd_start and abs(one.slurmd_start - text.slurmd_start) < 2
    finally:
        mc.run("scontrol", "update", "nodename=n3", "state=resume")
    # HealthCheckTimeout from 26.05 (default 60 s, must stay under the interval): our lines set it there
    # only, where a 5 s interval needs it; 22.05 would refuse the unknown key
    lines = (mc.dir / "etc" / "slurm.conf.gpufleet").read_text()
    assert ("HealthCheckTimeout=" in lines) == (release >= (26, 5)), lines
    assert "must be less than HealthCheckInterval" not in (mc.dir / "log" / "slurmctld.log").read_text()
    # reboot: every release refuses nextstate=DRAIN ("Valid states: DOWN, RESUME"): we ask only RESUME
    r = mc.run("scontrol", "reboot", "ASAP", "nextstate=DRAIN", "reason=probe", "n4", check=False)
    if r.returncode == 0:
        mc.run("scontrol", "reboot", "cancel", "n4", check=False)
    assert r.returncode != 0 and "Valid states: DOWN, RESUME" in r.stderr, r.stderr
