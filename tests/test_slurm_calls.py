"""How many Slurm command processes a health check starts, counted at the library boundary: a recording
`scontrol` that answers for one node (its state kept in a file, as slurmctld would keep it) and logs
every invocation.  A quiet run reads the node and nothing else; a drain run reads the node, the fleet
once (the breaker) and makes one write that carries the drain and the published summary."""

from __future__ import annotations

import json
import sys

from support import REPO

sys.path.insert(0, str(REPO / "tests"))
from fake_slurm.node import fault, healthcheck, setup  # noqa: E402


def _healthcheck(bin_dir, env) -> list[list[str]]:
    calls, _, r = healthcheck(bin_dir, env)
    assert r.returncode == 0, r.stderr
    assert "internal error" not in r.stderr, r.stderr
    return calls


def test_a_quiet_health_check_asks_slurm_nothing_and_a_drain_starts_at_most_three_processes(tmp_path):
    bin_dir, gpus, env = setup(tmp_path)
    first = _healthcheck(bin_dir, env)  # learns the release once, publishes its first summary
    assert first[0] == ["--version"] and len(first) <= 3, first
    for _ in range(2):
        quiet = _healthcheck(bin_dir, env)
        assert quiet == [], "a quiet run (same verdict, same summary, in service) asks slurmctld nothing"
    fault(gpus, 5, "row_remap_failure")
    drain = _healthcheck(bin_dir, env)
    assert len(drain) <= 3, drain
    writes = [c for c in drain if c[0] == "update"]
    assert len(writes) == 1 and "state=drain" in writes[0], drain
    # the drain and the summary that says why: one write
    assert any(a.startswith("reason=memory gpu5 row remapping failed") for a in writes[0])
    assert any(a.startswith("extra=") and '"v":"drain"' in a for a in writes[0]), writes[0]
    node = json.loads((bin_dir / "node.json").read_text())
    assert node["drain"] and '"v":"drain"' in node["extra"]
    # drained already, nothing new: one read, no write
    again = _healthcheck(bin_dir, env)
    assert len(again) <= 2 and not [c for c in again if c[0] == "update"], again


def test_an_open_breaker_is_published_once_and_the_summary_does_not_flap(tmp_path):
    """A blocked drain publishes "breaker open" once; the runs after it write nothing, rather than
    putting back the summary without the breaker every other run (seen on real Slurm 24.11)."""
    bin_dir, gpus, env = setup(tmp_path)
    _healthcheck(bin_dir, env)
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "breaker.json").write_text(json.dumps({"why": "3 of 20 nodes (limit 2)"}))
    fault(gpus, 5, "row_remap_failure")
    published = []
    for run in range(3):
        calls = _healthcheck(bin_dir, env)
        node = json.loads((bin_dir / "node.json").read_text())
        assert not node.get("drain"), "the breaker held the drain"
        extra = json.loads(node["extra"])
        assert extra["v"] == "drain" and extra.get("brk") == 1 and extra["f"].startswith("breaker open"), (run, extra)
        published.append([c for c in calls if c[0] == "update"])
    assert len(published[0]) == 1 and published[1:] == [[], []], published


def test_a_lemons_deep_check_confirms_a_throttled_node_in_its_job_comment_and_clears_a_healthy_one(tmp_path):
    """`slurm-gpufleet-healthcheck --level deep --confirm`, run as a lemon's check job: judge only; on a
    slow node it exits 1 and puts the finding in its job's comment (where `fleet lemons` reads it), with
    that one Slurm write and nothing else: no drain, no published summary."""
    import subprocess

    sys.path.insert(0, str(REPO / "tests" / "slurm"))
    import gpustate

    bin_dir, gpus, env = setup(tmp_path)
    env = {**env, "SLURM_JOB_ID": "4242"}
    argv = [sys.executable, str(REPO / "healthcheck" / "slurm-gpufleet-healthcheck"), "--level", "deep", "--confirm"]
    log = bin_dir / "calls.jsonl"
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not log.exists(), (r.stdout, r.stderr)
    for gpu in range(8):
        gpustate.set_value(str(gpus / "n9.json"), gpu, "clock_sm", 1650)
        gpustate.set_value(str(gpus / "n9.json"), gpu, "clocks_event_reasons", 0x20)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "internal error" not in r.stderr, (r.stdout, r.stderr)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 1 and calls[0][:2] == ["update", "jobid=4242"], calls
    assert calls[0][2] == f"comment=gpufleet confirmed: {r.stdout.strip()}", calls
    assert r.stdout.startswith(("thermal", "clocks")), r.stdout


