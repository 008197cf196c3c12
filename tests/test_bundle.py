"""Bundles: driver, kernel and firmware moved in one drain per node, validated part by part from what
the node publishes, rolled back to each node's recorded bundle."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from support import run_cli
from test_engine import T0, drive

from slurm_gpufleet.catalogs.bundle import (
    Bundle,
    first_difference,
    parse_firmware,
    parse_firmware_targets,
    unread_parts,
    version_key,
)
from slurm_gpufleet.maintain import states as S
from slurm_gpufleet.maintain.plan import PlanError
from slurm_gpufleet.maintain.planner import make_plan
from slurm_gpufleet.maintain.reconcile import Engine
from slurm_gpufleet.maintain.store import Store
from slurm_gpufleet.policy import parse_policy
from slurm_gpufleet.simulators.rollout import SimFleet
from slurm_gpufleet.simulators.simslurm import SimExecutor

OLD = {"driver": "570.172.08", "kernel": "6.1.0-28-amd64", "vbios": "96.00.A5.00.1A"}
NEW = {"driver": "580.159.04", "kernel": "6.1.0-31-amd64", "vbios": "96.00.AF.00.01"}
MAINTAIN = ('[maintain]\nwaves = [1, 2, "100%"]\nmax_unavailable = 4\nmax_unavailable_per_partition = "100%"\n'
            "upgrade_minutes = 20\n")


def fleet_state(fleet: SimFleet):
    state = fleet.fleet_state(OLD["driver"])
    for node in state.nodes.values():
        node.kernel, node.firmware = OLD["kernel"], OLD["vbios"]
    for n in fleet.sim.nodes:  # what the nodes published before the rollout
        n.extra = json.dumps({"gpufleet": 1, "v": "ok", "drv": OLD["driver"], "kern": OLD["kernel"],
                              "fw": OLD["vbios"], "t": "2020-01-01T00:00:00Z"})
    return state


def bundle_rollout(tmp_path, fleet, config="", template=SimExecutor.TEMPLATE, executor=None, **opts):
    policy = parse_policy(MAINTAIN + config)
    path = tmp_path / "upgrade.j2"
    path.write_text(template)
    policy = replace(policy, maintain=replace(policy.maintain, upgrade_template=str(path)))
    plan = make_plan(fleet_state(fleet), NEW["driver"], [n.name for n in fleet.sim.nodes], policy,
                     now=fleet.sim.now, force=True, kernel=NEW["kernel"], firmware={"vbios": NEW["vbios"]}).to_dict()
    store = Store(str(tmp_path / "maintain.db"))
    store.create_rollout(plan, at=fleet.sim.now)
    executor = executor or SimExecutor(fleet.sim, 20 * 60, **opts)
    return Engine(store, fleet.slurm, policy, executor, clock=lambda: fleet.sim.now), store, plan, executor


def test_one_drain_per_node_for_driver_kernel_and_firmware(tmp_path):
    fleet = SimFleet(6)
    engine, store, plan, executor = bundle_rollout(tmp_path, fleet)
    drains: list[tuple[str, str]] = []
    drain = fleet.slurm.drain_nodes
    fleet.slurm.drain_nodes = lambda names, reason: (drains.extend((n, reason) for n in names), drain(names, reason))
    assert plan["target_kernel"] == NEW["kernel"] and plan["target_firmware"] == {"vbios": NEW["vbios"]}
    assert plan["previous"]["node00001"] == {"driver": OLD["driver"], "kernel": OLD["kernel"],
                                             "firmware": {"vbios": OLD["vbios"]}}
    assert drive(fleet, engine, plan, executor) == S.R_DONE
    assert store.counts(plan["id"]) == {S.DONE: 6}
    for n in fleet.sim.nodes:
        seen = json.loads(n.extra)
        assert (seen["drv"], seen["kern"], seen["fw"]) == (NEW["driver"], NEW["kernel"], NEW["vbios"])
    # one drain per node for the whole bundle, with the bundle in its reason
    assert sorted(n for n, _ in drains) == [n.name for n in fleet.sim.nodes], drains
    assert {r for _, r in drains} == {
        f"maintain {plan['id']} upgrading to driver 580.159.04 + kernel 6.1.0-31-amd64 + vbios 96.00.AF.00.01 [gpufleet]"}
    assert store.rollout(plan["id"])["target"] == "driver 580.159.04 + kernel 6.1.0-31-amd64 + vbios 96.00.AF.00.01"


class Recording:
    """An executor that keeps the rendered scripts and never finishes them."""

    def __init__(self):
        self.scripts: dict[str, str] = {}

    def start(self, node, script, timeout_s):
        self.scripts[node] = script

    def running(self):
        return set(self.scripts)

    def finished(self):
        return {}


def test_the_template_gets_the_bundle_the_previous_bundle_and_power_cycle(tmp_path):
    fleet = SimFleet(2)
    template = ("{{ target_driver }}|{{ target_kernel }}|{{ target_firmware.vbios }}|{{ previous.kernel }}|"
                "{{ previous.firmware.vbios }}|{% if power_cycle %}cycle{% else %}reboot{% endif %}"
                "{% for c, v in target_firmware.items() %}|nvfwupd {{ c }}={{ v }}{% endfor %}")
    rec = Recording()
    engine, store, plan, _ = bundle_rollout(tmp_path, fleet, template=template, executor=rec)
    engine.step(plan["id"])  # drains the canary; the next step sees it drained and empty
    engine.step(plan["id"])
    (script,) = rec.scripts.values()
    assert script == ("580.159.04|6.1.0-31-amd64|96.00.AF.00.01|6.1.0-28-amd64|96.00.A5.00.1A|cycle"
                      "|nvfwupd vbios=96.00.AF.00.01")


def test_a_canary_whose_vbios_did_not_change_fails_naming_it_then_rollback_returns_each_bundle(tmp_path):
    fleet = SimFleet(5)

    def fields(name):  # the flash did not take: the node comes back with its old VBIOS
        return {"fw": OLD["vbios"]}

    engine, store, plan, executor = bundle_rollout(tmp_path, fleet, fields=fields)
    assert drive(fleet, engine, plan, executor) == S.R_HALTED
    (canary,) = plan["waves"][0]["nodes"]
    row = store.node(plan["id"], canary)
    assert row["state"] == S.FAILED
    assert row["error"] == f"validation failed: vbios {OLD['vbios']} != {NEW['vbios']}"
    assert all(r["state"] == S.PENDING for r in store.nodes(plan["id"]) if r["node"] != canary)
    engine.start_rollback(plan["id"])
    assert drive(fleet, engine, plan, executor) == S.R_ROLLED_BACK
    assert store.node(plan["id"], canary)["state"] == S.ROLLED_BACK
    seen = json.loads(fleet.slurm.index[canary].extra)
    assert (seen["drv"], seen["kern"], seen["fw"]) == (OLD["driver"], OLD["kernel"], OLD["vbios"])


def test_nodes_already_at_the_bundle_are_skipped_a_partial_match_is_not(tmp_path):
    fleet = SimFleet(3)
    state = fleet_state(fleet)
    state.nodes["node00001"].driver, state.nodes["node00001"].kernel = NEW["driver"], NEW["kernel"]
    state.nodes["node00001"].firmware = NEW["vbios"]
    state.nodes["node00002"].driver = NEW["driver"]  # the driver alone: kernel and VBIOS still to do
    plan = make_plan(state, NEW["driver"], list(state.nodes), parse_policy(MAINTAIN), now=T0,
                     kernel=NEW["kernel"], firmware={"vbios": NEW["vbios"]})
    assert [s["node"] for s in plan.skipped] == ["node00001"]
    assert sorted(n for w in plan.waves for n in w.nodes) == ["node00002", "node00003"]


def test_requires_rows_refuse_a_bundle_that_leaves_firmware_too_old(tmp_path):
    fleet = SimFleet(3)
    config = MAINTAIN + '\n[[requires]]\ndriver = "580"\nvbios = "96.00.AF.00.00"\n'
    policy = parse_policy(config, "site.toml")
    names = [n.name for n in fleet.sim.nodes]
    plan = make_plan(fleet_state(fleet), NEW["driver"], names, policy, now=T0)  # the driver alone
    assert plan.refused
    (problem,) = [p for g in plan.gate.values() for p in g["problems"]]
    assert problem == ("driver 580.159.04 needs vbios >= 96.00.AF.00.00 (site.toml:7); 3 node(s) would have "
                       "96.00.A5.00.1A: node[00001-00003]")  # folded, as every host list in a message
    # the same driver with the VBIOS in the bundle passes
    plan = make_plan(fleet_state(fleet), NEW["driver"], names, policy, now=T0, firmware={"vbios": NEW["vbios"]})
    assert not plan.refused and plan.waves
    # another branch is not concerned
    plan = make_plan(fleet_state(fleet), "575.57.08", names, policy, now=T0, force=True)
    assert not any("needs vbios" in p for g in plan.gate.values() for p in g["problems"])


def test_firmware_versions_order_field_by_field_and_options_are_checked():
    assert version_key("96.00.5E.00.01") < version_key("96.00.AF.00.01") < version_key("96.00.B0.00.00")
    assert version_key("G525.0200.00.04") < version_key("G525.0210.00.01")
    assert parse_firmware(["vbios=96.00.AF.00.01", "InfoROM=G525.0210.00.01"]) == {
        "vbios": "96.00.AF.00.01", "inforom": "G525.0210.00.01"}
    for bad in (["vbios"], ["vbios="], ["=1.0"], ["vbios=1 2"], ["vbios=1", "vbios=2"]):
        with pytest.raises(ValueError):
            parse_firmware(bad)
    want = Bundle("580.159.04", "6.1.0-31-amd64", {"vbios": "96.00.AF.00.01", "nvswitch": "2.1"})
    assert first_difference(want, {"drv": "580.159.04", "kern": "6.1.0-31-amd64", "fw": "96.00.AF.00.01"}) is None
    # a kernel the node could not read is not known yet, never a difference: named for a read again
    assert first_difference(want, {"drv": "580.159.04", "fw": "96.00.AF.00.01"}) is None
    assert unread_parts(want, {"drv": "580.159.04", "fw": "96.00.AF.00.01"}) == ["kernel"]
    assert unread_parts(want, {"drv": "580.159.04", "kern": "unknown", "fw": "96.00.AF.00.01"}) == ["kernel"]
    assert first_difference(want, {"drv": "580.159.04", "kern": "6.1.0-28-amd64"}) == "kernel 6.1.0-28-amd64 != 6.1.0-31-amd64"


def test_plan_needs_a_target_and_a_well_formed_firmware_option(tmp_path):
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps(SimFleet(2).fleet_state().to_dict()))
    r = run_cli("maintain", "plan", "--nodes", "node[00001-00002]", "--fleet", str(fleet))
    assert r.returncode == 2 and r.stderr.decode().strip().endswith(
        "nothing to roll out: give --target-driver, --target-kernel or --target-firmware, or a [bundle] in the config")
    r = run_cli("maintain", "plan", "--nodes", "node00001", "--fleet", str(fleet), "--target-firmware", "vbios")
    assert r.returncode == 2 and b"is not COMPONENT=VERSION" in r.stderr
    r = run_cli("maintain", "plan", "--nodes", "node[00001-00002]", "--fleet", str(fleet),
                "--target-firmware", "vbios=96.00.AF.00.01", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["target_driver"] is None and out["target_firmware"] == {"vbios": "96.00.AF.00.01"}
    assert sorted(n["node"] for n in out["nodes"]) == ["node00001", "node00002"]


@pytest.mark.parametrize("bundle", [{}, {"target_kernel": NEW["kernel"], "target_firmware": {"vbios": NEW["vbios"]},
                                     "power_cycle": True}])
def test_the_sample_template_renders_to_valid_bash_for_a_driver_and_for_a_bundle(tmp_path, bundle):
    import subprocess
    from pathlib import Path

    from slurm_gpufleet.maintain.upgrade import render

    sample = Path(__file__).resolve().parents[1] / "etc" / "upgrade.sh.j2"
    values = {"node": "gpu001", "target_driver": NEW["driver"], "previous_driver": OLD["driver"], "action": "upgrade",
              "rollout": "abc", "reservation": "", "target_kernel": None, "target_firmware": {},
              "previous": {"driver": OLD["driver"], "kernel": OLD["kernel"], "firmware": {}}, "power_cycle": False,
              **bundle}
    script = render(str(sample), **values)
    assert subprocess.run(["bash", "-n"], input=script.encode()).returncode == 0

    _shellcheck(script)
    assert ("chassis power cycle" in script.split("# Example for diskless")[0]) == bool(bundle)
    assert ("nvfwupd" in script) == bool(bundle) and ("linux-image-" in script) == bool(bundle)


@pytest.mark.parametrize("name", ["dnf-precompiled.sh.j2", "warewulf-image.sh.j2", "bcm-software-image.sh.j2"])
@pytest.mark.parametrize("action", ["upgrade", "rollback"])
def test_the_other_sample_templates_render_to_bash_that_shellcheck_passes(name, action):
    import subprocess
    from pathlib import Path

    from slurm_gpufleet.maintain.upgrade import render

    sample = Path(__file__).resolve().parents[1] / "etc" / "upgrade" / name
    values = {"node": "gpu001", "target_driver": NEW["driver"], "previous_driver": OLD["driver"], "action": action,
              "rollout": "abc", "reservation": "", "target_kernel": NEW["kernel"], "target_firmware": {},
              "previous": {"driver": OLD["driver"], "kernel": OLD["kernel"], "firmware": {}}, "power_cycle": False}
    script = render(str(sample), **values)
    assert f"driver={NEW['driver']}" in script
    assert subprocess.run(["bash", "-n"], input=script.encode()).returncode == 0
    _shellcheck(script)


def _shellcheck(script: str) -> None:
    """Debian's shellcheck over a rendered template: missing is a failure (`make system-deps` installs it)."""
    import shutil
    import subprocess

    if not shutil.which("shellcheck"):
        pytest.fail("shellcheck is not installed: `make system-deps` (as root) installs it")
    check = subprocess.run(["shellcheck", "-s", "bash", "-"], input=script.encode(), capture_output=True)
    assert check.returncode == 0, check.stdout.decode()


