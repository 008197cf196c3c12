"""Root trusts only root's files (slurm_gpufleet/policy/trust.py): each refused case, and what the programs slurmd
runs do on refusal (the packaged defaults, one ALERT line, never the config's program)."""

from __future__ import annotations

import json
import os
import sys

import pytest
from support import REPO, run_cli

from slurm_gpufleet.policy import parse_policy, trust

sys.path.insert(0, str(REPO / "tests"))
from fake_slurm.node import healthcheck, setup  # noqa: E402

NOBODY = 65534


def owned_by_root_only(*paths):
    for p in paths:
        os.chown(p, 0, 0)
        os.chmod(p, 0o755 if p.is_dir() else 0o644)


@pytest.fixture
def tree(tmp_path):
    d = tmp_path / "etc"
    d.mkdir()
    f = d / "gpufleet.toml"
    f.write_text("")
    owned_by_root_only(tmp_path, d, f)
    return d, f


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")


@needs_root
def test_a_root_only_path_is_trusted(tree):
    d, f = tree
    assert trust.problem(str(f), uid=0) is None


# case -> (which path changes, its new mode or None for "owned by nobody", why it is refused)
CASES = {"owner": ("file", None, "owned by nobody"),
         "group-writable": ("file", 0o664, "writable by group root (mode 0664)"),
         "other-writable": ("file", 0o646, "writable by others (mode 0646)"),
         "writable parent": ("dir", 0o775, "writable by group root (mode 0775)"),
         "sticky parent": ("dir", 0o1777, "writable by others (mode 1777, sticky)")}


@needs_root
@pytest.mark.parametrize("case", [*CASES, "symlink to untrusted"])
def test_each_refused_case(tree, case):
    d, f = tree
    path = f
    if case in CASES:
        which, mode, why = CASES[case]
        target = f if which == "file" else d
        os.chown(target, NOBODY, 0) if mode is None else os.chmod(target, mode)
        want = (str(target), why)
    else:
        other = d / "theirs.toml"
        other.write_text("")
        os.chown(other, NOBODY, 0)
        path = d / "link.toml"
        path.symlink_to(other)
        want = (str(other), "owned by nobody")
    r = trust.problem(str(path), uid=0)
    assert r is not None and (r.where, r.why) == want, r
    # the line says what to do
    fix = {"owner": f"fix: chown root {want[0]}", "group-writable": f"fix: chmod go-w {want[0]}",
           "other-writable": f"fix: chmod go-w {want[0]}", "writable parent": f"fix: chmod go-w {want[0]}",
           "sticky parent": f"move it out of {want[0]} (a shared directory)",
           "symlink to untrusted": f"fix: chown root {want[0]}"}[case]
    assert "not trusted (owned by root, writable by no one else); " + fix in r.line()


@needs_root
def test_the_trusted_group_may_write_what_the_config_names_never_the_config(tree):
    d, f = tree
    tpl = d / "upgrade.sh.j2"
    tpl.write_text("")
    os.chown(tpl, 0, 0)
    os.chmod(tpl, 0o664)
    assert trust.problem(str(tpl), uid=0, group=0) is None
    os.chmod(f, 0o664)
    policy = parse_policy(f'[slurm]\ntrusted_group = "root"\nstate_dir = "{d}"\nscontrol = "/usr/bin/scontrol"\n'
                          f'[maintain]\nupgrade_template = "{tpl}"\ndb = "{d}/m.db"\n', str(f))
    refused = trust.refusals(policy, uid=0)
    assert [r.where for r in refused] == [str(f)], refused


