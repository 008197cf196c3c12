"""GPU models true to their SKU (data/gpu_models.toml): healthy boards of every kind a site runs give no
NVLink or fabric-manager finding, and the same faults on them still do."""

from __future__ import annotations

import copy

import pytest

from slurm_gpufleet import evaluate
from slurm_gpufleet.judging.checks.fabric import needs_fabric_manager
from slurm_gpufleet.policy import parse_policy
from slurm_gpufleet.readers.snapshot import FabricManager, HostFacts, NvLink


def board(h200, name: str, gpus: int = 8, active: int | None = 18, slots: int = 18, fm: FabricManager | None = None):
    """`gpus` GPUs named `name`, each with `slots` NVLink answers of which the first `active` are up (as NVML
    answers for 18 on every board), and the fabric manager as given; booted long ago."""
    snap = copy.deepcopy(h200)
    base = snap.gpus[0]
    snap.gpus = []
    for i in range(gpus):
        g = copy.deepcopy(base)
        g.index, g.name, g.uuid = i, name, f"GPU-{i:08d}-0000-0000-0000-000000000000"
        g.pci_bus_id = f"00000000:{0x10 + i:02X}:00.0"
        g.nvlinks = [NvLink(link=k, active=active is not None and k < active) for k in range(slots)]
        snap.gpus.append(g)
    snap.uptime_s = 86_400.0
    snap.host_facts = HostFacts(fabric_manager=fm or FabricManager(installed=False, failed_probes=3))
    return snap


def nvlink_and_fabric(snap, policy=None):
    return [(f.severity, f.check, f.gpu, f.message) for f in evaluate(snap, policy).findings
            if f.check in ("nvlink", "fabric")]


@pytest.mark.parametrize("name,active,fm", [
    ("NVIDIA A100-SXM4-80GB", 12, FabricManager(installed=True, active="active", restarts=0)),  # DGX A100
    ("NVIDIA H100 80GB HBM3", 18, FabricManager(installed=True, active="active", restarts=0)),
    ("NVIDIA H200", 18, FabricManager(installed=True, active="active", restarts=0)),
    ("NVIDIA H200 NVL", 18, None),            # PCIe cards with a 4-way bridge: no NVSwitch, no fabric manager
    ("NVIDIA H200 NVL", None, None),          # ... and without the bridge
    ("NVIDIA H100 NVL", 12, None),
    ("NVIDIA H100 PCIe", None, None),
    ("NVIDIA A100 80GB PCIe", 12, None),
    ("NVIDIA L40S", None, None),              # no NVLink at all: NVML's 18 inactive answers mean nothing
    ("Tesla T4", None, None),
    ("NVIDIA L4", None, None),
])
def test_a_healthy_board_of_every_sku_gives_no_nvlink_or_fabric_finding(h200, name, active, fm):
    assert nvlink_and_fabric(board(h200, name, active=active, fm=fm)) == []


def test_an_a100_link_down_is_found_among_its_own_12(h200):
    snap = board(h200, "NVIDIA A100-SXM4-80GB", active=12, fm=FabricManager(installed=True, active="active"))
    snap.gpus[3].nvlinks[5].active = False
    assert nvlink_and_fabric(snap) == [("drain", "nvlink", 3, "1 NVLink(s) inactive")]


def test_a_bridged_card_with_one_link_of_its_bridge_down_is_found(h200):
    snap = board(h200, "NVIDIA H100 NVL", active=12)
    snap.gpus[1].nvlinks[2].active = False
    assert nvlink_and_fabric(snap) == [("drain", "nvlink", 1, "1 NVLink(s) inactive")]


def test_the_fabric_manager_is_asked_for_on_nvswitch_boards_only(h200):
    assert needs_fabric_manager(board(h200, "NVIDIA A100-SXM4-80GB", active=12))
    assert needs_fabric_manager(board(h200, "NVIDIA H200"))
    assert not needs_fabric_manager(board(h200, "NVIDIA H200 NVL"))
    assert not needs_fabric_manager(board(h200, "NVIDIA A100-SXM4-80GB", gpus=4, active=12))  # 4-GPU HGX: no NVSwitch
    assert nvlink_and_fabric(board(h200, "NVIDIA A100-SXM4-80GB", active=12)) == [
        ("drain", "fabric", None, "nvidia-fabricmanager not installed")]


def test_a_sites_own_model_reaches_the_fabric_manager_question(h200):
    policy = parse_policy('[models."Acme X9"]\nmatch = "Acme X9"\nnvswitch_board = true\nnvlink_links = 4\n')
    snap = board(h200, "Acme X9", active=4)
    assert not needs_fabric_manager(snap)
    assert needs_fabric_manager(snap, policy.models)
    assert nvlink_and_fabric(snap, policy) == [("drain", "fabric", None, "nvidia-fabricmanager not installed")]
    # a site's card with no NVLink: 0 is taken, and nothing NVLink is judged
    policy = parse_policy('[models."Acme P1"]\nmatch = "Acme P1"\nnvlink_links = 0\n')
    assert nvlink_and_fabric(board(h200, "Acme P1", active=None), policy) == []


def test_every_model_with_nvlink_names_its_link_speed_and_a_slow_bridge_link_is_found(h200):
    from slurm_gpufleet.catalogs import gpu_models

    for m in gpu_models():
        if m.nvlink_links:
            assert m.nvlink_gbps in (25, 26.562, 53.125), m.name
        elif m.nvlink_links == 0:
            assert m.nvlink_gbps is None, m.name
    snap = board(h200, "NVIDIA H100 NVL", active=12)
    for g in snap.gpus:
        for link in g.nvlinks:
            link.speed_gbps = 26.562
    assert nvlink_and_fabric(snap) == []
    snap.gpus[2].nvlinks[4].speed_gbps = 13.281  # a bridge link trained at half its speed
    assert [(sev, gpu) for sev, _, gpu, _ in nvlink_and_fabric(snap)] == [("drain", 2)]
