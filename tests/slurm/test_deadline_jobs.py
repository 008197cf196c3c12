"""A deadline rollout on real Slurm (issue #13): a job that checkpoints on its --signal is asked to, then
requeued, and resumes from its checkpoint; a job that cannot be requeued and cannot end in time is
cancelled, as the plan said beforehand; a job that ends in time is left alone."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import threading
import time

from test_maintain import TARGET, leftovers

CHECKPOINTING_JOB = """#!/bin/bash
# counts seconds of "work"; on SIGUSR1 writes the count to its checkpoint, and on a restart resumes from it
ck={dir}/ckpt.$SLURM_JOB_ID
step=$(cat "$ck" 2>/dev/null || echo 0)
echo "start $step restarts=${{SLURM_RESTART_COUNT:-0}}" >> {dir}/job.log
trap 'echo $step > "$ck"; echo "checkpoint $step" >> {dir}/job.log' USR1
while true; do step=$((step + 1)); sleep 1; done
"""


def test_deadline_checkpoints_and_requeues_cancels_what_it_said_and_leaves_the_rest(mc, tmp_path):
    mc.wait_published()
    # one minute a node: a deadline a test can wait for.  The slots are on a whole-minute grid from the
    # next minute, a node whose job ends within the minute waits for the grid's next one, and with the
    # cluster's waves [1, "25%", "50%", "100%"] the three nodes go one stage each: their slots end within
    # about 6 min of the grid's start.  The deadline is set on that grid (8 min past its start), so
    # where in its minute the plan is made moves nothing.
    config = tmp_path / "gpufleet.toml"
    config.write_text(re.sub(r"(?m)^\[maintain\]$", "[maintain]\nupgrade_minutes = 1",
                             (mc.dir / "etc" / "gpufleet.toml").read_text()))
    env = {"SLURM_GPUFLEET_CONFIG": str(config)}
    script = tmp_path / "ckpt.sh"
    script.write_text(CHECKPOINTING_JOB.format(dir=tmp_path))
    script.chmod(0o755)
    ck = mc.sbatch("-w", "n1", "--requeue", "--signal=B:USR1@30", "--time=600", "--gres=gpu:8",
                   "--comment=gpufleet:signal=B:USR1@30", str(script))
    norq = mc.sbatch("-w", "n2", "--no-requeue", "--time=600", "--gres=gpu:8", "--wrap", "sleep 3600")
    short = mc.sbatch("-w", "n3", "--no-requeue", "--time=1", "--gres=gpu:2", "--wrap", "sleep 20")
    mc.wait(lambda: all(mc.job(j).get("JobState") == "RUNNING" for j in (ck, norq, short)), 30, "jobs running")
    mc.wait(lambda: (tmp_path / "job.log").exists(), 30, "the checkpointing job's script started")

    out = tmp_path / "plan.json"
    grid = math.ceil(time.time() / 60) * 60
    deadline = dt.datetime.fromtimestamp(grid + 480).isoformat(timespec="seconds")
    r = mc.gpufleet("maintain", "plan", "--target-driver", TARGET, "--nodes", "n[1-3]", "--deadline", deadline,
                    "--out", str(out), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    plan = json.loads(out.read_text())
    actions = {j["job_id"]: j for j in plan["deadline"]["jobs"]}
    # said beforehand: what happens to each job, and when
    assert actions[ck]["action"] == "checkpoint-requeue" and actions[ck]["signal"] == "USR1"
    assert actions[norq]["action"] == "cancel" and "cannot be requeued" in actions[norq]["why"]
    assert actions[short]["action"] == "wait"
    assert f"job {norq}" in r.stdout and "cancel" in r.stdout

    # the apply runs until the last node is done, which can be near the deadline: past the
    # command's default 300 s limit.  The jobs' states are watched while it runs: Slurm forgets a job
    # MinJobAge (300 s) after it ended, which can be before the apply does.
    last_state: dict[str, str] = {}
    short_comments: set[str] = set()
    running = threading.Event()
    running.set()

    def watch() -> None:
        while running.is_set():
            for job in (norq, short):
                state = mc.job(job).get("JobState")
                if state:
                    last_state[job] = state
            short_comments.add(mc.run("squeue", "-h", "-t", "all", "-j", short, "-o", "%k", check=False).stdout.strip())
            time.sleep(1.0)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        r = mc.gpufleet("maintain", "apply", str(out), env=env, timeout=600)
    finally:
        running.clear()
        watcher.join(10)
    assert r.returncode == 0, r.stdout + r.stderr
    status = json.loads(mc.gpufleet("maintain", "status", "--json", env=env).stdout)
    assert status["state"] == "done" and status["counts"] == {"done": 3}, status
    assert mc.driver("n1") == TARGET and mc.driver("n3") == TARGET
    done_at = mc.maintain_db("select max(ts) from audit where event = 'done'")[0][0]
    assert done_at <= plan["deadline"]["at"] + 5

    # the checkpointing job: signalled, checkpointed, requeued, and resumed from its checkpoint on n1
    mc.wait(lambda: sum(line.startswith("start ") for line in (tmp_path / "job.log").read_text().splitlines()) >= 2,
            180, "the requeued job restarting")
    log = (tmp_path / "job.log").read_text().splitlines()
    saved = int(next(line for line in log if line.startswith("checkpoint")).split()[1])
    assert saved > 0 and log[-1] == f"start {saved} restarts=1", log
    told = mc.run("squeue", "-h", "-j", ck, "-o", "%k").stdout  # the owner was told in the job's comment
    assert told.startswith("gpufleet:signal=B:USR1@30 | gpufleet ") and "then requeued" in told, told
    # the job that could not be requeued was cancelled; the one that ended in time was never touched
    assert last_state == {norq: "CANCELLED", short: "COMPLETED"}, last_state
    assert short_comments <= {"", "(null)"}, short_comments  # never told anything: it was left alone
    states = dict(mc.maintain_db("select job, state from preemptions"))
    assert states == {ck: "stopped", norq: "stopped"}
    mc.run("scancel", ck)
    assert leftovers(mc) == ("", [])


RECORDER = """#!/bin/sh
# logs its argv (one JSON line) and runs the real {name}
{python} -c 'import json, sys; open("{log}", "a").write(json.dumps(sys.argv[1:]) + "\\n")' "$@"
exec {real} "$@"
"""


def test_job_controlled_text_reaches_slurm_only_as_single_argument_values(mc, tmp_path):
    """Job comments (the checkpoint convention) are the job owner's text: `;`, `$()`, newlines,
    `--user=root` and 1,000 characters (Slurm refuses 5,000 at sbatch) go through `plan --deadline` and `apply` as data, never a shell,
    each only ever inside one argument (recorded by stand-ins for scontrol, scancel, squeue, sbatch)."""
    import shutil
    import sys

    mc.wait_published()
    marker = tmp_path / "PWNED"
    hostile = {"n1": f"gpufleet:signal=B:USR1@30; touch {marker}",
               "n2": f"$(touch {marker}) `touch {marker}` --user=root",
               "n3": "x" * 1000 + " --user=root"}  # Slurm refuses a job comment of 5,000 (too long)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv.jsonl"
    for name in ("scontrol", "scancel", "squeue", "sbatch", "sinfo", "sacct"):
        real = shutil.which(name, path=mc.env["PATH"])
        if real:
            (bin_dir / name).write_text(RECORDER.format(name=name, python=sys.executable, log=log, real=real))
            (bin_dir / name).chmod(0o755)
    config = tmp_path / "gpufleet.toml"
    text = (mc.dir / "etc" / "gpufleet.toml").read_text()
    text = re.sub(r'(?m)^scontrol = .*$', f'scontrol = "{bin_dir / "scontrol"}"', text)
    config.write_text(re.sub(r"(?m)^\[maintain\]$", "[maintain]\nupgrade_minutes = 1", text))
    env = {"SLURM_GPUFLEET_CONFIG": str(config)}
    jobs = {}
    for n, c in hostile.items():
        r = mc.run("sbatch", "--parsable", "-o", "/dev/null", "-w", n, "--no-requeue", "--time=600", "--gres=gpu:8",
                   f"--comment={c}", "--wrap", "sleep 3600", check=False)
        assert r.returncode == 0, (len(c), r.stderr)
        jobs[n] = r.stdout.strip().split(";")[0]
    mc.wait(lambda: all(mc.job(j).get("JobState") == "RUNNING" for j in jobs.values()), 30, "jobs running")
    out = tmp_path / "plan.json"
    r = mc.gpufleet("maintain", "plan", "--target-driver", TARGET, "--nodes", "n[1-3]", "--deadline", "330s",
                    "--out", str(out), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    r = mc.gpufleet("maintain", "apply", str(out), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not marker.exists(), "a job comment reached a shell"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(c[:1] == [j] or j in c for c in calls for j in jobs.values()), "the jobs were acted on through argv"
    for c in calls:
        assert "--user=root" not in c, c  # never an option of its own
        for arg in c:
            for comment in hostile.values():
                for piece in ("touch", "x" * 100):
                    if piece in arg and piece in comment:
                        # a piece of a comment only inside one value that carries the whole comment's words
                        assert arg.startswith(("comment=", "--comment=")), (arg[:120], c[:3])
    # the owners' text is never cut: ours is added where the whole fits (Slurm's limit), else left out
    shown = {n: mc.run("squeue", "-h", "-t", "all", "-j", j, "-o", "%k").stdout.strip() for n, j in jobs.items()}
    for n in ("n1", "n2"):
        assert shown[n].startswith(hostile[n]) and " | gpufleet " in shown[n], shown[n][:200]
    assert shown["n3"] == hostile["n3"], shown["n3"][-80:]
    for j in jobs.values():
        assert mc.job(j)["JobState"] == "CANCELLED"
    assert leftovers(mc) == ("", [])
