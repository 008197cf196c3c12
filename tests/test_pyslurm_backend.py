"""The pyslurm backend against a stand-in pyslurm on PYTHONPATH (tests/fake_pyslurm: pyslurm 22.5's Node
API and types): the release compared as numbers, every contract field mapped from pyslurm's types, and
the health check choosing pyslurm when it is usable.  The real binding runs the same contract in
tests/slurm/test_backends.py wherever a build for the running release is installed."""

from __future__ import annotations

import json
import sys

import pytest
from support import REPO

FAKE = str(REPO / "tests" / "fake_pyslurm")
BOOT = 1_764_000_000

NODE = {"name": "n9", "state": "IDLE+DRAIN", "reason": "memory gpu5 row remapping failed [gpufleet]",
        "reason_user": "root", "reason_time": BOOT + 60, "comment": "rack 12", "extra": '{"gpufleet":1}',
        "boot_time": BOOT, "slurmd_start_time": BOOT + 30, "configured_gres": {"gpu:h200": 8},
        "partitions": ["batch", "gpu"], "available_features": ["h200", "gpufleet_drv580"],
        "active_features": ["h200"], "weight": 10}


@pytest.fixture
def fake_pyslurm(tmp_path, monkeypatch):
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"n9": NODE}))
    monkeypatch.setenv("FAKE_PYSLURM_NODES", str(nodes))
    monkeypatch.syspath_prepend(FAKE)
    sys.modules.pop("pyslurm", None)
    scontrol = tmp_path / "scontrol"
    scontrol.write_text("#!/bin/sh\necho 'slurm 22.05.8'\n")
    scontrol.chmod(0o755)
    yield nodes, str(scontrol)
    sys.modules.pop("pyslurm", None)


def test_the_release_is_compared_as_numbers(fake_pyslurm, monkeypatch):
    from slurm_gpufleet.slurm.pyslurm_backend import pyslurm_usable
    from slurm_gpufleet.slurm.release import parse_release as release_of

    assert release_of("22.5.3") == release_of("22.05.8") == (22, 5) and release_of("24.11.0-1") == (24, 11)
    _, scontrol = fake_pyslurm
    assert pyslurm_usable(scontrol) == (True, "pyslurm 22.5.3")
    monkeypatch.setenv("FAKE_PYSLURM_VERSION", "23.2.2")
    usable, why = pyslurm_usable(scontrol)
    assert not usable and why == "pyslurm 23.2.2 is built for Slurm 23.2, not 22.5"
    # 22.5.0 and 22.5.1 match Slurm 22.05 but lack the Node/Nodes/Jobs classes the backend calls
    for early in ("22.5.0", "22.5.1"):
        monkeypatch.setenv("FAKE_PYSLURM_VERSION", early)
        usable, why = pyslurm_usable(scontrol)
        assert not usable and why == f"pyslurm {early} predates 22.5.2, the first of its branch with the Node, " \
                                     "Nodes and Jobs classes"
    monkeypatch.setenv("FAKE_PYSLURM_VERSION", "22.5.2")
    assert pyslurm_usable(scontrol) == (True, "pyslurm 22.5.2")


def test_auto_says_once_per_run_why_it_uses_slurms_commands(fake_pyslurm, monkeypatch, caplog):
    import logging

    from slurm_gpufleet.slurm import get_backend
    from slurm_gpufleet.slurm.commands import CommandBackend

    _, scontrol = fake_pyslurm
    monkeypatch.setattr("slurm_gpufleet.slurm._SAID", set())  # a fresh run
    monkeypatch.setenv("FAKE_PYSLURM_VERSION", "22.5.1")
    with caplog.at_level(logging.INFO, logger="slurm_gpufleet"):
        backends = [get_backend("auto", scontrol) for _ in range(3)]
    assert all(b.name == CommandBackend.name for b in backends)
    said = [r.getMessage() for r in caplog.records if "backend auto" in r.getMessage()]
    assert said == ["backend auto: Slurm's commands, not pyslurm (pyslurm 22.5.1 predates 22.5.2, the first of "
                    "its branch with the Node, Nodes and Jobs classes)"]


