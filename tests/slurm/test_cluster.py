"""Against real slurmctld/slurmd daemons: what the health check, prolog and epilog do to nodes."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import time

import gpustate
import pytest


@pytest.mark.release("what a quiet run writes: Extra or Comment, and when")
def test_healthy_node_stays_idle_and_is_never_drained(mc):
    # two full health-check rounds on every node
    mc.wait(lambda: all(len(mc.history(n, "select 1 from runs where hook='healthcheck'")) >= 2 for n in mc.nodes),
            4 * mc.hc_interval, "two health checks on every node")
    for node in mc.nodes:
        info = mc.node(node)
        assert info["State"] == "IDLE", info
        if mc.release < (24, 11):  # 24.11 keeps a node's last reason after a resume (an earlier test's)
            assert info.get("Reason", "") in ("", "(null)")
        assert mc.history(node, "select count(*) from runs where verdict != 'ok'") == [(0,)]
        assert mc.history(node, "select count(*) from actions") == [(0,)]
        assert '"v":"ok"' in info.get("Extra", "") and '"gpus":"8xNVIDIA H200"' in info["Extra"]
        # what a rollout compares with its canary: kernel, module flavour, GSP firmware, CDMM mode
        summary = json.loads(info["Extra"])
        assert {k: summary.get(k) for k in ("kern", "modf", "gsp", "cdmm")} == {
            "kern": "6.1.0-28-amd64", "modf": "open", "gsp": "580.159.04", "cdmm": "default"}, summary


@pytest.mark.release("drain and resume with the summary in one scontrol update")
def test_fault_drains_within_one_interval_and_fix_resumes_after_hysteresis(mc):
    mc.fault("n2", 5, "row_remap_failure")
    injected = time.monotonic()
    mc.wait(lambda: "DRAIN" in mc.state("n2"), mc.hc_interval + 3, "n2 drained")
    assert time.monotonic() - injected <= mc.hc_interval + 3
    assert mc.node("n2")["Reason"].startswith("memory gpu5 row remapping failed [gpufleet]")
    assert mc.state("n1") == "IDLE"

    mc.heal("n2")
    healed = time.monotonic()
    # clean_runs_to_resume = 2: resumed on the second clean run, not the first
    mc.wait(lambda: mc.history("n2", "select count(*) from runs where hook='healthcheck' and verdict='ok' and id > "
                                     "(select max(id) from runs where verdict='drain')")[0][0] >= 1,
            mc.hc_interval + 3, "first clean run")
    assert "DRAIN" in mc.state("n2"), "resumed before the hysteresis"
    mc.wait(lambda: mc.state("n2") == "IDLE", 2 * mc.hc_interval + 3, "n2 resumed")
    assert time.monotonic() - healed >= mc.hc_interval - 1
    assert mc.history("n2", "select action from actions order by ts") == [("drain",), ("resume",)]


@pytest.mark.release("the reason's [user@time] suffix, read per release")
def test_admin_drain_is_never_touched(mc):
    mc.run("scontrol", "update", "nodename=n3", "state=drain", "reason=admin: fan replaced tomorrow")
    mc.fault("n3", 0, "row_remap_failure")
    for _ in range(2):
        run = mc.healthcheck("n3")
        assert run.returncode == 0, run.stderr
    assert "not ours, left alone" in run.stderr
    info = mc.node("n3")
    assert "DRAIN" in info["State"] and info["Reason"].startswith("admin: fan replaced tomorrow [")
    mc.heal("n3")
    for _ in range(3):
        mc.healthcheck("n3")
    info = mc.node("n3")
    assert "DRAIN" in info["State"] and info["Reason"].startswith("admin: fan replaced tomorrow [")
    assert mc.history("n3", "select count(*) from actions where action in ('drain','resume','set_reason')") == [(0,)]


def _validate_reservations(mc) -> list[str]:
    return [line.split()[0] for line in mc.run("scontrol", "show", "reservation", "-o", check=False).stdout.splitlines()
            if line.startswith("ReservationName=gpufleet-validate-")]


def _resets(mc, node: str) -> int:
    log = mc.dir / "log" / "resets.log"
    return log.read_text().split().count(node) if log.exists() else 0


def test_row_remap_pending_is_reset_between_jobs_without_a_reboot(mc):
    """The cheapest rung: the busy node is drained (its job runs on), its GPUs are reset once it is
    idle, and after clean runs it is resumed; no reboot."""
    # the job outlasts the drain by a margin: under CI's load slurmd's health check of n5 came late enough
    # that a 25 s job had ended by the time the drain showed
    job = mc.start_job("n5", 2, 60)
    mc.fault("n5", 1, "row_remap_pending")
    # what a GPU reset does: the pending remap is applied
    gpustate.write_atomic(gpustate.healthy_state(8, "n5"), str(mc.gpus / "n5.after-reset.json"))
    mc.wait(lambda: "DRAIN" in mc.state("n5"), 2 * mc.hc_interval + 5, "n5 drained for its reset")
    assert mc.job(job)["JobState"] == "RUNNING", f"the running job must not be touched: {mc.job(job)}"
    assert _resets(mc, "n5") == 0, "no reset while the job runs"
    assert mc.node("n5")["Reason"].startswith("memory gpu1 row remap pending")
    mc.wait(lambda: mc.job(job).get("JobState") == "COMPLETED", 90, "job completed")
    mc.wait(lambda: _resets(mc, "n5") == 1, 2 * mc.hc_interval + 10,
            lambda: "the reset once the node is idle" + mc.explain("n5"))
    # fixed: it returns only through a validation run, in a maintenance reservation of its own
    mc.wait(lambda: mc.node("n5").get("Reason", "").startswith("validate after reset: memory gpu1"),
            mc.hc_interval + 5, "n5 waiting for its validation")
    mc.wait(lambda: mc.history("n5", "select count(*) from validations where state = 'passed'") == [(1,)],
            4 * mc.hc_interval + 30, "the validation job passed")
    mc.wait(lambda: mc.state("n5") == "IDLE" and not _validate_reservations(mc), 2 * mc.hc_interval + 5,
            "n5 in service, its reservation gone")
    # the reset took all 8 GPUs of the NVSwitch board together
    assert (mc.dir / "log" / "resets.log").read_text().split()[-1] == "0,1,2,3,4,5,6,7"
    assert not (mc.dir / "log" / "reboots.log").exists() or "n5" not in (mc.dir / "log" / "reboots.log").read_text()
    assert mc.history("n5", "select class, rung, outcome from remedies") == [("ecc", "reset", "succeeded")]
    assert [a for (a,) in mc.history("n5", "select action from actions order by ts")] == [
        "drain", "reset", "set_reason", "validate", "validated"]
    job_id = mc.history("n5", "select job from validations")[0][0]
    shown = mc.job(job_id)  # (its reservation is deleted by now: Slurm no longer names it)
    assert shown.get("JobState") == "COMPLETED" and shown.get("NodeList") == "n5", shown
    assert shown.get("JobName") == "gpufleet-validate" and shown.get("ExitCode") == "0:0", shown
    assert mc.history("n5", "select action, why from actions where action = 'validate'")[0][1].endswith(
        "in gpufleet-validate-n5")


@pytest.mark.release("scontrol reboot ASAP nextstate=DOWN, the reason Slurm keeps across it, and RebootProgram")
def test_row_remap_pending_that_a_reset_does_not_fix_gets_one_reboot_between_jobs(mc):
    """The ladder's second rung, and validation after it: the node reboots with nextstate=DOWN, so Slurm
    does not hand it back; it comes back DOWN with our reason, runs clean, and returns only through a
    validation run in its own reservation."""
    # the job outlasts a health-check round with room to spare, also on a loaded machine (three releases'
    # clusters side by side): the node is drained while it runs, and the remedies wait for it
    job = mc.start_job("n4", 2, 40)
    mc.fault("n4", 1, "row_remap_pending")
    # the reset leaves the fault (no after-reset file); what the reboot does: the node comes back healthy
    gpustate.write_atomic(gpustate.healthy_state(8, "n4"), str(mc.gpus / "n4.after-reboot.json"))
    mc.wait(lambda: "DRAIN" in mc.state("n4"), 2 * mc.hc_interval + 5, "n4 drained")
    assert mc.job(job)["JobState"] == "RUNNING", f"the running job must not be touched: {mc.job(job)}"
    assert mc.node("n4")["Reason"].startswith("memory gpu1 row remap pending")
    mc.wait(lambda: mc.job(job).get("JobState") == "COMPLETED", 60, "job completed")
    mc.wait(lambda: _resets(mc, "n4") == 1, 2 * mc.hc_interval + 10,
            lambda: "the reset once the node is idle" + mc.explain("n4"))
    mc.wait(lambda: (mc.dir / "log" / "reboots.log").exists()
            and "n4" in (mc.dir / "log" / "reboots.log").read_text().split(), 60, "n4 rebooted")
    # back from the reboot, Slurm does not resume it: DOWN with our reason, until the validation
    back = mc.wait(lambda: (lambda i: i if "REBOOT" not in i["State"] else None)(mc.node("n4")), 60,
                   "n4 back from its reboot")
    assert back["State"].startswith("DOWN") or mc.history(
        "n4", "select count(*) from validations") != [(0,)], back  # (a fast validation may be under way)
    reboot_reason = mc.history("n4", "select reason from actions where action = 'reboot'")[0][0]
    assert reboot_reason.startswith("validate after reboot: memory gpu1 row remap pending"), reboot_reason
    mc.wait(lambda: mc.history("n4", "select count(*) from validations where state = 'passed'") == [(1,)],
            5 * mc.hc_interval + 60, "the validation after the reboot passed")
    mc.wait(lambda: mc.state("n4") == "IDLE" and not _validate_reservations(mc), 2 * mc.hc_interval + 5,
            "n4 in service after its validation")
    cause = mc.history("n4", "select cause from validations")[0][0]
    assert cause.startswith("reboot: memory gpu1 row remap pending") and "reboot issued" not in cause, cause
    time.sleep(mc.hc_interval + 1)  # one more health-check round: no second reboot
    reboots = (mc.dir / "log" / "reboots.log").read_text().split()
    assert reboots.count("n4") == 1 and _resets(mc, "n4") == 1
    assert mc.history("n4", "select count(*) from reboots") == [(1,)]
    assert mc.history("n4", "select rung, outcome from remedies order by id") == [
        ("reset", "permanent"), ("reboot", "succeeded")]
    assert mc.state("n4") == "IDLE"


def test_the_third_fault_of_a_class_within_the_window_is_drained_for_repair(mc):
    """max_attempts = 3: two faults are reset, the third drains the node for repair; `fleet cases` lists
    it, clean runs do not return it, an admin's resume closes the case."""
    for attempt in (1, 2):
        mc.fault("n6", attempt, "row_remap_pending")
        gpustate.write_atomic(gpustate.healthy_state(8, "n6"), str(mc.gpus / "n6.after-reset.json"))
        mc.wait(lambda n=attempt: _resets(mc, "n6") == n, 2 * mc.hc_interval + 10, f"reset {attempt}")
        mc.wait(lambda n=attempt: mc.history("n6", "select count(*) from validations where state = 'passed'") == [(n,)],
                5 * mc.hc_interval + 30, f"validated after reset {attempt}")
        mc.wait(lambda: mc.state("n6") == "IDLE" and not _validate_reservations(mc), 2 * mc.hc_interval + 5,
                f"n6 in service after reset {attempt}")
    mc.fault("n6", 3, "row_remap_pending")
    mc.wait(lambda: "DRAIN" in mc.state("n6"), 2 * mc.hc_interval + 5, "n6 drained")
    assert mc.node("n6")["Reason"].startswith("repair ecc attempt 3 of 3 in 7d: memory gpu3 row remap pending")
    assert _resets(mc, "n6") == 2, "not reset a third time"
    mc.heal("n6")  # repaired by hand: clean runs do not return it
    time.sleep(2 * mc.hc_interval + 2)
    assert "DRAIN" in mc.state("n6")
    cases = mc.gpufleet("fleet", "cases", "--json")
    assert cases.returncode == 0, cases.stderr
    rows = [(r["node"], r["class"], r["attempts"], r["status"]) for r in json.loads(cases.stdout)["cases"]]
    assert rows == [("n6", "ecc", 3, "repair")], rows
    # the admin hands it back: a validation run, then back to work, and the case closes
    handed = mc.gpufleet("fleet", "repaired", "n6")
    assert handed.returncode == 0 and "validate after repair" in handed.stdout, handed.stderr
    assert mc.node("n6")["Reason"].startswith("validate after repair")
    mc.wait(lambda: mc.history("n6", "select count(*) from validations where state = 'passed' and cause = 'repair'")
            == [(1,)], 4 * mc.hc_interval + 30, "the validation after repair passed")
    mc.wait(lambda: mc.history("n6", "select count(*) from case_closes") == [(1,)], 2 * mc.hc_interval + 5,
            "the case closed")
    assert mc.state("n6") == "IDLE"
    mc.wait(lambda: "case" not in json.loads(mc.node("n6").get("Extra") or "{}"), 2 * mc.hc_interval + 5,
            "no open case published")


