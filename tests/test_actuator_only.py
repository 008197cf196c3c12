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
                  "cancel_jobs", "submit_job", "submit_array", "set_admin_comment", "set_accounted_admin_comment",
                  "set_excluded_nodes", "release_jobs", "hold_jobs"}
# the backends themselves, the in-memory Slurm of the simulator, and the actuator
ALLOWED = {"slurm/actuator.py", "slurm/commands.py", "slurm/pyslurm_backend.py", "slurm/base.py",
           "simulators/simslurm.py"}


def test_no_module_but_the_actuator_calls_a_backend_write():
    """By name, in the source: outside the backends, the in-memory Slurm and the actuator, no module calls
    a backend's write on anything but an actuator (what the actuator's own typed methods share a name
    with), and none takes the writer behind a read-only backend."""
    package = REPO / "slurm_gpufleet"
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel in ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in BACKEND_WRITES:
                target = ast.unparse(node.func.value)
                if "actuator" not in target.lower() and not target.startswith("make_actuator("):
                    found.append(f"{rel}:{node.lineno} {target}.{node.func.attr}(")
            if isinstance(node, ast.Name) and node.id == "writer_of" or \
                    isinstance(node, ast.Attribute) and node.attr in ("_ReadOnly__backend", "_writer",
                                                                      "_Actuator__writer", "__writer") or \
                    isinstance(node, (ast.Name, ast.Attribute, ast.alias)) and "_MINT" in (
                        getattr(node, "id", None), getattr(node, "attr", None), getattr(node, "name", None)):
                found.append(f"{rel}:{node.lineno} takes a writer")
    assert found == []


def test_an_actuator_holds_its_writer_out_of_reach_and_takes_only_a_declared_actor():
    """The writer behind an actuator has no name outside slurm/actuator.py (name-mangled, and the scan
    above refuses any access to it), and an actor ownership does not declare gets no actuator at all."""
    from slurm_gpufleet.slurm.actuator import make_actuator
    from slurm_gpufleet.slurm.ownership import ACTORS, MAINTAIN

    class Recorder:
        def nodes(self):
            return []

    actuator = make_actuator(Recorder(), MAINTAIN)
    assert not hasattr(actuator, "_writer") and not hasattr(actuator, "writer")
    for actor in ("simulate", "admin", ""):
        with pytest.raises(ValueError, match="no actor ownership declares"):
            make_actuator(Recorder(), actor)
    assert set(ACTORS) == {"health", "maintain", "straggler"}


# the one place each program obtains its write power (make_actuator), by module: the hooks (health check,
# prolog, epilog), the in-job sampler, `fleet lemons`, `fleet sweep`, the other commands, the rollout
# engine and the fault simulator.  Everything else is handed an actuator.
ACTUATOR_MADE_IN = {"hooks/common.py", "slowgpus/sampler.py", "slowgpus/lemon_step.py", "remedy/sweep.py",
                    "cli/common.py", "maintain/reconcile.py", "simulators/faultrun.py"}


def test_an_actuator_is_made_in_one_place_per_program_and_only_through_the_factory():
    """By the AST: no module but slurm/actuator.py calls Actuator(...); make_actuator is called once in
    each program's module and nowhere else."""
    package = REPO / "slurm_gpufleet"
    direct, made = [], {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func).rsplit(".", 1)[-1]
                if name == "Actuator" and rel != "slurm/actuator.py":
                    direct.append(f"{rel}:{node.lineno}")
                if name == "make_actuator":
                    made.setdefault(rel, []).append(node.lineno)
    assert direct == []
    assert set(made) == ACTUATOR_MADE_IN
    assert {rel: lines for rel, lines in made.items() if len(lines) > 1} == {}


def test_an_actuator_made_around_the_factory_is_refused_at_run_time():
    from slurm_gpufleet.slurm.actuator import Actuator, make_actuator
    from slurm_gpufleet.slurm.ownership import MAINTAIN

    class Recorder:
        def nodes(self):
            return []

    with pytest.raises(PermissionError, match="make_actuator alone"):
        Actuator(Recorder(), MAINTAIN)
    with pytest.raises(PermissionError, match="make_actuator alone"):
        Actuator(Recorder(), MAINTAIN, mint=object())
    made = make_actuator(Recorder(), MAINTAIN)
    narrower = made.seeing(fleet=[], modes="observe")
    assert (narrower.actor, narrower.fleet, narrower.mode("n1")) == (MAINTAIN, [], "observe")
    assert (made.fleet, made.mode("n1")) == (None, "full")


