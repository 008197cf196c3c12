"""The remediation ladder end to end on one node: the real health check program, the recorded H200 behind
the fake pynvml, a recording `scontrol`, and a site reset command that does what a GPU reset does to the
recorded state (tests/fake_slurm).  Then the pieces: the kernel log's reset mark, the reset's timeout,
the history's cases, `fleet cases`."""

from __future__ import annotations

import json
import sqlite3
import sys
import time

import pytest
from support import REPO, run_cli

sys.path.insert(0, str(REPO / "tests"))
from fake_slurm.node import fault, healthcheck, setup  # noqa: E402

sys.path.insert(0, str(REPO / "tests" / "slurm"))
import gpustate  # noqa: E402


def _node(tmp_path, *, fixes: bool = True, hang: bool = False, extra: str = ""):
    """One node whose reset command logs its arguments and, when `fixes`, brings the GPUs back healthy."""
    bin_dir, gpus, env = setup(tmp_path)
    reset = bin_dir / "gpu-reset"
    healthy = gpus / "n9.healthy.json"
    gpustate.write_atomic(gpustate.healthy_state(8, "n9"), str(healthy))
    body = f'echo "$@" >> {tmp_path}/resets.log\n'
    if hang:
        body += "sleep 60\n"
    if fixes:
        body += f"cp {healthy} {gpus}/n9.json\n"
    reset.write_text("#!/bin/sh\n" + body)
    reset.chmod(0o755)
    (tmp_path / "kmsg").mkdir()
    cfg = env["SLURM_GPUFLEET_CONFIG"]
    with open(cfg, "a") as fh:
        # the recording scontrol has no sbatch: validation runs are the real-Slurm tests' (tests/slurm)
        fh.write(f'reset_command = "{reset} {{gpus}} {{node}}"\nreset_timeout_s = 3\nclean_runs_to_resume = 2\n'
                 f'kernel_log = "{tmp_path}/kmsg"\nvalidation_command = ""\n{extra}')
    return bin_dir, gpus, env


def _run(bin_dir, env):
    calls, _, r = healthcheck(bin_dir, env)
    assert r.returncode == 0, r.stderr
    assert "internal error" not in r.stderr, r.stderr
    return calls, r


def _shown(bin_dir) -> dict:
    return json.loads((bin_dir / "node.json").read_text())


def _db(tmp_path, sql: str) -> list:
    with sqlite3.connect(tmp_path / "state" / "n9.db") as conn:
        return conn.execute(sql).fetchall()


def test_a_reset_fixable_fault_is_reset_on_the_idle_board_then_resumed_without_a_reboot(tmp_path):
    bin_dir, gpus, env = _node(tmp_path)
    _run(bin_dir, env)
    fault(gpus, 1, "row_remap_pending")
    calls, r = _run(bin_dir, env)
    updates = [c for c in calls if c[0] == "update"]
    # drained before the reset (no job may land during it), with the fault as its reason
    assert "state=drain" in updates[0] and "reason=memory gpu1 row remap pending [gpufleet]" in updates[0], updates
    # an H200 HGX board has NVSwitch: every GPU is reset together
    assert (tmp_path / "resets.log").read_text().split() == ["0,1,2,3,4,5,6,7", "n9"]
    assert not [c for c in calls if c[0] == "reboot"]
    assert _db(tmp_path, "select class, rung, outcome from remedies") == [("ecc", "reset", "succeeded")]
    # the reset is in the kernel log, one line per GPU, so that its Xids are not taken for new ones
    assert (tmp_path / "kmsg" / "n9.kmsg").read_text().count("slurm-gpufleet: GPU reset PCI:") == 8
    # validated by clean runs before it returns: the run after the reset was the first
    assert _shown(bin_dir)["drain"]
    _run(bin_dir, env)
    assert not _shown(bin_dir)["drain"], "resumed after clean_runs_to_resume clean runs"
    case = json.loads(_shown(bin_dir)["extra"])["case"]
    assert [c[:2] + c[4:] for c in case] == [["ecc", 1, "watch"]]


def test_a_reset_that_does_not_fix_it_climbs_to_a_reboot_in_the_same_run(tmp_path):
    bin_dir, gpus, env = _node(tmp_path, fixes=False)
    _run(bin_dir, env)
    fault(gpus, 1, "row_remap_pending")
    calls, _ = _run(bin_dir, env)
    assert (tmp_path / "resets.log").exists()
    reboots = [c for c in calls if c[0] == "reboot"]
    assert len(reboots) == 1 and "ASAP" in reboots[0], calls
    assert _db(tmp_path, "select rung, outcome from remedies order by id") == [("reset", "permanent"), ("reboot", "pending")]


