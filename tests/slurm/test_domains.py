"""Failure domains and bundles on a real Slurm: the main cluster's 8 nodes in 2 blocks of 4 (topology/block
on 24.11 and later, `[[domain]]` rows on 22.05), a node budget of 2: a block of 4 goes alone."""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest
from conftest import BLOCKS, _reset, internal_errors
from test_maintain import OLD, TARGET, apply_sampling, leftovers

from slurm_gpufleet.common.hostlist import fold
from slurm_gpufleet.slurm.commands import expand_hostlist

DOMAINS = {"b1": ["n1", "n2", "n3", "n4"], "b2": ["n5", "n6", "n7", "n8"]}
NEW_KERNEL, OLD_KERNEL = "6.1.0-31-amd64", "6.1.0-28-amd64"
NEW_VBIOS, OLD_VBIOS = "96.00.AF.00.01", "96.00.A5.00.1A"


@pytest.fixture
def bc(cluster):
    """The cluster reset, its config restored afterwards (a test adds [maintain] keys and [[domain]] rows)."""
    config = cluster.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    _reset(cluster)
    yield cluster
    errors = internal_errors(cluster)
    config.write_text(original)
    shutil.rmtree(cluster.dir / "nodehosts", ignore_errors=True)
    _reset(cluster)
    if errors:
        pytest.fail(f"our programs printed internal errors during the test:\n{errors}")


def configure(c, maintain: str) -> None:
    """[maintain] keys (it is the config's last table), and on 22.05 the blocks as [[domain]] rows."""
    config = c.dir / "etc" / "gpufleet.toml"
    rows = "" if BLOCKS else "".join(f'\n[[domain]]\nname = "{d}"\nnodes = "{fold(n)}"\n' for d, n in DOMAINS.items())
    config.write_text(config.read_text() + maintain + rows)


def published_drivers(c) -> dict[str, str | None]:
    """Each node's published driver, from one `scontrol -o show nodes` (Extra is compact JSON, read from
    where it starts: a value may hold spaces)."""
    drivers: dict[str, str | None] = {}
    decoder = json.JSONDecoder()
    for line in c.run("scontrol", "-o", "show", "nodes", check=False).stdout.splitlines():
        name = line.split("NodeName=", 1)[-1].split(" ", 1)[0]
        at = line.find(" Extra={")
        try:
            extra = decoder.raw_decode(line, at + len(" Extra=")) if at >= 0 else ({}, 0)
        except ValueError:
            extra = ({}, 0)
        drivers[name] = extra[0].get("drv") if isinstance(extra[0], dict) else None
    return drivers


def plan(c, tmp_path, *extra: str) -> tuple[str, dict]:
    out = tmp_path / "plan.json"
    r = c.gpufleet("maintain", "plan", "--nodes", "n[1-8]", "--out", str(out), *extra)
    assert r.returncode == 0, r.stdout + r.stderr
    return str(out), json.loads(out.read_text())


