"""`slurm-gpufleet install`: wrappers slurmd can run with no PATH, a skeleton that parses to the safe
defaults, the site's files never overwritten, idempotent, and --dry-run writes nothing."""

import dataclasses
import os
import subprocess
import sys

import pytest
from support import run_cli

from slurm_gpufleet.policy import load_policy


def test_install_writes_runnable_wrappers_and_is_idempotent(tmp_path):
    prefix = tmp_path / "opt"
    r = run_cli("install", "--prefix", str(prefix), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().count("would write") == 6 and not prefix.exists()

    r = run_cli("install", "--prefix", str(prefix), "--interval", "120")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().count("wrote") == 6
    conf = (prefix / "etc" / "slurm.conf.gpufleet").read_text()
    assert f"HealthCheckProgram={prefix}/sbin/slurm-gpufleet-healthcheck" in conf
    assert "HealthCheckInterval=120" in conf and f"Prolog={prefix}/sbin/slurm-gpufleet-prolog" in conf
    # the skeleton is all comments: it loads, and gives the defaults
    skeleton = prefix / "etc" / "gpufleet.toml"
    assert dataclasses.replace(load_policy(str(skeleton)), path=None) == dataclasses.replace(load_policy(None), path=None)
    assert "{{ node }}" in (prefix / "etc" / "upgrade.sh.j2").read_text()

    # the wrapper runs with an empty environment, as slurmd runs it, from another directory
    wrapper = prefix / "sbin" / "slurm-gpufleet-healthcheck"
    assert os.access(wrapper, os.X_OK) and sys.executable in wrapper.read_text()
    assert f"SLURM_GPUFLEET_CONFIG={skeleton}" in wrapper.read_text()
    r = subprocess.run([str(wrapper), "--help"], env={}, cwd="/", capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "HealthCheckProgram" in r.stdout, r.stderr

    # the site edits its config; a second run keeps it and rewrites nothing else
    skeleton.write_text("[defaults]\nexpected_gpus = 8\n")
    r = run_cli("install", "--prefix", str(prefix), "--interval", "120")
    out = r.stdout.decode()
    assert r.returncode == 0 and "wrote" not in out and out.count("unchanged") == 4 and out.count("kept") == 2
    assert skeleton.read_text() == "[defaults]\nexpected_gpus = 8\n"
    # a changed setting rewrites only what depends on it
    out = run_cli("install", "--prefix", str(prefix), "--interval", "60").stdout.decode()
    assert [line.split()[-1] for line in out.splitlines() if line.startswith("wrote")] == [
        str(prefix / "etc" / "slurm.conf.gpufleet")]


def test_install_refuses_relative_paths(tmp_path):
    r = run_cli("install", "--prefix", "relative/dir")
    assert r.returncode == 2 and b"absolute" in r.stderr and r.stderr.count(b"\n") == 1


@pytest.mark.parametrize("release,interval,timeout", [("26.05.5", 5, "HealthCheckTimeout=4"),
                                                      ("26.05.5", 300, None),   # the default 60 s fits
                                                      ("24.11.5", 5, None),     # 24.11 has no such key
                                                      ("22.05.8", 5, None)])    # 22.05 would refuse it
def test_slurm_conf_lines_fit_the_release_that_reads_them(release, interval, timeout):
    from slurm_gpufleet.install import slurm_conf_lines

    lines = [line for line in slurm_conf_lines("/opt/g/sbin", interval, slurm_version=release).splitlines()
             if line.startswith("HealthCheckTimeout=")]
    assert lines == ([timeout] if timeout else [])
