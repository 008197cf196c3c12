"""Failure domains (NVLink racks, Slurm blocks): whole domains drain, upgrade, validate and return as one;
a domain budget; domains kept whole for segment jobs; nodes must come back into their block."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from test_engine import MAINTAIN, T0, TARGET, drive, drive_crashing

from slurm_gpufleet.maintain import states as S
from slurm_gpufleet.maintain.planner import make_plan
from slurm_gpufleet.maintain.reconcile import Engine
from slurm_gpufleet.maintain.store import Store
from slurm_gpufleet.policy import PolicyError, parse_policy
from slurm_gpufleet.simulators.rollout import SimFleet
from slurm_gpufleet.simulators.simslurm import SimExecutor
from slurm_gpufleet.slurm.domains import FROM_CONFIG, FROM_SLURM, from_config, parse_topology

TOPOLOGY_24_11 = ("BlockName=b1 BlockIndex=0 Nodes=node[00001-00004] BlockSize=4\n"
                  "BlockName=b2 BlockIndex=1 Nodes=node[00005-00008] BlockSize=4\n")


def blocks(fleet: SimFleet, size: int) -> None:
    names = [n.name for n in fleet.sim.nodes]
    fleet.slurm.blocks = {f"b{i // size + 1}": names[i:i + size] for i in range(0, len(names), size)}


def domain_rollout(tmp_path, fleet, config, **executor_opts):
    policy = parse_policy(MAINTAIN + "upgrade_minutes = 20\n" + config)
    template = tmp_path / "upgrade.j2"
    template.write_text(SimExecutor.TEMPLATE)
    policy = replace(policy, maintain=replace(policy.maintain, upgrade_template=str(template)))
    domains = from_config(policy.domains) if policy.domains else parse_topology(fleet.slurm.topology())
    plan = make_plan(fleet.fleet_state(), TARGET, [n.name for n in fleet.sim.nodes], policy, now=fleet.sim.now,
                     force=True, domains=domains).to_dict()
    store = Store(str(tmp_path / "maintain.db"))
    store.create_rollout(plan, at=fleet.sim.now)
    executor = SimExecutor(fleet.sim, 20 * 60, **executor_opts)
    return Engine(store, fleet.slurm, policy, executor, clock=lambda: fleet.sim.now), store, plan, executor


def domains_of(plan) -> dict[str, list[str]]:
    """The plan's failure domains, name -> nodes (the JSON lists them with their state and why)."""
    return {d["name"]: d["nodes"] for d in plan["domains"]}


class Watch:
    """After every step: per domain, the drivers its nodes in service run, and whether any node is out."""

    def __init__(self, fleet, plan):
        self.fleet, self.domains = fleet, domains_of(plan)
        self.mixed = 0
        self.most_out = 0
        self.fewest_whole = len(self.domains)

    def __call__(self, _before=None):
        nodes = self.fleet.slurm.index
        now = self.fleet.sim.now
        out = 0
        whole = 0
        for members in self.domains.values():
            serving = [n for n in members if not nodes[n].out(now)]
            drivers = {json.loads(nodes[n].extra)["drv"] if nodes[n].extra else "old" for n in serving}
            self.mixed = max(self.mixed, int(len(drivers) > 1))
            out += len(serving) < len(members)
            whole += len(serving) == len(members)
        self.most_out = max(self.most_out, out)
        self.fewest_whole = min(self.fewest_whole, whole)


