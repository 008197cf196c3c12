"""Rack escalation and IMEX: the pure decisions (real Slurm: tests/slurm/test_fabric_slurm.py)."""

from __future__ import annotations

import json
import os
import time

import pytest

from slurm_gpufleet.judging.imex import ImexState, job_imex, job_uses_imex, judge, parse_domain, read_imex
from slurm_gpufleet.judging.summary import stamp
from slurm_gpufleet.policy import SlurmSettings
from slurm_gpufleet.remedy.escalation import ready_to_resume, reason_for, trigger
from slurm_gpufleet.slurm.base import NodeInfo
from slurm_gpufleet.slurm.breaker import would_trip, would_trip_domain

NOW = 1_800_000_000.0


def job_findings(env, settings):
    """The IMEX judgement's findings (imex.job_imex's second half)."""
    return job_imex(env, settings)[1]


def node(name, reason="", at=NOW - 60, drained=True, extra=""):
    return NodeInfo(name=name, state="IDLE", flags={"DRAIN"} if drained else set(), reason=reason,
                    reason_time=at if reason else None, extra=extra)


def test_three_trays_with_fabric_or_nvlink_faults_in_the_window_trigger():
    members = [node("t1", "fabric gpu0 fabric route unhealthy [gpufleet]"),
               node("t2", "nvlink gpu3 16 of 18 NVLinks present [gpufleet]"),
               node("t3", "fabric gpu1 fabric access timeout recovery [gpufleet]"),
               node("t4", drained=False)]
    t = trigger("rack1", members, 3, 600, NOW)
    assert t is not None and t.nodes == ["t1", "t2", "t3"]
    assert reason_for(t) == "rack rack1 3 trays with fabric/NVLink faults in 600 s, first t1 [gpufleet]"
    # two are not three; an old drain is out of the window; an admin's or a memory drain is not the rack's
    assert trigger("rack1", members[:2] + members[3:], 3, 600, NOW) is None
    old = [*members[:2], node("t3", "fabric gpu1 fabric access timeout recovery [gpufleet]", at=NOW - 700)]
    assert trigger("rack1", old, 3, 600, NOW) is None
    other = [*members[:2], node("t3", "memory gpu1 row remapping failed [gpufleet]")]
    assert trigger("rack1", other, 3, 600, NOW) is None


def test_the_same_fabric_fault_on_two_trays_is_a_switch_side_signature():
    members = [node("t1", "fabric gpu0 fabric route unhealthy [gpufleet]"),
               node("t2", "fabric gpu2 fabric route unhealthy [gpufleet]"), node("t3", drained=False)]
    t = trigger("rack1", members, 3, 600, NOW)
    assert t is not None and t.why.startswith("switch-side: t1 and 1 more tray(s) fabric route unhealthy")
    # two different faults on two trays are not a signature
    members[1] = node("t2", "fabric gpu2 fabric bandwidth degraded [gpufleet]")
    assert trigger("rack1", members, 3, 600, NOW) is None


def test_the_breaker_counts_an_escalated_rack_by_its_nodes_and_as_one_domain():
    rack = [node(f"t{i}", "rack rack1 3 trays ... [gpufleet]") for i in range(1, 19)]
    free = [node(f"x{i}", drained=False) for i in range(1, 83)]
    fleet = rack + free
    # 18 nodes of one rack are 18 nodes out: one more drain passes a threshold of 18, and of 18% of 100
    assert would_trip(fleet, "x1", 18, 300, now=NOW).text(300) == (
        "19 of 100 nodes in the fleet drained by gpufleet within 300 s (limit 18)")
    assert would_trip(fleet, "x1", "18%", 300, now=NOW) is not None
    assert would_trip(fleet, "x1", 19, 300, now=NOW) is None
    # a second rack of 18: 36 nodes out, past a 30% node fraction, though 2 of 10 domains is within 20%
    rack2 = [f"x{i}" for i in range(1, 19)]
    trip = would_trip_domain(fleet, "rack2", 10, "30%", 300, now=NOW, members=rack2)
    assert trip is not None and trip.text(300) == "36 of 100 nodes in the fleet drained by gpufleet within 300 s (limit 30)"
    assert would_trip_domain(fleet, "rack2", 10, "40%", 300, now=NOW, members=rack2) is None
    # counted in domains as well: with 10 domains and a threshold of 10%, a second rack is one too many
    trip = would_trip_domain(fleet, "rack2", 10, "10%", 300, now=NOW)
    assert trip is not None and "2 of 10 failure domains" in trip.text(300)
    assert would_trip_domain(fleet, "rack2", 10, 2, 300, now=NOW) is None


