"""No news is not good news: an unchanged summary is written again once a heartbeat old, so `fleet` tells a
node that stopped checking (or never published) from a quiet one, and says so in a Prometheus gauge."""

from __future__ import annotations

import json
import time

from support import run_cli

from slurm_gpufleet.judging.summary import heartbeat_s, stamp
from slurm_gpufleet.maintain.fleet import FleetNode, FleetState
from slurm_gpufleet.maintain.inventory import silent
from slurm_gpufleet.policy import Policy, SlurmSettings
from slurm_gpufleet.slurm.base import NodeInfo


def test_an_unchanged_summary_is_written_again_once_a_heartbeat_old():
    from slurm_gpufleet.hooks.published import _news

    data = {"gpufleet": 1, "v": "ok", "t": stamp()}
    fresh = {**data, "t": stamp(time.time() - 60)}
    old = {**data, "t": stamp(time.time() - 700)}
    info = NodeInfo("n1", "IDLE")
    assert _news(info, "extra", data, fresh, heartbeat_s=600) is None, "unchanged and fresh: nothing to write"
    assert json.loads(_news(info, "extra", data, old, heartbeat_s=600))["t"] == data["t"], "aged: written again"
    assert _news(info, "extra", data, old) is None, "no heartbeat asked: as before"


def test_the_heartbeat_stretches_with_the_fleet_as_the_quiet_reads_do():
    s = SlurmSettings()
    assert heartbeat_s(s, 8) == 600.0
    assert heartbeat_s(s, 12_500) == 12_500 / s.slurm_reads_per_s
    # the writes it costs a fleet of 12,500 quiet nodes: one a node per heartbeat
    assert 12_500 / heartbeat_s(s, 12_500) <= 2.0


def _fleet(now: float) -> FleetState:
    def node(name, t, flags=frozenset()):
        extra = json.dumps({"gpufleet": 1, "v": "ok", "drv": "580.159.04", "t": stamp(t)}) if t else ""
        return FleetNode.from_info(NodeInfo(name, "IDLE", flags, extra=extra))
    nodes = [node("n1", now - 60), node("n2", now - 4 * 3600), node("n3", None),
             node("n4", now - 4 * 3600, frozenset({"DRAIN"}))]
    return FleetState({n.name: n for n in nodes}, [], taken_at=now)


def test_fleet_lists_the_nodes_in_service_silent_past_three_heartbeats_or_never_heard_from(tmp_path):
    now = time.time()
    found = silent(_fleet(now), Policy())
    assert found["after_s"] == 1800
    assert found["nodes"] == [{"node": "n2", "last": stamp(now - 4 * 3600)}, {"node": "n3", "last": None}]
    # a health check run every 2 h: silent only after three of its intervals
    assert silent(_fleet(now), Policy(), interval_s=7200)["nodes"] == [{"node": "n3", "last": None}]
    saved = tmp_path / "fleet.json"
    saved.write_text(json.dumps(_fleet(now).to_dict()))
    prom = tmp_path / "fleet.prom"
    r = run_cli("fleet", "--fleet", str(saved), "--textfile", str(prom))
    assert r.returncode == 0, r.stderr
    assert "silent (no summary newer than 0.5 h, in service): 2 node(s)" in r.stdout.decode()
    text = prom.read_text()
    assert 'gpufleet_fleet_nodes_unchecked{kind="silent"} 2.0' in text
    assert 'gpufleet_fleet_nodes_unchecked{kind="error"} 0.0' in text


def test_a_multi_node_job_whose_sampler_publishes_nothing_on_a_node_is_listed_once_it_should_have():
    from slurm_gpufleet.maintain.inventory import samplers_gone
    from slurm_gpufleet.slurm.base import JobInfo

    now = time.time()
    window = int(now // 60) - 1
    digest = {"j": "77", "ws": 60.0, "b": [], "w": [[window, []]]}

    def node(name, digests):
        extra = json.dumps({"gpufleet": 1, "v": "ok", "t": stamp(now), "is": digests})
        return FleetNode.from_info(NodeInfo(name, "ALLOCATED", extra=extra))
    nodes = {n.name: n for n in (node("n1", {"77": digest}), node("n2", {}), node("n3", {"77": digest}))}
    late = JobInfo("77", ["n1", "n2", "n3"], None, start_time=now - 600)
    young = JobInfo("78", ["n1", "n2"], None, start_time=now - 60)
    single = JobInfo("79", ["n3"], None, start_time=now - 6000)
    found = samplers_gone(FleetState(nodes, [late, young, single], taken_at=now), Policy())
    assert found == [{"job": "77", "nodes": ["n2"]}], "a young job's samplers have not had their turn yet"
    shared = Policy(slurm=SlurmSettings(instep_share_dir="/shared/instep"))
    assert samplers_gone(FleetState(nodes, [late], taken_at=now), shared) == [], "the digests are in files then"