def test_whole_domains_move_as_one_one_block_out_at_a_time_jobs_untouched(tmp_path):
    fleet = SimFleet(8)
    blocks(fleet, 4)
    fleet.add_job("j1", 1, 8, T0 + 3600)        # in b1: b1 goes when it ends
    fleet.add_job("j2", [5, 6], 8, T0 + 7200)   # a two-node job in b2
    engine, store, plan, executor = domain_rollout(
        tmp_path, fleet, "whole_domain = true\nmax_unavailable_domains = 1\n")
    assert plan["domains_from"] == FROM_SLURM and domains_of(plan)["b1"] == [f"node0000{i}" for i in range(1, 5)]
    assert plan["waves"][0]["kind"] == "canary" and len(plan["waves"][0]["nodes"]) == 4  # a whole block
    # every node of a domain shares its slot
    for members in domains_of(plan).values():
        assert len({tuple(plan["slots"][n]) for n in members}) == 1
    watch = Watch(fleet, plan)
    resumed: dict[str, float] = {}
    resume = fleet.slurm.resume_nodes
    fleet.slurm.resume_nodes = lambda names: (resumed.update({n: fleet.sim.now for n in names}), resume(names))
    assert drive(fleet, engine, plan, executor, on_step=watch) == S.R_DONE
    assert store.counts(plan["id"]) == {S.DONE: 8}
    assert watch.mixed == 0 and watch.most_out == 1
    # a block returns as one: each resumed at once, after its last node was done
    done = {r["node"]: r["ts"] for r in store.db.query("select node, ts from audit where event = 'done'")}
    for members in domains_of(plan).values():
        assert len({resumed[n] for n in members}) == 1 and resumed[members[0]] >= max(done[n] for n in members)
    assert fleet.sim.killed == 0
    # no node of a block was upgraded before every node of it was drained and empty
    ups = {r["node"]: r["ts"] for r in store.db.query("select node, ts from audit where event = 'upgrading'")}
    assert min(ups[n] for n in domains_of(plan)["b1"]) >= T0 + 3600
    assert min(ups[n] for n in domains_of(plan)["b2"]) >= T0 + 7200


def test_a_domains_early_free_nodes_keep_running_jobs_until_the_domain_can_go(tmp_path):
    fleet = SimFleet(4)
    blocks(fleet, 4)
    fleet.add_job("long", 0, 8, T0 + 4 * 3600)
    engine, store, plan, executor = domain_rollout(tmp_path, fleet, "whole_domain = true\n")
    for _ in range(3):
        engine.step(plan["id"])
        fleet.advance(fleet.sim.now + 600, executor)
    # three nodes sit empty, yet none is drained: the block goes when its last job ends (its slot)
    assert not any(n.drained for n in fleet.sim.nodes)
    assert {r["state"] for r in store.nodes(plan["id"])} == {S.PENDING}
    assert drive(fleet, engine, plan, executor) == S.R_DONE


def test_keep_free_domains_keeps_that_many_domains_whole(tmp_path):
    fleet = SimFleet(9)
    blocks(fleet, 3)
    engine, store, plan, executor = domain_rollout(tmp_path, fleet, "keep_free_domains = 2\n")
    watch = Watch(fleet, plan)
    assert drive(fleet, engine, plan, executor, on_step=watch) == S.R_DONE
    assert watch.fewest_whole == 2 and watch.most_out == 1


def test_without_whole_domain_the_domain_budget_still_bounds_domains_out(tmp_path):
    fleet = SimFleet(8)
    blocks(fleet, 2)
    engine, store, plan, executor = domain_rollout(tmp_path, fleet, "max_unavailable_domains = 1\n")
    assert len(plan["waves"][0]["nodes"]) == 1  # the canary is one node: no whole_domain
    watch = Watch(fleet, plan)
    assert drive(fleet, engine, plan, executor, on_step=watch) == S.R_DONE
    assert watch.most_out == 1


def test_a_domain_wide_component_takes_whole_domains(tmp_path):
    fleet = SimFleet(4)
    blocks(fleet, 2)
    policy = parse_policy(MAINTAIN + 'domain_wide = ["nvswitch"]\n')
    state = fleet.fleet_state()
    domains = parse_topology(fleet.slurm.topology())
    names = list(state.nodes)
    plan = make_plan(state, None, names, policy, now=T0, firmware={"nvswitch": "2.1"}, domains=domains)
    assert plan.budget.whole_domain is True and len(plan.waves[0].nodes) == 2
    plan = make_plan(state, None, names, policy, now=T0, firmware={"vbios": "96.00.AF.00.01"}, domains=domains)
    assert plan.budget.whole_domain is False and len(plan.waves[0].nodes) == 1


def test_a_node_not_back_in_its_block_fails_named(tmp_path):
    fleet = SimFleet(4)
    blocks(fleet, 2)
    engine, store, plan, executor = domain_rollout(tmp_path, fleet, "whole_domain = true\n")
    canary = plan["waves"][0]["nodes"]
    lost = canary[1]
    complete = executor.complete

    def complete_and_drop(name, *args):  # e.g. `scontrol update` re-applied its topology
        complete(name, *args)
        if name == lost:
            fleet.slurm.blocks = {b: [n for n in nodes if n != lost] for b, nodes in fleet.slurm.blocks.items()}

    executor.complete = complete_and_drop
    assert drive(fleet, engine, plan, executor) == S.R_HALTED
    row = store.node(plan["id"], lost)
    assert row["state"] == S.FAILED
    assert row["error"] == "validation failed: not back in its block b1 (Slurm's topology shows it in no block)"
    # its block-mate validated and returned once the whole block was through; the lost node stays drained
    mate = store.node(plan["id"], canary[0])
    assert mate["state"] == S.DONE and not fleet.slurm.index[canary[0]].drained
    assert fleet.slurm.index[lost].drained