def test_a_backend_is_handed_out_read_only_and_only_the_actuator_takes_its_writer(tmp_path):
    """At run time: what `get_backend` gives every entry point reads, and refuses every write; asking for
    the writer from anywhere but slurm/actuator.py is refused; the actuator made with it writes."""
    from slurm_gpufleet.slurm import ReadOnly, get_backend
    from slurm_gpufleet.slurm.actuator import make_actuator
    from slurm_gpufleet.slurm.base import WRITES, writer_of
    from slurm_gpufleet.slurm.ownership import MAINTAIN

    backend = get_backend("commands", "/bin/false", cache_dir=str(tmp_path))
    assert isinstance(backend, ReadOnly) and BACKEND_WRITES <= WRITES
    for name in sorted(WRITES):
        with pytest.raises(AttributeError, match="only the actuator writes"):
            getattr(backend, name)
    assert callable(backend.nodes) and callable(backend.reservations)
    with pytest.raises(PermissionError, match="only slurm_gpufleet.slurm.actuator writes"):
        writer_of(backend)
    with pytest.raises(AttributeError):
        backend.drain_nodes = print
    recorder = Recorder()
    make_actuator(ReadOnly(recorder), MAINTAIN).delete_reservation("gpufleet_abc_s1")
    assert recorder.calls == [("delete_reservation", "gpufleet_abc_s1")]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, *args))


def test_reservations_are_changed_only_under_the_actors_own_prefix():
    from slurm_gpufleet.slurm import effects as E
    from slurm_gpufleet.slurm.actuator import make_actuator
    from slurm_gpufleet.slurm.ownership import MAINTAIN

    backend = Recorder()
    rollout = make_actuator(backend, MAINTAIN)
    rollout.apply(E.Release("gpufleet_abc_s1"))
    with pytest.raises(SlurmError, match="may not delete reservation gpufleet-lemon-n1"):
        rollout.apply(E.Release("gpufleet-lemon-n1"))
    with pytest.raises(SlurmError, match="may not update reservation site_maint"):
        rollout.apply(E.Reshape("site_maint", ("n1",)))
    with pytest.raises(SlurmError, match="may not postpone reservation site_maint"):
        rollout.postpone_reservation("site_maint", 0.0)
    assert backend.calls == [("delete_reservation", "gpufleet_abc_s1")]


def test_an_unplanned_actor_without_settings_is_refused_and_its_reboots_meet_the_breaker(tmp_path):
    from slurm_gpufleet.policy import default_policy
    from slurm_gpufleet.slurm import breaker
    from slurm_gpufleet.slurm.actuator import make_actuator
    from slurm_gpufleet.slurm.ownership import HEALTH

    with pytest.raises(TypeError, match="breaker"):
        make_actuator(Recorder(), HEALTH)
    settings = default_policy().slurm
    settings = dataclasses.replace(settings, state_dir=str(tmp_path))
    breaker.open_(settings.breaker_path, "n9", "3 of 20 nodes (limit 2)")
    backend = Recorder()
    node = NodeInfo(name="n1", state="IDLE")
    done = make_actuator(backend, HEALTH, settings, fleet=[node]).reboot_asap([node], "memory gpu1 remap pending [gpufleet]")
    assert done.blocked == ["n1"] and done.done == [] and "3 of 20" in (done.breaker or "")
    assert backend.calls == []
    breaker.reset(settings.breaker_path)
    done = make_actuator(backend, HEALTH, settings, fleet=[node]).reboot_asap([node], "memory gpu1 remap pending [gpufleet]")
    assert done.done == ["n1"] and backend.calls[0][0] == "reboot_asap_nodes"


