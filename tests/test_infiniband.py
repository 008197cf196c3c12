"""InfiniBand and RoCE link health (readers/ib.py, checks/infiniband.py) on real sysfs trees: an H100 node's
eight NDR ports and its Ethernet bond (leptonai/gpud's test data), and prometheus/procfs's hfi1, mlx4 and
mlx5 devices (data/captures/public/infiniband)."""

from __future__ import annotations

import json
import shutil

import pytest
from support import REPO, run_cli

from slurm_gpufleet.judging.pipeline import evaluate
from slurm_gpufleet.policy import parse_policy
from slurm_gpufleet.readers.ib import read_ib, remember
from slurm_gpufleet.readers.snapshot import NodeSnapshot

TREES = REPO / "slurm_gpufleet" / "data" / "captures" / "public" / "infiniband"
H100 = TREES / "h100-gpud"
POLICY = "[defaults]\nib_ports = 8\nib_rate_gbps = 400\n"


@pytest.fixture
def tree(tmp_path):
    """A copy of the H100 node's tree, to break."""
    root = tmp_path / "infiniband"
    shutil.copytree(H100, root)
    return root


def judge(root, policy_text: str = POLICY, memory=None, previous=None):
    snap = NodeSnapshot(host="n1")
    snap.ib = read_ib(str(root))
    if memory is not None:
        remember(snap.ib, str(memory))
    report = evaluate(snap, parse_policy(policy_text), host="n1", previous=previous)
    return [f for f in report.findings if f.check == "infiniband"], report


def write(path, text: str) -> None:
    path.write_text(text)


def test_the_real_h100_tree_reads_eight_ndr_ports_and_an_ethernet_bond_and_is_quiet():
    state = read_ib(str(H100))
    ib = [p for p in state.ports if p.link_layer == "InfiniBand"]
    assert [p.device for p in ib] == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]
    assert {(p.state, p.phys_state, p.rate_gbps) for p in ib} == {("ACTIVE", "LinkUp", 400.0)}
    bond = [p for p in state.ports if p.device == "mlx5_bond_0"]
    assert [(p.link_layer, p.rate_gbps) for p in bond] == [("Ethernet", 200.0)]
    # link_downed 255 on mlx5_1 since boot (the 8-bit counter saturated): a count, never judged by itself
    assert next(p for p in ib if p.device == "mlx5_1").counters["link_downed"] == 255
    found, report = judge(H100)
    assert found == [] and report.verdict == "ok"


def test_a_port_down_drains_naming_it(tree):
    write(tree / "mlx5_4" / "ports" / "1" / "state", "1: DOWN\n")
    write(tree / "mlx5_4" / "ports" / "1" / "phys_state", "3: Disabled\n")
    found, report = judge(tree)
    assert [(f.severity, f.message) for f in found] == [("drain", "InfiniBand mlx5_4 port 1 DOWN/Disabled")]
    assert "7 of 8 port(s) up" in found[0].detail and report.verdict == "drain"


def test_a_missing_hca_drains(tree):
    shutil.rmtree(tree / "mlx5_9")
    found, _ = judge(tree)
    assert [(f.severity, f.message) for f in found] == [("drain", "7 InfiniBand port(s), 8 expected")]
    assert "mlx5_8" in found[0].detail and "mlx5_9" not in found[0].detail


def test_no_infiniband_at_all_where_ports_are_expected_drains_and_where_none_are_is_quiet(tmp_path):
    found, _ = judge(tmp_path / "absent")
    assert [(f.severity, f.message) for f in found] == [("drain", "0 InfiniBand port(s), 8 expected")]
    assert judge(tmp_path / "absent", "")[0] == []   # ib_ports unset: nothing expected


def test_a_port_at_half_its_rate_warns_naming_it_and_ib_degraded_action_can_drain(tree):
    write(tree / "mlx5_6" / "ports" / "1" / "rate", "200 Gb/sec (4X HDR)\n")
    found, report = judge(tree)
    assert [(f.severity, f.message) for f in found] == [("warn", "InfiniBand mlx5_6 port 1 at 200 Gb/s of 400")]
    assert report.verdict == "warn"
    found, _ = judge(tree, POLICY + 'ib_degraded_action = "drain"\n')
    assert [(f.severity, f.action) for f in found] == [("drain", "inspect_hardware")]