def test_an_observe_only_group_publishes_and_drains_nothing(mc):
    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    _replace(config, original + '\n[[group]]\nname = "canary-observe"\nnodes = "n7"\nmode = "observe"\n')
    try:
        mc.fault("n7", 5, "row_remap_failure")
        # (a run slurmd started before the fault may publish its "ok" after the first run that saw it: the
        # next run publishes the verdict again, since Slurm then shows another one)
        mc.wait(lambda: json.loads(mc.node("n7").get("Extra") or "{}").get("v") == "drain", 4 * mc.hc_interval + 15,
                "the verdict published")
        time.sleep(mc.hc_interval + 1)
        info = mc.node("n7")
        assert info["State"] == "IDLE", info
        assert json.loads(info["Extra"])["obs"].startswith("drain: memory gpu5 row remapping failed")
        assert mc.history("n7", "select count(*) from actions where action in ('drain', 'reboot', 'reset')") == [(0,)]
        assert mc.history("n7", "select count(*) from actions where action = 'observe'")[0][0] >= 1
    finally:
        _replace(config, original)


@pytest.mark.release("what slurmd does with a failed prolog")
def test_prolog_failure_requeues_the_job_and_drains_with_our_reason(mc):
    # a leftover process on GPU 4 of n1: only the prolog of a job that gets GPU 4 looks there while n1 is busy
    # long enough to outlast the requeue under load (CI saw it end first at 20 s); _reset cancels it
    first = mc.start_job("n1", 4, 110)
    gpustate.add_process(mc.gpu_file("n1"), 4, pid=4242)
    second = mc.sbatch("-w", "n1", "--gres=gpu:4", "--time=2", "--wrap", "true")
    mc.wait(lambda: mc.job(second).get("Restarts") == "1" and mc.job(second).get("JobState") == "PENDING", 60,
            "second job requeued")
    assert mc.job(first)["JobState"] == "RUNNING"
    # it asked for n1 by name: not excluded (it could not run then), released to wait for n1; the record says so
    mc.wait(lambda: "gpufleet=" in mc.job(second).get("AdminComment", ""), 30, "the requeue in the job's record")
    assert mc.job(second).get("Reason") != "launch_failed_requeued_held" or \
        mc.wait(lambda: mc.job(second).get("Reason") != "launch_failed_requeued_held", 30, "the job released")
    assert "n1 not excluded: the job asks for it" in mc.gpufleet("job", second).stdout
    mc.wait(lambda: mc.node("n1").get("Reason", "").startswith("processes gpu4 1 leftover GPU process"),
            25, "our reason in place of 'Prolog error'")
    assert "DRAIN" in mc.state("n1")
    assert mc.history("n1", "select hook, verdict, job_id from runs where hook='prolog'") == [("prolog", "drain", second)]


