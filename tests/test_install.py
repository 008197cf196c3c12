"""`slurm-gpufleet install`: wrappers slurmd can run with no PATH, a skeleton that parses to the safe
defaults, the site's files never overwritten, idempotent, and --dry-run writes nothing."""

import dataclasses
import os
import shlex
import subprocess

import pytest
from support import run_cli, trusted_python, trusted_tree

from slurm_gpufleet.policy import load_policy


def _install(*args: str):
    """`install` run from a package copy that passes the trust rule (the clone, unless it is under /tmp),
    for an interpreter that passes it (this one, unless its venv is under /tmp)."""
    return run_cli("install", "--python", trusted_python(), *args, cwd=trusted_tree())


def test_install_writes_runnable_wrappers_and_is_idempotent(tmp_path):
    prefix = tmp_path / "opt"
    r = _install("--prefix", str(prefix), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().count("would write") == 6 and not prefix.exists()

    r = _install("--prefix", str(prefix), "--interval", "120")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().count("wrote") == 6
    conf = (prefix / "etc" / "slurm.conf.gpufleet").read_text()
    assert f"HealthCheckProgram={prefix}/sbin/slurm-gpufleet-healthcheck" in conf
    assert "HealthCheckInterval=120" in conf and f"Prolog={prefix}/sbin/slurm-gpufleet-prolog" in conf
    # the skeleton is all comments but this prefix's commands: it loads, and gives the defaults but those
    from slurm_gpufleet.hooks.install import prefixed_commands

    skeleton = prefix / "etc" / "gpufleet.toml"
    defaults = load_policy(None)
    moved = prefixed_commands(str(prefix / "sbin"))
    assert set(moved) == {"validation_command", "sweep_command", "lemon_check"}
    assert dataclasses.replace(load_policy(str(skeleton)), path=None) == dataclasses.replace(
        defaults, path=None, slurm=dataclasses.replace(defaults.slurm, **moved))
    assert "{{ node }}" in (prefix / "etc" / "upgrade.sh.j2").read_text()

    # the wrapper runs with an empty environment, as slurmd runs it, from another directory
    wrapper = prefix / "sbin" / "slurm-gpufleet-healthcheck"
    assert os.access(wrapper, os.X_OK) and trusted_python() in wrapper.read_text()
    assert f"SLURM_GPUFLEET_CONFIG={skeleton}" in wrapper.read_text()
    r = subprocess.run([str(wrapper), "--help"], env={}, cwd="/", capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "HealthCheckProgram" in r.stdout, r.stderr

    # the site edits its config; a second run keeps it and rewrites nothing else
    skeleton.write_text("[defaults]\nexpected_gpus = 8\n")
    r = _install("--prefix", str(prefix), "--interval", "120")
    out = r.stdout.decode()
    assert r.returncode == 0 and "wrote" not in out and out.count("unchanged") == 4 and out.count("kept") == 3
    # (the third: the programs' state directory, made root's alone by the first run if it was missing)
    state = next(line.split()[-1] for line in out.splitlines() if line.startswith("kept") and "gpufleet.toml"
                 not in line and "upgrade.sh.j2" not in line)
    assert state == load_policy(None).slurm.state_dir and not os.stat(state).st_mode & 0o022
    assert skeleton.read_text() == "[defaults]\nexpected_gpus = 8\n"
    # a changed setting rewrites only what depends on it
    out = _install("--prefix", str(prefix), "--interval", "60").stdout.decode()
    assert [line.split()[-1] for line in out.splitlines() if line.startswith("wrote")] == [
        str(prefix / "etc" / "slurm.conf.gpufleet")]


def test_install_refuses_relative_paths(tmp_path):
    r = _install("--prefix", "relative/dir")
    assert r.returncode == 2 and b"absolute" in r.stderr and r.stderr.count(b"\n") == 1


@pytest.mark.parametrize("release,interval,read,timeout,notes", [
    ("26.05.5", 5, 20, 40, ["runs may overlap; HealthCheckTimeout is set above the interval"]),  # the run's need wins
    ("26.05.5", 5, 4, 24, ["Slurm logs an error"]),
    ("26.05.5", 300, 20, None, []),   # the default 60 s fits under the interval and covers the watchdog
    ("26.05.5", 60, 20, 59, []),      # the default would not stay under the interval; 59 covers 40
    ("26.05.5", 300, 50, 70, []),     # the default would kill the watchdog's drain
    ("24.11.5", 5, 20, None, ["runs may overlap"]),  # 24.11 has no such key
    ("24.11.5", 30, 20, None, ["runs may overlap"]),
    ("24.11.5", 300, 50, None, ["kills a health check after 60 s"]),
    ("22.05.8", 5, 4, None, ["runs may overlap"])])   # 22.05 would refuse the key
def test_health_check_limit_leaves_the_watchdog_time_to_drain(release, interval, read, timeout, notes):
    """slurmd 26.05 kills a run at HealthCheckTimeout (seen: interval 5, limit 4, runs of 4.8 s under load
    were killed before they published); a limit under read_timeout_s would also kill the watchdog."""
    from slurm_gpufleet.hooks.install import health_check_limit, slurm_conf_lines

    got, said = health_check_limit(interval, read, release)
    assert got == timeout
    assert len(said) == len(notes) and all(n in s for n, s in zip(notes, said, strict=False)), said
    assert not any("Slurm logs an error" in s for s in said) or (timeout or 0) >= interval
    lines = [line for line in slurm_conf_lines("/opt/g/sbin", interval, slurm_version=release,
                                               read_timeout_s=read).splitlines()
             if line.startswith("HealthCheckTimeout=")]
    assert lines == ([f"HealthCheckTimeout={timeout}"] if timeout else [])


def test_slurm_conf_takes_read_timeout_from_the_config_and_says_why(tmp_path):
    config = tmp_path / "gpufleet.toml"
    config.write_text("[slurm]\nread_timeout_s = 4\n")
    r = run_cli("slurm-conf", "--interval", "5", "--slurm-version", "26.05.5", "--config", str(config))
    out, err = r.stdout.decode(), r.stderr.decode()
    assert r.returncode == 0 and "HealthCheckTimeout=24" in out and "read_timeout_s 4" in out
    assert err.startswith("note: HealthCheckInterval 5 s is shorter") and err.count("\n") == 1
    r = run_cli("slurm-conf", "--interval", "300", "--slurm-version", "26.05.5", "--config", str(config))
    assert r.returncode == 0 and "HealthCheckTimeout" not in r.stdout.decode() and not r.stderr


def test_install_writes_only_trusted_paths_and_refuses_an_untrusted_prefix(tmp_path):
    old = os.umask(0o002)  # a group-writable umask must not leak into what slurmd runs as root
    try:
        prefix = tmp_path / "opt" / "gpufleet"
        r = _install("--prefix", str(prefix))
    finally:
        os.umask(old)
    out = r.stdout.decode()
    assert r.returncode == 0 and "trusted        every path above" in out, out
    assert all((p.stat().st_mode & 0o022) == 0 for p in [prefix, prefix / "sbin", prefix / "etc", *prefix.rglob("*")])
    open_dir = tmp_path / "shared"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    r = _install("--prefix", str(open_dir / "gpufleet"), "--dry-run")
    assert r.returncode == 0 and f"would refuse   {open_dir}: writable by others (mode 0777)" in r.stdout.decode()
    r = _install("--prefix", str(open_dir / "gpufleet"))
    err = r.stderr.decode().strip()
    assert r.returncode == 2 and err.startswith(f"slurm-gpufleet: error: refused: {open_dir} ") and "\n" not in err, err
    assert not (open_dir / "gpufleet").exists()


def test_an_install_under_a_prefix_points_the_commands_it_configures_there(tmp_path):
    """The ladder's validation, the idle sweep and the lemon check run this project's health check: under
    `--prefix DIR` the config written runs DIR/sbin's, which exists (before: /usr/local/sbin's, and every
    remedied node failed its validation with exit 127)."""
    from slurm_gpufleet.policy import load_policy

    prefix = tmp_path / "opt gpufleet"
    r = _install("--prefix", str(prefix))
    assert r.returncode == 0, r.stderr
    policy = load_policy(str(prefix / "etc" / "gpufleet.toml"))
    for command in (policy.slurm.validation_command, policy.slurm.sweep_command, policy.slurm.lemon_check):
        program = shlex.split(command)[0]
        assert program == str(prefix / "sbin" / "slurm-gpufleet-healthcheck") and os.access(program, os.X_OK), command
    assert shlex.split(policy.slurm.validation_command)[1:] == ["--level", "deep", "--nhc"]


@pytest.mark.parametrize("release, suggested", [("24.11", True), ("26.05", True), ("23.02", False), ("22.05", False)])
def test_install_suggests_extra_constraints_where_slurm_has_it_and_always_the_accounting_lines(tmp_path, release,
                                                                                               suggested):
    r = _install("--prefix", str(tmp_path / "gpufleet"), "--dry-run", "--slurm-version", release)
    out = r.stdout.decode()
    assert ("# SchedulerParameters=extra_constraints" in out) == suggested, out
    assert 'sbatch --extra "suspect=0&lemon<2"' in out or not suggested
    assert "# AccountingStorageType=accounting_storage/slurmdbd" in out and "sacctmgr beside scontrol" in out


def test_install_says_where_sacct_and_sacctmgr_are_missing_beside_scontrol(tmp_path):
    from slurm_gpufleet.hooks.install import accounting_notes

    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("scontrol", "sacct"):
        (bindir / name).write_text("#!/bin/sh\n")
        (bindir / name).chmod(0o755)
    assert accounting_notes(str(bindir / "scontrol")) == [
        f"sacctmgr not in {bindir} beside scontrol: the job record (AdminComment, in slurmdbd's accounting) is not written "
        "where they are missing"]
    (bindir / "sacctmgr").write_text("#!/bin/sh\n")
    (bindir / "sacctmgr").chmod(0o755)
    assert accounting_notes(str(bindir / "scontrol")) == []


@pytest.mark.parametrize("release, offered", [("22.05", []), ("24.11", []), ("25.11", ["START_ONLY"]),
                                              ("26.05", ["START_ONLY", "REBOOT_ONLY"])])
def test_install_offers_the_only_node_states_where_the_release_has_them(tmp_path, release, offered):
    r = _install("--prefix", str(tmp_path / "gpufleet"), "--dry-run", "--slurm-version", release)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "HealthCheckNodeState=ANY\n" in out
    offer = [line for line in out.splitlines() if " also has " in line]
    assert bool(offer) == bool(offered), out
    for name in offered:
        assert name in offer[0]
    assert "REBOOT_ONLY" not in out or "REBOOT_ONLY" in offered


@pytest.mark.parametrize("state, release, problem", [
    ("REBOOT_ONLY", "24.11", "REBOOT_ONLY came with Slurm 26.05; this is Slurm 24.11"),
    ("START_ONLY", "25.05", "START_ONLY came with Slurm 25.11"),
    ("ANY,START_ONLY", "26.05", "START_ONLY stands alone"),
    ("IDLE,BUSY", "26.05", "'BUSY' is none of"),
    ("ANY\nHealthCheckProgram=/tmp/x", "26.05", "is none of"),
])
def test_a_node_state_slurm_would_refuse_is_one_line_and_exit_2(tmp_path, state, release, problem):
    for args in (("install", "--prefix", str(tmp_path / "g"), "--dry-run"), ("slurm-conf",)):
        r = run_cli(*args, "--node-state", state, "--slurm-version", release)
        err = r.stderr.decode()
        assert r.returncode == 2 and problem in err and err.count("\n") == 1, (args, err)
        assert not r.stdout


def test_an_only_node_state_says_the_periodic_runs_stop(tmp_path):
    r = run_cli("slurm-conf", "--node-state", "reboot_only", "--slurm-version", "26.05")
    assert r.returncode == 0, r.stderr
    assert "HealthCheckNodeState=REBOOT_ONLY\n" in r.stdout.decode()
    assert "never every HealthCheckInterval" in r.stderr.decode()