def test_every_contract_field_is_mapped_from_pyslurms_types(fake_pyslurm):
    from slurm_gpufleet.slurm.commands import parse_node_text
    from slurm_gpufleet.slurm.pyslurm_backend import PyslurmBackend

    nodes, scontrol = fake_pyslurm
    info = PyslurmBackend(scontrol).node("n9")
    # what the commands backend reads from the same node, as scontrol prints it
    text = parse_node_text(
        "NodeName=n9 Arch=x86_64\n   Gres=gpu:h200:8\n   AvailableFeatures=h200,gpufleet_drv580\n"
        "   ActiveFeatures=h200\n   State=IDLE+DRAIN ThreadsPerCore=1\n   Partitions=batch,gpu\n"
        "   Weight=10\n   Comment=rack 12\n   Extra={\"gpufleet\":1}\n"
        "   Reason=memory gpu5 row remapping failed [gpufleet] [root@2025-11-24T16:01:00]\n")
    for field in ("name", "state", "flags", "drained", "reason", "reason_user", "gres", "partitions", "features",
                  "active_features", "weight", "comment", "extra"):
        assert getattr(info, field) == getattr(text, field), (field, getattr(info, field), getattr(text, field))
    assert info.boot_time.startswith("2025-11-2") and info.slurmd_start == BOOT + 30 and info.reason_time == BOOT + 60
    backend = PyslurmBackend(scontrol)
    backend.resume("n9")
    back = backend.node("n9")
    assert not back.drained and back.reason == "" and back.reason_user is None
    backend.set_field("n9", "extra", '{"gpufleet":1,"v":"ok"}')
    assert backend.node("n9").extra == '{"gpufleet":1,"v":"ok"}'
    with pytest.raises(Exception, match="does not exist"):
        backend.node("nosuchnode")


def test_the_engines_fleet_reads_go_through_libslurm_with_squeues_fields(fake_pyslurm):
    from slurm_gpufleet.slurm.pyslurm_backend import PyslurmBackend

    nodes, scontrol = fake_pyslurm
    nodes.write_text(json.dumps({"n9": NODE, "n11": {**NODE, "name": "n11", "state": "ALLOCATED", "reason": None,
                                                        "allocated_cpus": 16, "effective_cpus": 16},
                                 # libslurm's state string for a node with 4 of its 16 CPUs allocated
                                 "n10": {**NODE, "name": "n10", "state": "ALLOCATED", "reason": None,
                                         "allocated_cpus": 4, "effective_cpus": 16}}))
    (nodes.parent / "nodes.json.jobs").write_text(json.dumps({
        "41": {"state": "RUNNING", "allocated_nodes": "n[9-10]", "end_time": BOOT + 3600, "start_time": BOOT,
               "partition": "gpu", "gres_per_node": {"gpu:h200": 4}, "comment": "ckpt=SIGUSR1@600"},
        "42": {"state": "COMPLETING", "allocated_nodes": "n10", "end_time": BOOT + 60, "start_time": BOOT,
               "partition": "gpu", "gres_per_node": {}, "comment": None},
        "45": {"state": "CONFIGURING", "allocated_nodes": "n11", "end_time": BOOT + 60, "start_time": BOOT,
               "partition": "gpu", "gres_per_node": {"gres/gpu": 2}, "comment": None},  # pyslurm 24.11's key
        "43": {"state": "PENDING", "allocated_nodes": None, "end_time": None, "start_time": None,
               "partition": "gpu", "gres_per_node": {"gpu": 8}, "comment": None},
        "44": {"state": "COMPLETED", "allocated_nodes": "n9", "end_time": BOOT, "start_time": BOOT - 60,
               "partition": "gpu", "gres_per_node": {"gpu": 8}, "comment": None}}))
    backend = PyslurmBackend(scontrol)
    fleet = {n.name: n for n in backend.nodes()}
    assert sorted(fleet) == ["n10", "n11", "n9"] and fleet["n9"].drained
    assert (fleet["n10"].state, fleet["n11"].state) == ("MIXED", "ALLOCATED")  # as scontrol prints them
    assert fleet["n9"] == backend.node("n9")  # the fleet read maps a node as the one-node read does
    jobs = {j.job_id: j for j in backend.running_jobs()}
    assert sorted(jobs) == ["41", "42", "45"] and jobs["45"].gpus_per_node == 2  # what squeue -t RUNNING,COMPLETING,CONFIGURING lists
    assert (jobs["41"].nodes, jobs["41"].end_time, jobs["41"].start_time, jobs["41"].gpus_per_node,
            jobs["41"].partition, jobs["41"].comment) == (["n9", "n10"], BOOT + 3600, BOOT, 4, "gpu",
                                                          "ckpt=SIGUSR1@600")
    assert (jobs["42"].gpus_per_node, jobs["42"].comment) == (0, "")
    calls = [json.loads(line)[0] for line in (nodes.parent / "nodes.json.calls").read_text().splitlines()]
    assert calls.count("Nodes.load") == 1 and calls.count("Jobs.load") == 1  # one RPC a read, whatever the size