@pytest.mark.release("the epilog's environment")
def test_epilog_attributes_an_xid_to_the_job(mc):
    job = mc.start_job("n2", 8, 3)
    stamp = dt.datetime.now().astimezone().isoformat(timespec="microseconds").replace(".", ",")
    with open(mc.gpus / "n2.kmsg", "a") as fh:  # GPU 3 of n2 is at PCI 0000:5d:00
        fh.write(f"{stamp} NVRM: Xid (PCI:0000:5d:00): 79, pid=777, name=python3, GPU has fallen off the bus.\n")
    try:
        mc.wait(lambda: mc.history("n2", "select job_id, xid, gpu from findings where job_id = ? and xid = 79", (job,)),
                30, "Xid 79 attributed to the job")
    except AssertionError as exc:
        log = (mc.dir / "log" / "slurmd-n2.log").read_text().splitlines()
        raise AssertionError(f"{exc}\nslurmd-n2.log:\n" + "\n".join(log[-25:])) from None
    rows = mc.history("n2", "select gpu, message from findings where job_id = ? and [check] = 'job'", (job,))
    assert rows == [(3, f"Xid 79 during job {job}")]
    assert mc.history("n2", "select hook from runs where job_id = ?", (job,)) == [("epilog",)]
    # no accounting on this cluster: `slurm-gpufleet job` says where the record is (tests/slurm/test_accounting.py
    # has slurmdbd)
    shown = mc.gpufleet("job", job)
    assert shown.returncode == 0 and "keeps no accounting (slurmdbd)" in shown.stdout, shown.stdout + shown.stderr


