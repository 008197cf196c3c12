"""In-job straggler detection (slurm_gpufleet/slowgpus/instep.py) on generated jobs (bench/instep_stragglers.py's
model): both signatures flagged, a job slow everywhere and the healthy spread flag nothing, persistence
is required, and `fleet stragglers --telemetry` reads recorded samples with bad lines named."""

from __future__ import annotations

import json
import random
import sys

import pytest
from support import REPO, BusyNvml, run_cli

sys.path.insert(0, str(REPO / "bench"))
from instep_stragglers import job_samples  # noqa: E402

from slurm_gpufleet.slowgpus.instep import Settings, detect  # noqa: E402


def test_both_signatures_are_flagged_and_name_the_slowed_node():
    for kind, signature, seed in (("throttled", "throttled", 3), ("silent", "silent_slow", 4)):
        samples, bad, onset = job_samples(random.Random(seed), "j1", 20, kind, nodes=12)
        flags = detect(samples)
        assert [(f.node, f.signature) for f in flags] == [(bad, signature)], flags
        assert flags[0].t_first >= onset - 60 and flags[0].t_first + 3 * 60 - onset <= 300  # within 5 minutes
        if kind == "throttled":
            assert flags[0].gpu is not None and flags[0].evidence["throttle"] == "0x20"


@pytest.mark.parametrize("noise", [1.5, 3.0, 5.0])
def test_a_silent_gpu_is_found_while_its_peers_spin_in_nccl_busy_to_nvml(noise):
    """The NCCL case: the GPUs that wait for the slow one spin in NCCL's kernels, so NVML shows every GPU
    near 97 % busy and only the power tells: the slow GPU computes, draws power, its peers' power falls."""
    for seed in (11, 12, 13):
        gpu: list[int] = []
        samples, bad, onset = job_samples(random.Random(seed), "j", 20, "gpu_silent", nodes=8, bad_gpu_out=gpu,
                                          style="nccl", noise=noise)
        after = [x.sm_util for x in samples if x.t >= onset + 120 and (x.node, x.gpu) != (bad, gpu[0])]
        assert abs(sum(after) / len(after) - 97.0) < 1.0  # the peers look as busy as before: no idle to see
        flags = detect(samples)
        assert [(f.node, f.gpu) for f in flags] == [(bad, gpu[0])], (seed, flags)
        assert flags[0].t_flagged - onset <= 300 and "power_position" in flags[0].evidence
    for seed, kind in ((5, "uniform"), (6, "healthy")):
        samples, _, _ = job_samples(random.Random(seed), "j", 20, kind, nodes=8, style="nccl", noise=noise)
        assert detect(samples) == [], kind


def test_the_idle_style_is_still_found_through_utilisation():
    samples, bad, onset = job_samples(random.Random(4), "j1", 20, "silent", nodes=12, style="idle")
    flags = detect(samples)
    assert [(f.node, f.signature) for f in flags] == [(bad, "silent_slow")]
    assert flags[0].evidence["position"] - flags[0].evidence["position_at_start"] > flags[0].evidence["band"]


def test_a_job_slow_everywhere_and_healthy_jobs_flag_nothing():
    for kind, seed in (("uniform", 5), ("healthy", 6), ("healthy", 7)):
        samples, _, _ = job_samples(random.Random(seed), "j", 20, kind, nodes=12)
        assert detect(samples) == [], kind