def test_link_downed_rising_by_five_between_two_runs_warns_naming_the_port(tree, tmp_path):
    memory = tmp_path / "ib-counters-n1.json"
    assert judge(tree, memory=memory)[0] == []        # the first run: nothing to compare with
    counter = tree / "mlx5_5" / "ports" / "1" / "counters" / "link_downed"
    write(counter, str(int(counter.read_text()) + 5))
    found, report = judge(tree, memory=memory)
    assert [(f.severity, f.message) for f in found] == [("warn", "InfiniBand mlx5_5 port 1 link_downed +5")]
    assert "link went down: 5 more since the previous run" in found[0].detail and report.verdict == "warn"
    assert judge(tree, memory=memory)[0] == []        # no growth since: quiet again
    write(counter, "0")                               # the driver reloaded: a counter that fell is no growth
    assert judge(tree, memory=memory)[0] == []


def test_small_physical_layer_noise_is_quiet_and_a_burst_warns(tree, tmp_path):
    memory = tmp_path / "ib-counters-n1.json"
    judge(tree, memory=memory)
    counter = tree / "mlx5_0" / "ports" / "1" / "counters" / "symbol_error"
    base = int(counter.read_text())
    write(counter, str(base + 3))
    assert judge(tree, memory=memory)[0] == []
    write(counter, str(base + 3 + 250))
    found, _ = judge(tree, memory=memory)
    assert [f.message for f in found] == ["InfiniBand mlx5_0 port 1 symbol_error +250"]


def test_the_ethernet_bond_down_drains_nothing_and_ib_exclude_leaves_a_device_out(tree):
    write(tree / "mlx5_bond_0" / "ports" / "1" / "state", "1: DOWN\n")
    write(tree / "mlx5_bond_0" / "ports" / "1" / "phys_state", "3: Disabled\n")
    found, report = judge(tree)
    assert found == [] and report.verdict == "ok"
    write(tree / "mlx5_9" / "ports" / "1" / "state", "1: DOWN\n")
    found, _ = judge(tree, POLICY.replace("ib_ports = 8", "ib_ports = 7") + 'ib_exclude = ["mlx5_9"]\n')
    assert found == []


def test_the_procfs_trees_read_as_their_devices_say():
    state = read_ib(str(TREES / "procfs"))
    got = {(p.device, p.port): (p.state, p.phys_state, p.rate_gbps, p.link_layer) for p in state.ports}
    assert got[("hfi1_0", 1)] == ("ACTIVE", "LinkUp", 100.0, "InfiniBand")
    assert got[("mlx4_0", 1)] == ("ACTIVE", "LinkUp", 40.0, "InfiniBand")
    assert got[("mlx4_0", 2)][2] == 40.0
    # procfs's mlx5_0 fixture writes "4: ACTIVE" as its physical state: read as it is, so not LinkUp
    assert got[("mlx5_0", 1)] == ("ACTIVE", "ACTIVE", 25.0, "InfiniBand")
    found, _ = judge(TREES / "procfs", "[defaults]\nib_ports = 4\n")
    assert [f.message for f in found] == ["InfiniBand mlx5_0 port 1 ACTIVE/ACTIVE"]


