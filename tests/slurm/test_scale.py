"""A rollout over 32 real slurmd with jobs running: budget 4, 4 upgrades at once (issue #10's real-Slurm
measure).  Its own cluster, for this module only."""

from __future__ import annotations

import calendar
import json
import re
import threading
import time

import pytest
from conftest import internal_errors, start_cluster
from test_maintain import intervals, leftovers, max_concurrent

NODES = 32
TARGET = "595.71.05"


@pytest.fixture(scope="module")
def big():
    yield from start_cluster("scale", NODES, 28817, 29001, MAX_UNAVAILABLE="4", MAX_PARALLEL_UPGRADES="4",
                             UPGRADE_SLEEP="3", HC_INTERVAL="20",  # 32 health checks every 10 s overloaded 2 cores beside the other suites
                             # the jobs' records outlive the rollout (CI's load once took it past 300 s, and
                             # slurmctld had purged them)
                             MIN_JOB_AGE="3600")


def test_rollout_over_32_nodes_parallel_within_budget(big, tmp_path):
    big.wait(lambda: all('"drv":"580.159.04"' in big.node(n).get("Extra", "") for n in big.nodes), 60,
             "every node publishing its GPU summary")
    jobs = [big.start_job(f"n{i}", 2, secs) for i, secs in ((3, 20), (9, 35), (17, 15), (26, 30), (31, 25))]
    plan_file = tmp_path / "plan.json"
    r = big.gpufleet("maintain", "plan", "--target-driver", TARGET, "--nodes", f"n[1-{NODES}]", "--out",
                     str(plan_file))
    assert r.returncode == 0, r.stdout + r.stderr
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            out = big.run("sinfo", "-h", "-N", "-p", "gpu", "-o", "%N|%T|%E", check=False).stdout
            samples.append(sum(1 for line in out.splitlines() if big.out_of_service(line)))
            time.sleep(0.2)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    started = time.monotonic()
    r = big.gpufleet("maintain", "apply", str(plan_file), timeout=900)
    wall = time.monotonic() - started
    stop.set()
    t.join()
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"done (done {NODES})" in r.stdout
    for job in jobs:
        info = big.job(job)
        assert (info["JobState"], info["Restarts"]) == ("COMPLETED", "0"), info
    # never more than the budget out: in the audit log and in what sinfo showed, sampled every 0.2 s
    assert max_concurrent(intervals(big)) <= 4 and max(samples) <= 4
    # upgrades overlapped: the commands' spans (state upgrading -> command's result) in the audit log
    rows = big.maintain_db("select node, event, ts from audit where node is not null order by ts")
    began = {n: ts for n, e, ts in rows if e == "upgrading"}
    ended = {n: ts for n, e, ts in rows if e.startswith("upgrade command rc=")}
    spans = [(n, began[n], ended[n]) for n in ended]
    parallel = max_concurrent(spans)
    assert parallel >= 3, spans
    # validated from the health check each node published after its reboot
    for n, detail in big.maintain_db("select node, detail from audit where event = 'done'"):
        stamp = re.search(r"at (\S+)$", detail).group(1)
        published = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
        assert published >= int(began[n]), (n, detail)
    calls = big.maintain_db("select detail from audit where event = 'slurm calls'")[-1][0]
    assert "3 reads" in calls and "writes max 2" in calls
    assert leftovers(big) == ("", [])
    assert internal_errors(big) == ""
    print(f"\n32-node rollout: {wall:.1f} s wall, up to {parallel} upgrades at once, peak out (sinfo) "
          f"{max(samples)}; {calls}")
    status = json.loads(big.gpufleet("maintain", "status", "--json").stdout)
    assert status["counts"] == {"done": NODES}
