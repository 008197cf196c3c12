"""Slow GPUs and fleet health over time: statistics, stragglers, history, metrics, checkpoint advice."""

import json
import math
import random

import pytest
from support import H200, run_cli

from slurm_gpufleet import evaluate, read_report_file
from slurm_gpufleet.common.stats import mad, median, outliers, robust_z
from slurm_gpufleet.judging.findings import Finding
from slurm_gpufleet.readers.snapshot import PerfSample
from slurm_gpufleet.records.checkpoint import advise, daly_interval, lost_fraction
from slurm_gpufleet.records.history import History
from slurm_gpufleet.slowgpus.fleet import failure_history, from_history


def test_median_mad_and_robust_z():
    values = [10.0, 11.0, 9.0, 10.0, 50.0]
    assert median(values) == 10.0 and mad(values) == 1.0
    assert robust_z(7.0, 10.0, 1.0) == pytest.approx(-3 / 1.4826)


def _fleet(n=64, slow=(), factor=0.8, seed=3):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        v = 4119 * rng.gauss(1, 0.01)
        key = f"n{i:03d}/gpu0"
        rows.append((key, "NVIDIA H200", v * factor if key in slow else v))
    return rows


def test_outliers_find_slow_gpus_per_model_only():
    rows = _fleet(slow={"n005/gpu0", "n040/gpu0"})
    rows += [(f"a{i}/gpu0", "NVIDIA A100", 1900.0 + i) for i in range(20)]  # another model, its own median
    found, summary = outliers(rows)
    assert {o.key for o in found} == {"n005/gpu0", "n040/gpu0"}
    assert summary["NVIDIA H200"]["judged"] and summary["NVIDIA A100"]["judged"]
    assert found[0].drop_pct > 15


def test_outliers_need_peers_and_ignore_noise():
    rows = _fleet(n=5, slow={"n001/gpu0"})
    found, summary = outliers(rows, min_peers=8)
    assert found == [] and summary["NVIDIA H200"] == {"peers": 5, "judged": False}
    identical = [(f"n{i}/gpu0", "M", 4000.0) for i in range(20)] + [("x/gpu0", "M", 3990.0)]
    assert outliers(identical)[0] == []  # 0.25 % below: noise, not a straggler (spread floor + min drop)