def test_odd_sysfs_values_are_read_as_unknown_never_a_crash(tree):
    write(tree / "mlx5_0" / "ports" / "1" / "rate", "garbage\n")
    write(tree / "mlx5_0" / "ports" / "1" / "state", "\n")
    write(tree / "mlx5_0" / "ports" / "1" / "counters" / "link_downed", "-3\n")
    (tree / "mlx5_1" / "ports" / "1" / "phys_state").unlink()
    (tree / "mlx5_4" / "ports" / "1").rename(tree / "mlx5_4" / "ports" / "x")   # not a port number
    write(tree / "mlx5_5" / "ports" / "1" / "counters" / "symbol_error", "\u00b2\n")   # a digit int() refuses
    write(tree / "mlx5_6" / "ports" / "1" / "link_layer", "InfiniBand\x00\n")
    found, report = judge(tree)
    # a port whose state did not read is unknown, said, never drained; a port renamed away is missing
    assert sorted((f.severity, f.message) for f in found) == [
        ("drain", "6 InfiniBand port(s) and 1 of no known link layer, 8 expected")] + [
        ("warn", "InfiniBand not readable")] * 6
    assert sorted(f.detail for f in found if f.severity == "warn") == [
        "mlx5_0 port 1 counters/link_downed: value not read as given ('-3')",
        "mlx5_0 port 1 rate: value not read as given ('garbage')",
        "mlx5_0 port 1 state: value not read as given ('')",
        "mlx5_1 port 1 phys_state: not there",
        "mlx5_5 port 1 counters/symbol_error: value not read as given ('\ufffd\ufffd')",
        "mlx5_6 port 1 link_layer: value not read as given ('InfiniBand\\x00')"]
    assert report.verdict == "drain"
    (tree / "mlx5_4" / "ports" / "x").rename(tree / "mlx5_4" / "ports" / "1")
    found, report = judge(tree)
    assert {f.severity for f in found} == {"warn"} and report.verdict == "warn"