@pytest.mark.release("topology/block (23.11 on)")
def test_whole_blocks_one_at_a_time_jobs_complete_and_a_segment_job_lands_in_one_block(bc, tmp_path):
    bc.wait_published()
    if BLOCKS:
        topo = bc.run("scontrol", "show", "topology").stdout
        assert "BlockName=b1" in topo and "BlockName=b2" in topo, topo
    configure(bc, "whole_domain = true\nmax_unavailable_domains = 1\n")
    jobs = [bc.start_job(n, 2, secs) for n, secs in (("n2", 10), ("n6", 15))]
    plan_file, p = plan(bc, tmp_path, "--target-driver", TARGET)
    assert {d["name"]: d["nodes"] for d in p["domains"]} == DOMAINS and p["domains_from"] == ("slurm topology/block" if BLOCKS else "config [[domain]]")
    assert p["waves"][0]["kind"] == "canary" and sorted(p["waves"][0]["nodes"]) in DOMAINS.values()

    def sample() -> tuple[int, int]:  # (blocks with a node out, blocks whose nodes in service run two
        # drivers), in two reads, so that CI's load leaves samples
        lines = bc.run("sinfo", "-h", "-N", "-o", "%N|%T|%E", check=False).stdout.splitlines()
        out = {line.split("|")[0] for line in lines if bc.out_of_service(line)}
        drivers = published_drivers(bc)
        mixed = sum(1 for nodes in DOMAINS.values() if len({drivers.get(n) for n in nodes if n not in out}) > 1)
        return sum(1 for nodes in DOMAINS.values() if out & set(nodes)), mixed

    r, samples = apply_sampling(bc, plan_file, sample, 1.0)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "done (done 8)" in r.stdout
    assert len(samples) > 5 and max(s[0] for s in samples) == 1, samples
    assert max(s[1] for s in samples) == 0, samples
    for job in jobs:
        info = bc.job(job)
        assert (info["JobState"], info["Restarts"]) == ("COMPLETED", "0"), info
    assert leftovers(bc) == ("", [])
    assert all(bc.driver(n) == TARGET for n in bc.nodes)
    if BLOCKS:  # every node is back in its block: a 4-node segment lands inside one
        assert "Nodes=n[1-4]" in bc.run("scontrol", "show", "topology").stdout
        job = bc.sbatch("--segment=4", "-N4", "--time=1", "--wrap", "sleep 2")
        bc.wait(lambda: bc.job(job).get("NodeList", "(null)") not in ("(null)", ""), 30, f"job {job} placed")
        placed = set(expand_hostlist(bc.job(job)["NodeList"]))
        assert any(placed == set(nodes) for nodes in DOMAINS.values()), placed


def test_a_bundle_in_one_drain_a_canary_whose_vbios_did_not_change_halts_and_rollback_restores(bc, tmp_path):
    """Driver, kernel and VBIOS together; each node has its own host tree (host_root .../nodehosts/%n), so
    the kernel a node booted is its own."""
    for n in bc.nodes:
        shutil.copytree(bc.dir / "host", bc.dir / "nodehosts" / n)
    config = bc.dir / "etc" / "gpufleet.toml"
    config.write_text(config.read_text().replace(f'host_root = "{bc.dir}/host"', f'host_root = "{bc.dir}/nodehosts/%n"'))
    bc.wait(lambda: all(json.loads(bc.node(n).get("Extra") or "{}").get("kern") == OLD_KERNEL for n in bc.nodes),
            60, "every node publishing its kernel")
    bc.wait_published()
    plan_file, p = plan(bc, tmp_path, "--target-driver", TARGET, "--target-kernel", NEW_KERNEL,
                        "--target-firmware", f"vbios={NEW_VBIOS}")
    assert p["previous"]["n1"] == {"driver": OLD, "kernel": OLD_KERNEL,
                                   "firmware": {"vbios": OLD_VBIOS, "inforom": "G520.0282.02.02"}}
    canary = p["waves"][0]["nodes"][0]
    (bc.dir / "hooks").mkdir(exist_ok=True)
    (bc.dir / "hooks" / f"vbios-stuck.{canary}").write_text("")
    r = bc.gpufleet("maintain", "apply", str(plan_file))
    assert r.returncode == 1, r.stdout + r.stderr
    status = json.loads(bc.gpufleet("maintain", "status", "--json").stdout)
    assert status["state"] == "halted" and status["target"]["kernel"] == NEW_KERNEL
    error = dict(bc.maintain_db("select node, error from nodes"))[canary]
    assert error == f"validation failed: vbios {OLD_VBIOS} != {NEW_VBIOS}", error
    # one upgrade command for the whole bundle, told to power-cycle
    upgrades = (bc.dir / "log" / "upgrades.log").read_text().split()
    assert upgrades.count(canary) == 1 and upgrades.count("upgrade") == 1
    # the canary's new driver and kernel took: it published them
    seen = json.loads(bc.node(canary)["Extra"])
    assert (seen["drv"], seen["kern"], seen["fw"]) == (TARGET, NEW_KERNEL, OLD_VBIOS)
    (bc.dir / "hooks" / f"vbios-stuck.{canary}").unlink()
    r = bc.gpufleet("maintain", "rollback")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(bc.gpufleet("maintain", "status", "--json").stdout)["state"] == "rolled_back"
    seen = json.loads(bc.node(canary)["Extra"])
    assert (seen["drv"], seen["kern"], seen["fw"]) == (OLD, OLD_KERNEL, OLD_VBIOS)
    assert leftovers(bc) == ("", [])