@pytest.mark.slow  # 3-5 s, among the fast tier's slowest: run in the slow tier
def test_a_hung_reset_is_killed_at_its_timeout_and_counts_as_failed(tmp_path):
    bin_dir, gpus, env = _node(tmp_path, hang=True)
    _run(bin_dir, env)
    fault(gpus, 1, "row_remap_pending")
    t = time.monotonic()
    calls, _ = _run(bin_dir, env)
    assert time.monotonic() - t < 20
    assert _db(tmp_path, "select rung, outcome, detail from remedies order by id")[0] == (
        "reset", "transient", "killed after 3 s")
    assert [c for c in calls if c[0] == "reboot"], "the next rung"
    assert json.loads(_shown(bin_dir)["extra"])["case"][0][4] == "running"


@pytest.mark.slow  # 3-5 s, among the fast tier's slowest: run in the slow tier
def test_the_capth_fault_of_a_class_is_drained_for_repair_and_closes_when_an_admin_resumes_it(tmp_path):
    bin_dir, gpus, env = _node(tmp_path, extra="max_attempts = 2\n")
    _run(bin_dir, env)
    fault(gpus, 1, "row_remap_pending")
    _run(bin_dir, env)          # reset, fixed
    _run(bin_dir, env)          # clean: resumed
    assert not _shown(bin_dir)["drain"]
    fault(gpus, 4, "row_remap_pending")
    calls, _ = _run(bin_dir, env)
    assert (tmp_path / "resets.log").read_text().count("n9") == 1, "no second reset"
    reason = _shown(bin_dir)["reason"]
    assert _shown(bin_dir)["drain"] and reason == "repair ecc attempt 2 of 2 in 7d: memory gpu4 row remap pending [gpufleet]"
    # the fault is fixed by hand, the node runs clean: still held, only an admin returns it
    gpustate.write_atomic(gpustate.healthy_state(8, "n9"), str(gpus / "n9.json"))
    for _ in range(3):
        _run(bin_dir, env)
    assert _shown(bin_dir)["drain"]
    out = run_cli("fleet", "cases", "--json", env={**env, "SLURM_GPUFLEET_CONFIG": env["SLURM_GPUFLEET_CONFIG"]})
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["cases"]
    assert [(r["node"], r["class"], r["attempts"], r["status"]) for r in rows] == [("n9", "ecc", 2, "repair")]
    assert rows[0]["reason"] == reason
    text = run_cli("fleet", "cases", env=env)
    assert b"repair" in text.stdout and b"ecc" in text.stdout
    # the admin resumes it after the repair: the case closes, and a later fault starts afresh
    state = _shown(bin_dir)
    state.update(drain=False, reason="")
    (bin_dir / "node.json").write_text(json.dumps(state))
    _run(bin_dir, env)
    assert "case" not in json.loads(_shown(bin_dir)["extra"])
    assert _db(tmp_path, "select count(*) from case_closes") == [(1,)]
    fault(gpus, 2, "row_remap_pending")
    _run(bin_dir, env)
    assert (tmp_path / "resets.log").read_text().count("n9") == 2, "reset again: the count started afresh"


def test_observe_mode_decides_and_publishes_but_touches_nothing(tmp_path):
    bin_dir, gpus, env = _node(tmp_path, extra='[defaults]\nmode = "observe"\n')
    _run(bin_dir, env)
    fault(gpus, 5, "row_remap_failure")
    calls, r = _run(bin_dir, env)
    assert not _shown(bin_dir).get("drain")
    assert not [c for c in calls if c[0] == "update" and any(a.startswith("state=") for a in c)]
    extra = json.loads(_shown(bin_dir)["extra"])
    assert extra["v"] == "drain" and extra["obs"].startswith("drain: memory gpu5 row remapping failed")
    assert "observe mode: would drain" in r.stderr
    # a reset-fixable fault is not reset either
    gpustate.write_atomic(gpustate.healthy_state(8, "n9"), str(gpus / "n9.json"))
    fault(gpus, 1, "row_remap_pending")
    _run(bin_dir, env)
    assert not (tmp_path / "resets.log").exists()


