"""The in-job sampler on the real mini-cluster (issue 22): a 3-node job, every GPU busy; mid-job one
node's GPUs drop their SM clock with a thermal slowdown reason.  `fleet stragglers --running` (one read
of the fleet) flags that node within `instep_windows` windows; the sampler is gone after the epilog; a
single-node job starts none."""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time

import gpustate
from conftest import REPO

BUSY = {"clock_sm": 1980, "utilization": {"gpu": 96, "memory": 40}, "power_usage_mw": 610000,
        "clocks_event_reasons": 0}


@contextlib.contextmanager
def fast_samplers(mc, nodes: tuple[str, ...]):
    """The cluster's config with a sample every 0.5 s and a window of 2 s, for the test's time; its nodes
    healed after."""
    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    config.write_text(re.sub(r"(?m)^\[slurm\]$", "[slurm]\ninstep_sample_s = 0.5\ninstep_window_s = 2\n"
                             "instep_windows = 3", original))
    try:
        mc.wait_published()
        yield
    finally:
        config.write_text(original)
        for node in nodes:
            mc.heal(node)


def samplers(mc) -> list[str]:
    return sorted(p.name for p in (mc.dir / "state" / "gpufleet").glob("instep-*.pid"))


def sampler_processes(mc) -> list[str]:
    out = mc.run("pgrep", "-af", "sampler_main", check=False).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def test_a_throttled_node_in_a_three_node_job_is_flagged_and_the_sampler_ends_with_the_job(mc):
    with fast_samplers(mc, ("n1", "n2", "n3")):
        for node in ("n1", "n2", "n3"):
            for gpu in range(8):
                for key, value in BUSY.items():
                    gpustate.set_value(str(mc.gpu_file(node)), gpu, key, value)
        single = mc.sbatch("-w", "n4", "--gres=gpu:8", "--time=2", "--wrap", "sleep 5")
        job = mc.sbatch("-N", "3", "-w", "n[1-3]", "--gres=gpu:8", "--time=3", "--wrap", "sleep 300")
        mc.wait(lambda: len([p for p in samplers(mc) if f"-{job}-" in p]) == 3, 60, "a sampler on each of 3 nodes")
        assert not [p for p in samplers(mc) if f"-{single}-" in p], "a single-node job started a sampler"
        # the job's first windows (its nodes' own start), then one node slows down
        mc.wait(lambda: all('"is":' in mc.node(n).get("Extra", "") for n in ("n1", "n2", "n3")), 30,
                "every node of the job publishing its digest")
        time.sleep(3 * 2)
        for gpu in range(8):
            gpustate.set_value(str(mc.gpu_file("n2")), gpu, "clock_sm", 1650)
            gpustate.set_value(str(mc.gpu_file("n2")), gpu, "clocks_event_reasons", 0x20)
        onset = time.time()

        def flagged():
            r = mc.gpufleet("fleet", "stragglers", "--running", "--json")
            return json.loads(r.stdout)["flags"] if r.returncode == 1 else None

        flags = mc.wait(flagged, 60, lambda: "n2 flagged: " + mc.gpufleet("fleet", "stragglers", "--running", "--json")
                        .stdout[:1500] + " digests: " + " ".join(mc.node(n).get("Extra", "")[:700] for n in ("n1", "n2")))
        assert {f["node"] for f in flags} == {"n2"} and {f["job"] for f in flags} == {job}, flags
        assert flags[0]["signature"] == "throttled" and flags[0]["evidence"]["throttle"] == "0x20"
        # what the samplers read beside: the recorded H200's temperature and PCIe throughput (1051 + 594
        # KB/s); no NVLink on it, so none is shown
        evidence = flags[0]["evidence"]
        assert (evidence["temp_c"], evidence["pcie_mbps"], evidence["job_median_pcie_mbps"]) == (34.0, 1.6, 1.6)
        assert "nvlink_mbps" not in evidence, evidence
        took = time.time() - onset
        assert took < 60, took
        text = mc.gpufleet("fleet", "stragglers", "--running").stdout
        assert f"SLOW job {job} n2" in text, text
        mc.run("scancel", job)
        mc.wait(lambda: not [p for p in samplers(mc) if f"-{job}-" in p] and not sampler_processes(mc), 60,
                "the samplers gone with the job")
        # the digest leaves with the job: the epilog's summary carries none
        mc.wait(lambda: not any('"is":' in mc.node(n).get("Extra", "") for n in ("n1", "n2", "n3")), 30,
                "the digests cleared")