@pytest.mark.parametrize("killed_after", ["upgrading", "validating"])
def test_kill_9_mid_domain_then_resume_converges(bc, tmp_path, killed_after):
    from test_maintain import _apply_killed_after

    bc.wait_published()
    configure(bc, "whole_domain = true\nmax_unavailable_domains = 1\n")
    plan_file, p = plan(bc, tmp_path, "--target-driver", TARGET)
    assert _apply_killed_after(bc, plan_file, killed_after, 2) == -9  # SIGKILL, mid-way through the canary block
    r = bc.gpufleet("maintain", "resume")
    assert r.returncode == 0, r.stdout + r.stderr + bc.failed_stories()
    status = json.loads(bc.gpufleet("maintain", "status", "--json").stdout)
    assert status["state"] == "done" and status["counts"] == {"done": 8}, status
    assert leftovers(bc) == ("", [])
    assert all(bc.driver(n) == TARGET for n in bc.nodes)
    # the blocks went one after the other even across the crash
    rows = bc.maintain_db("select node, event, ts from audit where event in ('reserved', 'done')")
    span = {d: (min(t for n, e, t in rows if n in nodes and e == "reserved"),
                max(t for n, e, t in rows if n in nodes and e == "done")) for d, nodes in DOMAINS.items()}
    (a0, a1), (b0, b1) = sorted(span.values())
    assert a1 <= b0, span


APT_SAID = ("E: Version '595.71.05-1' for 'nvidia-kernel-dkms' was not found; E: Unable to locate package "
            "'nvidia-vbios-96.00.AF.00.01' in \"bookworm-nvidia\" (the node's apt sources)")


def _reason_writes(c, node: str) -> list[float]:
    """When slurmctld set `node`'s reason ("update_node: node N reason set to: ..."), from its log."""
    from datetime import datetime

    at = []
    for line in (c.dir / "log" / "slurmctld.log").read_text(errors="replace").splitlines():
        m = re.match(rf"\[([0-9T:.-]+)\] update_node: node {node} reason set to: ", line)
        if m:
            at.append(datetime.fromisoformat(m.group(1)).timestamp())
    return at


@pytest.mark.release("what each release keeps of a reason with quotes, cut at 120 characters")
def test_a_bundle_rollout_with_max_failures_2_settles_a_long_quoted_failure_reason(bc, tmp_path):
    """Driver + kernel + VBIOS + InfoROM on 4 nodes (each with its own host tree), max_failures = 2; one
    node's package manager fails with apt's own words, quotes included, so the reason Slurm keeps is
    cleaned and cut at 120 characters.  The rollout ends within 3 minutes of that node's result, and the
    node's reason is written at most once after it: the engine compares cleaned with cleaned."""
    nodes = ["n1", "n2", "n3", "n4"]
    for n in nodes:
        shutil.copytree(bc.dir / "host", bc.dir / "nodehosts" / n)
    config = bc.dir / "etc" / "gpufleet.toml"
    config.write_text(config.read_text().replace(f'host_root = "{bc.dir}/host"', f'host_root = "{bc.dir}/nodehosts/%n"')
                      + "max_failures = 2\n")
    bc.wait(lambda: all(json.loads(bc.node(n).get("Extra") or "{}").get("kern") == OLD_KERNEL for n in nodes),
            60, "every node publishing its kernel")
    bc.wait_published()
    out = tmp_path / "plan.json"
    r = bc.gpufleet("maintain", "plan", "--nodes", "n[1-4]", "--out", str(out), "--target-driver", TARGET,
                    "--target-kernel", NEW_KERNEL, "--target-firmware", f"vbios={NEW_VBIOS}",
                    "--target-firmware", "inforom=G520.0282.02.02")
    assert r.returncode == 0, r.stdout + r.stderr
    p = json.loads(out.read_text())
    order = [n["node"] for n in sorted(p["nodes"], key=lambda n: n["slot_start"])]
    victim = order[-1]
    (bc.dir / "hooks").mkdir(exist_ok=True)
    (bc.dir / "hooks" / f"upgrade-fails.{victim}").write_text(APT_SAID + "\n")
    r = bc.gpufleet("maintain", "apply", str(out), timeout=900)
    ended = time.time()
    assert r.returncode == 1 and "done (done 3, failed 1)" in r.stdout, r.stdout + r.stderr
    failed_at = [ts for node, event, ts in bc.maintain_db("select node, event, ts from audit order by ts")
                 if node == victim and event == "failed"]
    assert failed_at, bc.maintain_db("select node, event, detail from audit where node = ?", (victim,))
    assert ended - failed_at[0] < 180, ended - failed_at[0]
    reason = re.sub(r" \[[^]@]*@[^]]*\]$", "", bc.node(victim)["Reason"])  # Slurm's [user@time] after it
    # what the engine built, as Slurm keeps it: one line, no quotes, at most 120 characters
    assert reason.startswith("maintain ") and " failed: " in reason and len(reason) <= 120, reason
    assert not set("'\"`") & set(reason) and "E: Version 595.71.05-1 for nvidia-kernel-dkms" in reason, reason
    after = [t for t in _reason_writes(bc, victim) if t >= failed_at[0] - 1]
    assert len(after) <= 1, (after, failed_at, reason)
    # the bundle took on the others: driver, kernel and VBIOS published after their boot
    for n in nodes:
        if n != victim:
            seen = json.loads(bc.node(n)["Extra"])
            assert (seen["drv"], seen["kern"], seen["fw"]) == (TARGET, NEW_KERNEL, NEW_VBIOS), (n, seen)
    (bc.dir / "hooks" / f"upgrade-fails.{victim}").unlink()
    bc.run("scontrol", "update", f"nodename={victim}", "state=resume")