A100 = "NVIDIA A100-SXM4-80GB"


def test_firmware_per_gpu_model_each_node_gets_its_model_s_a_model_without_one_is_left_out(tmp_path):
    assert parse_firmware_targets(["vbios=1", "NVIDIA H200:vbios=2", "NVIDIA H200:inforom=3", f"{A100}:vbios=4"]) == (
        {"vbios": "1"}, {"NVIDIA H200": {"vbios": "2", "inforom": "3"}, A100: {"vbios": "4"}})
    with pytest.raises(ValueError, match="no GPU model"):
        parse_firmware_targets([":vbios=2"])
    fleet = SimFleet(6)
    for n in fleet.sim.nodes[3:]:
        n.model = A100
    policy = parse_policy(MAINTAIN)
    state = fleet_state(fleet)
    names = [n.name for n in fleet.sim.nodes]
    plan = make_plan(state, NEW["driver"], names, policy, now=fleet.sim.now, force=True,
                     firmware_by_model={"nvidia h200": {"vbios": NEW["vbios"]}})  # the model's case aside
    skipped = {s["node"]: s["why"] for s in plan.skipped}
    assert set(skipped) == {"node00004", "node00005", "node00006"}
    assert all(f"no firmware target for its GPU model {A100}" in why for why in skipped.values())
    assert plan.target_for("node00001").firmware == {"vbios": NEW["vbios"]}
    # both models given: each node its own, the A100s never the H200's VBIOS
    plan = make_plan(state, NEW["driver"], names, policy, now=fleet.sim.now, force=True,
                     firmware_by_model={"NVIDIA H200": {"vbios": NEW["vbios"]}, A100: {"vbios": "92.00.45.00.06"}})
    assert not plan.skipped
    assert {n: plan.target_for(n).firmware["vbios"] for n in names} == {
        **{f"node0000{i}": NEW["vbios"] for i in (1, 2, 3)}, **{f"node0000{i}": "92.00.45.00.06" for i in (4, 5, 6)}}
    # a canary per model and firmware, and the template gets each node's own
    rec = Recording()
    path = tmp_path / "upgrade.j2"
    path.write_text("{{ node }} {% for c, v in target_firmware.items() %}{{ c }}={{ v }}{% endfor %}")
    policy = replace(policy, maintain=replace(policy.maintain, upgrade_template=str(path)))
    store = Store(str(tmp_path / "maintain.db"))
    store.create_rollout(plan.to_dict(), at=fleet.sim.now)
    engine = Engine(store, fleet.slurm, policy, rec, clock=lambda: fleet.sim.now)
    engine.step(plan.id)
    engine.step(plan.id)
    assert sorted(rec.scripts.values()) == ["node00001 vbios=96.00.AF.00.01", "node00004 vbios=92.00.45.00.06"]
    # a target for a model no node has is refused, naming the models there are
    with pytest.raises(PlanError, match=r"matches no node's GPU model \(here: NVIDIA A100-SXM4-80GB, NVIDIA H200\)"):
        make_plan(state, None, names, policy, now=fleet.sim.now, firmware_by_model={"NVIDIA H100": {"vbios": "x"}})