def _replace(path, text: str) -> None:
    """The live cluster's config replaced whole (write, then rename): slurmd's health checks keep running,
    and one that opened it between a truncate and a write read an empty file, a valid config of defaults
    without the group the test adds (CI run 19: an observe-only node drained)."""
    part = path.with_name(f".{path.name}.new")
    part.write_text(text)
    os.replace(part, path)


def _own_state_config(mc):
    """The cluster's config with a state directory of its own. slurmd's own runs (spread over the
    interval by CYCLE), stuck on the same read, hold the node's run lock most of the time, and a run
    that finds it held gives way (test_slurm_calls.py) instead of timing out: with the shared state a
    manual run read that lock, not the timeout, whenever slurmd's run on the node came first."""
    config = mc.dir / "etc" / "gpufleet-own-state.toml"
    text = (mc.dir / "etc" / "gpufleet.toml").read_text()
    _replace(config, text.replace(f'state_dir = "{mc.dir}/state/gpufleet"', f'state_dir = "{mc.dir}/state/manual"'))
    assert config.read_text() != text
    return config


@pytest.mark.release("how slurmd treats a health check that overruns")
def test_stuck_reader_returns_within_timeout_and_drains(mc):
    path = mc.gpu_file("n3")
    os.unlink(path)
    os.mkfifo(path)  # opening it blocks forever, like a wedged driver
    config = _own_state_config(mc)
    started = time.monotonic()
    run = mc.healthcheck("n3", timeout=30, config=config)
    elapsed = time.monotonic() - started
    assert elapsed < 4 + 6, elapsed  # read_timeout_s = 4, plus the drain
    assert run.returncode == 1 and "timed out after 4 s" in run.stderr
    info = mc.node("n3")
    assert "DRAIN" in info["State"] and info["Reason"].startswith("NVML timeout")
    mc.heal("n3")


@pytest.mark.release("reason ownership as each release shows it")
def test_nvml_timeout_leaves_a_rollouts_drain_and_reason_alone(mc):
    rollout_reason = "maintain 0abc1234 upgrading to 580.95.05 [gpufleet]"
    mc.run("scontrol", "update", "nodename=n4", "state=drain", f"reason={rollout_reason}")
    path = mc.gpu_file("n4")
    os.unlink(path)
    os.mkfifo(path)
    run = mc.healthcheck("n4", timeout=30, config=_own_state_config(mc))
    assert run.returncode == 1 and "timed out after 4 s" in run.stderr
    info = mc.node("n4")
    assert "DRAIN" in info["State"] and info["Reason"].startswith(rollout_reason), info["Reason"]
    mc.heal("n4")
    mc.run("scontrol", "update", "nodename=n4", "state=resume")


def test_fault_that_survives_reboots_becomes_a_drain(mc):
    # reboots_before_drain = 2: remap pending asks for a reboot; the reset does not fix it (no
    # after-reboot file); after the second reboot the node is drained for hardware inspection
    mc.fault("n3", 6, "row_remap_pending")
    reboots = mc.dir / "log" / "reboots.log"
    mc.wait(lambda: reboots.exists() and reboots.read_text().split().count("n3") >= 2, 6 * mc.hc_interval + 30,
            "two reboots of n3")
    mc.wait(lambda: mc.node("n3").get("Reason", "").startswith("memory gpu6 row remap pending after 2 reboots"),
            3 * mc.hc_interval + 10, "drain after 2 reboots")
    assert "DRAIN" in mc.state("n3")
    time.sleep(mc.hc_interval + 1)
    assert reboots.read_text().split().count("n3") == 2, "no third reboot"
    assert mc.history("n3", "select count(*) from reboots") == [(2,)]


def test_drain_breaker_stops_a_fleet_wide_drain_and_holds_until_reset(mc):
    """Five nodes turn drain-worthy at once; with a threshold of 2 nodes, two are drained, the breaker
    opens, the other three stay in service publishing "breaker open", and it holds until reset."""
    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    _replace(config, re.sub(r"(?m)^breaker_threshold = .*$", "breaker_threshold = 2", original))
    try:
        victims = ["n2", "n3", "n4", "n5", "n6"]
        for node in victims:
            mc.fault(node, 5, "row_remap_failure")
        breaker_file = mc.dir / "state" / "gpufleet" / "breaker.json"
        mc.wait(lambda: breaker_file.exists() and all(
            '"brk":1' in mc.node(n).get("Extra", "") for n in victims if "DRAIN" not in mc.state(n)),
            6 * mc.hc_interval, "breaker open and the rest publishing it")
        time.sleep(2 * mc.hc_interval)  # more runs: still no third drain
        drained = [n for n in victims if "DRAIN" in mc.state(n)]
        assert len(drained) == 2, [(n, mc.state(n)) for n in victims]
        for n in set(victims) - set(drained):
            extra = json.loads(mc.node(n)["Extra"])
            assert extra["v"] == "drain" and extra["f"].startswith("breaker open")
        assert "limit 2" in json.loads(breaker_file.read_text())["why"]
        status = mc.gpufleet("breaker", "status", "--json")
        assert status.returncode == 1 and json.loads(status.stdout)["open"]
        for n in victims:  # the cause is fixed, then an admin closes the breaker
            mc.heal(n)
        mc.wait(lambda: all('"v":"ok"' in mc.node(n).get("Extra", "") for n in victims), 4 * mc.hc_interval,
                "victims healthy again")
        assert mc.gpufleet("breaker", "reset").returncode == 0
        assert not breaker_file.exists()
        assert mc.gpufleet("breaker", "status").returncode == 0
    finally:
        _replace(config, original)