def test_the_health_check_reads_its_node_through_pyslurm_when_usable(tmp_path):
    sys.path.insert(0, str(REPO / "tests"))
    from fake_slurm.node import healthcheck, setup

    bin_dir, gpus, env = setup(tmp_path)
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"n9": {**NODE, "name": "n9", "state": "IDLE", "reason": None, "extra": "",
                                        "comment": ""}}))
    env = {**env, "PYTHONPATH": f"{FAKE}:{env['PYTHONPATH']}", "FAKE_PYSLURM_NODES": str(nodes)}
    calls, _, r = healthcheck(bin_dir, env)
    assert r.returncode == 0 and "internal error" not in r.stderr, r.stderr
    pyslurm_calls = [json.loads(line) for line in (tmp_path / "nodes.json.calls").read_text().splitlines()]
    assert ["load", "n9"] in pyslurm_calls, pyslurm_calls
    assert not any(c[:2] == ["show", "node"] for c in calls), "the node was read through pyslurm, not scontrol"
    # forced to the commands backend by config: pyslurm is not touched
    cfg = tmp_path / "gpufleet.toml"
    cfg.write_text(cfg.read_text().replace("[slurm]\n", '[slurm]\nbackend = "commands"\n'))
    (tmp_path / "nodes.json.calls").unlink()
    calls, _, r = healthcheck(bin_dir, env)
    assert r.returncode == 0 and not (tmp_path / "nodes.json.calls").exists()


def test_a_pyslurm_checkout_names_the_slurm_release_it_is_for(tmp_path):
    """make test builds pyslurm from PYSLURM_SRC only for the release its branch is for: PySlurm's version
    is SLURM_MAJOR.PATCH (22.5.3 is for 22.05)."""
    import subprocess

    from support import REPO

    script = str(REPO / "tests" / "slurm" / "pyslurm_build.sh")
    for version, release in (("22.5.3", "22.05"), ("24.11.0", "24.11"), ("23.2.2", "23.02")):
        src = tmp_path / version
        (src / "pyslurm").mkdir(parents=True)
        (src / "pyslurm" / "version.py").write_text(f'# SLURM_MAJOR.PYSLURM_PATCH\n__version__ = "{version}"\n')
        r = subprocess.run([script, "release-of", str(src)], capture_output=True, text=True)
        assert (r.returncode, r.stdout.strip()) == (0, release), r.stderr
    r = subprocess.run([script, "release-of", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1 and "no PySlurm version" in r.stderr
