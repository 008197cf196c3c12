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