@needs_root
def test_the_health_check_never_runs_a_program_from_an_untrusted_config(tmp_path):
    """The scenario of issue 24: a config owned by a user names the program root would run as scontrol."""
    bin_dir, gpus, env = setup(tmp_path)
    config = env["SLURM_GPUFLEET_CONFIG"]
    os.chown(config, NOBODY, 0)
    calls, _, r = healthcheck(bin_dir, env)
    assert calls == [], "the config's scontrol was run"
    assert r.returncode == 0 and "internal error" not in r.stderr
    alert = [line for line in r.stderr.splitlines() if "ALERT gpufleet config refused" in line]
    assert alert and f"{config}: owned by nobody" in alert[0], r.stderr
    os.chown(config, 0, 0)
    calls, _, r = healthcheck(bin_dir, env)  # trusted again: its scontrol is run
    assert calls and "ALERT" not in r.stderr


def _two_node_plan(tmp_path):
    """A plan of two simulated nodes, written by `maintain plan --fleet` as an admin would."""
    from slurm_gpufleet.simulators.rollout import SimFleet

    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps(SimFleet(2).fleet_state().to_dict()))
    plan = tmp_path / "plan.json"
    r = run_cli("maintain", "plan", "--nodes", "node[00001-00002]", "--fleet", str(fleet), "--target-driver",
                "580.159.04", "--force", "--out", str(plan))
    assert r.returncode == 0, r.stderr
    return plan


@needs_root
def test_maintain_install_and_breaker_refuse_in_one_line(tmp_path):
    config = tmp_path / "site.toml"
    tpl = tmp_path / "upgrade.sh.j2"
    tpl.write_text("echo hi\n")
    os.chmod(tpl, 0o666)
    config.write_text(f'[slurm]\nstate_dir = "{tmp_path}/state"\n[maintain]\nupgrade_template = "{tpl}"\n'
                      f'db = "{tmp_path}/maintain.db"\n')
    plan = _two_node_plan(tmp_path)
    for argv in (("breaker", "status"), ("breaker", "reset"), ("maintain", "status"), ("maintain", "apply", str(plan)),
                 ("maintain", "resume")):
        r = run_cli(*argv, "--config", str(config))
        err = r.stderr.decode().strip()
        assert r.returncode == 2 and len(err.splitlines()) == 1 and f"{tpl}: writable by others" in err, (argv, err)
    assert not (tmp_path / "maintain.db").exists(), "nothing written before the refusal"
    # `check` reads GPU state only: unaffected
    r = run_cli("check", "--nvidia-smi-q", str(REPO / "slurm_gpufleet/data/captures/h200-real/nvidia-smi-q.xml"), "--config", str(config),
                "--json")
    assert r.returncode in (0, 1) and json.loads(r.stdout)["verdict"]


@needs_root
def test_apply_checks_the_plan_file_and_slurm_before_it_records_anything(tmp_path):
    tpl = tmp_path / "upgrade.sh.j2"
    tpl.write_text("echo hi\n")
    config = tmp_path / "site.toml"
    config.write_text(f'[slurm]\nstate_dir = "{tmp_path}/state"\nscontrol = "{tmp_path}/bin/scontrol"\n'
                      f'[maintain]\nupgrade_template = "{tpl}"\ndb = "{tmp_path}/maintain.db"\n')
    plan = _two_node_plan(tmp_path)
    # no scontrol at all: exit 2, said in one line, nothing recorded (no wait: the README has the time)
    r = run_cli("maintain", "apply", str(plan), "--config", str(config))
    err = r.stderr.decode().strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and "Slurm does not answer" in err, err
    assert err.endswith("not found); nothing recorded: apply again once `scontrol ping` answers"), err
    assert not (tmp_path / "maintain.db").exists()
    # a Slurm that answers, without the plan's nodes (a plan made on another cluster): said, not "no answer"
    (tmp_path / "bin").mkdir(exist_ok=True)
    scontrol = tmp_path / "bin" / "scontrol"
    scontrol.write_text("#!/bin/sh\ncase \"$*\" in --version) echo 'slurm 22.05.8';; "
                        "*) echo 'NodeName=other1 State=IDLE Partitions=gpu';; esac\n")
    scontrol.chmod(0o755)
    r = run_cli("maintain", "apply", str(plan), "--config", str(config))
    err = r.stderr.decode().strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and "are not in this cluster" in err, err
    assert "Slurm does not answer" not in err and not (tmp_path / "maintain.db").exists()
    scontrol.unlink()
    # a plan file others could have written decides nothing
    os.chmod(plan, 0o666)
    r = run_cli("maintain", "apply", str(plan), "--config", str(config))
    err = r.stderr.decode().strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and f"{plan}: writable by others" in err, err
    assert "write the plan where only root can" in err
    assert not (tmp_path / "maintain.db").exists()