def test_a_reboot_into_a_kernel_without_the_module_becomes_a_drain(mc):
    """unattended-upgrades installed 6.1.0-31 and DKMS built nothing for it: the reset-fixable fault is
    reset first (the node held, with the fault's own reason, while it runs); the reset does not fix it, and
    the reboot it would then ask for would come back without GPUs, so the node is drained instead."""
    host = mc.dir / "host"
    (host / "boot" / "vmlinuz-6.1.0-31-amd64").write_text("kernel")
    (host / "lib" / "modules" / "6.1.0-31-amd64" / "kernel").mkdir(parents=True, exist_ok=True)
    kernel_reason = "next boot kernel 6.1.0-31-amd64 has no nvidia 580.159.04 module [gpufleet]"
    try:
        mc.fault("n3", 2, "row_remap_pending")  # reset-fixable: a reset, then a reboot normally
        # the reset's own drain shows first (CI stop 38 caught it: a wait on DRAIN alone read that reason)
        mc.wait(lambda: mc.node("n3").get("Reason", "").startswith(kernel_reason), 5 * mc.hc_interval,
                lambda: f"n3 drained for its next boot kernel: {mc.node('n3').get('Reason')!r}, actions "
                        f"{mc.history('n3', 'select action, reason from actions order by ts')}")
        assert "DRAIN" in mc.state("n3")
        actions = mc.history("n3", "select action, reason from actions order by ts")
        assert actions[0] == ("reset", "memory gpu2 row remap pending [gpufleet]"), actions
        assert mc.history("n3", "select rung from remedies") == [("reset",)]
        time.sleep(mc.hc_interval)
        reboots = mc.dir / "log" / "reboots.log"
        assert not reboots.exists() or "n3" not in reboots.read_text()
        assert "REBOOT" not in mc.state("n3")
    finally:
        (host / "boot" / "vmlinuz-6.1.0-31-amd64").unlink()
        shutil.rmtree(host / "lib" / "modules" / "6.1.0-31-amd64")


@pytest.mark.release("AvailableFeatures/ActiveFeatures updates and --constraint")
def test_driver_features_let_jobs_pick_the_driver(mc):
    """During a mixed-driver period a job constrained to one driver runs only where it is installed; the
    site's own features stay."""
    import gpustate

    mc.run("scontrol", "update", "nodename=n5", "availablefeatures=ib", "activefeatures=ib")
    gpustate.write_atomic(gpustate.healthy_state(8, "n5", "570.172.08"), mc.gpu_file("n5"))
    mc.wait(lambda: "gpufleet_drv570.172.08" in mc.node("n5").get("ActiveFeatures", ""), 3 * mc.hc_interval,
            "n5's driver feature")
    mc.wait(lambda: all("gpufleet_drv580.159.04" in mc.node(n).get("ActiveFeatures", "")
                        for n in mc.nodes if n != "n5"), 3 * mc.hc_interval, "the others' driver feature")
    features = mc.node("n5")["ActiveFeatures"].split(",")
    assert "ib" in features and "gpufleet_drv570" in features and "gpufleet_cuda13.0" in features
    assert "gpufleet_drv580.159.04" not in features
    ran_on = []
    for _ in range(3):
        job = mc.sbatch("--constraint=gpufleet_drv570.172.08", "--gres=gpu:1", "--time=1", "--wrap", "true")
        mc.wait(lambda j=job: mc.job(j).get("JobState") == "COMPLETED", 60, f"job {job} completed")
        ran_on.append(mc.job(job)["NodeList"])
    assert ran_on == ["n5", "n5", "n5"]
    mc.run("scontrol", "update", "nodename=n5", "availablefeatures=", "activefeatures=", check=False)


def test_a_broken_history_never_stops_a_drain(mc):
    """The node's history cannot be opened (full disk, broken file; here a directory in its place): the
    health check still drains the faulty node, says why in its log, and raises no internal error."""
    db = mc.dir / "state" / "gpufleet" / "n6.db"
    for leftover in (db, db.with_name("n6.db-wal"), db.with_name("n6.db-shm")):
        leftover.unlink(missing_ok=True)
    db.mkdir()
    try:
        mc.fault("n6", 1, "row_remap_failure")
        mc.wait(lambda: "DRAIN" in mc.state("n6"), 4 * mc.hc_interval, "n6 drained without its history")
        assert mc.node("n6")["Reason"].startswith("memory gpu1")
        run = mc.healthcheck("n6")
        assert run.returncode == 0 and "history" in run.stderr and "unavailable" in run.stderr, run.stderr
    finally:
        db.rmdir()