def test_a_rack_resumes_only_when_every_member_escalated_has_passed():
    reason = "rack rack1 switch-side: t1 and 1 more tray(s) fabric route unhealthy [gpufleet]"
    drained_at = NOW - 600
    ok = json.dumps({"gpufleet": 1, "v": "ok", "t": stamp(NOW - 10)})
    bad = json.dumps({"gpufleet": 1, "v": "drain", "t": stamp(NOW - 10)})
    stale = json.dumps({"gpufleet": 1, "v": "ok", "t": stamp(NOW - 900)})
    members = [node("t1", reason, drained_at, extra=bad), node("t2", reason, drained_at, extra=ok),
               node("t3", "admin: PSU", drained_at, extra=bad)]
    # t1 is the one deciding now (its clean summary goes out in the same write): t1, t2 resume together
    assert [n.name for n in ready_to_resume("rack1", members, drained_at, clean_now="t1")] == ["t1", "t2"]
    # from t2's side, t1 still shows its drain verdict: wait
    assert ready_to_resume("rack1", members, drained_at, clean_now="t2") is None
    members[1] = node("t2", reason, drained_at, extra=stale)  # a clean check from before the escalation
    assert ready_to_resume("rack1", members, drained_at, clean_now="t1") is None


# -- IMEX ----------------------------------------------------------------------------------------
UP = {"status": "UP", "nodes": {"0": {"status": "READY", "host": "10.0.0.1", "connections": {
    "0": {"host": "10.0.0.1", "status": "CONNECTED"}, "1": {"host": "10.0.0.2", "status": "CONNECTED"}}}}}


def settings(**kw):
    return SlurmSettings(**kw)


def test_only_a_job_that_uses_imex_is_judged():
    s = settings(imex_features=("imex",), imex_env=("GPUFLEET_IMEX=1",))
    assert job_uses_imex({"SLURM_JOB_CONSTRAINTS": "gb200&imex"}, s) == "feature imex"
    assert job_uses_imex({"SLURM_JOB_CONSTRAINTS": "gb200"}, s) is None
    assert job_uses_imex({"GPUFLEET_IMEX": "1"}, s) == "environment GPUFLEET_IMEX=1"
    assert job_uses_imex({"GPUFLEET_IMEX": "0"}, s) is None
    assert job_uses_imex({}, settings(imex_jobs="all")).startswith("every job")
    assert job_uses_imex({"SLURM_JOB_CONSTRAINTS": "imex"}, settings(imex_jobs="none", imex_features=("imex",))) is None


@pytest.mark.parametrize("state,message", [
    (ImexState(daemon="READY", domain="UP"), None),
    (ImexState(installed=False), None),
    (ImexState(daemon="WAITING_FOR_PEERS", domain="UP"), "IMEX daemon WAITING_FOR_PEERS"),
    (ImexState(daemon="READY", domain="DOWN"), "IMEX domain DOWN"),
    (ImexState(daemon="READY", domain="DEGRADED"), "IMEX domain DEGRADED"),
    (ImexState(daemon="READY", domain="UP", version_mismatch=["10.0.0.2"]), "IMEX version mismatch"),
    (ImexState(error="nvidia-imex-ctl -q did not answer within 2 s"), "IMEX not readable"),
])
def test_imex_judgement(state, message):
    found = judge(state, "feature imex")
    assert [f.message for f in found] == ([message] if message else [])
    assert all(f.severity == "drain" and f.check == "imex" for f in found)