def test_a_node_slow_in_two_jobs_is_held_checked_when_it_frees_and_drained_only_on_confirmation(mc):
    """Part 4: flags feed a lemon score, not a drain.  n2 throttles in two 3-node jobs: after the first
    `fleet lemons` only counts it; after the second it holds n2 in a maintenance reservation while the
    job runs on, and queues the deep check there; the check starts when the job ends, confirms (the
    throttle is still there) in its job comment, and the next step drains n2 with that finding."""
    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    check = f"{mc.dir}/sbin/slurm-gpufleet-healthcheck --level deep --confirm"
    config.write_text(re.sub(r"(?m)^\[slurm\]$", "[slurm]\ninstep_sample_s = 0.5\ninstep_window_s = 2\n"
                             f"instep_windows = 3\nlemon_jobs = 2\nlemon_check = {json.dumps(check)}\n"
                             "lemon_check_minutes = 5\nlemon_hold_hours = 1", original))
    jobs: list[str] = []
    try:
        mc.wait_published()
        for round_ in (1, 2):
            for node in ("n1", "n2", "n3"):
                mc.heal(node)
                for gpu in range(8):
                    for key, value in BUSY.items():
                        gpustate.set_value(str(mc.gpu_file(node)), gpu, key, value)
            job = mc.sbatch("-N", "3", "-w", "n[1-3]", "--gres=gpu:8", "--time=3", "--wrap", "sleep 300")
            jobs.append(job)
            mc.wait(lambda job=job: all(f'"j":"{job}"' in mc.node(n).get("Extra", "") for n in ("n1", "n2", "n3")),
                    60, "every node of the job publishing its digest")
            time.sleep(2 * 2)
            for gpu in range(8):
                gpustate.set_value(str(mc.gpu_file("n2")), gpu, "clock_sm", 1650)
                gpustate.set_value(str(mc.gpu_file("n2")), gpu, "clocks_event_reasons", 0x20)

            def stepped(job=job):
                r = mc.gpufleet("fleet", "lemons", "--json")
                assert r.returncode == 0, r.stdout + r.stderr
                out = json.loads(r.stdout)
                return out if any(f["job"] == job for f in out["flags"]) else None

            out = mc.wait(stepped, 60, f"n2 flagged in job {job}")
            assert {f["node"] for f in out["flags"]} == {"n2"}, out
            if round_ == 1:
                assert out["scores"] == {"n2": 1} and out["reserved"] == [] and out["submitted"] == {}, out
                mc.run("scancel", job)
                mc.wait(lambda: not sampler_processes(mc), 60, "the samplers gone with the job")
        # the second job's flag made n2 a lemon: held, and its check queued behind the running job
        assert out["scores"] == {"n2": 2} and out["reserved"] == ["n2"], out
        check_job = out["submitted"]["n2"]
        res = mc.run("scontrol", "show", "reservation", "gpufleet-lemon-n2").stdout
        assert "Nodes=n2 " in res and "MAINT" in res, res
        assert mc.job(check_job)["JobState"] == "PENDING" and mc.job(jobs[1])["JobState"] == "RUNNING"
        assert "DRAIN" not in mc.state("n2"), "a suspect is not drained"
        mc.run("scancel", jobs[1])
        mc.wait(lambda: mc.job(check_job)["JobState"] == "FAILED", 90, "the deep check run and confirm")
        comment = mc.run("squeue", "-h", "-t", "all", "-j", check_job, "-o", "%k").stdout.strip()
        assert comment.startswith("gpufleet confirmed: thermal"), comment
        r = mc.gpufleet("fleet", "lemons", "--json")
        assert r.returncode == 1, r.stdout + r.stderr
        out = json.loads(r.stdout)
        assert out["drained"] == ["n2"] and out["released"] == ["gpufleet-lemon-n2"], out
        reason = mc.node("n2")["Reason"]
        assert reason.startswith(f"performance lemon: slow in jobs {jobs[0]},{jobs[1]}; deep check: "
                                 "thermal"), reason
        assert "gpufleet-lemon-n2" not in mc.run("scontrol", "show", "reservation").stdout
        # the next step finds nothing to do; the case stays closed
        again = json.loads(mc.gpufleet("fleet", "lemons", "--json").stdout)
        assert again["drained"] == [] and again["reserved"] == [] and again["scores"] == {}, again
    finally:
        config.write_text(original)
        for job in jobs:
            mc.run("scancel", job, check=False)
        mc.run("scontrol", "delete", "reservation=gpufleet-lemon-n2", check=False)
        for node in ("n1", "n2", "n3"):
            mc.heal(node)
        mc.run("scontrol", "update", "nodename=n2", "state=resume", check=False)