def test_straggler_drains_go_through_the_breaker(mc, tmp_path):
    """`fleet stragglers --drain` over three slow nodes with breaker_threshold = 1: the actuator drains
    the first, the breaker opens for the other two and the command names it."""
    config = tmp_path / "gpufleet.toml"
    _replace(config, re.sub(r"(?m)^breaker_threshold = .*$", "breaker_threshold = 1\ndrain_stragglers = true",
                             (mc.dir / "etc" / "gpufleet.toml").read_text()))
    results = tmp_path / "bandwidth.jsonl"
    slow = {"n2", "n3", "n4"}
    with results.open("w") as fh:
        for node in mc.nodes:
            for gpu in range(8):
                bw = 3000.0 if node in slow and gpu == 3 else 4100.0 + gpu
                fh.write(json.dumps({"node": node, "gpu": gpu, "model": "NVIDIA H200", "mem_bw_gbps": bw}) + "\n")
    r = mc.gpufleet("fleet", "--json", "stragglers", "--results", str(results), "--drain",
                    env={"SLURM_GPUFLEET_CONFIG": str(config)})
    assert r.returncode == 1, r.stderr  # stragglers found
    out = json.loads(r.stdout)
    assert sorted(o["key"] for o in out["stragglers"]) == ["n2/gpu3", "n3/gpu3", "n4/gpu3"]
    assert out["drained"] == ["n2"] and out["breaker_blocked"] == ["n3", "n4"]
    assert "drain breaker is open" in r.stderr and "n[3-4]" in r.stderr
    assert "DRAIN" in mc.state("n2") and mc.node("n2")["Reason"].startswith("performance gpu3 memory")
    for node in ("n3", "n4"):
        assert "DRAIN" not in mc.state(node)
    breaker_file = mc.dir / "state" / "gpufleet" / "breaker.json"
    assert "limit 1" in json.loads(breaker_file.read_text())["why"]


def test_an_idle_sweep_gives_way_to_a_user_job(mc):
    """`fleet sweep` puts the deep check on an idle node as a job of the sweep partition (a lower
    PriorityTier, PreemptMode=CANCEL); a user job that needs the node starts at once, the sweep cancelled."""
    mc.run("scontrol", "create", "partitionname=gpufleet-sweep", "nodes=n8", "prioritytier=1", "preemptmode=cancel",
           "maxtime=60", "defaulttime=10", "state=up")
    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    sweep = f"{mc.dir}/sbin/slurm-gpufleet-healthcheck --level deep; sleep 300"
    _replace(config, original.replace("[slurm]\n", f'[slurm]\nsweep_partition = "gpufleet-sweep"\n'
                                                     f'sweep_command = "{sweep}"\n', 1)
                      + '\n[[group]]\nname = "swept"\nnodes = "n8"\nsweep_interval_h = 24\nsweep_idle_min = 0\n')
    try:
        step = mc.gpufleet("fleet", "sweep", "--json")
        assert step.returncode == 0, step.stderr
        submitted = json.loads(step.stdout)["submitted"]
        assert list(submitted) == ["n8"], step.stdout
        sweep_job = submitted["n8"]
        mc.wait(lambda: mc.job(sweep_job).get("JobState") == "RUNNING", 30, "the sweep job running")
        assert mc.job(sweep_job)["Partition"] == "gpufleet-sweep"
        # the deep check ran, acting, as the node's health check: its measurements are in the history
        mc.wait(lambda: mc.history("n8", "select count(*) from performance")[0][0] > 0, 30, "the deep check's record")
        # swept within the interval: not due again
        again = json.loads(mc.gpufleet("fleet", "sweep", "--json").stdout)
        assert again["submitted"] == {} and again["running"] == ["n8"]
        asked = time.monotonic()
        user = mc.sbatch("-p", "gpu", "-w", "n8", "--gres=gpu:8", "--time=2", "--wrap", "sleep 30")
        mc.wait(lambda: mc.job(user).get("JobState") == "RUNNING", 30, "the user job running")
        waited = time.monotonic() - asked
        assert waited < 15, f"the user job waited {waited:.1f} s for the sweep"
        assert mc.job(sweep_job).get("JobState") in ("CANCELLED", "PREEMPTED"), mc.job(sweep_job)
    finally:
        _replace(config, original)


def _suspect_reservations(mc) -> list[str]:
    return [line.split()[0].split("=", 1)[1]
            for line in mc.run("scontrol", "show", "reservation", "-o", check=False).stdout.splitlines()
            if line.startswith("ReservationName=gpufleet-suspect-")]


def _with_suspect_settings(mc):
    """The cluster's config with a PCIe width every node must reach, and the suspect rung's re-checks
    quick (6 s, 2 clean ones): returns the original text, to put back."""
    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    _replace(config, original.replace("[defaults]\n", "[defaults]\npcie_min_width = 16\n", 1)
             .replace("[slurm]\n", "[slurm]\nsuspect_recheck_min = 0.1\nsuspect_passes = 2\n", 1))
    return config, original


