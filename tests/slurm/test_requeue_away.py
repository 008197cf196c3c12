"""Issue 47 on real Slurm: a job that a node's failed prolog sent back to the queue runs next on another node
(the node in its ExcNodeList, the job released), and with `max_fault_requeues = 1` its second fault
requeue leaves it held, the nodes that failed it named in its record (`slurm-gpufleet job`)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

import gpustate

FILLERS = [f"n{i}" for i in range(3, 9)]


def _busy(mc, nodes, seconds: int) -> list[str]:
    """Every GPU of these nodes taken by a job of `seconds`: a new job can land only elsewhere."""
    jobs = [mc.sbatch("-w", n, "--gres=gpu:8", "--time=3", "--wrap", f"sleep {seconds}") for n in nodes]
    mc.wait(lambda: all(mc.job(j).get("JobState") == "RUNNING" for j in jobs), 60, "the filler jobs running")
    return jobs


def _leftover_on(mc, node: str) -> str:
    """A job on GPUs 0-3 of the node (so its health check judges no processes) and a leftover process on
    GPUs 4-7: the prolog of the next job there fails on it."""
    job = mc.start_job(node, 4, 120)
    for gpu in range(4, 8):
        gpustate.add_process(mc.gpu_file(node), gpu, pid=4242 + gpu)
    return job


def test_a_job_its_prolog_failed_runs_next_on_another_node(mc):
    _leftover_on(mc, "n1")
    _busy(mc, ["n2", *FILLERS], 25)
    job = mc.sbatch("--gres=gpu:4", "--time=2", "--wrap", "sleep 2")
    mc.wait(lambda: mc.job(job).get("Restarts") == "1", 60, f"job {job} requeued by n1's prolog")
    mc.wait(lambda: "n1" in mc.job(job).get("ExcNodeList", ""), 30,
            lambda: f"n1 in job {job}'s ExcNodeList: {mc.job(job)}")
    mc.wait(lambda: mc.job(job).get("JobState") == "COMPLETED", 90, lambda: f"job {job} completed: {mc.job(job)}")
    ran_on = mc.job(job)["NodeList"]
    assert ran_on != "n1", ran_on
    shown = mc.gpufleet("job", job, "--json")
    record = json.loads(shown.stdout)["record"]
    assert [rq[0] for rq in record["rq"]] == ["n1"] and record["rq"][0][1].startswith("processes gpu4")
    assert "held" not in record


def test_past_max_fault_requeues_the_job_stays_held_naming_the_nodes(mc):
    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    config.write_text(re.sub(r"(?m)^\[defaults\]$", "[defaults]\nmax_fault_requeues = 1", original, count=1))
    try:
        _leftover_on(mc, "n1")
        _leftover_on(mc, "n2")
        _busy(mc, FILLERS, 60)
        job = mc.sbatch("--gres=gpu:4", "--time=2", "--wrap", "sleep 2")
        mc.wait(lambda: mc.job(job).get("Restarts") == "2", 90, lambda: f"job {job} requeued twice: {mc.job(job)}")

        def held():
            info = mc.job(job)
            record = json.loads(mc.gpufleet("job", job, "--json").stdout)["record"]
            kept = info.get("Reason") in ("launch_failed_requeued_held", "JobHeldAdmin")
            return record if info.get("JobState") == "PENDING" and kept and "held" in record else None

        record = mc.wait(held, 30, lambda: f"job {job} held with its record: {mc.job(job)}")
        assert sorted(rq[0] for rq in record["rq"]) == ["n1", "n2"]
        assert record["held"].startswith("2 fault requeues (max_fault_requeues 1): ")
        text = mc.gpufleet("job", job).stdout
        assert "held: 2 fault requeues" in text, text
    finally:
        config.write_text(original)


def test_a_job_the_node_failed_under_after_its_drain_runs_next_elsewhere(mc):
    """NODE_FAIL after a drain (#55): the health check drains n1 under a running `--requeue` job (a drain
    lets it finish), then n1's slurmd dies, Slurm marks the node down and requeues the job; once n1 is back
    its checks find it held for its fault and send the job away: n1 in its ExcNodeList, said in its record."""
    fillers = _busy(mc, ["n2", *FILLERS], 150)
    marker = mc.dir / "jobs-started"
    marker.mkdir(exist_ok=True)
    job = mc.sbatch("--requeue", "--gres=gpu:4", "--time=3", "--wrap", f"touch {marker}/$SLURM_JOB_ID; sleep 300")
    mc.wait(lambda: (marker / job).exists() and mc.job(job).get("NodeList") == "n1", 60, f"job {job} running on n1")
    mc.fault("n1", 5, "row_remap_failure")
    mc.wait(lambda: "DRAIN" in mc.state("n1") and mc.node("n1").get("Reason", "").startswith("memory gpu5"),
            3 * mc.hc_interval + 5, lambda: f"n1 drained under job {job}: {mc.node('n1')}")
    assert mc.job(job).get("JobState") == "RUNNING"
    pid = int((mc.dir / "run" / "slurmd-n1.pid").read_text())
    try:
        os.kill(pid, signal.SIGKILL)   # the node's slurmd dies under the job: no epilog runs now
        mc.wait(lambda: mc.job(job).get("Restarts") == "1", 120,
                lambda: f"job {job} requeued after NODE_FAIL: {mc.job(job)} / {mc.node('n1')}")
    finally:
        subprocess.run([str(mc.dir / "bin" / "restart-slurmd"), "n1"], env=mc.env, check=True, timeout=120,
                       capture_output=True)
    mc.wait(lambda: "n1" in mc.job(job).get("ExcNodeList", ""), 3 * mc.hc_interval + 60,
            lambda: f"n1 in job {job}'s ExcNodeList: {mc.job(job)} / {mc.node('n1')}")
    assert mc.node("n1").get("Reason", "").startswith("memory gpu5"), mc.node("n1")
    record = json.loads(mc.gpufleet("job", job, "--json").stdout)["record"]
    assert [rq[0] for rq in record["rq"]] == ["n1"] and record["rq"][0][1].startswith("memory gpu5"), record
    print("requeue actions:", mc.history("n1", "select hook, why from actions where action = 'requeue'"))
    said = mc.history("n1", "select why from actions where action = 'requeue'")
    assert [w for (w,) in said if w.startswith(f"job {job}: released to run elsewhere; excluded n1")], said
    mc.run("scancel", *fillers)
    mc.wait(lambda: mc.job(job).get("JobState") == "RUNNING", 90, lambda: f"job {job} running again: {mc.job(job)}")
    assert mc.job(job)["NodeList"] != "n1"
    mc.run("scancel", job)