def test_imex_domain_json_and_text_marks():
    st = ImexState()
    parse_domain(json.dumps(UP), st)
    assert (st.domain, st.version_mismatch, st.not_connected) == ("UP", [], [])
    down = json.loads(json.dumps(UP))
    down["status"] = "DEGRADED"
    down["nodes"]["0"]["connections"]["1"]["status"] = "VERSION_MISMATCH"
    st = ImexState()
    parse_domain(json.dumps(down), st)
    assert (st.domain, st.version_mismatch) == ("DEGRADED", ["10.0.0.2"])
    st = ImexState()
    parse_domain("garbage !V!", st)
    assert st.error and st.domain is None


def _fake_ctl(tmp_path, q="READY", n=None, sleep=0):
    ctl = tmp_path / "nvidia-imex-ctl"
    (tmp_path / "q").write_text(q + "\n")
    (tmp_path / "n").write_text(n or json.dumps(UP))
    ctl.write_text(f"#!/bin/sh\nsleep {sleep}\n"
                   f"if [ \"$1\" = -q ]; then exec cat {tmp_path}/q; else exec cat {tmp_path}/n; fi\n")
    os.chmod(ctl, 0o755)
    return str(ctl)


def test_imex_read_through_the_real_command_path(tmp_path):
    ctl = _fake_ctl(tmp_path)
    assert read_imex(ctl, 5) == ImexState(daemon="READY", domain="UP")
    s = settings(imex_features=("imex",), imex_ctl=ctl)
    assert job_findings({"SLURM_JOB_CONSTRAINTS": "imex"}, s) == []
    (tmp_path / "q").write_text("UNAVAILABLE\n")
    assert [f.message for f in job_findings({"SLURM_JOB_CONSTRAINTS": "imex"}, s)] == ["IMEX daemon UNAVAILABLE"]
    assert job_findings({}, s) == []  # an idle node, a job without IMEX: never asked
    assert job_findings({"SLURM_JOB_CONSTRAINTS": "imex"}, settings(imex_features=("imex",),
                                                                     imex_ctl=str(tmp_path / "none"))) == []


def test_a_hanging_imex_ctl_is_bounded_by_the_read_timeout(tmp_path):
    ctl = _fake_ctl(tmp_path, sleep=30)
    s = settings(imex_features=("imex",), imex_ctl=ctl, read_timeout_s=2.0)
    started = time.monotonic()
    found = job_findings({"SLURM_JOB_CONSTRAINTS": "imex"}, s)
    assert time.monotonic() - started < 10
    assert [f.message for f in found] == ["IMEX not readable"] and "did not answer within 1 s" in found[0].detail