def test_a_suspect_keeps_its_running_job_takes_no_new_one_and_is_released_after_clean_rechecks(mc):
    """A PCIe link trained x4 (a suspect class): the node is held in a MAINT reservation of its own, not
    drained: its running job goes on, a job pinned to it waits; `fleet cases` shows it; once the link is
    back, two clean re-checks release it and the waiting job runs."""
    config, original = _with_suspect_settings(mc)
    try:
        first = mc.start_job("n4", 2, 40)
        gpustate.set_value(mc.gpu_file("n4"), 2, "pcie_link_width", 4)
        mc.wait(lambda: _suspect_reservations(mc) == ["gpufleet-suspect-n4"], 2 * mc.hc_interval + 10,
                "n4 held in its suspect reservation")
        assert "DRAIN" not in mc.state("n4"), mc.node("n4")
        assert mc.job(first)["JobState"] == "RUNNING", "the running job goes on"
        second = mc.sbatch("-w", "n4", "--gres=gpu:1", "--time=2", "--wrap", "sleep 1")
        time.sleep(mc.hc_interval)
        assert mc.job(second)["JobState"] == "PENDING", mc.job(second)
        mc.wait(lambda: [(r["node"], r["class"], r["status"]) for r in json.loads(
            mc.gpufleet("fleet", "cases", "--json").stdout)["cases"]] == [("n4", "pcie", "suspect")],
            2 * mc.hc_interval + 10, "fleet cases shows the suspect")
        mc.heal("n4")   # the link trains x16 again
        mc.wait(lambda: _suspect_reservations(mc) == [], 6 * mc.hc_interval + 30, "the suspect released")
        # the reservation goes first, then the hold's row closes (remedy/carrier._end_suspect): a read between
        # the two saw it open under CI's load
        mc.wait(lambda: mc.history("n4", "select state from suspects") != [("open",)], 10, "the hold's row closed")
        assert mc.history("n4", "select state, passes from suspects") == [("released", 1)]
        mc.wait(lambda: mc.job(second).get("JobState") == "COMPLETED", 60, "the waiting job ran on n4")
        assert mc.job(first)["JobState"] in ("RUNNING", "COMPLETED"), "never killed"
        assert "DRAIN" not in mc.state("n4")
    finally:
        _replace(config, original)


def test_a_suspect_whose_recheck_still_finds_its_fault_is_drained_for_repair(mc):
    config, original = _with_suspect_settings(mc)
    try:
        gpustate.set_value(mc.gpu_file("n3"), 5, "pcie_link_width", 8)
        mc.wait(lambda: _suspect_reservations(mc) == ["gpufleet-suspect-n3"], 2 * mc.hc_interval + 10,
                "n3 held in its suspect reservation")
        mc.wait(lambda: "DRAIN" in mc.state("n3"), 4 * mc.hc_interval + 20, "n3 drained at its re-check")
        assert mc.node("n3")["Reason"].startswith("repair pcie suspect re-check failed: pcie gpu5 PCIe x8")
        assert _suspect_reservations(mc) == [], "its reservation deleted with the drain"
        assert mc.history("n3", "select state from suspects") == [("repair",)]
        mc.wait(lambda: [(r["node"], r["status"]) for r in json.loads(
            mc.gpufleet("fleet", "cases", "--json").stdout)["cases"]] == [("n3", "repair")],
            2 * mc.hc_interval + 10, "fleet cases: needs repair")
    finally:
        _replace(config, original)


def _summary(mc, node: str) -> dict:
    return json.loads(mc.node(node).get("Extra") or "{}")


def test_the_tools_own_faults_drain_nothing_under_running_jobs_and_a_real_xid_still_drains(mc):
    """The tool's own faults, one at a time, with jobs running (issue 53): a config that stops loading, then a
    corrupt history on one node.  No node is drained for them, each node says so in its summary (`err`) and
    `fleet` lists it; then a real Xid 79 still takes its node out (the last config that loaded is in force)."""
    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    admin = mc.dir / "etc" / "admin.toml"   # the admin's own view: `fleet` refuses a config that does not load
    _replace(admin, original)
    db = mc.dir / "state" / "gpufleet" / "n5.db"
    jobs = [mc.start_job(n, 2, 100) for n in ("n4", "n5")]
    try:
        _replace(config, original + '\n[[group]]\nnodes = [1]\n')
        mc.wait(lambda: all(_summary(mc, n).get("err", "").startswith(f"config: {config}:") for n in mc.nodes),
                4 * mc.hc_interval + 15, "every node says its config does not load")
        fleet = json.loads(mc.gpufleet("fleet", "--json", env={"SLURM_GPUFLEET_CONFIG": str(admin)}).stdout)
        assert sorted(c["node"] for c in fleet["cannot_check"]) == sorted(mc.nodes)
        assert not [n for n in mc.nodes if mc.out_of_service(mc.state(n))], "a config error drains nothing"
        _replace(config, original)
        mc.wait(lambda: not any("err" in _summary(mc, n) for n in mc.nodes), 4 * mc.hc_interval + 15,
                "the error gone once the config loads")

        broken = db.with_name("n5.db.broken")
        broken.write_bytes(b"not a database " * 200)
        os.replace(broken, db)
        mc.wait(lambda: _summary(mc, "n5").get("err", "").startswith("history "), 4 * mc.hc_interval + 15,
                "n5 says its history cannot be used")
        fleet = json.loads(mc.gpufleet("fleet", "--json", env={"SLURM_GPUFLEET_CONFIG": str(admin)}).stdout)
        assert [c["node"] for c in fleet["cannot_check"]] == ["n5"]
        assert not [n for n in mc.nodes if "DRAIN" in mc.state(n)], "a broken history drains nothing"
        assert all(mc.job(j)["JobState"] == "RUNNING" for j in jobs)

        stamp = dt.datetime.now().astimezone().isoformat(timespec="microseconds").replace(".", ",")
        with open(mc.gpus / "n5.kmsg", "a") as fh:  # GPU 3 at PCI 0000:5d:00
            fh.write(f"{stamp} NVRM: Xid (PCI:0000:5d:00): 79, pid=777, name=python3, GPU has fallen off the bus.\n")
        mc.wait(lambda: mc.out_of_service(mc.state("n5")) or "DRAIN" in mc.state("n5"), 4 * mc.hc_interval + 15,
                lambda: "n5 taken out for its Xid 79 with its history broken" + mc.explain("n5"))
    finally:
        _replace(config, original)
        db.unlink(missing_ok=True)   # the next run makes it anew