def test_quarantine_mode_drains_but_never_resets_or_reboots(tmp_path):
    bin_dir, gpus, env = _node(tmp_path, extra='[defaults]\nmode = "quarantine"\n')
    _run(bin_dir, env)
    fault(gpus, 1, "row_remap_pending")
    for _ in range(2):
        calls, _ = _run(bin_dir, env)
        assert not [c for c in calls if c[0] == "reboot"]
    assert _shown(bin_dir)["drain"] and not (tmp_path / "resets.log").exists()


def test_an_xid_a_reset_answered_no_longer_counts_in_its_boot():
    from slurm_gpufleet.readers.kernel_log import RESET_MARK, parse_kernel_log

    lines = ["[ 10.0] NVRM: Xid (PCI:0000:5d:00): 48, pid=1, name=x, DBE (0x1)",
             "[ 11.0] NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=x, DBE (0x1)",
             f"[ 12.0] {RESET_MARK}0000:5d:00.0",
             "[ 13.0] NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus."]
    events, boots = parse_kernel_log(lines)
    assert boots == 1
    assert [(e.xid, e.pci, e.cleared) for e in events] == [
        (48, "0000:5d:00", True), (48, "0000:18:00", False), (79, "0000:18:00", False)]
    # a new Xid after the reset counts again
    events, _ = parse_kernel_log([*lines, "[ 14.0] NVRM: Xid (PCI:0000:5d:00): 48, pid=1, name=x, DBE (0x1)"])
    assert [e.cleared for e in events if e.pci == "0000:5d:00"] == [True, False]


def test_the_reset_command_is_an_argv_and_a_missing_one_is_a_failed_reset():
    from slurm_gpufleet.remedy.ladder import render, run_reset

    assert render("nvidia-smi -r -i {gpus}", "n1", [0, 3]) == ["nvidia-smi", "-r", "-i", "0,3"]
    assert render("/x/reset --node={node} '{gpus}'", "n1", [2]) == ["/x/reset", "--node=n1", "2"]
    r = run_reset("/nonexistent/reset {gpus}", "n1", [0], 5)
    assert not r.ok and "No such file" in r.detail


@pytest.mark.parametrize("body,error", [
    ('[slurm]\nmax_attempts = 0\n', "max_attempts"),
    ('[defaults]\nmode = "yolo"\n', "mode"),
    ('[slurm]\nreset_timeout_s = 90\n', "reset_timeout_s"),
])
def test_bad_ladder_settings_are_one_line_errors(tmp_path, body, error):
    from slurm_gpufleet.policy import PolicyError, parse_policy

    with pytest.raises(PolicyError, match=error):
        parse_policy(body)


def test_every_reset_or_reboot_action_has_a_ladder_and_every_xid_class_exists():
    from slurm_gpufleet.catalogs import remediation_data, xid_catalog
    from slurm_gpufleet.judging.findings import ACTIONS
    from slurm_gpufleet.remedy.ladder import rungs_for

    data = remediation_data()
    for action, ladder in data["ladder"].items():
        assert action in ACTIONS and ladder["source"] and ladder["rungs"][-1] == "repair"
        assert set(ladder["rungs"]) <= {"reset", "reboot", "cool_off", "repair"}
    for xid in data["class"]["xid"]:
        assert int(xid) in xid_catalog(), xid
    for info in xid_catalog().values():
        if info.severity == "reboot":
            assert rungs_for(info.action) != ("repair",), info


@pytest.mark.slow  # 3-5 s, among the fast tier's slowest: run in the slow tier
def test_an_xid_that_asks_for_a_reset_is_answered_by_one_and_not_reset_again(tmp_path):
    bin_dir, gpus, env = _node(tmp_path)
    _run(bin_dir, env)
    stamp = "2026-12-01T08:00:00,000000+00:00"
    (tmp_path / "kmsg" / "n9.kmsg").write_text(
        f"{stamp} NVRM: Xid (PCI:0000:18:00): 48, pid=7, name=python3, DBE (0x00000001)\n")
    _run(bin_dir, env)
    assert _db(tmp_path, "select class, rung, outcome from remedies") == [("ecc", "reset", "succeeded")]
    for _ in range(2):
        _run(bin_dir, env)
    assert not _shown(bin_dir)["drain"]
    assert (tmp_path / "resets.log").read_text().count("n9") == 1
    assert json.loads(_shown(bin_dir)["extra"])["v"] == "ok"