def test_one_gpu_that_stays_busy_while_the_job_waits_is_flagged_by_name(mc):
    """Issue 33's case on real Slurm: a 3-node job, every GPU busy; then the job's GPUs wait (utilisation
    and power drop) except n2's GPU 3, which stays busy at full power: the bottleneck, clocks normal."""
    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    config.write_text(re.sub(r"(?m)^\[slurm\]$", "[slurm]\ninstep_sample_s = 0.5\ninstep_window_s = 2\n"
                             "instep_windows = 3", original))
    nodes = ("n1", "n2", "n3")
    try:
        mc.wait_published()
        for node in nodes:
            for gpu in range(8):
                for key, value in BUSY.items():
                    gpustate.set_value(str(mc.gpu_file(node)), gpu, key, value)
        job = mc.sbatch("-N", "3", "-w", "n[1-3]", "--gres=gpu:8", "--time=3", "--wrap", "sleep 300")
        mc.wait(lambda: all('"is":' in mc.node(n).get("Extra", "") for n in nodes), 60,
                "every node of the job publishing its digest")
        time.sleep(3 * 2)
        for node in nodes:
            for gpu in range(8):
                if (node, gpu) != ("n2", 3):
                    gpustate.set_value(str(mc.gpu_file(node)), gpu, "utilization", {"gpu": 86, "memory": 36})
                    gpustate.set_value(str(mc.gpu_file(node)), gpu, "power_usage_mw", 550000)
        onset = time.time()

        def flagged():
            r = mc.gpufleet("fleet", "stragglers", "--running", "--json")
            return json.loads(r.stdout)["flags"] if r.returncode == 1 else None

        flags = mc.wait(flagged, 60, lambda: "n2 GPU 3 flagged: " + mc.gpufleet(
            "fleet", "stragglers", "--running", "--json").stdout[:1500])
        assert [(f["node"], f["gpu"], f["signature"], f["job"]) for f in flags] == [("n2", 3, "silent_slow", job)], flags
        assert flags[0]["t_flagged"] > flags[0]["t_first"] and time.time() - onset < 60
        mc.run("scancel", job)
        mc.wait(lambda: not [p for p in samplers(mc) if f"-{job}-" in p] and not sampler_processes(mc), 60,
                "the samplers gone with the job")
    finally:
        config.write_text(original)
        for node in nodes:
            mc.heal(node)


