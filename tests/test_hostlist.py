"""Output that holds at fleet size: node lists folded into Slurm host lists, one line per shared reason;
`--json` keeps the full lists."""

import json

import pytest
from support import REPO, run_cli

from slurm_gpufleet.common.hostlist import fold, fold_short, grouped


def test_fold_and_group():
    assert fold([f"g{i}" for i in range(10001, 12501)]) == "g[10001-12500]"
    assert fold(["gpu003", "gpu001", "gpu002", "a100-01"]) == "a100-01,gpu[001-003]"
    assert fold([]) == ""
    rows = grouped([("n1", "driver old"), ("n2", "driver old"), ("n9", "verdict drain"), ("n3", "driver old")])
    assert rows == [("driver old", 3, "n[1-3]"), ("verdict drain", 1, "n9")]
    cut = fold_short([f"x{i * 2}" for i in range(500)], 60)
    assert len(cut) <= 60 and cut.endswith("(500 nodes)")


def _fleet(path, n=12500, old=2500):
    nodes = []
    for i in range(1, n + 1):
        nodes.append({"name": f"g{i:05d}", "partitions": ["batch"], "features": ["h200"], "state": "IDLE",
                      "flags": [], "reason": "", "reason_user": None,
                      "driver": "570.172.08" if i > n - old else "580.159.04", "cuda": "13.0",
                      "gpus": "8xNVIDIA H200", "firmware": "96.00.A5.00.1A", "verdict": "ok",
                      "checked": "2026-11-29T23:55Z"})
    path.write_text(json.dumps({"taken_at": 1795996800.0, "nodes": nodes, "jobs": [], "reservations": []}))


@pytest.mark.slow  # whole replays / 12,500 nodes: the slow tier (make test, CI)
def test_fleet_and_plan_text_fold_at_12500_nodes(tmp_path):
    fleet = tmp_path / "fleet.json"
    _fleet(fleet)
    r = run_cli("fleet", "--fleet", str(fleet))
    assert r.returncode == 0, r.stderr
    text = r.stdout.decode()
    assert len(text.splitlines()) < 20, text
    assert "2500 g[10001-12500]: driver 570.172.08 != 580.159.04" in text
    r = run_cli("fleet", "--fleet", str(fleet), "--json")
    off = json.loads(r.stdout)["groups"]["(defaults)"]["off_standard"]
    assert len(off) == 2500 and off[0]["node"] == "g10001"  # JSON keeps every node
    r = run_cli("maintain", "plan", "--target-driver", "580.159.04", "--nodes", "g[00001-12500]",
                "--fleet", str(fleet))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert len(lines) < 30 and max(map(len, lines)) <= 120, "\n".join(lines)
    assert any("skipped 10000: already at 580.159.04: g[00001-10000]" in line for line in lines)
    assert any("g[" in line and "wave" in line for line in lines)


@pytest.mark.parametrize("expr,n", [("gpu[001-128]", 128), ("g[1-4],h[1-2]", 6), ("g[1-3,7,10-11]", 6),
                                    ("r[1-2]-n[01-18]", 36), ("g[0-10/2]", 6), ("gpu01", 1), ("", 0)])
def test_a_host_list_is_sized_without_making_its_names(expr, n):
    from slurm_gpufleet.common.hostlist import size

    assert size(expr) == n


def test_a_host_list_past_the_bound_is_refused_before_it_is_made():
    """gpu[1-99999999] grew to 17 GB as ClusterShell made every name; now one line, at once."""
    from slurm_gpufleet.common.hostlist import MAX_HOSTS, expand

    with pytest.raises(ValueError, match="names 99,999,999 nodes; at most 100,000"):
        expand("gpu[1-99999999]")
    assert len(expand(f"g[1-{MAX_HOSTS}]")) == MAX_HOSTS
    r = run_cli("maintain", "plan", "--fleet", str(REPO / "etc" / "sample-fleet.json"), "--target-driver",
                "580.159.04", "--nodes", "gpu[1-99999999]", timeout=20)
    assert r.returncode == 2 and b"at most 100,000" in r.stderr, r.stderr
