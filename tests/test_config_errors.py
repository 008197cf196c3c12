"""A config that cannot be used is loud and narrows nothing away: the programs Slurm runs go on with the
last config that loaded (or the packaged defaults in observe mode), publish why in the node's summary
(`err`), `fleet` lists the node, `--nhc` says it; `check --config` names FILE:LINE in one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import REPO, run_cli

sys.path.insert(0, str(REPO / "tests"))
from fake_slurm.node import fault, healthcheck, setup  # noqa: E402

H200 = str(REPO / "slurm_gpufleet" / "data" / "captures" / "h200-real" / "nvidia-smi-q.xml")
# each crashed the parser (exit 70, or the health check's "internal error, no action taken")
BROKEN = {
    "a list where a table array belongs": ("group = [1]\n", 1),
    "a number where [models] belongs": ("models = 5\n", 1),
    "a host list past any fleet": ('[[group]]\nname = "a"\nnodes = "n[1-99999999999]"\n', 3),
    "arrays nested past the stack": ("a = " + "[" * 2000 + "\n", 1),
    "a list where the mode belongs": ('[[group]]\nnodes = "n9"\nmode = ["full"]\n', 3),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_check_names_file_and_line_in_one_line_exit_2(tmp_path, name):
    body, line = BROKEN[name]
    cfg = tmp_path / "gpufleet.toml"
    cfg.write_text(body)
    r = run_cli("check", "--nvidia-smi-q", H200, "--config", str(cfg))
    err = r.stderr.decode().strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"slurm-gpufleet: error: {cfg}:{line}: "), err


def _summary(bin_dir) -> dict:
    return json.loads(json.loads((bin_dir / "node.json").read_text())["extra"])


def _node(tmp_path, mode: str):
    bin_dir, gpus, env = setup(tmp_path)
    cfg = tmp_path / "gpufleet.toml"
    good = cfg.read_text() + f'validation_command = ""\nkernel_log = "{tmp_path}/kmsg"\n[defaults]\nmode = "{mode}"\n'
    cfg.write_text(good)
    (tmp_path / "kmsg").mkdir()
    return bin_dir, gpus, env, cfg, good


def test_a_config_that_stops_loading_runs_on_the_last_that_did_and_says_so(tmp_path):
    bin_dir, gpus, env, cfg, good = _node(tmp_path, "observe")
    calls, _, r = healthcheck(bin_dir, env)
    assert r.returncode == 0 and "err" not in _summary(bin_dir)
    # a typo: a group whose nodes are a list; observe mode must stay observe, not become the default full
    cfg.write_text(good + "[[group]]\nnodes = [1]\n")
    fault(gpus, 5, "row_remap_failure")
    calls, _, r = healthcheck(bin_dir, env)
    assert r.returncode == 0 and "internal error" not in r.stderr, r.stderr
    assert "ALERT gpufleet config error, running on the last config that loaded" in r.stderr
    shown = json.loads((bin_dir / "node.json").read_text())
    assert not shown.get("drain"), "observe mode kept: nothing drained"
    summary = _summary(bin_dir)
    assert summary["err"].startswith(f"config: {cfg}:") and "needs 'nodes'" in summary["err"]
    assert summary["v"] == "drain" and summary["obs"].startswith("drain: memory gpu5"), "still checked"
    # `fleet` lists the node: from the fleet as Slurm shows it (saved as `fleet save` does), with a config
    # that loads (the broken one is refused there, in one line)
    from slurm_gpufleet.maintain.fleet import FleetNode, FleetState
    from slurm_gpufleet.slurm.base import NodeInfo

    shown = NodeInfo("n9", "IDLE", frozenset(), extra=(json.loads((bin_dir / "node.json").read_text())["extra"]))
    saved = tmp_path / "fleet.json"
    saved.write_text(json.dumps(FleetState({"n9": FleetNode.from_info(shown)}, []).to_dict()))
    refused = run_cli("fleet", "--fleet", str(saved), "--json", env={**env, "SLURM_GPUFLEET_CONFIG": str(cfg)})
    assert refused.returncode == 2 and refused.stderr.decode().startswith(f"slurm-gpufleet: error: {cfg}:")
    admin = tmp_path / "admin.toml"
    admin.write_text(good)
    out = run_cli("fleet", "--fleet", str(saved), "--json", env={**env, "SLURM_GPUFLEET_CONFIG": str(admin)})
    inv = json.loads(out.stdout)
    assert [c["node"] for c in inv["cannot_check"]] == ["n9"] and inv["cannot_check"][0]["err"] == summary["err"]
    text = run_cli("fleet", "--fleet", str(saved), env={**env, "SLURM_GPUFLEET_CONFIG": str(admin)}).stdout.decode()
    assert "cannot be checked as configured (the tool's own faults): 1 node(s)" in text
    # --nhc judges on the kept config and says why it cannot judge as configured (NHC logs it, fails nothing)
    exe = [sys.executable, str(REPO / "healthcheck" / "slurm-gpufleet-healthcheck"), "--nhc"]
    gpus_healthy = (tmp_path / "gpus" / "n9.json")
    import gpustate

    gpustate.write_atomic(gpustate.healthy_state(8, "n9"), str(gpus_healthy))
    nhc = subprocess.run(exe, env=env, capture_output=True, text=True, timeout=60)
    # one line, cut to a reason's length (NHC puts it in its log)
    assert nhc.returncode == 2 and nhc.stdout.startswith(f"config error: {str(cfg)[:40]}"), (nhc.returncode, nhc.stdout)
    # fixed: the error goes from the summary
    cfg.write_text(good)
    healthcheck(bin_dir, env)
    assert "err" not in _summary(bin_dir)


def test_with_no_config_ever_loaded_the_defaults_run_in_observe_mode(tmp_path):
    bin_dir, gpus, env, cfg, good = _node(tmp_path, "full")
    cfg.write_text(good + "models = 5\n")   # broken from the first run: no config has loaded here
    fault(gpus, 5, "row_remap_failure")
    calls, _, r = healthcheck(bin_dir, env)
    assert r.returncode == 0 and "internal error" not in r.stderr, r.stderr
    assert "running on the packaged defaults in observe mode" in r.stderr
    assert not json.loads((bin_dir / "node.json").read_text()).get("drain"), "a config error never drains"
    summary = _summary(bin_dir)
    assert summary["err"].startswith(f"config: {cfg}:") and summary["v"] == "drain"


def test_a_mistyped_ib_sysfs_is_said_and_drains_nothing(tmp_path):
    """`[slurm] ib_sysfs` naming a folder that is not there is the config's fault: the health check says so
    and judges no InfiniBand, where a node whose ports were all missing would have been drained."""
    bin_dir, gpus, env = setup(tmp_path)
    with open(env["SLURM_GPUFLEET_CONFIG"], "a") as fh:
        fh.write(f'ib_sysfs = "{tmp_path}/sys/class/infinibnd"\n[defaults]\nib_ports = 4\n')
    calls, _, r = healthcheck(bin_dir, env)
    assert "ib_sysfs" in r.stderr and "no such folder: InfiniBand not judged" in r.stderr, r.stderr
    assert not [c for c in calls if any("state=drain" in a.lower() for a in c)], calls