def test_a_rack_whose_trays_registered_no_gpu_is_drained_once_as_a_rack(tmp_path, monkeypatch):
    """The switch-side case: every GPU of every tray fails its registration (clique 0, zero UUID), so no run
    of this boot names the NVLink domain.  Each tray keeps the domain it last published (marked `fdl`), the
    same fault on two trays escalates, and the rack is drained once, whole, on the in-memory Slurm."""
    from test_fabric import read, session

    from slurm_gpufleet.hooks.common import _setup, act
    from slurm_gpufleet.judging.pipeline import evaluate
    from slurm_gpufleet.judging.summary import parse
    from slurm_gpufleet.simulators.rollout import Simulator
    from slurm_gpufleet.simulators.simslurm import SimSlurm
    from slurm_gpufleet.slurm.ownership import rack_of_reason

    config = tmp_path / "gpufleet.toml"
    config.write_text(f'[slurm]\nstate_dir = "{tmp_path}/state"\nbreaker_threshold = "50%"\nrack_escalate_nodes = 3\n')
    sim = Simulator([], 8, 4)
    sim.now = time.time()  # the hooks' actuator reads the wall clock, as Slurm's reason times are
    slurm = SimSlurm(sim)
    healthy = read(session("gb200-tray"))
    names = [n.name for n in sim.nodes]
    for name in names:  # a day ago every tray registered: the first four in one rack, the rest in another
        uuid = "4f6a7c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b" if name in names[:4] else "99999999-2b3d-4e5f-8a9b-0c1d2e3f4a5b"
        slurm.set_fields(name, {"extra": json.dumps({"gpufleet": 1, "v": "ok", "t": stamp(sim.now),
                                                     "fab": "C", "clq": 32766, "cuid": uuid})})
    broken = read(session("gb200-tray"))
    for g in broken.gpus:
        g.fabric.status, g.fabric.clique_id = "insufficient_resources", 0
        g.fabric.cluster_uuid = "00000000-0000-0000-0000-000000000000"
    for name in names[:2]:
        monkeypatch.setenv("SLURMD_NODENAME", name)
        setup = _setup("healthcheck", str(config), name)
        act(setup, evaluate(broken, setup.policy, host=name), "healthcheck", backend=slurm)
        published = parse(slurm.node(name).extra)
        assert published["fdl"] == 1 and published["cuid"].startswith("4f6a7c1e") and published["clq"] == 32766
        sim.now += 1
    shown = {n: slurm.node(n) for n in names}
    assert [n for n in names if rack_of_reason(shown[n].reason) == "nvl-4f6a7c1e-32766"] == names[:4]
    assert all(not shown[n].drained for n in names[4:])
    # a tray whose check read it free before the rack's drain and wrote its own reason after it: its next
    # escalation gives it the domain's reason back, so the rack comes back as one
    from slurm_gpufleet.remedy.escalation import escalate, strays
    from slurm_gpufleet.slurm.actuator import make_actuator
    from slurm_gpufleet.slurm.ownership import HEALTH

    rack_reason = shown[names[2]].reason
    slurm.set_reason_nodes([names[2]], "fabric gpu0 fabric registration failed: insufficient resources [gpufleet]")
    assert [n.name for n in strays([slurm.node(n) for n in names[:4]])] == [names[2]]
    said = escalate(make_actuator(slurm, HEALTH, setup.settings, clock=lambda: sim.now), setup.policy.domains, names[2])
    assert said == f"rack nvl-4f6a7c1e-32766 drained: {names[2]} given its reason"
    assert slurm.node(names[2]).reason == rack_reason
    assert escalate(make_actuator(slurm, HEALTH, setup.settings, clock=lambda: sim.now), setup.policy.domains, names[2]) is None
    # a healthy run publishes its own domain again, without the mark
    monkeypatch.setenv("SLURMD_NODENAME", names[5])
    setup = _setup("healthcheck", str(config), names[5])
    act(setup, evaluate(healthy, setup.policy, host=names[5]), "healthcheck", backend=slurm)
    assert "fdl" not in parse(slurm.node(names[5]).extra)


def test_a_tray_whose_summary_was_cleared_keeps_the_domain_its_history_saw(tmp_path, monkeypatch):
    """A tray registered in its rack's domain (its history remembers it); an admin then clears its Extra,
    and at its next run none of its GPUs joins the fabric: it publishes the domain from its history, marked
    `fdl`, so it still counts for its rack.  Only a change of domain adds a row to the history."""
    from test_fabric import read, session

    from slurm_gpufleet.hooks.common import _setup, act
    from slurm_gpufleet.judging.pipeline import evaluate
    from slurm_gpufleet.judging.summary import parse
    from slurm_gpufleet.records.history import History, db_path
    from slurm_gpufleet.simulators.rollout import Simulator
    from slurm_gpufleet.simulators.simslurm import SimSlurm

    config = tmp_path / "gpufleet.toml"
    config.write_text(f'[slurm]\nstate_dir = "{tmp_path}/state"\nbreaker_threshold = "50%"\n')
    sim = Simulator([], 2, 4)
    sim.now = time.time()
    slurm = SimSlurm(sim)
    name = sim.nodes[0].name
    monkeypatch.setenv("SLURMD_NODENAME", name)
    healthy = read(session("gb200-tray"))
    for _ in range(2):
        setup = _setup("healthcheck", str(config), name)
        act(setup, evaluate(healthy, setup.policy, host=name), "healthcheck", backend=slurm)
    registered = parse(slurm.node(name).extra)
    assert isinstance(registered["cuid"], str) and isinstance(registered["clq"], int) and "fdl" not in registered
    history = History(db_path(f"{tmp_path}/state", name))
    assert history.last_domain(name) == (registered["clq"], registered["cuid"])
    assert history.db["domains"].count == 1
    history.close()
    slurm.set_fields(name, {"extra": ""})   # the admin's `scontrol update extra=`
    broken = read(session("gb200-tray"))
    for g in broken.gpus:
        g.fabric.status, g.fabric.clique_id = "insufficient_resources", 0
        g.fabric.cluster_uuid = "00000000-0000-0000-0000-000000000000"
    setup = _setup("healthcheck", str(config), name)
    act(setup, evaluate(broken, setup.policy, host=name), "healthcheck", backend=slurm)
    published = parse(slurm.node(name).extra)
    assert (published["clq"], published["cuid"], published["fdl"]) == (registered["clq"], registered["cuid"], 1)