@pytest.mark.release("what an admin's drain looks like to each release's commands")
def test_whole_domains_with_an_admin_drained_member_never_run_two_drivers(bc, tmp_path):
    """whole_domain, an admin drains n6 (block b2) before the plan: b2 is skipped whole, said in text and
    JSON, b1 upgraded whole; no block ever runs two drivers in service (sampled every 0.3 s).  Before, the
    admin's drain of n6 used the domain budget that b1 needed: apply postponed b1's begun slot forever,
    which Slurm refuses ("Reservation already started"), while the plan showed b1 going at once."""
    bc.wait_published()
    configure(bc, "whole_domain = true\nmax_unavailable_domains = 1\n")
    bc.run("scontrol", "update", "nodename=n6", "state=drain", "reason=admin: PSU swap")
    try:
        plan_file, p = plan(bc, tmp_path, "--target-driver", TARGET)
        states = {d["name"]: (d["state"], d["why"]) for d in p["domains"]}
        assert states["b2"][0] == "skipped" and "n6" in states["b2"][1], states
        assert states["b1"][0] == "planned", states
        text = bc.gpufleet("maintain", "plan", "--target-driver", TARGET, "--nodes", "n[1-8]").stdout
        assert "domain(s) skipped: b2" in text, text

        def sample() -> int:  # blocks whose nodes in service run two drivers
            lines = bc.run("sinfo", "-h", "-N", "-o", "%N|%T|%E", check=False).stdout.splitlines()
            out = {line.split("|")[0] for line in lines if bc.out_of_service(line) or "drain" in line.split("|")[1]}
            drivers = published_drivers(bc)
            return sum(1 for members in DOMAINS.values()
                       if len({drivers.get(n) for n in members if n not in out}) > 1)

        r, samples = apply_sampling(bc, plan_file, sample, 0.3)
        assert r.returncode == 0, r.stdout + r.stderr
        assert len(samples) > 3 and max(samples) == 0, samples
        assert all(bc.driver(n) == TARGET for n in DOMAINS["b1"])
        assert all(bc.driver(n) == OLD for n in DOMAINS["b2"])
        info = bc.node("n6")
        assert "DRAIN" in info["State"] and info["Reason"].startswith("admin: PSU swap ["), info  # as the admin left it
    finally:
        bc.run("scontrol", "update", "nodename=n6", "state=resume")