def test_history_perf_and_failures(tmp_path):
    h = History(str(tmp_path / "n1.db"))
    perf = [PerfSample(gpu=0, mem_bw_gbps=4100.0), PerfSample(gpu=1, mem_bw_gbps=3300.0)]
    h.record_run("n1", "healthcheck", "ok", [], gpus=8, performance=perf, models={0: "NVIDIA H200", 1: "NVIDIA H200"})
    bad = [Finding("memory", "reboot", "reset_gpu", 1, "row remap pending")]
    h.record_run("n1", "healthcheck", "reboot", bad, gpus=8)
    h.record_run("n1", "healthcheck", "reboot", bad, gpus=8)  # the same incident
    h.record_run("n1", "healthcheck", "ok", [], gpus=8)
    h.record_run("n1", "healthcheck", "reboot", bad, gpus=8)  # a new one
    h.db.execute("update runs set ts = ts + (id - 1) * 3600")
    h.db.conn.commit()
    h.close()
    assert sorted(from_history(str(tmp_path))) == [("n1/gpu0", "NVIDIA H200", 4100.0), ("n1/gpu1", "NVIDIA H200", 3300.0)]
    incidents, gpu_hours, nodes = failure_history(str(tmp_path))
    assert (incidents, nodes) == (2, 1) and gpu_hours == pytest.approx(4 * 8, abs=0.01)  # 4 h x 8 GPUs, + real ms
    r = run_cli("history", "--db", str(tmp_path / "n1.db"), "--node", "n1", "--gpu", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["runs"]) == 5 and {f["gpu"] for f in out["findings"]} == {1}
    assert [p["mem_bw_gbps"] for p in out["performance"]] == [3300.0]
    # --since: an age or an ISO time; the runs were spread over 4 h from now on (ts + (id - 1) h)
    r = run_cli("history", "--db", str(tmp_path / "n1.db"), "--node", "n1", "--since", "1h", "--json")
    assert r.returncode == 0 and len(json.loads(r.stdout)["runs"]) == 5, r.stderr
    r = run_cli("history", "--db", str(tmp_path / "n1.db"), "--node", "n1", "--since", "2099-01-01T00:00", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["runs"] == [], r.stderr
    for args, said in ((("--since", "soon"), "--since 'soon': an ISO time or an age like 2h"),
                       (("--db", str(tmp_path / "nope.db")), "nope.db: no history")):
        r = run_cli("history", "--db", str(tmp_path / "n1.db"), "--node", "n1", *args)
        err = r.stderr.decode()
        assert r.returncode == 2 and said in err and len(err.strip().splitlines()) == 1, err


def test_checkpoint_advice_formulas():
    # Young: sqrt(2 C M); Daly adds higher-order terms and subtracts C
    c, m = 300.0, 48 * 3600.0
    assert daly_interval(c, m) == pytest.approx(math.sqrt(2 * c * m) * (1 + math.sqrt(c / (2 * m)) / 3 + c / (2 * m) / 9) - c)
    a = advise(1024, 300, gpu_mtbf_h=50_000)
    assert a.job_mtbf_h == pytest.approx(50_000 / 1024)
    assert a.interval_s == pytest.approx(daly_interval(300, a.job_mtbf_h * 3600))
    # the advised interval is (near) the minimum of the expected loss
    best = min(range(600, 30000, 60), key=lambda t: lost_fraction(t, 300, a.job_mtbf_h * 3600))
    assert abs(best - a.interval_s) < 400
    h = advise(64, 120, failures=3, gpu_hours=30_000)
    assert h.gpu_mtbf_h == 10_000 and h.job_mtbf_h_range[0] < h.job_mtbf_h < h.job_mtbf_h_range[1]
    with pytest.raises(ValueError):
        advise(8, 60)


def test_checkpoint_cli_json():
    r = run_cli("advise", "checkpoint", "--job-gpus", "2048", "--checkpoint-cost", "180", "--gpu-mtbf-hours", "40000",
                "--json")
    assert r.returncode == 0
    out = json.loads(r.stdout)
    assert out["job_mtbf_h"] == pytest.approx(40000 / 2048) and out["interval_s"] > 0


def test_metrics_file_parses_back(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    prom = tmp_path / "gpufleet.prom"
    r = run_cli("metrics", "--nvidia-smi-q", str(H200 / "nvidia-smi-q.xml"), "--node", "n7", "--textfile", str(prom))
    assert r.returncode == 0, r.stderr
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert {"gpufleet_gpu_verdict", "gpufleet_ecc_errors", "gpufleet_remapped_rows", "gpufleet_clock_event_reason",
            "gpufleet_last_check_timestamp_seconds", "gpufleet_check_duration_seconds"} <= set(families)
    (verdict,) = families["gpufleet_gpu_verdict"].samples
    assert verdict.labels["node"] == "n7" and verdict.value == 0
    idle = [s for s in families["gpufleet_clock_event_reason"].samples if s.labels["reason"] == "gpu_idle"]
    assert idle[0].value == 1


def test_metrics_carry_perf_and_faults():
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from slurm_gpufleet.records.metrics import registry_for

    snap = read_report_file(str(H200 / "nvidia-smi-q.xml"))
    snap.gpus[0].remapped_rows.pending = True
    snap.performance = [PerfSample(gpu=0, mem_bw_gbps=4100.0, gemm_tflops=770.0)]
    text = generate_latest(registry_for(evaluate(snap), "n1")).decode()
    fam = {f.name: f for f in text_string_to_metric_families(text)}
    assert [s.value for s in fam["gpufleet_gpu_verdict"].samples] == [2]
    assert {s.labels["measure"]: s.value for s in fam["gpufleet_perf"].samples} == {"mem_bw_gbps": 4100.0,
                                                                                   "gemm_tflops": 770.0}


def test_stragglers_cli(tmp_path):
    rows = _fleet(n=32, slow={"n007/gpu0"})
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps({"node": k.split("/")[0], "gpu": 0, "model": m, "mem_bw_gbps": v}) + "\n"
                               for k, m, v in rows))
    r = run_cli("fleet", "--json", "stragglers", "--results", str(results))
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert [s["key"] for s in out["stragglers"]] == ["n007/gpu0"] and out["drained"] == []
    r = run_cli("fleet", "stragglers", "--results", str(results), "--drain")
    assert r.returncode == 2 and b"opt-in" in r.stderr