def test_topology_and_config_domains_parse():
    d = parse_topology(TOPOLOGY_24_11 + "SwitchName=s0 Level=0 LinkSpeed=1 Nodes=node[00001-00008]\n")
    assert d.source == FROM_SLURM and list(d.members) == ["b1", "b2"] and d.of["node00006"] == "b2"
    assert not parse_topology("") and not parse_topology("SwitchName=s0 Level=0 Nodes=n[1-4]\n")
    policy = parse_policy('[[domain]]\nname = "rack1"\nnodes = "n[1-4]"\n[[domain]]\nname = "rack2"\nnodes = "n[5-8]"\n')
    d = from_config(policy.domains)
    assert d.source == FROM_CONFIG and d.members["rack2"] == ["n5", "n6", "n7", "n8"]
    assert d.restricted(["n2", "n3"]).members == {"rack1": ["n2", "n3"]}
    with pytest.raises(PolicyError, match=r"<config>:5: n4 is in \[\[domain\]\] rack1 and rack2"):
        parse_policy('[[domain]]\nname = "rack1"\nnodes = "n[1-4]"\n[[domain]]\nnodes = "n[4-8]"\nname = "rack2"\n')
    with pytest.raises(PolicyError, match="unknown key 'size'"):
        parse_policy('[[domain]]\nnodes = "n[1-4]"\nsize = 4\n')


def test_a_crash_at_every_step_still_converges_with_whole_domains(tmp_path):
    """A new engine and executor each step, as after kill -9 and `maintain resume`."""
    fleet = SimFleet(12)
    blocks(fleet, 4)
    for i in range(12):
        fleet.add_job(f"j{i}", i, 8, T0 + 900 * (i % 3 + 1))
    engine, store, plan, executor = domain_rollout(
        tmp_path, fleet, "whole_domain = true\nmax_unavailable_domains = 1\n")
    watch = Watch(fleet, plan)
    state = drive_crashing(tmp_path, fleet, engine, plan, executor, on_step=watch)
    assert state == S.R_DONE and store.counts(plan["id"]) == {S.DONE: 12}
    assert watch.mixed == 0 and watch.most_out == 1
    assert fleet.slurm.reservations_ == {} and not any(n.drained for n in fleet.sim.nodes)


def _drivers(fleet) -> dict[str, str]:
    return {n.name: json.loads(n.extra)["drv"] if n.extra else "old" for n in fleet.sim.nodes}


@pytest.mark.parametrize("when", ["before the plan", "during the rollout"])
def test_a_domain_with_a_member_someone_else_holds_is_skipped_whole(tmp_path, when):
    fleet = SimFleet(8)
    blocks(fleet, 4)
    fleet.add_job("j1", 0, 8, T0 + 3 * 3600)  # b1 (the canary block) is busy a while: b2 is second
    if when == "before the plan":
        fleet.slurm.drain_nodes(["node00006"], "admin: cable swap")
    engine, store, plan, executor = domain_rollout(tmp_path, fleet, "whole_domain = true\n")
    states = {d["name"]: d for d in plan["domains"]}
    if when == "before the plan":
        assert states["b2"]["state"] == "skipped" and "node00006" in states["b2"]["why"]
        assert "cable swap" in states["b2"]["why"] and states["b1"]["state"] == "planned"
        skipped = {s["node"] for s in plan["skipped"]}
        assert skipped == {f"node0000{i}" for i in range(5, 9)}
        # and the admin reads it: text and HTML name the domain, its state and why
        from slurm_gpufleet.maintain import report
        from slurm_gpufleet.maintain.plan import Plan

        text = report.text(Plan.from_dict(plan))
        assert "1 domain(s) skipped: b2: member node00006 held by someone else (IDLE+DRAIN (admin: cable swap))" in text
        assert "skipped 3: domain b2 skipped whole: member node00006 held: node[00005,00007-00008]" in text
        page = report.html(Plan.from_dict(plan))
        assert '<td class="no">skipped</td>' in page and "admin: cable swap" in page
    else:
        assert states["b2"]["state"] == "planned"
        engine.step(plan["id"])
        fleet.slurm.drain_nodes(["node00006"], "admin: cable swap")
    watch = Watch(fleet, plan)
    assert drive(fleet, engine, plan, executor, on_step=watch) == S.R_DONE
    drivers = _drivers(fleet)
    assert watch.mixed == 0 and {drivers[f"node0000{i}"] for i in range(5, 9)} == {"old"}
    assert {drivers[f"node0000{i}"] for i in range(1, 5)} == {TARGET}
    rows = {r["node"]: r for r in store.nodes(plan["id"])}
    if when == "during the rollout":
        assert all(rows[f"node0000{i}"]["state"] == S.SKIPPED for i in range(5, 9))
        assert "skipped whole" in store.db.execute(
            "select detail from audit where node = 'node00005' and event = 'skipped'").fetchone()[0]