def test_a_hung_slurmctld_drains_nothing_and_every_check_ends_within_45_s(mc):
    """slurmctld stopped (SIGSTOP: every scontrol call hangs, as on an overloaded controller) with jobs
    running and a GPU fault arriving on another node meanwhile (issue 53): each health check, run as slurmd
    runs it, ends within 45 s (Slurm kills it at 60) and changes nothing; once slurmctld answers again the
    jobs still run, no node left service for the outage, and the fault still takes its node out."""
    import signal

    # nodes in service now (an earlier test's reboot can leave one DOWN a while): two for jobs, one for the fault
    idle = [n for n in mc.nodes if mc.state(n) == "IDLE"]
    assert len(idle) >= 3, {n: mc.state(n) for n in mc.nodes}
    busy, faulty = idle[:2], idle[2]
    out_before = {n for n in mc.nodes if mc.out_of_service(mc.state(n))}
    pid = int((mc.dir / "run" / "slurmctld.pid").read_text())
    jobs = [mc.start_job(n, 2, 300) for n in busy]
    walls = {}
    os.kill(pid, signal.SIGSTOP)
    try:
        mc.fault(faulty, 1, "row_remap_failure")
        for node in (busy[0], faulty):
            t = time.monotonic()
            r = mc.healthcheck(node, timeout=60)
            walls[node] = time.monotonic() - t
            assert "internal error" not in r.stderr, r.stderr
            assert walls[node] < 45, (node, walls[node], r.stderr)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert all(mc.job(j)["JobState"] == "RUNNING" for j in jobs)
    out_after = {n for n in mc.nodes if mc.out_of_service(mc.state(n))}
    assert out_after - {faulty} <= out_before, (out_before, out_after)
    mc.wait(lambda: "DRAIN" in mc.state(faulty), 4 * mc.hc_interval + 15,
            lambda: f"{faulty} taken out for its fault once slurmctld answers" + mc.explain(faulty))
    print(f"\nslurmctld stopped: health checks ended in {walls[busy[0]]:.1f} s ({busy[0]}, a job running) and "
          f"{walls[faulty]:.1f} s ({faulty}, its fault found)")


def test_a_user_s_forged_xid_in_a_syslog_file_drains_nothing_and_the_kernel_s_does(mc):
    """A kernel log that is a syslog file (issue 54): any user can log `NVRM: Xid ... 79` with `logger`; that
    line, under its program's tag, drains nothing and is said in the health check's log; the same line
    tagged by the kernel takes the node out."""
    xid = "NVRM: Xid (PCI:0000:5d:00): 79, pid=777, name=python3, GPU has fallen off the bus."
    node = next(n for n in reversed(mc.nodes) if mc.state(n) == "IDLE")   # one in service now
    now = dt.datetime.now().astimezone()
    with open(mc.gpus / f"{node}.kmsg", "a") as fh:
        fh.write(f"{now.isoformat(timespec='microseconds')} {node} mallory[4242]: {xid}\n")
    mc.wait(lambda: len(mc.history(node, "select 1 from runs where hook = 'healthcheck' and ts > ?",
                                   (now.timestamp(),))) >= 2, 4 * mc.hc_interval + 15, f"two checks of {node} since")
    assert not mc.out_of_service(mc.state(node)) and "DRAIN" not in mc.state(node), mc.explain(node)
    r = mc.healthcheck(node)
    assert "not from the kernel, not counted" in r.stderr and "mallory" in r.stderr, r.stderr
    with open(mc.gpus / f"{node}.kmsg", "a") as fh:
        fh.write(f"{dt.datetime.now().astimezone().isoformat(timespec='microseconds')} {node} kernel: {xid}\n")
    mc.wait(lambda: mc.out_of_service(mc.state(node)) or "DRAIN" in mc.state(node), 4 * mc.hc_interval + 15,
            lambda: f"{node} taken out for the kernel's Xid 79" + mc.explain(node))


def test_observe_and_quarantine_groups_side_by_side(mc):
    """An observe group writes no change of state; a quarantine group drains a reset-fixable fault but never
    resets or reboots; both on the same cluster as the full-mode nodes."""
    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    _replace(config, original + '\n[[group]]\nname = "watch"\nnodes = "n6"\nmode = "observe"\n'
                                '\n[[group]]\nname = "hold"\nnodes = "n7"\nmode = "quarantine"\n')
    try:
        for node in ("n6", "n7"):
            mc.fault(node, 1, "row_remap_pending")
            gpustate.write_atomic(gpustate.healthy_state(8, node), str(mc.gpus / f"{node}.after-reset.json"))
        mc.wait(lambda: "DRAIN" in mc.state("n7"), 4 * mc.hc_interval + 15, "n7 drained")
        mc.wait(lambda: _summary(mc, "n6").get("obs", "").startswith("drain: memory gpu1 row remap pending")
                or _summary(mc, "n6").get("obs", "").startswith("reset"), 4 * mc.hc_interval + 15,
                "n6 says what it would do")
        time.sleep(2 * mc.hc_interval)
        assert mc.state("n6") == "IDLE" and "REBOOT" not in mc.state("n7")
        assert _resets(mc, "n6") == 0 and _resets(mc, "n7") == 0
        assert mc.history("n6", "select count(*) from actions where action in ('drain', 'reboot', 'reset', "
                                "'set_reason', 'resume')") == [(0,)]
        assert mc.history("n7", "select count(*) from actions where action in ('reboot', 'reset')") == [(0,)]
    finally:
        _replace(config, original)