@needs_root
@pytest.mark.slow  # 10 s of program runs: the slow tier (make test-fast stays under 60 s)
def test_the_edges_a_config_judged_before_parsing_programs_of_jobs_interpreter_read_only_commands(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp is
    # a config others could write is refused before it is parsed: a broken one says "refused", not a
    # parse error (nothing of it was read)
    broken = shared / "site.toml"
    broken.write_text("[maintain\nnot toml at all")
    r = run_cli("breaker", "status", "--config", str(broken))
    err = r.stderr.decode().strip()
    assert r.returncode == 2 and "refused" in err and "move it out of" in err and "TOML" not in err, err
    # and the health check runs on the packaged defaults, with its ALERT, instead of "config error"
    (tmp_path / "node").mkdir()
    bin_dir, gpus, env = setup(tmp_path / "node")
    calls, _, r = healthcheck(bin_dir, {**env, "SLURM_GPUFLEET_CONFIG": str(broken)})
    assert "ALERT gpufleet config refused" in r.stderr and "config error" not in r.stderr, r.stderr
    # the program a validation job or the deep check runs is judged as the config's own programs are
    tpl = tmp_path / "upgrade.sh.j2"
    tpl.write_text("echo hi\n")
    config = tmp_path / "site.toml"
    for key, section in (("validation_job", "maintain"), ("lemon_check", "slurm")):
        config.write_text(f'[slurm]\nstate_dir = "{tmp_path}/state"\n'
                          + (f'{key} = "{shared}/check.sh --deep"\n' if section == "slurm" else "")
                          + f'[maintain]\nupgrade_template = "{tpl}"\ndb = "{tmp_path}/maintain.db"\n'
                          + (f'{key} = "NCCL_DEBUG=WARN {shared}/check.sh --deep"\n' if section == "maintain" else ""))
        r = run_cli("maintain", "status", "--config", str(config))
        err = r.stderr.decode().strip()
        assert r.returncode == 2 and f"{shared}/check.sh" in err and "sticky" in err, (key, err)
    # read-only commands read an untrusted config, with one warning line, all alike
    sample = REPO / "etc" / "sample-fleet.json"
    untrusted = shared / "read.toml"
    untrusted.write_text("[maintain]\nmax_unavailable = 3\n")
    warnings = set()
    for argv in (("fleet", "--fleet", str(sample)),
                 ("maintain", "plan", "--fleet", str(sample), "--nodes", "gpu[001-004]", "--target-driver",
                  "580.159.04"),
                 ("maintain", "simulate", "--nodes", "4", "--no-replay", "--seeds", "1")):
        r = run_cli(*argv, "--config", str(untrusted))
        lines = [line for line in r.stderr.decode().splitlines() if "trials:" not in line]  # (progress)
        assert r.returncode == 0 and len(lines) == 1 and "warning" in lines[0], (argv, r.stderr)
        warnings.add(lines[0])
    assert len(warnings) == 1 and "read only here: nothing runs as root" in warnings.pop()
    # install judges the interpreter the wrappers will run
    (shared / "python3").symlink_to(sys.executable)
    r = run_cli("install", "--prefix", str(tmp_path / "opt"), "--python", str(shared / "python3"))
    err = r.stderr.decode().strip()
    assert r.returncode == 2 and f"refused: {shared}" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "opt").exists()