def test_cli_firmware_per_model_on_the_sample_fleet(tmp_path):
    from support import REPO, trusted

    base = ["maintain", "plan", "--fleet", str(REPO / "etc" / "sample-fleet.json"), "--config",
            str(trusted(REPO / "etc" / "gpufleet.toml")), "--nodes", "gpu[001-032],a100-[01-08]", "--json"]
    r = run_cli(*base, "--target-firmware", "NVIDIA H200:vbios=96.00.AF.00.01")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    planned = {n for w in plan["waves"] for n in w["nodes"]}
    assert planned and not any(n.startswith("a100") for n in planned)  # no H200 VBIOS on an A100
    assert plan["firmware_by_model"] == {"NVIDIA H200": {"vbios": "96.00.AF.00.01"}}
    r = run_cli(*base, "--target-firmware", "NVIDIA H100:vbios=96.00.AF.00.01")
    assert r.returncode == 2 and b"matches no node's GPU model" in r.stderr and len(r.stderr.splitlines()) == 1


def test_a_bundle_table_in_the_config_is_the_plan_s_targets_when_the_command_line_names_none(tmp_path):
    """[bundle]: the site's standard bundle, firmware per GPU model; the command line's targets, when given,
    replace it whole (never mixed), and each run says which it used."""
    from support import REPO, trusted

    conf = (REPO / "etc" / "gpufleet.toml").read_text() + (
        '\n[bundle]\ndriver = "580.159.04"\nkernel = "6.1.0-31-amd64"\n'
        '[bundle.firmware."NVIDIA H200"]\nvbios = "96.00.AF.00.01"\n')
    cfg = tmp_path / "with-bundle.toml"
    cfg.write_text(conf)
    base = ["maintain", "plan", "--fleet", str(REPO / "etc" / "sample-fleet.json"), "--config", str(trusted(cfg)),
            "--nodes", "gpu[001-032],a100-[01-08]", "--json"]
    r = run_cli(*base)
    assert r.returncode == 0, r.stderr
    assert b"targets from [bundle] in" in r.stderr
    plan = json.loads(r.stdout)
    assert plan["firmware_by_model"] == {"NVIDIA H200": {"vbios": "96.00.AF.00.01"}}
    assert plan["target_driver"] == "580.159.04" and plan["target_kernel"] == "6.1.0-31-amd64"
    planned = {n for w in plan["waves"] for n in w["nodes"]}
    assert planned and not any(n.startswith("a100") for n in planned)
    r = run_cli(*base, "--target-driver", "580.159.04")
    assert r.returncode == 0, r.stderr
    assert b"[bundle] in" in r.stderr and b"not used" in r.stderr
    plan = json.loads(r.stdout)
    assert plan["target_kernel"] is None and plan["firmware_by_model"] == {} and plan["target_firmware"] == {}


@pytest.mark.parametrize("body,says", [
    ('[bundle]\n', "names nothing to roll out"),
    ('[bundle]\ndriver = "latest"\n', "[bundle]"),
    ('[bundle]\nfirmware = { "bogus name" = "1" }\n', "firmware"),
    ('[bundle]\nkernels = "6.1"\n', "unknown key 'kernels' in [bundle]"),
])
def test_a_bad_bundle_table_is_a_config_error_with_its_line(body, says):
    from slurm_gpufleet.policy import PolicyError, parse_policy

    with pytest.raises(PolicyError, match=re.escape(says)) as info:
        parse_policy(body, "site.toml")
    assert str(info.value).startswith("site.toml:1:")