@pytest.mark.parametrize("state,attempt,waited,want", [
    ("RUNNING", 1, 10, "wait"), ("PENDING", 1, 10, "wait"), ("COMPLETED", 1, 10, "passed"),
    ("FAILED", 1, 10, "retry"), ("TIMEOUT", 2, 10, "failed"), (None, 1, 10, "wait"),
    # gone from Slurm past its time limit, with no exit said in its output: not known, never a failure
    (None, 2, 4000, "unverified"), (None, 1, 4000, "unverified"),
])
def test_a_validation_job_is_waited_for_passed_retried_or_failed(state, attempt, waited, want):
    from slurm_gpufleet.remedy.returning import judge

    assert judge(state, attempt, 1, waited, 1800) == want
    # the validation's own tools could not run (returning.DEPENDENCY_EXIT): never a failure of the GPUs
    assert judge("FAILED" if state is None else state, attempt, 1, waited, 1800, 75) == "unverified"


@pytest.mark.parametrize("name", ["dcgm-diag.sh", "nccl-allreduce.sh"])
def test_the_sample_validation_commands_pass_shellcheck_and_say_unjudged_without_their_tool(tmp_path, name):
    """Where dcgmi or all_reduce_perf is missing, the validation ends with one line and exit 75 (returning.
    DEPENDENCY_EXIT): nothing was judged, so the node's validation is `unverified`, never a failure."""
    import subprocess

    from test_bundle import _shellcheck

    script = REPO / "etc" / "validation" / name
    _shellcheck(script.read_text())
    r = subprocess.run([str(script)], capture_output=True, text=True, env={"PATH": str(tmp_path), "GPUS": "8"})
    assert r.returncode == 75 and r.stdout.count("\n") == 1 and "not found" in r.stdout, r.stdout


def test_the_dcgm_validation_sample_is_the_deep_check_reading_dcgm_as_data(tmp_path):
    """The sample runs the installed health check's deep level with DCGM at its level: a GPU's failed test
    exits 1 with the test named (a failed validation), DCGM's own fault exits 75 (tests/test_dcgm.py)."""
    import subprocess

    from test_dcgm import DATA, _deep_node

    bin_dir, env = _deep_node(tmp_path, (DATA / "diag-4x-memory-fail-gpu3.json").read_text())
    wrapper = tmp_path / "slurm-gpufleet-healthcheck"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {REPO}/healthcheck/slurm-gpufleet-healthcheck "$@"\n')
    wrapper.chmod(0o755)
    r = subprocess.run([str(REPO / "etc" / "validation" / "dcgm-diag.sh")], capture_output=True, text=True,
                       env={**env, "GPUFLEET_HEALTHCHECK": str(wrapper)}, timeout=60)
    assert r.returncode == 1 and r.stdout.startswith("dcgm gpu3 memory failed (ISOLATE)"), (r.stdout, r.stderr)
    assert (tmp_path / "dcgmi.args").read_text().split() == ["diag", "-r", "3", "-j"]


def test_the_sample_nccl_validation_judges_the_bus_bandwidth(tmp_path):
    import subprocess

    fake = tmp_path / "all_reduce_perf"
    rows = ["#  size  count type redop root time algbw busbw #wrong",
            "  1073741824  268435456 float sum -1  5000  214.7  375.8  0",
            "  4294967296 1073741824 float sum -1 20000  214.7  {bw}  0"]
    script = REPO / "etc" / "validation" / "nccl-allreduce.sh"
    for bw, rc in (("375.8", 0), ("120.5", 1)):
        fake.write_text("#!/bin/sh\ncat <<'OUT'\n" + "\n".join(rows).replace("{bw}", bw) + "\nOUT\n")
        fake.chmod(0o755)
        r = subprocess.run([str(script)], capture_output=True, text=True,
                           env={"PATH": f"{tmp_path}:/usr/bin:/bin", "GPUS": "8"})
        assert r.returncode == rc and bw in r.stdout, r.stdout


def test_a_node_to_validate_returns_after_clean_runs_where_validation_is_off(tmp_path):
    bin_dir, gpus, env = _node(tmp_path)   # validation_command = ""
    _run(bin_dir, env)
    state = _shown(bin_dir)
    state.update(drain=True, reason="validate after repair [gpufleet]")
    (bin_dir / "node.json").write_text(json.dumps(state))
    # (a node waiting for its validation was drained before, and a drained node keeps no view of Slurm for
    # quiet runs: the shortcut above skips that drain, so its view goes too)
    (tmp_path / "state" / "slurm-view-n9.json").unlink()
    calls, r = _run(bin_dir, env)   # its second clean run in a row
    assert not _shown(bin_dir)["drain"] and "validation_command is" in r.stderr
    assert not [c for c in calls if c[0] == "create"]