def test_check_reads_ib_sysfs_and_judges_growth_against_a_previous_snapshot(tree, tmp_path):
    xml = REPO / "slurm_gpufleet" / "data" / "captures" / "h200-real" / "nvidia-smi-q.xml"
    config = tmp_path / "gpufleet.toml"
    config.write_text(POLICY)
    r = run_cli("check", "--config", str(config), "--nvidia-smi-q", str(xml), "--ib-sysfs", str(tree), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["verdict"] == "ok", r.stdout + r.stderr
    r = run_cli("snapshot", "--nvidia-smi-q", str(xml), "--ib-sysfs", str(tree), "-o", str(tmp_path / "before.json"))
    assert r.returncode == 0, r.stderr
    before = json.loads((tmp_path / "before.json").read_text())
    assert [p["device"] for p in before["ib"]["ports"]][:2] == ["mlx5_0", "mlx5_1"]
    counter = tree / "mlx5_7" / "ports" / "1" / "counters" / "link_downed"
    write(counter, str(int(counter.read_text()) + 2))
    write(tree / "mlx5_8" / "ports" / "1" / "state", "2: INIT\n")
    r = run_cli("check", "--config", str(config), "--nvidia-smi-q", str(xml), "--ib-sysfs", str(tree),
                "--previous", str(tmp_path / "before.json"))
    assert r.returncode == 1, r.stdout + r.stderr
    text = r.stdout.decode()
    assert "InfiniBand mlx5_8 port 1 INIT/LinkUp" in text and "InfiniBand mlx5_7 port 1 link_downed +2" in text


def test_the_health_check_reads_the_hosts_ports_keeps_their_counters_and_drains_a_port_down(tmp_path):
    """The health check as slurmd runs it (a recording scontrol, the recorded H200): the H100 node's tree
    under its host root; healthy it stays in service, link_downed +5 warns, a port down drains with the
    port in the reason.  The counters are kept in the state directory between runs."""
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from fake_slurm.node import healthcheck, setup

    bin_dir, _, env = setup(tmp_path)
    root = tmp_path / "root" / "sys" / "class" / "infiniband"
    shutil.copytree(H100, root)
    with open(env["SLURM_GPUFLEET_CONFIG"], "a") as fh:
        fh.write(POLICY)

    def run() -> dict:
        _, _, r = healthcheck(bin_dir, env)
        assert r.returncode == 0 and "internal error" not in r.stderr, r.stderr
        return json.loads((bin_dir / "node.json").read_text())

    node = run()
    assert not node.get("drain") and json.loads(node["extra"])["v"] == "ok"
    assert (tmp_path / "state" / "ib-counters-n9.json").exists()
    counter = root / "mlx5_5" / "ports" / "1" / "counters" / "link_downed"
    write(counter, str(int(counter.read_text()) + 5))
    node = run()
    assert not node.get("drain") and json.loads(node["extra"])["v"] == "warn", node
    write(root / "mlx5_4" / "ports" / "1" / "state", "1: DOWN\n")
    write(root / "mlx5_4" / "ports" / "1" / "phys_state", "3: Disabled\n")
    node = run()
    assert node.get("drain") and "InfiniBand mlx5_4 port 1 DOWN/Disabled" in node["reason"], node


def test_mlx5_kernel_lines_of_a_failed_card_or_link_are_read_and_judged_in_the_current_boot():
    """The mlx5 driver's own words (Linux health.c and events.c; the examples as gpud and kernel logs quote
    them): a card whose firmware stopped answering drains, a hot transceiver or a short of power warns; a
    line of an earlier boot is history; ACCESS_REG noise is none of them."""
    from slurm_gpufleet.readers.kernel_log import read_kernel_log

    lines = [
        "[   17.982092] mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health compromised - reached miss count",
        "[   17.982217] mlx5_core 0000:41:00.0: print_health_info:458:(pid 0): synd 0x8: unrecoverable hardware error",
        "[   20.1] mlx5_core 0000:5c:00.0: mlx5_pcie_event:299:(pid 268269): Detected insufficient power on the PCIe "
        "slot (27W).",
        "[   21.5] mlx5_core 0000:5c:00.0: mlx5_port_module_event:1131:(pid 0): Port module event[error]: module 0, "
        "Cable error, High Temperature",
        "[   22.0] mlx5_core 0000:d2:00.0: mlx5_cmd_out_err:838:(pid 1441871): ACCESS_REG(0x805) op_mod(0x1) failed, "
        "status bad resource(0x5), syndrome (0x305684), err(-22)",
    ]
    log = read_kernel_log(lines)
    assert [(e.name, e.pci, e.what) for e in log.nics] == [
        ("health_compromised", "0000:41:00", ""), ("unrecoverable", "0000:41:00", ""),
        ("pci_power", "0000:5c:00", "27W"), ("module_error", "0000:5c:00", "High Temperature")]
    snap = NodeSnapshot(host="n1", boots_seen=log.boots)
    snap.nic_events = log.nics
    report = evaluate(snap, parse_policy(""), host="n1")
    found = sorted((f.severity, f.message) for f in report.findings if f.check == "infiniband")
    assert found == [("drain", "mlx5 card's firmware stopped answering"),
                     ("drain", "mlx5 card: unrecoverable hardware error"),
                     ("warn", "mlx5 cable or transceiver error (High Temperature)"),
                     ("warn", "mlx5 card: insufficient power on its PCIe slot (27W)")]
    # the same lines, then a reboot: the new boot is clean
    later = read_kernel_log(lines + ["[    0.000000] Linux version 6.1.0-28-amd64", "[    5.0] mlx5_core ok"])
    snap.nic_events, snap.boots_seen = later.nics, later.boots
    assert later.boots == 2 and [f for f in evaluate(snap, parse_policy(""), host="n1").findings if f.check == "infiniband"] == []


def test_the_summary_carries_the_network_and_fleet_shows_it_per_group(tree, tmp_path):
    """A node publishes its ports down, slow and whose counters grew (summary `ib`); `fleet` counts them per
    group with their nodes."""
    from slurm_gpufleet.cli.output import inventory_text
    from slurm_gpufleet.judging.summary import encode
    from slurm_gpufleet.maintain.fleet import FleetNode, FleetState
    from slurm_gpufleet.maintain.inventory import inventory
    from slurm_gpufleet.slurm.base import NodeInfo

    memory = tmp_path / "ib-counters-n1.json"
    judge(tree, memory=memory)
    write(tree / "mlx5_4" / "ports" / "1" / "state", "1: DOWN\n")
    write(tree / "mlx5_6" / "ports" / "1" / "rate", "200 Gb/sec (4X HDR)\n")
    counter = tree / "mlx5_7" / "ports" / "1" / "counters" / "link_downed"
    write(counter, str(int(counter.read_text()) + 1))
    _, report = judge(tree, memory=memory)
    data = encode(report, report.verdict)
    assert data["ib"] == {"d": ["mlx5_4/1"], "s": ["mlx5_6/1"], "c": ["mlx5_7/1"]}
    nodes = {name: FleetNode.from_info(NodeInfo(name, "IDLE", extra=json.dumps({"gpufleet": 1, "v": "ok", **extra})))
             for name, extra in (("g1", {"ib": data["ib"]}), ("g2", {"ib": {"c": ["mlx5_0/1"], "m": 1}}), ("g3", {}))}
    inv = inventory(FleetState(nodes, [], []), parse_policy(""))
    net = inv["groups"]["(defaults)"]["network"]
    assert net == {"down": {"nodes": ["g1"], "ports": 1}, "slow": {"nodes": ["g1"], "ports": 1},
                   "counters_grew": {"nodes": ["g1", "g2"], "ports": 2}, "missing": {"nodes": ["g2"], "ports": 1}}
    assert "  network   down: 1 port(s) on 1 node(s) g1; slow: 1 port(s) on 1 node(s) g1; counters grew: 2 port(s) " \
           "on 2 node(s) g[1-2]; missing: 1 port(s) on 1 node(s) g2" in inventory_text(inv).splitlines()


def test_saved_ibstat_outputs_read_as_the_same_ports_and_a_roce_fabric_is_judged_as_such(tmp_path):
    """Real `ibstat` outputs (gpud's test data): an A100 node's 8 HDR InfiniBand ports, and an H100 node whose
    12 ports are all Ethernet (RoCE).  `ib_link_layer = "Ethernet"` counts the RoCE ports; by default none
    of them is taken for an InfiniBand port."""
    from slurm_gpufleet.readers.ib import read_ibstat

    ibstat = TREES / "ibstat"
    a100 = read_ibstat((ibstat / "a100-8-cas.txt").read_text())
    assert [(p.device, p.state, p.phys_state, p.rate_gbps, p.link_layer) for p in a100.ports][:2] == [
        ("mlx5_0", "ACTIVE", "LinkUp", 200.0, "InfiniBand"), ("mlx5_1", "ACTIVE", "LinkUp", 200.0, "InfiniBand")]
    h100 = read_ibstat((ibstat / "h100-12-cas.txt").read_text())
    assert len(h100.ports) == 12 and {p.link_layer for p in h100.ports} == {"Ethernet"}
    xml = REPO / "slurm_gpufleet" / "data" / "captures" / "h200-real" / "nvidia-smi-q.xml"
    config = tmp_path / "gpufleet.toml"
    config.write_text("[defaults]\nib_ports = 8\nib_rate_gbps = 200\n")
    r = run_cli("check", "--config", str(config), "--nvidia-smi-q", str(xml), "--ibstat", str(ibstat / "a100-8-cas.txt"))
    assert r.returncode == 0 and "InfiniBand" not in r.stdout.decode(), r.stdout
    r = run_cli("check", "--config", str(config), "--nvidia-smi-q", str(xml), "--ibstat", str(ibstat / "h100-12-cas.txt"))
    assert r.returncode == 1 and "0 InfiniBand port(s), 8 expected" in r.stdout.decode(), r.stdout
    rates = sorted({p.rate_gbps for p in h100.ports})
    config.write_text(f'[defaults]\nib_ports = 12\nib_link_layer = "Ethernet"\nib_rate_gbps = {min(rates):g}\n')
    r = run_cli("check", "--config", str(config), "--nvidia-smi-q", str(xml), "--ibstat", str(ibstat / "h100-12-cas.txt"))
    assert r.returncode == 0 and "RoCE" not in r.stdout.decode(), r.stdout
    bad = tmp_path / "ibstat.txt"
    bad.write_text((ibstat / "h100-12-cas.txt").read_text().replace("State: Active", "State: Down", 1))
    r = run_cli("check", "--config", str(config), "--nvidia-smi-q", str(xml), "--ibstat", str(bad))
    assert r.returncode == 1 and "RoCE mlx5_0 port 1 DOWN/LinkUp" in r.stdout.decode(), r.stdout
