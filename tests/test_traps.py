"""The traps a new admin met in plan and apply (issue 48), each closed."""

from __future__ import annotations

import json

from support import run_cli


def test_a_plan_file_of_another_shape_is_one_line_and_exit_2(tmp_path):
    for name, body in (("list.json", [1, 2]), ("other.json", {"plan_version": 1, "targets": "x"}),
                       ("number.json", 7)):
        path = tmp_path / name
        path.write_text(json.dumps(body))
        r = run_cli("maintain", "apply", str(path))
        err = r.stderr.decode().strip()
        assert r.returncode == 2 and len(err.splitlines()) == 1, (name, r.returncode, err)
        assert err.startswith(f"slurm-gpufleet: error: {path}: not a plan: not a slurm-gpufleet plan"), err


def test_fleet_repaired_dry_run_writes_nothing_and_fleet_commands_take_config_after_their_name(tmp_path):
    import sys

    from support import REPO

    sys.path.insert(0, str(REPO / "tests"))
    from fake_slurm.node import setup

    bin_dir, _, env = setup(tmp_path)
    (bin_dir / "node.json").write_text(json.dumps({"state": "IDLE", "drain": True, "extra": "",
                                                   "reason": "repair ecc attempt 3 of 3 in 7d [gpufleet]"}))
    config = env["SLURM_GPUFLEET_CONFIG"]
    env = {k: v for k, v in env.items() if k != "SLURM_GPUFLEET_CONFIG"}
    r = run_cli("fleet", "repaired", "n9", "--dry-run", "--config", config, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().strip() == "n9: would be marked validate after repair"
    calls = [json.loads(line) for line in (bin_dir / "calls.jsonl").read_text().splitlines()]
    assert not [c for c in calls if c[0] == "update"], calls
    assert json.loads((bin_dir / "node.json").read_text())["reason"].startswith("repair ecc")
    r = run_cli("fleet", "cases", "--config", config, "--json", env=env)
    assert r.returncode == 0, r.stderr


def test_a_truncated_target_driver_is_refused(tmp_path):
    from support import REPO

    fleet = REPO / "etc" / "sample-fleet.json"
    r = run_cli("maintain", "plan", "--fleet", str(fleet), "--target-driver", "580.172", "--nodes", "gpu[001-004]")
    assert r.returncode == 2 and "--target-driver: driver '580.172': a driver version is branch.minor.patch" in r.stderr.decode()


def test_a_firmware_target_without_a_model_on_nodes_of_two_models_is_refused_naming_them():
    from support import REPO

    fleet = REPO / "etc" / "sample-fleet.json"
    r = run_cli("maintain", "plan", "--fleet", str(fleet), "--target-firmware", "vbios=96.00.AF.00.01",
                "--nodes", "gpu[001-032],a100-[01-08]")
    err = r.stderr.decode()
    assert r.returncode == 2 and "--target-firmware vbios=96.00.AF.00.01 names no GPU model, and the nodes have 2:" in err
    assert "NVIDIA A100-SXM4-80GB (x8)" in err and "NVIDIA H200 (x32)" in err, err


def test_a_per_model_firmware_plans_headline_counts_the_nodes_it_touches():
    from support import REPO

    r = run_cli("maintain", "plan", "--fleet", str(REPO / "etc" / "sample-fleet.json"), "--target-firmware",
                "NVIDIA H200:vbios=96.00.AF.00.01", "--nodes", "gpu[001-032],a100-[01-08]")
    head = r.stdout.decode().splitlines()[0]
    assert r.returncode == 0 and ": firmware for NVIDIA H200 on " in head and "nothing" not in head, head
    touched = int(head.split(" on ")[1].split()[0])
    assert touched <= 32 and "of the 40 selected left out" in head, head