def test_an_epilog_on_a_broken_config_still_ends_its_job_s_sampler(mc):
    """Issue 33: the epilog stops the job's sampler before it reads any config.  A 2-node job starts one
    sampler per node; the config is broken while it runs; the job ends: every sampler's process is gone
    (checked by its pid), and the broken config drained nothing."""
    import os

    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    try:
        mc.wait_published()
        job = mc.sbatch("-N", "2", "-w", "n[4-5]", "--gres=gpu:8", "--time=3", "--wrap", "sleep 300")
        mc.wait(lambda: len([p for p in samplers(mc) if f"-{job}-" in p]) == 2, 60, f"job {job}'s two samplers")
        pids = {p: int((mc.dir / "state" / "gpufleet" / p).read_text().split()[0])
                for p in samplers(mc) if f"-{job}-" in p}
        assert all(os.path.exists(f"/proc/{pid}") for pid in pids.values()), pids
        config.write_text(original + "\n[slurm\nthis is = not toml\n")
        mc.run("scancel", job)
        mc.wait(lambda: mc.job(job).get("JobState") in ("CANCELLED", "COMPLETED", None), 30, f"job {job} ended")
        # gone within seconds: the epilog's doing, not the sampler's own look at its job each 60 s window
        mc.wait(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids.values()), 10,
                lambda: f"job {job}'s samplers' processes {pids} gone")
        # the epilog has returned on both nodes (no longer COMPLETING): a failed one would have drained them
        states = mc.wait(lambda: (lambda s: s if not any("COMPLETING" in v for v in s.values()) else None)(
            {n: mc.state(n) for n in ("n4", "n5")}), 30, "n4, n5 done completing")
        assert not any("DRAIN" in s for s in states.values()), states
    finally:
        config.write_text(original)


def test_two_jobs_sharing_nodes_are_sampled_on_their_own_gpus_by_minor_number_and_keep_both_digests(mc):
    """n1 and n2 number their GPUs the other way round (NVML index 0 is /dev/nvidia7): two 2-node jobs of 4
    GPUs each share the two nodes.  Slurm gives the first job /dev/nvidia0-3 (SLURM_JOB_GPUS 0,1,2,3), which
    are NVML indices 7-4: each sampler reads its own job's GPUs, and both jobs' digests stay on the node."""
    with fast_samplers(mc, ("n1", "n2")):
        for node in ("n1", "n2"):
            for gpu in range(8):
                gpustate.set_value(str(mc.gpu_file(node)), gpu, "minor_number", 7 - gpu)
                for key, value in BUSY.items():
                    gpustate.set_value(str(mc.gpu_file(node)), gpu, key, value)
        jobs = [mc.sbatch("-N", "2", "-w", "n[1-2]", "--gres=gpu:4", "--time=3", "--wrap", "sleep 300")
                for _ in range(2)]

        def digests() -> dict:
            return {n: json.loads(mc.node(n).get("Extra") or "{}").get("is", {}) for n in ("n1", "n2")}

        mc.wait(lambda: all(set(d) == set(jobs) for d in digests().values()), 60,
                lambda: f"both jobs' digests on both nodes: {digests()}")
        for _ in range(5):  # window after window, neither sampler drops the other's
            time.sleep(2)
            shown = digests()
            assert all(set(d) == set(jobs) for d in shown.values()), shown
        gpus = {job: sorted(digests()["n1"][job]["g"]) for job in jobs}
        # each job's four GPUs by NVML index, found through their minor numbers; together all eight, apart
        assert sorted(gpus[jobs[0]] + gpus[jobs[1]]) == list(range(8)), gpus
        for job in jobs:  # and the very ones Slurm gave the job: its minor numbers, as NVML indices
            shown = mc.run("scontrol", "show", "job", "-d", job).stdout
            idx = re.search(r"GRES=gpu[^ (]*\(IDX:([0-9,-]+)\)", shown)
            assert idx, shown
            minors = [m for part in idx.group(1).split(",")
                      for m in range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)]
            assert gpus[job] == sorted(7 - m for m in minors), (job, minors, gpus[job])
        for job in jobs:
            mc.run("scancel", job)
        mc.wait(lambda: not [p for p in samplers(mc) if any(f"-{j}-" in p for j in jobs)], 60, "the samplers gone")