def test_a_run_gives_way_to_the_previous_one_still_running_and_waits_for_a_short_one(tmp_path):
    # slurmd starts a health check every interval whether the last ended or not: runs must not pile up
    import fcntl
    import os
    import threading

    bin_dir, gpus, env = setup(tmp_path)
    cfg = env["SLURM_GPUFLEET_CONFIG"]
    with open(cfg, "a") as fh:
        fh.write("read_timeout_s = 1\n")
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    lock = os.open(state / "healthcheck-n9.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)  # the previous run, still reading the GPUs
    calls, _, r = healthcheck(bin_dir, env)
    assert r.returncode == 0 and calls == [], (calls, r.stderr)
    assert "the previous health check of n9 still runs after 1 s: this run is skipped" in r.stderr
    # a previous run that ends within the wait: this one waits for it, then runs
    threading.Timer(0.3, lambda: fcntl.flock(lock, fcntl.LOCK_UN)).start()
    calls, _, r = healthcheck(bin_dir, env)
    os.close(lock)
    assert r.returncode == 0 and calls and "skipped" not in r.stderr, r.stderr


_MODULES_AT_EXIT = """
import json, sys
from slurm_gpufleet.hooks import healthcheck_main
rc = healthcheck_main([])
print(json.dumps({"rc": rc, "modules": sorted(m for m in sys.modules if m.split(".")[0] in
                  ("click", "jinja2", "sqlite_utils", "slurm_gpufleet"))}))
"""


def _modules_of_a_run(env) -> dict:
    import subprocess

    r = subprocess.run([sys.executable, "-c", _MODULES_AT_EXIT], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "internal error" not in r.stderr, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_health_check_records_and_publishes_without_sqlite_utils_or_click(tmp_path):
    """slurmd runs it every interval on every node: its history goes through the standard sqlite3."""
    from slurm_gpufleet.records.history import History

    bin_dir, gpus, env = setup(tmp_path)
    fault(gpus, 5, "row_remap_failure")  # a drain: the run records its findings and its action
    out = _modules_of_a_run(env)
    assert out["rc"] == 0 and not [m for m in out["modules"] if not m.startswith("slurm_gpufleet")], out
    assert json.loads((bin_dir / "node.json").read_text()).get("drain"), "the drain went out"
    h = History(str(tmp_path / "state" / "n9.db"))
    (run,) = h.runs()
    assert run["verdict"] == "drain" and run["hook"] == "healthcheck"
    assert [r["action"] for r in h.db.query("select action from actions")] == ["drain"]
    assert h.db["findings"].count >= 1  # the same file, read through sqlite-utils
    h.close()


def test_a_run_that_gives_way_to_the_previous_one_loads_no_check(tmp_path):
    """slurmd starts a run every interval whether the last ended or not: one that finds the previous run
    still holding the node's lock gives way after `read_timeout_s`, having parsed only its config."""
    import fcntl

    bin_dir, gpus, env = setup(tmp_path)
    cfg = tmp_path / "gpufleet.toml"
    cfg.write_text(cfg.read_text() + "read_timeout_s = 1\n")
    (tmp_path / "state").mkdir()
    with open(tmp_path / "state" / "healthcheck-n9.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        out = _modules_of_a_run(env)
    assert out["rc"] == 0
    assert "slurm_gpufleet.judging.checks" not in out["modules"] and "slurm_gpufleet.judging.pipeline" not in out["modules"], out
    assert not (bin_dir / "calls.jsonl").exists(), "a run that gave way asked Slurm nothing"
    assert not (tmp_path / "state" / "n9.db").exists()


def test_a_quiet_run_reads_slurm_again_after_slurm_read_every_s_a_config_change_or_a_verdict_change(tmp_path):
    import json as json_

    bin_dir, gpus, env = setup(tmp_path)
    _healthcheck(bin_dir, env)
    assert _healthcheck(bin_dir, env) == []
    view = tmp_path / "state" / "slurm-view-n9.json"
    kept = json_.loads(view.read_text())
    kept["read_at"] -= 601  # older than slurm_read_every_s (600): one read, which keeps a new view
    view.write_text(json_.dumps(kept))
    assert [c[:2] for c in _healthcheck(bin_dir, env)] == [["show", "node"]]
    assert _healthcheck(bin_dir, env) == []
    cfg = env["SLURM_GPUFLEET_CONFIG"]
    with open(cfg, "a") as fh:  # a changed config: read
        fh.write("slurm_read_every_s = 0\n")
    assert [c[:2] for c in _healthcheck(bin_dir, env)] == [["show", "node"]]
    assert [c[:2] for c in _healthcheck(bin_dir, env)] == [["show", "node"]]  # 0: every run reads


def test_a_large_fleets_quiet_nodes_read_slurm_less_often_so_that_the_fleet_makes_few_reads_a_second(tmp_path):
    """`slurm_reads_per_s` (3 here, 2 by default): in a fleet of 12,500 nodes (slurm.conf's count, no call to
    slurmctld) a quiet node reads Slurm every 12,500 / 3 = 4,167 s, not every 600 s; the count is kept until
    slurm.conf changes; a small fleet keeps `slurm_read_every_s`."""
    import json as json_
    import os
    from types import SimpleNamespace

    from slurm_gpufleet.hooks import quiet

    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=big\nNodeName=DEFAULT CPUs=112\nNodeName=gpu[00001-12000] Gres=gpu:8\n"
                    "NodeName=gpu[20001-20500] Gres=gpu:8\n")
    settings = SimpleNamespace(slurm_read_every_s=600, slurm_reads_per_s=3.0, state_dir=str(tmp_path / "state"))
    os.makedirs(settings.state_dir)
    assert round(quiet.read_every(settings, str(conf))) == 4167
    assert (tmp_path / "state" / "slurm-conf-nodes").read_text().endswith(" 12500")
    (tmp_path / "state" / "slurm-conf-nodes").write_text(f"{os.stat(conf).st_mtime_ns} 40")  # kept: not parsed again
    assert quiet.read_every(settings, str(conf)) == 600.0
    assert quiet.read_every(SimpleNamespace(**{**vars(settings), "slurm_read_every_s": 0}), str(conf)) == 0.0
    assert quiet.read_every(settings, str(tmp_path / "missing.conf")) == 600.0

    (tmp_path / "state" / "slurm-conf-nodes").unlink()
    (tmp_path / "node").mkdir()
    bin_dir, gpus, env = setup(tmp_path / "node")
    env = {**env, "SLURM_CONF": str(conf)}
    _healthcheck(bin_dir, env)
    view = tmp_path / "node" / "state" / "slurm-view-n9.json"
    kept = json_.loads(view.read_text())
    kept["read_at"] -= 601  # past slurm_read_every_s, within the default 12,500 / 2 = 6,250 s: still quiet
    view.write_text(json_.dumps(kept))
    assert _healthcheck(bin_dir, env) == []
    kept["read_at"] -= 5700  # 6,301 s old: read
    view.write_text(json_.dumps(kept))
    assert [c[:2] for c in _healthcheck(bin_dir, env)] == [["show", "node"]]


def test_the_health_check_keeps_what_slurm_shows_for_the_samplers_to_write_beside_without_a_read(tmp_path):
    """After a run, the node keeps the summary Slurm shows (summary.keep_published): a sampler's
    publication merges into it and only writes; someone else's text in the field leaves no copy."""
    import json as json_
    from types import SimpleNamespace

    from slurm_gpufleet.policy import SlurmSettings
    from slurm_gpufleet.slowgpus import sampler

    bin_dir, gpus, env = setup(tmp_path)
    _healthcheck(bin_dir, env)
    kept = json_.loads((tmp_path / "state" / "published-n9.json").read_text())
    shown = json_.loads((bin_dir / "node.json").read_text())
    assert kept["field"] == "extra" and kept["summary"] == json_.loads(shown["extra"])

    class Recorded:  # the actuator's writer over the same recording scontrol's state
        reads = 0

        def node(self, name):
            self.reads += 1
            return SimpleNamespace(extra="", comment="")

        def set_fields(self, name, fields):
            node = json_.loads((bin_dir / "node.json").read_text())
            (bin_dir / "node.json").write_text(json_.dumps({**node, **fields}))

    backend = Recorded()
    sampler.publish(backend, "n9", "extra", {"j": "5", "ws": 60, "b": [], "w": [[1, []]]},
                    SlurmSettings(state_dir=str(tmp_path / "state")), 600)
    after = json_.loads(json_.loads((bin_dir / "node.json").read_text())["extra"])
    assert backend.reads == 0 and after["v"] == kept["summary"]["v"] and after["is"]["5"]["w"] == [[1, []]]
    # someone else's text in Extra: the next run that reads Slurm (a quiet one reads nothing) leaves no
    # copy, so a sampler reads, and then leaves the text alone
    node = json_.loads((bin_dir / "node.json").read_text())
    (bin_dir / "node.json").write_text(json_.dumps({**node, "extra": "rack 7 spare"}))
    (tmp_path / "state" / "slurm-view-n9.json").unlink()
    assert [c[:2] for c in _healthcheck(bin_dir, env)][:1] == [["show", "node"]]
    assert not (tmp_path / "state" / "published-n9.json").exists()