def test_one_remedy_of_a_node_at_a_time(tmp_path):
    """The epilog and the health check can run together: while one holds the node's remedy lock, the other
    resets nothing; after it, the history it left decides."""
    import fcntl
    import os

    bin_dir, gpus, env = _node(tmp_path)
    _run(bin_dir, env)
    fault(gpus, 1, "row_remap_pending")
    fd = os.open(tmp_path / "state" / "remedy-n9.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        _, r = _run(bin_dir, env)
        assert "another run of ours is remedying this node" in r.stderr
        assert not (tmp_path / "resets.log").exists()
    finally:
        os.close(fd)
    _run(bin_dir, env)
    assert (tmp_path / "resets.log").read_text().count("n9") == 1


def test_fleet_cases_lists_repairs_first_then_the_most_recent_as_its_help_says():
    from types import SimpleNamespace

    from slurm_gpufleet.remedy.ladder import fleet_cases

    day = 86400.0
    nodes = [SimpleNamespace(name="n1", reason="", cases=[("xid", 1, 1 * day, 1 * day, "watch")]),
             SimpleNamespace(name="n2", reason="", cases=[("ecc", 1, 3 * day, 3 * day, "watch")]),
             SimpleNamespace(name="n3", reason="repair: x", cases=[("xid", 3, 0.0, 2 * day, "repair")]),
             SimpleNamespace(name="n4", reason="repair: y", cases=[("hbm", 3, 0.0, 4 * day, "repair")])]
    assert [r["node"] for r in fleet_cases(nodes)] == ["n4", "n3", "n2", "n1"]  # was n3, n4, n1, n2


# a GPU fell off the bus before the node's repair, as the kernel log keeps it
FELL = "NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"


def _fell_before_repair(tmp_path):
    """A node checked once, then FELL in its kernel log at 2026-11-30T22:00: (bin, env, log, line, shown)."""
    bin_dir, gpus, env = _node(tmp_path)
    _run(bin_dir, env)
    kmsg = tmp_path / "kmsg" / "n9.kmsg"
    kmsg.write_text(f"2026-11-30T22:00:00,000000+00:00 {FELL}")
    return bin_dir, env, kmsg, FELL, _shown(bin_dir)


def test_a_repaired_node_is_never_taken_out_again_for_what_was_logged_before_its_repair(tmp_path):
    """An admin's `fleet repaired` (the reason `validate after repair`, set at the recording scontrol's
    2026-12-01T08:00:00): the Xid logged before it never counts again, on this run and after restarts; one
    logged after it does."""
    bin_dir, env, kmsg, fell, state = _fell_before_repair(tmp_path)
    state.update(drain=True, reason="validate after repair [gpufleet]")
    (bin_dir / "node.json").write_text(json.dumps(state))
    for _ in range(3):
        calls, _ = _run(bin_dir, env)
        assert not [c for c in calls if c[0] == "reboot"], calls
        assert not [c for c in calls if any("Xid" in a or "xid" in a for a in c)], calls
    assert not _shown(bin_dir)["drain"], "validated by its clean runs and returned"
    assert json.loads((tmp_path / "state" / "repaired-n9.json").read_text())["at"] > 0
    # the same line is still in the log: a run after a restart (the quiet view gone) does not count it
    (tmp_path / "state" / "slurm-view-n9.json").unlink(missing_ok=True)
    calls, _ = _run(bin_dir, env)
    assert json.loads(_shown(bin_dir)["extra"])["v"] == "ok"
    # a fault logged after the repair is a new one
    with open(kmsg, "a") as fh:
        fh.write(f"2026-12-01T09:00:00,000000+00:00 {fell}")
    calls, _ = _run(bin_dir, env)
    assert json.loads(_shown(bin_dir)["extra"])["v"] != "ok"
    assert [c for c in calls if c[0] == "reboot"] or _shown(bin_dir)["drain"], calls


def test_a_node_an_admin_resumed_after_its_repair_drain_is_not_taken_out_again_for_its_past(tmp_path):
    """A bare `scontrol update state=resume` of a node drained for repair (its summary still holds the case
    as `repair`): the repair is taken as done then, and what the kernel log holds from before no longer
    counts; a fault logged later does."""
    bin_dir, env, kmsg, fell, state = _fell_before_repair(tmp_path)
    extra = json.loads(state["extra"])
    extra["case"] = [["xid", 3, 1764540000, 1764543600, "repair"]]
    state.update(drain=False, reason="", extra=json.dumps(extra))   # the admin's resume
    (bin_dir / "node.json").write_text(json.dumps(state))
    calls, _ = _run(bin_dir, env)
    assert not [c for c in calls if c[0] == "reboot"] and not _shown(bin_dir).get("drain"), calls
    assert json.loads(_shown(bin_dir)["extra"])["v"] == "ok"
    import datetime as dt

    time.sleep(0.01)
    with open(kmsg, "a") as fh:  # logged after the resume: a new fault
        fh.write(f"{dt.datetime.now().astimezone().isoformat(timespec='microseconds').replace('.', ',')} {fell}")
    calls, _ = _run(bin_dir, env)
    assert json.loads(_shown(bin_dir)["extra"])["v"] != "ok"


def test_a_repaired_gpu_s_lifetime_counters_count_again_only_where_they_rise(tmp_path):
    """Uncorrectable SRAM errors the InfoROM keeps (aggregate: no reset or reboot clears them) over the
    limit drain the node.  After an admin's `fleet repaired` on the same board, the count as it stood then
    is the repaired fault's: the node returns and stays; one more error drains it again."""
    bin_dir, gpus, env = _node(tmp_path)
    _run(bin_dir, env)
    gpustate.set_value(str(gpus / "n9.json"), 3, "ecc_uncorrected_aggregate_sram", 7)   # the limit is 4
    _run(bin_dir, env)
    state = _shown(bin_dir)
    assert state["drain"] and "SRAM error threshold exceeded" in state["reason"], state
    state.update(drain=True, reason="validate after repair [gpufleet]")
    (bin_dir / "node.json").write_text(json.dumps(state))
    for _ in range(4):
        _run(bin_dir, env)
    assert not _shown(bin_dir)["drain"], "validated by its clean runs and returned"
    kept = json.loads((tmp_path / "state" / "repaired-n9.json").read_text())["counters"]
    assert sorted(c.get("sram_agg") for c in kept.values()) == [0] * 7 + [7], kept
    (tmp_path / "state" / "slurm-view-n9.json").unlink(missing_ok=True)   # a restart: still not counted
    _run(bin_dir, env)
    assert json.loads(_shown(bin_dir)["extra"])["v"] == "ok"
    gpustate.set_value(str(gpus / "n9.json"), 3, "ecc_uncorrected_aggregate_sram", 8)
    _run(bin_dir, env)
    state = _shown(bin_dir)
    assert state["drain"] and "SRAM error threshold exceeded" in state["reason"], state


def test_a_hold_for_a_configuration_fix_is_a_case_of_its_own_until_its_checks_run_clean(tmp_path):
    """No rung of the ladder fixes a compute mode (or a driver off its pins, ECC off, Slurm's own view of the
    node): the node is drained, and `fleet cases` shows it as `config` with its reason, until it runs clean."""
    bin_dir, gpus, env = _node(tmp_path)
    _run(bin_dir, env)
    gpustate.set_value(str(gpus / "n9.json"), 2, "compute_mode", 2)   # NVML_COMPUTEMODE_PROHIBITED
    _run(bin_dir, env)
    shown = _shown(bin_dir)
    assert shown["drain"] and shown["reason"].startswith("modes gpu2 compute mode Prohibited"), shown
    case = json.loads(shown["extra"])["case"]
    assert [c[:2] + c[4:] for c in case] == [["mode_change", 0, "config"]], case
    _run(bin_dir, env)   # still held: the same case, from when Slurm shows the hold began (its reason's time)
    again = json.loads(_shown(bin_dir)["extra"])["case"]
    assert [c[:2] + c[4:] for c in again] == [["mode_change", 0, "config"]], again

    from slurm_gpufleet.maintain.fleet import FleetNode
    from slurm_gpufleet.remedy.ladder import fleet_cases

    node = FleetNode(name="n9", state="IDLE", reason=shown["reason"], cases=again)
    row = fleet_cases([node])[0]
    assert row["status"] == "config" and row["reason"].startswith("modes gpu2") and "fix it" in row["todo"], row

    gpustate.set_value(str(gpus / "n9.json"), 2, "compute_mode", 0)
    _run(bin_dir, env)
    _run(bin_dir, env)
    assert not _shown(bin_dir).get("drain")
    assert "case" not in json.loads(_shown(bin_dir)["extra"])