def test_with_a_shared_directory_the_samplers_write_nothing_to_slurm_and_the_throttled_node_is_flagged(mc):
    """Issue 46: `instep_share_dir` names a directory the job's nodes share (here the cluster's own
    folder).  A 3-node job's samplers write their digests there: no node's Extra carries one, and
    `fleet stragglers --running` still flags the throttled node; the epilog removes the job's folder."""
    share = mc.dir / "instep-share"
    config = mc.dir / "etc" / "gpufleet.toml"
    nodes = ("n1", "n2", "n3")
    with fast_samplers(mc, nodes):
        config.write_text(re.sub(r"(?m)^\[slurm\]$", f'[slurm]\ninstep_share_dir = "{share}"', config.read_text()))
        for node in nodes:
            for gpu in range(8):
                for key, value in BUSY.items():
                    gpustate.set_value(str(mc.gpu_file(node)), gpu, key, value)
        job = mc.sbatch("-N", "3", "-w", "n[1-3]", "--gres=gpu:8", "--time=3", "--wrap", "sleep 300")
        mc.wait(lambda: sorted(p.name for p in (share / job).glob("*.json")) == ["n1.json", "n2.json", "n3.json"]
                if (share / job).is_dir() else False, 60, "a digest file from each of the 3 nodes")
        time.sleep(3 * 2)
        for gpu in range(8):
            gpustate.set_value(str(mc.gpu_file("n2")), gpu, "clock_sm", 1650)
            gpustate.set_value(str(mc.gpu_file("n2")), gpu, "clocks_event_reasons", 0x20)

        def flagged():
            r = mc.gpufleet("fleet", "stragglers", "--running", "--json")
            return json.loads(r.stdout)["flags"] if r.returncode == 1 else None

        flags = mc.wait(flagged, 60, lambda: "n2 flagged from the shared directory: "
                        + mc.gpufleet("fleet", "stragglers", "--running", "--json").stdout[:1500])
        assert {(f["node"], f["job"], f["signature"]) for f in flags} == {("n2", job, "throttled")}, flags
        # none of this job's digests went to Slurm (an earlier test's job may linger in a summary a quiet run
        # has not rewritten: not this job's samplers' doing)
        from slurm_gpufleet.judging.summary import digests

        assert not [n for n in nodes if job in digests(json.loads(mc.node(n).get("Extra") or "{}").get("is"))], \
            "a digest of this job went to Slurm"
        mc.run("scancel", job)
        mc.wait(lambda: not (share / job).exists() and not sampler_processes(mc), 60,
                "the job's digest folder and samplers gone with the job")


def test_without_cgroups_a_sampler_whose_epilog_never_ran_ends_within_a_window_of_its_job(mc, tmp_path):
    """Issue 46: this mini-cluster tracks jobs by process group (no cgroup plugin).  A sampler loop is run
    here for a real job (no epilog will stop it), with no cgroup tree to look at: while the job's
    slurmstepd runs it samples on; the job is cancelled, the slurmstepd goes, squeue no longer shows it
    running, and the loop ends within a window or two, not at its max_hours."""
    import os
    import signal
    import threading
    from types import SimpleNamespace

    from support import BusyNvml

    from slurm_gpufleet.slowgpus import sampler
    from slurm_gpufleet.slurm.commands import CommandBackend

    class Nvml(BusyNvml):
        def nvmlDeviceGetFieldValues(self, h, fields):
            return 1980  # not field values: the sampler reads no NVLink from it, and goes on

    job = mc.start_job("n6", 1, 300)
    state = tmp_path / "state"
    state.mkdir()
    (state / f"instep-{job}-n6.pid").write_text(str(os.getpid()))
    settings = SimpleNamespace(state_dir=str(state), instep_window_s=1.0, instep_windows=3, instep_sample_s=0.2,
                               publish="extra", instep_share_dir=str(tmp_path / "share"))
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = mc.env["SLURM_CONF"]
    backend = CommandBackend(mc.run("which", "scontrol").stdout.strip())
    seen: dict[str, object] = {}

    def cancel() -> None:  # from a timer: the loop runs in this test's main thread, as it sets SIGTERM's handler
        seen["sampling"] = (tmp_path / "share" / job / "n6.json").exists()
        mc.run("scancel", job)
        seen["cancelled"] = time.monotonic()
        time.sleep(8)  # what the loop sees by now, said if it has not ended
        try:
            seen["then"] = (sampler.stepd_running(job), backend.job_state(job))
        except Exception as exc:  # noqa: BLE001 (said in the assertion)
            seen["then"] = repr(exc)

    handler = signal.getsignal(signal.SIGTERM)
    threading.Timer(4.0, cancel).start()
    try:
        sampler.loop(settings, backend, Nvml(), job, "n6", max_hours=0.05, cgroup_root=str(tmp_path / "no-cgroups"))
        ended = time.monotonic()
    finally:
        signal.signal(signal.SIGTERM, handler)
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
    assert seen.get("sampling") is True, "the sampler was writing its digest while the job ran"
    assert "cancelled" in seen, "the loop ended before the job was cancelled"
    assert ended - seen["cancelled"] < 10, (ended - seen["cancelled"], seen)   # max_hours would be 180 s


