"""`maintain simulate --seeds N --slurm-array PARTITION` on the real mini-cluster (issue 31): the seeds run
as one Slurm job array, each task writes its JSON, and the command merges them into what a local run
prints."""

from __future__ import annotations

import json

# 2 seeds: 4 tasks at once on the cluster's nodes, which share this machine's 2 cores with another cluster
ARGS = ("maintain", "simulate", "--nodes", "16", "--rollout-at", "240", "--no-replay", "--seeds", "2",
        "--failure-rate", "6.5", "--driver-effect", "3", "--json")


def test_the_seeds_run_as_one_job_array_and_merge_into_the_local_run_s_figures(mc, tmp_path):
    local = mc.gpufleet(*ARGS, "--jobs", "1", cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    array = mc.gpufleet(*ARGS, "--slurm-array", "gpu", cwd=tmp_path, timeout=600)
    assert array.returncode == 0, array.stderr
    here, there = json.loads(local.stdout)["gate"], json.loads(array.stdout)["gate"]
    here.pop("cpu_s_per_seed"), there.pop("cpu_s_per_seed")  # the only figure that is a timing
    assert here == there and here["seeds"] == 2
    # Slurm ran them: one array of 4 tasks (2 gated seeds, their 2 ungated twins), all completed; array
    # tasks are the jobs whose id has an index (other tests' jobs, validation ones included, have none)
    shown = mc.run("squeue", "-h", "-t", "all", "-o", "%i|%j|%T", check=False).stdout.splitlines()
    tasks = [line.split("|") for line in shown if "_" in line.split("|")[0]
             and line.split("|")[1].startswith("gpufleet-")]
    assert len(tasks) == 4 and {state for _, _, state in tasks} == {"COMPLETED"}, shown
    assert len({job_id.split("_")[0] for job_id, _, _ in tasks}) == 1, tasks
    assert list(tmp_path.iterdir()) == []  # the tasks' directory is gone once every result is in
    # a partition Slurm does not have: one line, exit 2, nothing left behind
    r = mc.gpufleet(*ARGS, "--slurm-array", "nosuch", cwd=tmp_path)
    assert r.returncode == 2 and "not submitted" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert list(tmp_path.iterdir()) == []
