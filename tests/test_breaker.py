"""The fleet-wide drain breaker: when it trips, and that it holds until reset."""

import json

import pytest
from support import run_cli

from slurm_gpufleet.slurm import breaker
from slurm_gpufleet.slurm.base import NodeInfo
from slurm_gpufleet.slurm.commands import parse_node_text

NOW = 1_800_000_000.0


def fleet(n=20, drained=(), reason="memory gpu1 row remapping failed [gpufleet]", age=60.0, parts=None):
    out = []
    for i in range(n):
        name = f"g{i:02d}"
        info = NodeInfo(name, "IDLE", {"DRAIN"} if name in drained else set(),
                        reason if name in drained else "", partitions=(parts or {}).get(name, ["batch"]))
        info.reason_time = NOW - age if name in drained else None
        out.append(info)
    return out


def test_trips_past_the_fleet_threshold_counting_only_our_recent_drains():
    # 10% of 20 = 2: the third drain within the window trips
    assert breaker.would_trip(fleet(drained=("g01",)), "g05", "10%", 300, NOW) is None
    trip = breaker.would_trip(fleet(drained=("g01", "g02")), "g05", "10%", 300, NOW)
    assert trip and trip.scope == "fleet" and (trip.drained, trip.limit, trip.total) == (3, 2, 20)
    # drains older than the window, an admin's drains and a rollout's do not count
    assert breaker.would_trip(fleet(drained=("g01", "g02"), age=900), "g05", "10%", 300, NOW) is None
    assert breaker.would_trip(fleet(drained=("g01", "g02"), reason="admin: PSU"), "g05", "10%", 300, NOW) is None
    assert breaker.would_trip(fleet(drained=("g01", "g02"), reason="maintain 0abc upgrading [gpufleet]"),
                              "g05", "10%", 300, NOW) is None


def test_trips_per_partition_and_by_count():
    parts = {f"g{i:02d}": ["small"] for i in range(4)}
    trip = breaker.would_trip(fleet(drained=("g00", "g01"), parts=parts), "g02", "50%", 300, NOW)
    assert trip and trip.scope == "partition small" and trip.limit == 2
    assert breaker.would_trip(fleet(drained=("g00",)), "g02", 1, 300, NOW).limit == 1


def test_reason_time_comes_from_slurm(tmp_path):
    info = parse_node_text("NodeName=n2 Arch=x86_64\n   State=IDLE+DRAIN ThreadsPerCore=1\n"
                           "   Reason=memory gpu5 row remapping failed [gpufleet] [root@2026-11-30T10:04:11]\n")
    assert info.reason_user == "root" and info.reason_time is not None


def test_open_holds_until_reset_and_the_cli_says_so(tmp_path):
    config = tmp_path / "site.toml"
    path = tmp_path / "breaker.json"
    config.write_text(f'[slurm]\nbreaker_file = "{path}"\nstate_dir = "{tmp_path}"\n')
    r = run_cli("breaker", "status", "--config", str(config))
    assert r.returncode == 0 and b"closed" in r.stdout
    breaker.open_(str(path), "g05", "3 of 20 nodes in the fleet drained by gpufleet within 300 s (limit 2)")
    breaker.open_(str(path), "g06", "later")  # the first record stays
    r = run_cli("breaker", "status", "--config", str(config), "--json")
    assert r.returncode == 1
    data = json.loads(r.stdout)
    assert data["open"] and data["node"] == "g05" and "limit 2" in data["why"]
    assert run_cli("breaker", "reset", "--config", str(config)).returncode == 0
    assert breaker.state(str(path)) is None
    assert run_cli("breaker", "status", "--config", str(config)).returncode == 0


def test_an_unreadable_breaker_file_counts_as_open(tmp_path):
    path = tmp_path / "breaker.json"
    path.write_text("{not json")
    assert breaker.state(str(path))["why"].startswith("unreadable breaker file")


@pytest.mark.parametrize("value", ["0", "-1", '"150%"', '"x"'])
def test_bad_threshold_is_a_config_error(tmp_path, value):
    config = tmp_path / "site.toml"
    config.write_text(f"[slurm]\nbreaker_threshold = {value}\n")
    r = run_cli("breaker", "status", "--config", str(config))
    assert r.returncode == 2 and b"breaker_threshold" in r.stderr