def test_typed_effects_clean_their_reasons_and_apply_keeps_ownership_and_prefixes(tmp_path):
    from slurm_gpufleet.policy import SlurmSettings
    from slurm_gpufleet.slurm import effects as E
    from slurm_gpufleet.slurm.actuator import make_actuator
    from slurm_gpufleet.slurm.ownership import HEALTH

    drain = E.Drain((NodeInfo("n1", "IDLE"),), 'xid gpu1 "quoted"\nsecond line' + "x" * 200 + " [gpufleet]")
    assert "\n" not in drain.reason and '"' not in drain.reason and len(drain.reason) <= 120
    backend = Recorder()
    backend.nodes = lambda: [NodeInfo("n1", "IDLE"), NodeInfo("n2", "IDLE", {"DRAIN"}, "admin: PSU")]
    health = make_actuator(backend, HEALTH, SlurmSettings(breaker_threshold=10, state_dir=str(tmp_path)))
    done = health.apply(E.Drain((NodeInfo("n1", "IDLE"), NodeInfo("n2", "IDLE", {"DRAIN"}, "admin: PSU")), "x [gpufleet]"),
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


def test_at_run_time_every_write_to_the_in_memory_slurm_comes_from_the_actuator(monkeypatch):
    """The source scan above sees calls by name; this sees them run.  The fault simulator (the remedy
    carrier: resets, reboots, suspects, validation, repairs, rack escalations) and a rollout replay (the
    engine's batched writes) on the in-memory Slurm: every write it receives is made by slurm/actuator.py."""
    import sys

    from slurm_gpufleet.simulators.faultmodel import Fault, load_model
    from slurm_gpufleet.simulators.faultsim import _fault_run
    from slurm_gpufleet.simulators.rollout import SimJob
    from slurm_gpufleet.simulators.simslurm import SimSlurm

    seen: dict[str, int] = {}
    elsewhere: list[str] = []
    for name in BACKEND_WRITES:
        method = getattr(SimSlurm, name, None)
        if method is None:
            continue

        def guarded(self, *args, _name=name, _method=method, **kw):
            caller = sys._getframe(1).f_code.co_filename
            seen[_name] = seen.get(_name, 0) + 1
            if not caller.endswith("slurm/actuator.py"):
                elsewhere.append(f"{_name} from {caller}:{sys._getframe(1).f_lineno}")
            return _method(self, *args, **kw)
        monkeypatch.setattr(SimSlurm, name, guarded)

    model = load_model()
    by_name = {c.name: c for c in model.classes}
    faults = [Fault(3600.0, 0, by_name["gpu"], "reset", 0.5), Fault(7200.0, 1, by_name["hbm"], "reboot", 0.5),
              Fault(10800.0, 2, by_name["gsp"], "repair", 0.5), Fault(3600.0, 3, by_name["thermal"], "repair", 0.5)]
    jobs = [SimJob("j1", 0.0, run=5 * 3600.0, limit=6 * 3600.0, nodes=1, gpn=8)]
    out = _fault_run("gpufleet", model, jobs, 6, 8, 5 * 86400.0, faults, [], hc_interval_s=300.0, checkpoint_every_h=1.0,
                     restart_min=10.0, seed=0, big_jobs=frozenset())
    assert out["faults"] == 4
    from test_simulate import _excerpt_replay

    _excerpt_replay(None, strategies=("gpufleet",), nodes=12)
    # the ladder's and the rollout's writes were all seen, and each came from the actuator
    for call in ("drain_nodes", "set_reason_nodes", "resume_nodes", "reboot_asap_nodes", "create_reservation",
                 "delete_reservation", "submit_job", "set_weight_nodes"):
        assert seen.get(call), (call, seen)
    assert elsewhere == []


def test_at_run_time_the_entry_points_write_to_slurms_commands_only_from_the_actuator(tmp_path):
    """The programs Slurm runs, started as Slurm starts them, against a recording scontrol, with a profiler
    on PYTHONPATH (tests/fake_slurm/write_audit) that logs each call into the command backend's writes and
    the file it came from: the health check's drain, a confirming deep check's job comment, the prolog's
    drain reason and the epilog's return.  Every write is seen, and each came from slurm/actuator.py."""
    import json
    import os
    import subprocess
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from fake_slurm.node import fault, gpustate, setup

    from slurm_gpufleet.slurm.base import WRITES

    bin_dir, gpus, env = setup(tmp_path)
    audit = tmp_path / "writes.jsonl"
    env = {**env, "PYTHONPATH": f"{REPO / 'tests' / 'fake_slurm' / 'write_audit'}:{env['PYTHONPATH']}",
           "GPUFLEET_WRITE_AUDIT": str(audit), "GPUFLEET_WRITE_NAMES": " ".join(sorted(WRITES))}
    healthcheck = [sys.executable, str(REPO / "healthcheck" / "slurm-gpufleet-healthcheck")]

    def run(argv, **extra):
        r = subprocess.run(argv, env={**env, **extra}, capture_output=True, text=True, timeout=60)
        assert "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
        return r

    run(healthcheck)                                   # the first summary published
    fault(gpus, 5, "row_remap_failure")
    run(healthcheck)                                   # drained, the summary in the same write
    for gpu in range(8):                               # a lemon's deep check confirms a slow node
        gpustate.set_value(str(gpus / "n9.json"), gpu, "clock_sm", 1650)
        gpustate.set_value(str(gpus / "n9.json"), gpu, "clocks_event_reasons", 0x20)
    assert run(healthcheck + ["--level", "deep", "--confirm"], SLURM_JOB_ID="4242").returncode == 1
    node = json.loads((bin_dir / "node.json").read_text())
    assert node.get("drain"), node
    writes = [json.loads(line) for line in audit.read_text().splitlines()]
    made = {name for name, _, _ in writes}
    assert {"set_fields", "drain_nodes", "set_job_comment"} <= made, writes
    assert [w for w in writes if not w[1].endswith(os.path.join("slurm", "actuator.py"))] == []


def test_releasing_a_reservation_that_is_gone_is_done_and_any_other_refusal_is_an_error():
    """A typed answer, never an error's words: ReservationMissing on delete is what was asked for; another
    SlurmError still raises."""
    from slurm_gpufleet.slurm import effects as E
    from slurm_gpufleet.slurm.actuator import make_actuator
    from slurm_gpufleet.slurm.base import ReservationMissing
    from slurm_gpufleet.slurm.ownership import MAINTAIN, ROLLOUT_RESERVATION_PREFIX

    class Gone:
        def __init__(self, error):
            self.error = error

        def nodes(self):
            return []

        def delete_reservation(self, name):
            raise self.error

    name = f"{ROLLOUT_RESERVATION_PREFIX}abc_s1"
    assert make_actuator(Gone(ReservationMissing("gone")), MAINTAIN).apply(E.Release(name)) == [None]
    with pytest.raises(SlurmError, match="slurmctld down"):
        make_actuator(Gone(SlurmError("slurmctld down")), MAINTAIN).apply(E.Release(name))