@needs_root
def test_imex_ctl_and_the_reset_program_are_judged_by_the_trust_rule(tmp_path):
    """Root runs imex_ctl in every IMEX job's prolog and epilog, and the reset command on idle GPUs: a
    world-writable one is refused like any program the config names."""
    owned_by_root_only(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    owned_by_root_only(bin_dir)
    for name in ("imex-ctl", "reset"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        owned_by_root_only(bin_dir / name)
    policy = parse_policy(f'[slurm]\nimex_ctl = "{bin_dir / "imex-ctl"}"\nreset_command = "{bin_dir / "reset"} -i {{gpus}}"\n')
    _, named = trust.policy_paths(policy)
    assert str(bin_dir / "imex-ctl") in named and str(bin_dir / "reset") in named
    assert not [r for r in trust.refusals(policy, uid=0) if "imex-ctl" in r.path or "reset" in r.path]
    os.chmod(bin_dir / "imex-ctl", 0o666)
    os.chmod(bin_dir / "reset", 0o646)
    refused = {r.path: r.why for r in trust.refusals(policy, uid=0)}
    assert refused[str(bin_dir / "imex-ctl")] == "writable by others (mode 0666)"
    assert "writable by others" in refused[str(bin_dir / "reset")]


def test_a_bare_program_is_found_on_roots_path_never_the_callers(tmp_path):
    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "ran"
    for name in ("true", "systemctl", "nvidia-smi"):
        (evil / name).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (evil / name).chmod(0o755)
    saved = os.environ["PATH"]
    os.environ["PATH"] = f"{evil}:{saved}"  # the caller's PATH, its own programs first
    try:
        _bare_programs(marker)
    finally:
        os.environ["PATH"] = saved


def _bare_programs(marker) -> None:
    from slurm_gpufleet.remedy.ladder import run_reset

    assert trust.root_program("true") in ("/usr/bin/true", "/bin/true")
    assert trust.root_program("./true") is None and trust.root_program("/opt/x/reset") == "/opt/x/reset"
    result = run_reset("true {gpus}", "n1", [0, 1], 5)  # the caller's PATH has its own `true` first
    assert result.ok and not marker.exists()
    result = run_reset("no-such-reset-program -i {gpus}", "n1", [0], 5)
    assert not result.ok and "not an absolute path nor a program on root's PATH" in result.detail
    from slurm_gpufleet.readers.host import read_fabric_manager

    read_fabric_manager(uptime_s=100.0, timeout_s=2)  # systemctl from root's PATH, or none: never the evil one
    assert not marker.exists()


def test_every_slurm_program_root_runs_and_the_samplers_shared_folder_are_judged(tmp_path):
    """The epilog runs sacctmgr as root, the ladder sbatch and scancel: each one beside scontrol is judged;
    the samplers write `instep_share_dir` as root and the checks decide on it: `/tmp` is refused."""
    owned_by_root_only(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    owned_by_root_only(bin_dir)
    for name in ("scontrol", "sacctmgr", "sbatch", "scancel"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        owned_by_root_only(bin_dir / name)
    share = tmp_path / "share"
    share.mkdir()
    owned_by_root_only(share)
    policy = parse_policy(f'[slurm]\nscontrol = "{bin_dir / "scontrol"}"\ninstep_share_dir = "{share}"\n')
    _, named = trust.policy_paths(policy)
    assert {str(bin_dir / p) for p in ("sacctmgr", "sbatch", "scancel")} <= set(named) and str(share) in named
    assert not [r for r in trust.refusals(policy, uid=0) if str(tmp_path) in r.path]
    os.chmod(bin_dir / "sacctmgr", 0o646)
    refused = {r.path: r.why for r in trust.refusals(policy, uid=0)}
    assert refused[str(bin_dir / "sacctmgr")] == "writable by others (mode 0646)"
    tmp_policy = parse_policy('[slurm]\ninstep_share_dir = "/tmp"\n')
    assert [r for r in trust.refusals(tmp_policy, uid=0) if r.path == "/tmp"], "a world-writable folder is refused"
