"""One place writes to Slurm: slurm/actuator.py.  Every other module of the product asks it, so ownership,
the breaker and reservation prefixes apply to every write (issue 31)."""

from __future__ import annotations

import ast
import dataclasses

import pytest
from support import REPO

from slurm_gpufleet.slurm.base import NodeInfo, SlurmError

# what a backend writes with (slurm/base.py); the actuator's own node-state methods take NodeInfo lists
BACKEND_WRITES = {"set_fields", "set_field", "set_features", "drain_nodes", "resume_nodes", "set_reason_nodes",
                  "reboot_asap_nodes", "set_weight_nodes", "create_reservation", "update_reservation",
                  "postpone_reservation", "delete_reservation", "set_job_comment", "signal_job", "requeue_jobs",
                  "cancel_jobs", "submit_job", "submit_array"}
# the backends themselves, the in-memory Slurm of the simulator, and the actuator
ALLOWED = {"slurm/actuator.py", "slurm/commands.py", "slurm/pyslurm_backend.py", "slurm/base.py",
           "maintain/simslurm.py"}


def test_no_module_but_the_actuator_calls_a_backend_write():
    package = REPO / "slurm_gpufleet"
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel in ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in BACKEND_WRITES:
                found.append(f"{rel}:{node.lineno} .{node.func.attr}(")
    assert found == []


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, *args))


def test_reservations_are_changed_only_under_the_actors_own_prefix():
    from slurm_gpufleet.slurm.actuator import Actuator
    from slurm_gpufleet.slurm.ownership import MAINTAIN

    backend = Recorder()
    rollout = Actuator(backend, MAINTAIN)
    rollout.reservation("delete_reservation", "gpufleet_abc_s1")
    with pytest.raises(SlurmError, match="may not delete reservation gpufleet-lemon-n1"):
        rollout.reservation("delete_reservation", "gpufleet-lemon-n1")
    with pytest.raises(SlurmError, match="may not update reservation site_maint"):
        rollout.reservation("update_reservation", "site_maint", ["n1"])
    with pytest.raises(ValueError):
        rollout.reservation("drain_nodes", "gpufleet_abc_s1")
    assert backend.calls == [("delete_reservation", "gpufleet_abc_s1")]


def test_an_unplanned_actor_without_settings_is_refused_and_its_reboots_meet_the_breaker(tmp_path):
    from slurm_gpufleet.policy import default_policy
    from slurm_gpufleet.slurm import breaker
    from slurm_gpufleet.slurm.actuator import Actuator
    from slurm_gpufleet.slurm.ownership import HEALTH

    with pytest.raises(TypeError, match="breaker"):
        Actuator(Recorder(), HEALTH)
    settings = default_policy().slurm
    settings = dataclasses.replace(settings, state_dir=str(tmp_path))
    breaker.open_(settings.breaker_path, "n9", "3 of 20 nodes (limit 2)")
    backend = Recorder()
    node = NodeInfo(name="n1", state="IDLE")
    done = Actuator(backend, HEALTH, settings, fleet=[node]).reboot_asap([node], "gpufleet: memory gpu1 remap pending")
    assert done.blocked == ["n1"] and done.done == [] and "3 of 20" in (done.breaker or "")
    assert backend.calls == []
    breaker.reset(settings.breaker_path)
    done = Actuator(backend, HEALTH, settings, fleet=[node]).reboot_asap([node], "gpufleet: memory gpu1 remap pending")
    assert done.done == ["n1"] and backend.calls[0][0] == "reboot_asap_nodes"


def test_typed_effects_clean_their_reasons_and_apply_keeps_ownership_and_prefixes(tmp_path):
    from slurm_gpufleet.policy import SlurmSettings
    from slurm_gpufleet.slurm import effects as E
    from slurm_gpufleet.slurm.actuator import Actuator
    from slurm_gpufleet.slurm.ownership import HEALTH

    drain = E.Drain((NodeInfo("n1", "IDLE"),), 'gpufleet: xid gpu1 "quoted"\nsecond line' + "x" * 200)
    assert "\n" not in drain.reason and '"' not in drain.reason and len(drain.reason) <= 120
    backend = Recorder()
    backend.nodes = lambda: [NodeInfo("n1", "IDLE"), NodeInfo("n2", "IDLE", {"DRAIN"}, "admin: PSU")]
    health = Actuator(backend, HEALTH, SlurmSettings(breaker_threshold=10, state_dir=str(tmp_path)))
    done = health.apply(E.Drain((NodeInfo("n1", "IDLE"), NodeInfo("n2", "IDLE", {"DRAIN"}, "admin: PSU")), "gpufleet: x"),
                        E.Reserve("gpufleet-suspect-n1", ("n1",), None, 60), E.Release("gpufleet-validate-n1"),
                        E.Weight(("n1",), 5))
    assert done[0].done == ["n1"] and "n2" in done[0].left   # an admin's node is left alone
    assert [c[0] for c in backend.calls] == ["drain_nodes", "create_reservation", "delete_reservation",
                                             "set_weight_nodes"]
    with pytest.raises(SlurmError, match="may not create reservation gpufleet-lemon-n1"):
        health.apply(E.Reserve("gpufleet-lemon-n1", ("n1",), None, 60))
    with pytest.raises(TypeError, match="not an effect"):
        health.apply("drain n1")


def test_the_remedy_carrier_writes_only_typed_effects_through_apply():
    """remedy/carrier.py asks the actuator nothing but `apply` (and its clock): every write it makes is a
    typed effect."""
    tree = ast.parse((REPO / "slurm_gpufleet" / "remedy" / "carrier.py").read_text())
    used = {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "actuator"}
    assert used == {"apply", "clock"}, used