def test_fleet_report_renders(tmp_path):
    h = History(str(tmp_path / "n1.db"))
    h.record_run("n1", "healthcheck", "ok", [], gpus=8, performance=[PerfSample(gpu=0, mem_bw_gbps=4100.0)],
                 models={0: "NVIDIA H200"})
    h.record_run("n1", "healthcheck", "drain", [Finding("memory", "drain", "inspect_hardware", 0, "x")], gpus=8)
    h.close()
    out = tmp_path / "fleet.html"
    r = run_cli("fleet", "report", "--history-dir", str(tmp_path), "--out", str(out))
    assert r.returncode == 0, r.stderr
    page = out.read_text()
    assert "<svg" in page and "NVIDIA H200" in page and "drain: 1" in page


def test_probe_without_a_gpu_library_says_so():
    from slurm_gpufleet.readers import probe

    if probe.available_library() is not None:
        pytest.skip("a GPU library is installed here")
    (s,) = probe.measure([0])
    assert s.mem_bw_gbps is None and "no GPU library" in s.error
    snap = read_report_file(str(H200 / "nvidia-smi-q.xml"))
    snap.performance = [s]
    (f,) = evaluate(snap).findings
    assert (f.check, f.severity, f.message) == ("performance", "ok", "performance not measured")


def test_check_judges_against_a_fleet_baseline(tmp_path):
    snap = read_report_file(str(H200 / "nvidia-smi-q.xml"))
    snap.performance = [PerfSample(gpu=0, mem_bw_gbps=3900.0, gemm_tflops=760.0)]
    path = tmp_path / "snap.json"
    path.write_text(snap.to_json())
    # 3900 GB/s is within 10 % of the table's 4119: fine by the reference
    r = run_cli("check", "--snapshot", str(path), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["findings"] == []
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"NVIDIA H200": {"mem_bw_gbps": 4400.0}}))
    r = run_cli("check", "--snapshot", str(path), "--perf-baseline", str(baseline), "--json")
    (f,) = json.loads(r.stdout)["findings"]
    assert (f["check"], f["severity"]) == ("performance", "warn") and "fleet median 4400" in f["detail"]
    baseline.write_text("[1, 2]")
    assert run_cli("check", "--snapshot", str(path), "--perf-baseline", str(baseline)).returncode == 2



def test_the_published_baseline_is_each_models_median_over_enough_peers():
    from slurm_gpufleet.slowgpus.fleet import baseline_by_model

    samples = [(f"n{i}/gpu0", "H200", v) for i, v in enumerate((4000.0, 4100.0, 3000.0, 4200.0))]
    samples += [("m1/gpu0", "A100", 1900.0), ("m2/gpu3", "A100", 1800.0)]
    assert baseline_by_model(samples, min_peers=3) == {"H200": {"mem_bw_gbps": 4050.0}}
    assert baseline_by_model(samples, min_peers=2)["A100"] == {"mem_bw_gbps": 1850.0}

def test_history_on_a_fresh_node_survives_concurrent_hooks_and_prunes(tmp_path):
    """Six hooks open a fresh node's history at the same moment, three times over: no "database is
    locked", no run lost, and pruning works on a node where the deep check never ran."""
    import subprocess
    import sys

    code = ("import sys; from slurm_gpufleet.records.history import History; h = History(sys.argv[1]); "
            "h.record_run('n1', sys.argv[2], 'ok', []); h.prune(); h.close()")
    for attempt in range(3):
        path = tmp_path / f"fresh{attempt}.db"
        procs = [subprocess.Popen([sys.executable, "-c", code, str(path), hook], stderr=subprocess.PIPE, text=True)
                 for hook in ("healthcheck", "prolog", "epilog", "healthcheck", "prolog", "epilog")]
        errors = [p.communicate(timeout=60)[1] for p in procs]
        assert all(p.returncode == 0 for p in procs), errors
        from slurm_gpufleet.records.history import History

        h = History(str(path))
        assert len(h.runs(limit=100)) == 6
        assert "performance" in h.db.table_names()
        h.close()