def test_a_domain_waits_for_its_held_member_then_goes_whole(tmp_path):
    fleet = SimFleet(8)
    blocks(fleet, 4)
    fleet.slurm.drain_nodes(["node00006"], "admin: cable swap")
    engine, store, plan, executor = domain_rollout(tmp_path, fleet,
                                                   "whole_domain = true\ndomain_member_held = \"wait\"\n")
    states = {d["name"]: d for d in plan["domains"]}
    assert states["b2"]["state"] == "waits" and "node00006" in states["b2"]["why"]
    assert "node00006" in plan["slots"] and not plan["skipped"]
    watch = Watch(fleet, plan)
    for _ in range(60):  # five hours: b1 is done long before; b2 waits for its member
        engine.step(plan["id"])
        watch()
        fleet.advance(fleet.sim.now + 300, executor)
    drivers = _drivers(fleet)
    assert {drivers[f"node0000{i}"] for i in range(1, 5)} == {TARGET}
    assert {drivers[f"node0000{i}"] for i in range(5, 9)} == {"old"}
    fleet.slurm.resume_nodes(["node00006"])  # the admin is done with it
    assert drive(fleet, engine, plan, executor, on_step=watch) == S.R_DONE
    assert set(_drivers(fleet).values()) == {TARGET} and watch.mixed == 0


def test_late_domain_slots_take_turns_on_the_slot_grid(tmp_path):
    """The first domain overruns its slot (slots 2 minutes apart, each upgrade takes 20): the next domains'
    slots come due while the domain budget is spent.  They are moved to the slots the one slot function
    gives them (schedule.plan_slots), one domain after another on the plan's grid, never two to one moment,
    and the budget holds throughout."""
    fleet = SimFleet(8)
    blocks(fleet, 2)
    policy = parse_policy(MAINTAIN + "upgrade_minutes = 2\nmax_unavailable_domains = 1\nwhole_domain = true\n")
    template = tmp_path / "upgrade.j2"
    template.write_text(SimExecutor.TEMPLATE)
    policy = replace(policy, maintain=replace(policy.maintain, upgrade_template=str(template)))
    plan = make_plan(fleet.fleet_state(), TARGET, [n.name for n in fleet.sim.nodes], policy, now=fleet.sim.now,
                     force=True, domains=parse_topology(fleet.slurm.topology())).to_dict()
    store = Store(str(tmp_path / "maintain.db"))
    store.create_rollout(plan, at=fleet.sim.now)
    executor = SimExecutor(fleet.sim, 20 * 60)
    engine = Engine(store, fleet.slurm, policy, executor, clock=lambda: fleet.sim.now)
    moves: list[tuple[float, str, float]] = []
    postpone = fleet.slurm.postpone_reservation

    def recording(name: str, start: float) -> None:
        moves.append((fleet.sim.now, name, start))
        postpone(name, start)

    fleet.slurm.postpone_reservation = recording
    watch = Watch(fleet, plan)
    assert drive(fleet, engine, plan, executor, dt=60.0, on_step=watch) == S.R_DONE
    assert watch.most_out == 1 and not watch.mixed
    together: dict[float, list[float]] = {}
    for at, _name, start in moves:
        together.setdefault(at, []).append(start)
    assert any(len(starts) > 1 for starts in together.values()), moves  # the case: several late at once
    for starts in together.values():
        assert len(set(starts)) == len(starts), together  # each to a slot of its own
        assert all(s % 60 == 0 for s in starts)  # on the whole-minute grid