def test_a_tray_on_its_reset_or_reboot_rung_holds_its_fault_for_the_rack():
    from slurm_gpufleet.remedy.escalation import fault_of

    plain = fault_of("fabric gpu0 NVLink switch tray degraded [gpufleet]")
    assert plain == ("fabric", "NVLink switch tray degraded")
    # the ladder's words around it: the reboot rung (with Slurm's own words appended), the repair after reboots
    assert fault_of("validate after reboot: fabric gpu0 NVLink switch tray degraded [gpufleet] : reboot issued") \
        == plain
    assert fault_of("validate after reset: fabric gpu0 NVLink switch tray degraded [gpufleet]") == plain
    assert fault_of("fabric gpu0 NVLink switch tray degraded after 2 reboots [gpufleet]") == plain
    # a validation after another fault, or a repair's own words, are no rack fault
    assert fault_of("validate after reboot: xid gpu0 Xid 79 fallen off the bus [gpufleet]") is None
    assert fault_of("validate after repair [gpufleet]") is None


class _Fleet:
    """What a backend shows of the fleet (the two reads due_with makes)."""

    def __init__(self, nodes):
        self.shown = nodes

    def nodes(self):
        return list(self.shown)

    def topology(self):
        return ""


def test_a_rack_fault_its_rack_mate_holds_is_the_rack_s_not_the_tray_s():
    from slurm_gpufleet.judging.findings import Finding
    from slurm_gpufleet.policy import DomainSpec
    from slurm_gpufleet.remedy.decide import NodeHistory, decide
    from slurm_gpufleet.remedy.escalation import due_with

    domains = (DomainSpec("rack1", ("t1", "t2", "t3")), DomainSpec("rack2", ("u1",)))
    rebooting = node("t1", "validate after reboot: fabric gpu0 NVLink switch tray degraded [gpufleet]")
    fleet = _Fleet([rebooting, node("t2", drained=False), node("t3", drained=False), node("u1", drained=False)])
    settings = SlurmSettings()
    why = "fabric gpu3 NVLink switch tray degraded [gpufleet]"
    # t2 held for the fault t1 holds: the switch-side signature fires; another fault, or another rack, does not
    assert due_with(fleet, domains, settings, fleet.shown[1], why, NOW)
    assert not due_with(fleet, domains, settings, fleet.shown[1], "fabric gpu3 fabric route unhealthy [gpufleet]",
                        NOW)
    assert not due_with(fleet, domains, settings, fleet.shown[3], why, NOW)
    # t1's hold out of the window: not due
    fleet.shown[0] = node("t1", rebooting.reason, at=NOW - 700)
    assert not due_with(fleet, domains, settings, fleet.shown[1], why, NOW)

    f = Finding("fabric", "reboot", "reset_gpu", 3, "NVLink switch tray degraded")
    free = node("t2", drained=False)
    on_its_own = decide(free, "reboot", [f], NodeHistory(), 3, gpus_idle=True)
    assert on_its_own.kind == "reset", on_its_own
    the_racks = decide(free, "reboot", [f], NodeHistory(), 3, gpus_idle=True, rack_due=True)
    assert (the_racks.kind, the_racks.reason) == ("drain", why), the_racks
    assert "rack's fault" in the_racks.why