def test_fleet_names_the_node_of_a_running_job_whose_sampler_died(mc):
    """Issue 53: no news is not good news.  A 2-node job's samplers publish; one is killed; once its digest
    is no longer live, `fleet` names the job and that node (the other node's sampler goes on)."""
    import json
    import os
    import signal

    with fast_samplers(mc, ("n5", "n6")):
        job = mc.sbatch("-N", "2", "-w", "n[5-6]", "--gres=gpu:8", "--time=3", "--wrap", "sleep 300")
        mc.wait(lambda: len([p for p in samplers(mc) if f"-{job}-" in p]) == 2, 60, "a sampler on each node")
        mc.wait(lambda: all('"is":' in mc.node(n).get("Extra", "") for n in ("n5", "n6")), 30,
                "both nodes publishing their digest")
        pid = int((mc.dir / "state" / "gpufleet" / f"instep-{job}-n6.pid").read_text())
        os.kill(pid, signal.SIGKILL)

        def gone():
            inv = json.loads(mc.gpufleet("fleet", "--json").stdout)
            return inv["samplers_gone"]
        mc.wait(lambda: gone() == [{"job": job, "nodes": ["n6"]}], 60, "the dead sampler named")
        assert "no in-job sampler publishing on n6" in mc.gpufleet("fleet").stdout
        mc.run("scancel", job)


def test_fleet_lemons_takes_a_jobs_own_timings_into_the_lemon_record(mc, tmp_path):
    """`fleet lemons --timings FILE --job JOBID` end to end (#56): the job's slow worker, on n3, becomes a
    `slow_timings` flag of n3 for that job, counted once in the lemon record however often the step runs."""
    sys.path.insert(0, str(REPO / "tests"))
    from timings_traces import trace

    job = mc.start_job("n3", 2, 120)
    rows = trace("slow_worker", slow=(3, 1), factor=1.3, noise=0.15)
    for r in rows:
        r["node"] = "n3" if r["rank"] == 11 else "n4"
    timings = tmp_path / "timings.jsonl"
    timings.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    try:
        outs = []
        for _ in range(2):
            r = mc.gpufleet("fleet", "lemons", "--timings", str(timings), "--job", job, "--json")
            assert r.returncode == 0, r.stdout + r.stderr
            outs.append(json.loads(r.stdout))
        first, again = outs
        mine = [f for f in first["flags"] if f["job"] == job]
        assert {(f["node"], f["signature"]) for f in mine} == {("n3", "slow_timings")}, first["flags"]
        assert first["new_flags"] == 1 and first["scores"].get("n3") == 1 and job in first["jobs"], first
        assert again["new_flags"] == 0 and again["scores"].get("n3") == 1, again
        assert first["reserved"] == [] and first["drained"] == []
    finally:
        mc.run("scancel", job, check=False)