def test_a_node_apart_for_fewer_windows_than_required_is_not_flagged():
    samples, bad, onset = job_samples(random.Random(3), "j1", 20, "throttled", nodes=12)
    # the throttled GPU recovers two windows after onset: never three windows in a row
    end = (int(onset // 60) + 2) * 60
    healed = [s if not (s.node == bad and s.t >= end) else
              type(s)(s.t, s.job, s.node, s.gpu, 1980.0, s.power_w, s.sm_util, 0, s.model) for s in samples]
    assert detect(healed, Settings(windows=3)) == []
    assert detect(healed, Settings(windows=1)) != []


def test_digests_a_window_apart_still_flag_the_throttled_node():
    """What `fleet stragglers --running` reads: each node's digest, published at its own moment.  n2 is
    throttled from window 4 on; whichever node closed its newest window first, the flag holds."""
    from types import SimpleNamespace

    from slurm_gpufleet.slowgpus.instep import samples_from_digests
    from slurm_gpufleet.slowgpus.sampler import digest_for

    settings = SimpleNamespace(instep_window_s=2.0, instep_windows=3)

    def published(last_window: dict[str, int]) -> dict[str, dict]:
        out = {}
        for node, last in last_window.items():
            digest = digest_for("9", settings)
            for tick in range(0, (last + 1) * 4 + 1):  # four samples a window, the last one opens the next
                t = tick * 0.5
                slow = node == "n2" and t >= 8
                digest.add(t, [[1650.0 if slow else 1980.0, 600.0, 96.0, 0x20 if slow else 0]] * 8)
            out[node] = {"gpus": "H200", "is": digest.to_dict()}
        return out

    for lag in ({"n1": 9, "n2": 9, "n3": 9}, {"n1": 9, "n2": 8, "n3": 9}, {"n1": 8, "n2": 9, "n3": 8},
                {"n1": 9, "n2": 9, "n3": 8}):
        samples, window_s = samples_from_digests(published(lag))
        flags = detect(samples, Settings(window_s=window_s, windows=3))
        assert [(f.node, f.signature) for f in flags] == [("n2", "throttled")], (lag, flags)


def test_telemetry_file_flags_counts_bad_lines_and_an_empty_file_is_exit_3(tmp_path):
    samples, bad, _ = job_samples(random.Random(3), "j1", 20, "throttled", nodes=12)
    path = tmp_path / "samples.jsonl"
    lines = [json.dumps({"t": s.t, "job": s.job, "node": s.node, "gpu": s.gpu, "sm_clock_mhz": s.sm_clock_mhz,
                         "power_w": s.power_w, "sm_util": s.sm_util, "throttle": s.throttle}) for s in samples]
    lines.insert(5, "{not json")
    lines.insert(9, '{"t": 1}')
    # NaN and Infinity, which json reads: malformed lines, counted (they ended in an internal error)
    lines.insert(12, lines[12].replace(f'"t": {samples[10].t}', '"t": NaN'))
    lines.insert(14, lines[14].replace(f'"sm_util": {samples[11].sm_util}', '"sm_util": Infinity'))
    assert "NaN" in lines[12] and "Infinity" in lines[14]
    path.write_text("\n".join(lines) + "\n")
    r = run_cli("fleet", "stragglers", "--telemetry", str(path))
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert [(f["job"], f["node"]) for f in out["flags"]] == [("j1", bad)] and out["skipped"] == 4
    # the config's in-job settings judge: a streak longer than the recording flags nothing
    config = tmp_path / "gpufleet.toml"
    config.write_text("[slurm]\ninstep_windows = 50\n")
    r = run_cli("fleet", "--config", str(config), "stragglers", "--telemetry", str(path))
    assert r.returncode == 0 and json.loads(r.stdout)["flags"] == [], r.stderr
    assert set(out["flags"][0]) >= {"job", "node", "gpu", "t_first"}
    assert f"{path}:6: not a sample, skipped" in r.stderr.decode() and f"{path}:10:" in r.stderr.decode()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    r = run_cli("fleet", "stragglers", "--telemetry", str(empty))
    assert r.returncode == 3 and r.stderr.decode().strip().endswith("no samples")


def test_the_sampler_stops_when_its_job_s_cgroup_is_gone(tmp_path):
    """An epilog that never stopped it (it failed, or never ran): the sampler sees the job's cgroup gone
    at its next window and ends, long before `max_hours`."""
    import os
    import threading
    import time
    from types import SimpleNamespace

    from slurm_gpufleet.slowgpus import sampler

    class Unreachable:  # Slurm away: publishing fails, sampling goes on
        def node(self, name):
            raise OSError("slurmctld unreachable")

    scope = tmp_path / "cgroup" / "system.slice" / "slurmstepd.scope"
    (scope / "job_42").mkdir(parents=True)
    state = tmp_path / "state"
    state.mkdir()
    (state / "instep-42-n1.pid").write_text(str(os.getpid()))
    settings = SimpleNamespace(state_dir=str(state), instep_window_s=0.1, instep_windows=3, instep_sample_s=0.02,
                               publish="extra", instep_share_dir=None)
    assert not sampler.job_gone("42", str(tmp_path / "cgroup")) and sampler.job_gone("43", str(tmp_path / "cgroup"))
    assert not sampler.job_gone("42", str(tmp_path / "no-cgroups"))  # nothing to tell by: not gone
    threading.Timer(0.5, lambda: (scope / "job_42").rmdir()).start()
    import signal

    handler = signal.getsignal(signal.SIGTERM)  # the loop sets its own: this test process keeps its
    t0 = time.monotonic()
    try:
        assert sampler.loop(settings, Unreachable(), BusyNvml(), "42", "n1", max_hours=0.01,
                            cgroup_root=str(tmp_path / "cgroup")) == 0
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert 0.5 <= time.monotonic() - t0 < 5  # a window or two after the cgroup went, not at max_hours (36 s)


def test_two_multi_node_jobs_on_one_node_keep_a_digest_each(tmp_path):
    """Two samplers on one node (two jobs sharing it) publish into one summary: each keeps its own job's
    digest, the detector reads both, and a summary from before per-job digests still reads."""
    import json
    from types import SimpleNamespace

    from slurm_gpufleet.judging import summary
    from slurm_gpufleet.slowgpus import sampler
    from slurm_gpufleet.slowgpus.instep import samples_from_digests

    class Node:  # the node's Extra, as Slurm keeps it between the two samplers' writes
        extra = json.dumps({"gpufleet": 1, "v": "ok", "gpus": "8xNVIDIA H200"})

        def node(self, name):
            return SimpleNamespace(extra=self.extra, comment="")

        def set_fields(self, name, fields):
            self.extra = fields["extra"]

    backend = Node()
    settings = SimpleNamespace(feature_prefix="", state_dir=str(tmp_path))
    for job in ("101", "202"):
        d = sampler.Digest(job, 60.0, 4)
        for t in range(0, 200, 15):
            d.add(float(t), [[1980.0, 600.0, 95.0, 0]] * 2)
        sampler.publish(backend, "n1", "extra", d.to_dict(), settings)
    published = json.loads(backend.extra)
    assert sorted(published["is"]) == ["101", "202"] and published["v"] == "ok"  # the health check's keys kept
    samples, window_s = samples_from_digests({"n1": published})
    assert {s.job for s in samples} == {"101", "202"} and window_s == 60.0
    old = {"j": "7", "ws": 60, "b": [], "w": []}  # one digest, as releases before published it
    assert summary.digests(old) == {"7": old} and summary.digests(None) == {}


def test_one_slow_gpu_is_flagged_by_name_and_two_node_jobs_are_judged():
    """The held-out style of case (issue 33): one GPU of one node is the bottleneck, clocks normal; it stays
    busy while the job's other GPUs, its own node's included, wait.  And a whole slow node on a two-node
    job, where the other node is its only peer."""
    for nodes, seed in ((4, 11), (8, 12), (12, 13), (2, 14)):
        gpu: list[int] = []
        samples, bad, onset = job_samples(random.Random(seed), "j", 20, "gpu_silent", nodes=nodes, bad_gpu_out=gpu)
        flags = detect(samples)
        assert [(f.node, f.gpu, f.signature) for f in flags] == [(bad, gpu[0], "silent_slow")], (nodes, flags)
        f = flags[0]
        assert f.t_flagged == f.t_first + 3 * 60 and f.t_flagged - onset <= 300  # raised within 5 minutes
        assert f.evidence["power_position"] >= f.evidence["power_position_at_start"]  # its power held
    samples, bad, onset = job_samples(random.Random(15), "j", 20, "silent", nodes=2)
    assert [(f.node, f.gpu) for f in detect(samples)] == [(bad, None)]
    for seed in (16, 17, 18):  # two healthy nodes, or both slow alike: nothing
        for kind in ("healthy", "uniform"):
            samples, _, _ = job_samples(random.Random(seed), "j", 20, kind, nodes=2)
            assert detect(samples) == [], (seed, kind)


def _job(utils_before: dict, utils_after: dict, windows: int = 8, onset_window: int = 3) -> list:
    """Exact samples (no noise), four a window of 60 s: every GPU at `utils_before[(node, gpu)]` until the
    onset window, at `utils_after` from it; power follows utilisation."""
    from slurm_gpufleet.slowgpus.instep import Sample

    out = []
    for i in range(windows * 4):
        t = i * 15.0
        utils = utils_after if t >= onset_window * 60 else utils_before
        for (node, gpu), u in utils.items():
            out.append(Sample(t, "j", node, gpu, 1980.0, 120 + 5.8 * u, u, 0, "NVIDIA H200"))
    return out


def test_one_busy_gpu_that_moves_its_node_s_median_is_still_named():
    """n1's GPU 0 was its node's least busy (a fast GPU, waiting most); slowed, it becomes the job's
    bottleneck and its rise moves n1's median a rank, past the node band, while n1's other GPUs wait like
    every peer.  The flag names GPU 0 from the first window on: the node key neither wins nor breaks the
    GPU's streak (a bench tail of 748 s came from that)."""
    before = {("n1", g): u for g, u in enumerate([60, 70, 70, 70, 90, 90, 90, 90])}
    before.update({(f"n{n}", g): 80.0 + g for n in (2, 3, 4) for g in range(8)})
    after = {k: (99.0 if k == ("n1", 0) else 0.9 * u) for k, u in before.items()}
    (flag,) = detect(_job(before, after))
    assert (flag.node, flag.gpu, flag.signature) == ("n1", 0, "silent_slow"), flag
    assert flag.t_first == 3 * 60 and flag.t_flagged == 6 * 60
    # a whole slow node, half its GPUs past the GPU band or not, is still the node
    after = {k: (min(99.0, u / 0.9) if k[0] == "n1" else u) for k, u in before.items()}
    (flag,) = detect(_job(before, after))
    assert (flag.node, flag.gpu) == ("n1", None), flag


def test_on_a_two_node_job_the_gap_between_the_nodes_counts_whole():
    """Two nodes: the one that rose is measured from the other, not from their mean (which halves the
    gap).  A 5-point gap in position is flagged, 3 points is not, and the lower node never is."""
    before = {(n, g): 90.0 for n in ("n1", "n2") for g in range(8)}
    for gap, flagged in ((0.05, ["n1"]), (0.03, [])):
        after = {k: (90.0 if k[0] == "n1" else 90.0 * (1 - gap)) for k in before}
        assert [f.node for f in detect(_job(before, after))] == flagged, gap


def test_one_wide_window_does_not_widen_the_band():
    """The band's deviation is read over the job's recent windows: one window whose spread reads three
    times wider leaves it where the others put it (one window's MAD over 16 GPUs swings by half)."""
    from slurm_gpufleet.slowgpus.instep import _band

    s = Settings()
    calm = [0.0, 0.01, -0.01, 0.02, -0.02, 0.005, -0.005, 0.0]
    wide = [3 * x for x in calm]
    spread: list[float] = []
    for _ in range(5):
        _, band = _band(calm, s, spread)
    _, after_wide = _band(wide, s, spread)
    assert after_wide == band and len(spread) == 6
    assert _band(wide, s)[1] > band  # alone, that window would widen it
    for _ in range(s.spread_windows):
        _band(wide, s, spread)
    assert len(spread) == s.spread_windows and _band(wide, s, spread)[1] == _band(wide, s)[1]  # it follows


def test_the_sampler_reads_only_the_job_s_gpus_and_the_flag_names_the_real_index():
    import json
    from types import SimpleNamespace

    from slurm_gpufleet.readers.jobgpus import handles_of, job_gpu_ids
    from slurm_gpufleet.slowgpus import sampler
    from slurm_gpufleet.slowgpus.instep import samples_from_digests

    def ids(env):   # no device cgroup here (tests/test_jobgpus.py has the cgroup's cases)
        return job_gpu_ids(env, dev_root="/nonexistent")

    assert ids({"SLURM_JOB_GPUS": "4,5,6,7"}) == {4, 5, 6, 7}
    assert ids({"CUDA_VISIBLE_DEVICES": "GPU-1f2e,GPU-3a4b"}) is None  # UUIDs: every GPU
    assert ids({"SLURM_JOB_GPUS": "", "CUDA_VISIBLE_DEVICES": "2,3"}) == {2, 3}
    assert ids({}) is None

    class Nvml:  # NVML indices in the reverse of the minor numbers' order (/dev/nvidia7 is index 0)
        def nvmlDeviceGetCount(self):
            return 8

        def nvmlDeviceGetHandleByIndex(self, i):
            return f"h{i}"

        def nvmlDeviceGetMinorNumber(self, h):
            return 7 - int(h[1:])

    # Slurm's GPUs 4-7 (/dev/nvidia4-7) are NVML indices 3..0: the sampler reads those, not indices 4-7
    assert handles_of(Nvml(), frozenset({4, 5, 6, 7})) == [(0, "h0"), (1, "h1"), (2, "h2"), (3, "h3")]
    assert len(handles_of(Nvml(), None)) == 8
    d = sampler.digest_for("5", SimpleNamespace(instep_window_s=60.0, instep_windows=3), [4, 5, 6, 7])
    for t in range(0, 200, 15):
        d.add(float(t), [[1980.0, 600.0, 95.0, 0]] * 4)
    published = {"n1": {"gpus": "8xNVIDIA H200", "is": json.loads(json.dumps({"5": d.to_dict()}))}}
    samples, _ = samples_from_digests(published)
    assert {s.gpu for s in samples} == {4, 5, 6, 7}


def test_the_sampler_reads_temperature_and_pcie_and_nvlink_throughput_where_nvml_gives_them():
    """The recorded H200 answers PCIe throughput (its nvidia-smi -q: 1051 KB/s TX, 594 KB/s RX) and the
    temperature (34 C) and has no NVLink; GPU 1 is given NVLink counters that grow 2,000 KiB a second on
    each of two links.  The window's means carry them; a digest from before (four values a row) still
    reads; a flag shows them beside its evidence."""
    sys.path.insert(0, str(REPO / "tests" / "slurm"))
    import gpustate

    from slurm_gpufleet.readers.nvml_replay import NvmlReplay
    from slurm_gpufleet.slowgpus.instep import Sample, samples_from_digests
    from slurm_gpufleet.slowgpus.sampler import Digest, Links, read_gpus

    probe = gpustate.healthy_state(2, "n1")
    nvml = NvmlReplay(probe)
    handles = [0, 1]
    links, digest = Links(), Digest("7", 60.0, 3)
    for t in (0.0, 15.0, 30.0, 45.0, 60.0):
        kib = int(t * 2000)
        probe["devices"][1]["nvlink_throughput_kib"] = {"value": {"tx": [kib, kib], "rx": [0, 0]}}
        rows = read_gpus(nvml, handles, links)
        assert rows[0][4:7] == [34.0, 1.645, None] and rows[1][4:6] == [34.0, 1.645], rows
        closed = digest.add(t, rows)
    assert closed and links.of == {0: None, 1: [0, 1]}  # GPU 0 has no NVLink: asked once, never again
    means = digest.to_dict()["b"][0][1]
    # 4,000 KiB/s on the two links = 4.096 MB/s
    assert means[0][4:] == [34.0, 1.6, None] and means[1][4:] == [34.0, 1.6, 4.1], means
    samples, _ = samples_from_digests({"n1": {"is": digest.to_dict()}})
    assert {(s.gpu, s.temp_c, s.pcie_mbps, s.nvlink_mbps) for s in samples} == {(0, 34.0, 1.6, None),
                                                                                  (1, 34.0, 1.6, 4.1)}
    old = {"j": "7", "ws": 60.0, "b": [[0, [[1980, 700.0, 99.0, 0]]]], "w": []}
    assert samples_from_digests({"n1": {"is": old}})[0][0].temp_c is None
    # a flag shows the extras of what it names, beside the job's median
    samples, bad, _ = job_samples(random.Random(3), "j1", 20, "throttled", nodes=4)
    warm = [Sample(s.t, s.job, s.node, s.gpu, s.sm_clock_mhz, s.power_w, s.sm_util, s.throttle, s.model,
                   88.0 if s.node == bad and s.throttle else 60.0, 2.0, 300.0) for s in samples]
    flag = detect(warm)[0]
    assert flag.evidence["temp_c"] == 88.0 and flag.evidence["job_median_temp_c"] == 60.0, flag.evidence
    assert flag.evidence["nvlink_mbps"] == 300.0


def test_a_telemetry_line_with_a_non_finite_temperature_is_malformed():
    from slurm_gpufleet.slowgpus.instep import parse_telemetry

    good = {"t": 0, "job": "1", "node": "n1", "gpu": 0, "sm_clock_mhz": 1980, "power_w": 700, "sm_util": 99}
    lines = [json.dumps({**good, "temp_c": 61.5}), json.dumps(good).replace("}", ', "temp_c": NaN}')]
    samples, bad = parse_telemetry(lines)
    assert [s.temp_c for s in samples] == [61.5] and bad == [2]


def test_without_cgroups_the_sampler_asks_slurm_only_when_no_slurmstepd_of_its_job_runs_here(tmp_path):
    from slurm_gpufleet.slowgpus import sampler

    proc = tmp_path / "proc"
    for pid, cmd in ((10, b"slurmstepd: [42.0]\x00"), (11, b"python\x00train.py\x00"), (12, b"slurmstepd: [7.extern]\x00")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(cmd)
    (proc / "self").mkdir()

    class Slurm:
        def __init__(self, state):
            self.state, self.asked = state, 0

        def job_state(self, job):
            self.asked += 1
            return self.state

    no_cgroups = str(tmp_path / "none")
    running = Slurm("RUNNING")
    assert sampler.stepd_running("42", str(proc)) and not sampler.stepd_running("4", str(proc))
    assert not sampler.job_gone("42", no_cgroups, running, str(proc)) and running.asked == 0  # its step runs here
    assert not sampler.job_gone("43", no_cgroups, running, str(proc)) and running.asked == 1  # between steps
    assert sampler.job_gone("43", no_cgroups, Slurm("COMPLETED"), str(proc))
    assert sampler.job_gone("43", no_cgroups, Slurm(None), str(proc))  # squeue forgot it: long gone

    class Away:
        def job_state(self, job):
            raise OSError("slurmctld unreachable")

    assert not sampler.job_gone("43", no_cgroups, Away(), str(proc))
    assert not sampler.job_gone("43", no_cgroups, None, str(proc))


def test_two_samplers_of_one_node_never_drop_each_others_window(tmp_path):
    """Each sampler reads, merges and writes the node's summary under the node's lock: 2 jobs x 30 windows
    published at once, every window of both jobs is kept."""
    import json
    import threading
    import time
    from types import SimpleNamespace

    from slurm_gpufleet.slowgpus import sampler
    from slurm_gpufleet.slurm.base import NodeInfo

    class Slurm:
        def __init__(self):
            self.extra = json.dumps({"gpufleet": 1, "v": "ok"})

        def node(self, name):
            return NodeInfo(name, "ALLOCATED", extra=self.extra)

        def set_fields(self, name, fields):
            time.sleep(0.002)  # between the read and this write, the other sampler would read the same
            self.extra = fields["extra"]

    slurm = Slurm()
    settings = SimpleNamespace(state_dir=str(tmp_path), publish="extra", breaker_path=str(tmp_path / "b.json"))
    lost = []

    def run(job):
        other = "2" if job == "1" else "1"
        for w in range(30):
            with sampler.publish_lock(str(tmp_path), "n1"):
                before = json.loads(slurm.extra).get("is", {}).get(other)
                sampler.publish(slurm, "n1", "extra", {"j": job, "ws": 60, "b": [], "w": [[w, []]]}, settings)
                if json.loads(slurm.extra)["is"].get(other) != before:
                    lost.append((job, w))  # the other job's window, as it stood, did not survive this write

    threads = [threading.Thread(target=run, args=(j,)) for j in ("1", "2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = json.loads(slurm.extra)["is"]
    assert final["1"]["w"] == [[29, []]] and final["2"]["w"] == [[29, []]] and lost == []


def test_with_a_shared_directory_the_samplers_ask_slurm_nothing_and_stragglers_reads_their_digests(tmp_path):
    """`instep_share_dir`: each node's sampler writes its job's digest to <dir>/<job>/<node>.json and makes
    no Slurm call; `fleet stragglers --running` reads the folder beside the nodes' summaries and flags the
    throttled node; the epilog drops a node's file, and the job's folder with its last one; a stale file (a
    node whose epilog never ran) or one that is not a digest is not read."""
    import os
    import signal
    import threading
    import time
    from types import SimpleNamespace

    from slurm_gpufleet.slowgpus import sampler

    share = tmp_path / "share"
    state = tmp_path / "state"
    state.mkdir()

    class NoSlurm:  # any call at all is a failure: the shared directory path asks Slurm nothing
        calls: list = []

        def __getattr__(self, name):
            NoSlurm.calls.append(name)
            raise AssertionError(f"Slurm asked: {name}")

    settings = SimpleNamespace(state_dir=str(state), instep_window_s=0.1, instep_windows=3, instep_sample_s=0.02,
                               publish="extra", instep_share_dir=str(share))
    (state / "instep-42-n1.pid").write_text(str(os.getpid()))
    threading.Timer(0.6, lambda: (state / "instep-42-n1.pid").unlink()).start()  # the epilog, in 0.6 s
    handler = signal.getsignal(signal.SIGTERM)
    scope = tmp_path / "cgroup" / "system.slice" / "slurmstepd.scope" / "job_42"
    scope.mkdir(parents=True)
    try:
        assert sampler.loop(settings, NoSlurm(), BusyNvml(2), "42", "n1", max_hours=0.01,
                            cgroup_root=str(tmp_path / "cgroup")) == 0
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert NoSlurm.calls == []
    written = json.loads((share / "42" / "n1.json").read_text())
    assert written["gpus"] == "2xNVIDIA H200" and written["is"]["42"]["ws"] == 0.1 and written["is"]["42"]["w"]

    # a 3-node job whose n2 is throttled from window 4 on, written as three samplers would
    job_settings = SimpleNamespace(instep_window_s=2.0, instep_windows=3)
    start = time.time() - 40
    for node in ("n1", "n2", "n3"):
        digest = sampler.digest_for("9", job_settings)
        for tick in range(41):
            t = start + tick * 0.5
            slow = node == "n2" and tick >= 16
            digest.add(t, [[1650.0 if slow else 1980.0, 600.0, 96.0, 0x20 if slow else 0]] * 8)
        sampler.write_shared(str(share), node, digest.to_dict(), "8xNVIDIA H200")
    (share / "9" / "n4.json").write_text("{not json")
    (share / "9" / "n5.json").write_text(json.dumps({"is": {"9": {"ws": 2}}}))  # no windows: not judged
    old = share / "9" / "n6.json"
    old.write_text((share / "9" / "n1.json").read_text())
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    read = sampler.read_shared(str(share))
    assert sorted(read) == ["n1", "n2", "n3", "n5"] and "9" in read["n2"]["is"]

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text("#!/bin/sh\ncase \"$1\" in --version) echo 'slurm 22.05.8';; "
                        "*) echo 'NodeName=n1 State=ALLOCATED Partitions=gpu';; esac\n")
    scontrol.chmod(0o755)
    config = tmp_path / "gpufleet.toml"
    config.write_text(f'[slurm]\nscontrol = "{scontrol}"\nstate_dir = "{state}"\ninstep_share_dir = "{share}"\n'
                      "instep_window_s = 2\n")
    r = run_cli("fleet", "--config", str(config), "stragglers", "--running", "--json")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert [(f["job"], f["node"], f["signature"]) for f in out["flags"]] == [("9", "n2", "throttled")], out

    for node in ("n1", "n2", "n3", "n5", "n6"):
        sampler.drop_shared(str(share), "9", node)
    assert (share / "9").exists()          # n4's unreadable file is still there
    (share / "9" / "n4.json").unlink()
    sampler.drop_shared(str(share), "42", "n1")
    assert sorted(os.listdir(share)) == ["9"] and not (share / "42").exists()
    with pytest.raises(ValueError):
        sampler.shared_path(str(share), "../etc", "n1")


def test_at_fleet_size_the_samplers_write_every_few_windows_and_never_read_their_node(tmp_path):
    """The shipped defaults at 12,500 nodes: every node of a job publishes in the same window, every 21st
    (instep_writes_per_s 10, 60 s windows), jobs spread over those windows; a publication merges into the
    copy of the summary the node's last writer kept, so slurmctld is written to and never read."""
    import json
    import time
    from types import SimpleNamespace

    from slurm_gpufleet.judging import summary
    from slurm_gpufleet.policy import SlurmSettings
    from slurm_gpufleet.slowgpus import sampler

    defaults = SlurmSettings(state_dir=str(tmp_path))
    assert sampler.publish_every(defaults, 12_500) == 21 and sampler.publish_every(defaults, 300) == 1
    assert sampler.publish_every(defaults, None) == 1
    every = 21
    for job in ("4101", "4102", "98765"):
        due = [w for w in range(1000, 1000 + every) if sampler.publishes_in(job, w, every)]
        assert len(due) == 1, (job, due)
    starts = {next(w for w in range(every) if sampler.publishes_in(str(j), w, every)) for j in range(2000)}
    assert len(starts) == every, "a fleet's jobs spread over every window"
    # 12,500 nodes, each in a multi-node job: writes a second, the fleet together
    assert 12_500 / (every * defaults.instep_window_s) <= defaults.instep_writes_per_s

    class Slurm:
        reads = writes = 0
        extra = json.dumps({"gpufleet": 1, "v": "ok", "gpus": "8xNVIDIA H200"})

        def node(self, name):
            self.reads += 1
            return SimpleNamespace(extra=self.extra, comment="")

        def set_fields(self, name, fields):
            self.writes += 1
            self.extra = fields["extra"]

    slurm = Slurm()
    sampler.publish(slurm, "n1", "extra", {"j": "7", "ws": 60, "b": [], "w": [[1, []]], "pe": 21}, defaults, 600)
    assert (slurm.reads, slurm.writes) == (1, 1), "no copy kept yet: read once"
    for w in range(2, 6):
        sampler.publish(slurm, "n1", "extra", {"j": "7", "ws": 60, "b": [], "w": [[w, []]], "pe": 21}, defaults, 600)
    assert (slurm.reads, slurm.writes) == (1, 5)
    shown = json.loads(slurm.extra)
    assert shown["v"] == "ok" and shown["is"]["7"]["w"] == [[5, []]]
    # the health check's own write replaces the copy: the sampler's next write keeps what it published
    summary.keep_published(str(tmp_path), "n1", "extra", {"gpufleet": 1, "v": "warn", "is": shown["is"]})
    sampler.publish(slurm, "n1", "extra", {"j": "7", "ws": 60, "b": [], "w": [[6, []]], "pe": 21}, defaults, 600)
    assert json.loads(slurm.extra)["v"] == "warn" and slurm.reads == 1
    # a copy older than the bound, or of the other field, is not used: Slurm is read
    assert summary.kept_published(str(tmp_path), "n1", "comment", 600) is None
    assert summary.kept_published(str(tmp_path), "n1", "extra", 600, now=time.time() + 601) is None
    # a paced digest stays live to the health check until its next publication is due
    d = {"j": "7", "ws": 60, "b": [], "w": [[100, []]], "pe": 21}
    assert summary.live_digests({"7": d}, now=101 * 60 + 20 * 60) and not summary.live_digests(
        {"7": {**d, "pe": 0}}, now=101 * 60 + 20 * 60)


def test_at_60_w_of_power_noise_the_energy_counter_finds_the_silent_gpu_and_offsets_flag_nothing():
    """The NCCL case at real noise (#56): 60 W of per-sample power noise, each GPU drawing up to 10 % more or
    less than its peers for the whole job.  With the energy counter in the samples, the silent GPU alone is
    flagged within 5 minutes, and healthy and uniformly slow jobs flag nothing; judged on the instantaneous
    readings, the same jobs lose it (the noise knob moves the result)."""
    found = {True: 0, False: 0}
    seeds = (21, 22, 23, 24)
    for seed in seeds:
        for energy in (True, False):
            gpu: list[int] = []
            samples, bad, onset = job_samples(random.Random(seed), "j", 20, "gpu_silent", nodes=8, bad_gpu_out=gpu,
                                              style="nccl", power_noise=60.0, offset=0.10, energy=energy)
            flags = detect(samples)
            exact = [(f.node, f.gpu) for f in flags] == [(bad, gpu[0])]
            found[energy] += exact
            if energy:
                assert exact and flags[0].t_flagged - onset <= 300, (seed, flags)
    assert found[True] == len(seeds) and found[False] < len(seeds), found
    for seed, kind in ((25, "uniform"), (26, "healthy"), (27, "healthy")):
        samples, _, _ = job_samples(random.Random(seed), "j", 20, kind, nodes=8, style="nccl", power_noise=60.0,
                                    offset=0.10, energy=True)
        assert detect(samples) == [], kind


def test_a_window_s_power_is_its_energy_over_its_time_and_a_stuck_counter_is_not_used():
    from slurm_gpufleet.slowgpus.instep import Sample, windows_of

    def samples(step_j):
        return [Sample(t, "j", "n1", 0, 1980.0, 700.0 if i % 2 else 300.0, 97.0, energy_j=1e6 + i * step_j)
                for i, t in enumerate((0.0, 15.0, 30.0, 45.0, 60.0, 75.0))]

    cells = windows_of(samples(15 * 520.0), 60.0)["j"]
    assert [round(cells[w][("n1", 0)][1], 1) for w in (0, 1)] == [520.0, 520.0]   # not the readings' 500
    stuck = windows_of(samples(0.0), 60.0)["j"]
    assert round(stuck[0][("n1", 0)][1], 1) == 500.0   # the readings' mean


def test_the_sampler_s_window_power_comes_from_the_energy_counter_where_it_moves():
    from slurm_gpufleet.slowgpus.sampler import Digest

    digest = Digest("7", 60.0, 3)
    for i, t in enumerate((0.0, 15.0, 30.0, 45.0, 60.0)):
        noisy = 640.0 if i % 2 else 560.0   # instantaneous readings around a dip
        digest.add(t, [[1980, noisy, 97, 0, None, None, None, 5e8 + i * 15 * 612_000.0]])
    assert digest.to_dict()["b"][0][1][0][1] == 612.0
    still = Digest("7", 60.0, 3)
    for t in (0.0, 15.0, 30.0, 45.0, 60.0):
        still.add(t, [[1980, 600.0, 97, 0, None, None, None, 5e8]])
    assert still.to_dict()["b"][0][1][0][1] == 600.0


def test_telemetry_lines_may_carry_the_energy_counter_and_a_non_finite_one_is_malformed():
    from slurm_gpufleet.slowgpus.instep import parse_telemetry

    line = {"t": 0, "job": "j", "node": "n1", "gpu": 0, "sm_clock_mhz": 1980, "power_w": 600, "sm_util": 97}
    samples, bad = parse_telemetry([json.dumps({**line, "energy_j": 12.5}), json.dumps(line),
                                    json.dumps({**line, "energy_j": float("nan")}).replace("NaN", "NaN")])
    assert [s.energy_j for s in samples] == [12.5, None] and bad == [3]


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_a_healthy_gpus_power_rising_mid_job_is_a_level_change_never_a_slow_gpu(seed):
    """On each node one healthy GPU draws +30 W from a moment of its own on (a phase of its work, a
    neighbour's heat), in a healthy job and in one slow everywhere: each GPU's own level is followed, and a
    level change alone flags nothing.  The same job with a GPU that holds it back still finds that GPU."""
    for kind in ("healthy", "uniform"):
        samples, _, _ = job_samples(random.Random(seed), "j", 20, kind, nodes=12, style="nccl", step_w=30)
        assert detect(samples) == [], kind
    gpu: list[int] = []
    samples, bad, onset = job_samples(random.Random(seed), "j", 20, "gpu_silent", nodes=12, bad_gpu_out=gpu,
                                      style="nccl", step_w=30)
    flags = detect(samples)
    assert (bad, gpu[0]) in [(f.node, f.gpu) for f in flags], flags
