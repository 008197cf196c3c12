"""`maintain simulate`: sacct input line by line, the scheduler, and the strategies on the real Helios trace."""

import io
import json

import pytest
from support import REPO, run_cli

from slurm_gpufleet.common.datafiles import HELIOS_SACCT, open_text
from slurm_gpufleet.maintain.sacct import SacctError, assume_limit, duration_s, read_sacct
from slurm_gpufleet.policy import parse_policy
from slurm_gpufleet.simulators.rollout import SimJob, Simulator, simulate

HEADER = "JobIDRaw|User|Submit|Start|End|Elapsed|NNodes|AllocTRES|State|Timelimit"


def test_bad_sacct_lines_are_counted_not_fatal():
    lines = [HEADER,
             "1|u|2020-09-01T00:00:00|2020-09-01T00:00:00|2020-09-01T01:00:00|01:00:00|1|cpu=1,gres/gpu=2|COMPLETED|02:00:00",
             "1.batch|u|2020-09-01T00:00:00|2020-09-01T00:00:00|2020-09-01T01:00:00|01:00:00|1|cpu=1|COMPLETED|",
             "1.0|u|2020-09-01T00:00:00|2020-09-01T00:00:00|2020-09-01T01:00:00|01:00:00|1|gres/gpu=2|COMPLETED|",
             "2_7|u|2020-09-01T00:10:00|Unknown|Unknown|00:30:00|1|gres/gpu:h100=1|CANCELLED|UNLIMITED",
             "3|u|None|2020-09-01T00:00:00|2020-09-01T01:00:00|01:00:00|1|gres/gpu=1|COMPLETED|1:00:00",
             "4|u|2020-09-01T00:20:00|Unknown|Unknown|Unknown|1|gres/gpu=1|PENDING|1:00:00",
             "5|u|2020-09-01T00:30:00|2020-09-01T00:30:00|2020-09-01T00:40:00|00:10:00|1|cpu=4,mem=1G|COMPLETED|1:00:00",
             "6|u|2020-09-01T00:30:00|2020-09-01",
             "",
             "x7|u|2020-09-01T00:30:00|2020-09-01T00:30:00|2020-09-01T00:40:00|00:10:00|1|gres/gpu=1|COMPLETED|1:00:00"]
    trace = read_sacct(lines)
    assert [j.job_id for j in trace.jobs] == ["1", "2_7"]
    assert trace.jobs[0].time_limit_s == 7200 and trace.jobs[1].time_limit_s is None  # UNLIMITED
    assert trace.jobs[1].run_s == 1800 and trace.jobs[1].gpus == 1
    assert trace.skipped == {"job step (123.batch, 123.0)": 2, "no submit time": 1,
                             "no run time (Unknown start/end)": 1, "no GPUs in AllocTRES": 1,
                             "too few columns": 1, "empty line": 1, "unreadable job id": 1}


def test_times_with_an_offset_mix_with_local_ones():
    import datetime as dt

    start = dt.datetime(2020, 9, 1, 0, 0, tzinfo=dt.UTC)
    end_local = (start + dt.timedelta(hours=1)).astimezone().replace(tzinfo=None).isoformat()
    lines = [HEADER, f"1|u|2020-09-01T00:00:00|{start.isoformat()}|{end_local}|01:00:00|1|gres/gpu=1|COMPLETED|"]
    assert [j.run_s for j in read_sacct(lines).jobs] == [3600]


def test_time_limits_are_from_the_history_only_where_it_gives_them():
    from slurm_gpufleet.simulators.rollout import time_limits_label

    row = "|u|2020-09-01T00:00:00|2020-09-01T00:00:00|2020-09-01T01:00:00|01:00:00|1|gres/gpu=1|COMPLETED|"
    empty = read_sacct([HEADER, "1" + row, "2" + row + "UNLIMITED"])
    assert not empty.has_time_limits and time_limits_label(empty, "runtime-ceil-hour") == "assumed: runtime-ceil-hour"
    some = read_sacct([HEADER, "1" + row + "02:00:00", "2" + row])
    assert time_limits_label(some, "x") == "from the history for 1 of 2 jobs; assumed for the rest: x"
    every = read_sacct([HEADER, "1" + row + "02:00:00"])
    assert time_limits_label(every, "x") == "from the history"


@pytest.mark.parametrize("lines,fragment", [([], "empty file"), (["JobIDRaw|User"], "lacks Submit"),
                                            (["JobIDRaw|Submit|NNodes|AllocTRES"], "needs Elapsed")])
def test_unusable_sacct_is_one_clear_error(lines, fragment):
    with pytest.raises(SacctError, match=fragment):
        read_sacct(lines)


def test_durations_and_assumptions():
    assert duration_s("1-02:03:04") == 93784 and duration_s("02:03") == 123 and duration_s("UNLIMITED") is None
    assert assume_limit(10, "runtime-ceil-hour") == 3600 and assume_limit(3601, "runtime-ceil-hour") == 7200
    assert assume_limit(100, "factor:2") == 200 and assume_limit(1, "partition:7-00:00:00") == 7 * 86400


def test_backfill_respects_time_limits_and_reservations():
    # one 8-GPU node: job a holds it for 1 h; b (8 GPUs) waits; c (1 GPU, 30 min) cannot backfill in front of b
    # because the node is full, and d is never placed across a reservation
    jobs = [SimJob("a", 0, 3600, 3600, 1, 8), SimJob("b", 10, 600, 1200, 1, 8), SimJob("c", 20, 60, 1800, 1, 1)]
    sim = Simulator(jobs, nodes=1, gpus_per_node=8)
    sim.run()
    start = {j.id: j.start for j in sim.jobs}
    assert start["a"] == 0 and start["b"] == 3600 and start["c"] == 4200
    jobs = [SimJob("a", 0, 60, 600, 1, 1), SimJob("long", 5, 60, 7200, 1, 1)]
    sim = Simulator(jobs, nodes=1, gpus_per_node=8)
    sim.nodes[0].reserved_from = 3600  # a maintenance reservation in an hour
    sim.run()
    assert sim.jobs[0].start == 0 and sim.jobs[1].start is None  # would run past the reservation


EXCERPT = str(REPO / "tests" / "data" / "helios_3days.sacct.txt")  # the first 3 days of the bundled trace


@pytest.mark.slow
def test_helios_strategies_side_by_side():
    with open_text(HELIOS_SACCT) as fh:
        trace = read_sacct(fh)
    assert len(trace.jobs) == 10796 and trace.skipped == {"no GPUs in AllocTRES": 4204}
    policy = parse_policy('[maintain]\nwaves = [1, "2%", "10%", "25%", "100%"]\n')
    out = simulate(trace, nodes=150, gpus_per_node=8, strategies=("gpufleet", "reboot-asap", "drain-all"),
                   rollout_at_h=240, max_unavailable="10%", policy=policy, assumption="runtime-ceil-hour")
    s = out["strategies"]
    for name in ("gpufleet", "reboot-asap"):
        assert s[name]["jobs_killed"] == 0 and s[name]["peak_nodes_out"] <= 15
        assert s[name]["makespan_h"] < float("inf")
    assert s["drain-all"]["peak_nodes_out"] == 150
    # every node is upgraded once: 150 nodes x 8 GPUs x 20 min is the floor of what any strategy loses
    assert all(m["gpu_hours_lost"] >= 400 - 1e-6 for m in s.values())
    assert s["gpufleet"]["gpu_hours_lost"] <= s["reboot-asap"]["gpu_hours_lost"] <= s["drain-all"]["gpu_hours_lost"]
    assert out["assumptions"]["time_limits"] == "assumed: runtime-ceil-hour"
    waves = out["_results"]["gpufleet"].waves
    assert waves[0]["nodes"] == 1  # the planner's canary, the same code `maintain plan` runs


@pytest.mark.slow  # whole replays / 12,500 nodes: the slow tier (make test, CI)
def test_cli_json_contract_and_bad_input(tmp_path):
    r = run_cli("maintain", "simulate", "--sacct", EXCERPT, "--nodes", "20", "--gpus-per-node", "8",
                "--strategy", "gpufleet", "--strategy", "reboot-asap", "--rollout-at", "30",
                "--max-unavailable", "10%", "--json", "--plot", str(tmp_path / "sim.html"))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out["strategies"]) == {"gpufleet", "reboot-asap"}
    for m in out["strategies"].values():
        assert set(m) == {"makespan_h", "gpu_hours_lost", "jobs_killed", "wait_added_mean_h", "wait_added_p95_h",
                          "peak_nodes_out", "over_budget", "work_lost_gpu_h", "jobs_preempted", "node_drain_hours"}
        assert m["over_budget"] == 0 and m["peak_nodes_out"] <= 2  # the budget (10% of 20) held throughout
        assert m["work_lost_gpu_h"] == 0 and m["jobs_preempted"] == 0  # without a deadline no job is stopped
    assert "time_limits" in out["assumptions"] and out["gating_jobs"]
    # failure domains: every 4 nodes, taken whole, one at a time
    config = tmp_path / "domains.toml"
    config.write_text("[maintain]\nwhole_domain = true\nmax_unavailable_domains = 1\n")
    r = run_cli("maintain", "simulate", "--sacct", EXCERPT, "--nodes", "20", "--strategy", "gpufleet",
                "--strategy", "drain-all", "--rollout-at", "30", "--max-unavailable", "10%", "--domain-size", "4",
                "--config", str(config), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    gpufleet = out["strategies"]["gpufleet"]
    assert gpufleet["domains"] == 5 and gpufleet["mixed_driver_domains_max"] == 0
    assert gpufleet["domains_in_service_min"] == 4 and gpufleet["peak_nodes_out"] == 4
    assert out["assumptions"]["whole_domain"] is True
    assert out["assumptions"]["job_history"] == EXCERPT
    assert "<svg" in (tmp_path / "sim.html").read_text()
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\x00\x01garbage\n")
    r = run_cli("maintain", "simulate", "--sacct", str(bad))
    assert r.returncode == 2 and b"Traceback" not in r.stderr and r.stderr.count(b"\n") == 1


@pytest.mark.slow  # replays in subprocesses: the slow tier (make test-fast stays under 60 s)
def test_text_output_names_the_history_and_the_gating_jobs():
    r = run_cli("maintain", "simulate", "--sacct", EXCERPT, "--nodes", "20", "--strategy", "gpufleet",
                "--rollout-at", "30")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[0] == f"job history: {EXCERPT}"
    assert any(line.startswith("gating job") for line in lines)
    assert any(line.startswith("gpufleet ") for line in lines)


@pytest.mark.slow
def test_text_output_names_the_bundled_history_and_folds_nodes():
    r = run_cli("maintain", "simulate", "--nodes", "150", "--strategy", "gpufleet", "--rollout-at", "240")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert out.splitlines()[0].startswith("job history: bundled Helios trace")
    assert any(line.startswith("gating job") for line in out.splitlines())


def _helios():
    with open_text(HELIOS_SACCT) as fh:
        return read_sacct(fh)


def _deadline(hours: float, checkpoint_every_h: float | None = None) -> dict:
    return simulate(_helios(), nodes=100, gpus_per_node=8, strategies=("gpufleet", "wait-then-kill"),
                    rollout_at_h=200, max_unavailable="10%", policy=parse_policy(""), assumption="runtime-ceil-hour",
                    deadline_h=hours, checkpoint_every_h=checkpoint_every_h)


@pytest.mark.slow
def test_deadline_72h_on_helios_loses_at_most_half_of_wait_then_kill():
    """Issue #13's measure: 100 nodes x 8 GPUs, rollout at 200 h, 10% budget, deadline 72 h."""
    out = _deadline(72)
    g, w = out["strategies"]["gpufleet"], out["strategies"]["wait-then-kill"]
    assert g["done_by_deadline"] is True and w["done_by_deadline"] is True
    assert g["makespan_h"] <= 72 and g["jobs_killed"] == 0
    assert g["work_lost_gpu_h"] <= 0.5 * w["work_lost_gpu_h"]
    bound = out["work_lost_lower_bound_gpu_h"]
    assert 0 < bound <= g["work_lost_gpu_h"] + 1e-6  # no checkpoints: nothing does better than the bound
    assert g["jobs_preempted"] > 0 and g["jobs_preempted_that_would_end_in_time"] == 0
    assert g["jobs_preempted"] < w["jobs_preempted"]


@pytest.mark.slow
@pytest.mark.parametrize("hours", [24, 168])
def test_other_deadlines_are_kept_too(hours):
    out = _deadline(hours)
    g, w = out["strategies"]["gpufleet"], out["strategies"]["wait-then-kill"]
    assert g["done_by_deadline"] and w["done_by_deadline"]
    assert g["work_lost_gpu_h"] <= 0.7 * w["work_lost_gpu_h"]
    assert g["jobs_preempted_that_would_end_in_time"] == 0


@pytest.mark.slow
def test_hourly_checkpoints_cut_the_loss_and_are_stopped_late():
    out = _deadline(72, checkpoint_every_h=1)
    g, w = out["strategies"]["gpufleet"], out["strategies"]["wait-then-kill"]
    assert g["done_by_deadline"]
    # each stopped job loses under an hour of its GPUs' work
    assert g["work_lost_gpu_h"] < g["jobs_preempted"] * 8 * 8
    assert g["work_lost_gpu_h"] <= 0.5 * w["work_lost_gpu_h"]


def test_wait_then_kill_needs_a_deadline_in_one_line():
    r = run_cli("maintain", "simulate", "--strategy", "wait-then-kill")
    assert r.returncode == 2 and r.stderr.count(b"\n") == 1 and b"--deadline" in r.stderr


def _excerpt_replay(rates, seed=1, config="", strategies=("gpufleet", "reboot-asap"), nodes=40):
    from slurm_gpufleet.simulators.failures import Rates

    with open_text(EXCERPT) as fh:
        trace = read_sacct(fh)
    return simulate(trace, nodes=nodes, gpus_per_node=8, strategies=strategies, rollout_at_h=30,
                    max_unavailable="10%", policy=parse_policy(config), assumption="runtime-ceil-hour",
                    rates=Rates(*rates) if rates else None, seed=seed)


@pytest.mark.slow  # whole replays / 12,500 nodes: the slow tier (make test, CI)
def test_the_full_replay_draws_failures_from_the_rollouts_start_the_same_way_in_every_run():
    out = _excerpt_replay((300.0, 3.0))  # 0.3 failures a node-day: enough to see in 40 nodes over days
    again = _excerpt_replay((300.0, 3.0), strategies=("gpufleet",))
    assert out["strategies"]["gpufleet"] == again["strategies"]["gpufleet"]  # the same seed, the same replay
    for name, m in out["strategies"].items():
        f = m["failures"]
        assert f["node_failures"] > 0 and f["jobs_failed"] > 0 and f["soft_events"] > 0, (name, f)
        assert f["work_lost_gpu_h"] > 0 and m["jobs_killed"] == 0  # failures are not the rollout's kills
    assert out["strategies"]["gpufleet"]["failures"]["rollout"] == "done"
    assert out["assumptions"]["failures"]["failure_per_1000_node_days"] == 300.0
    other = _excerpt_replay((300.0, 3.0), seed=2, strategies=("gpufleet",))
    assert other["strategies"]["gpufleet"]["failures"] != out["strategies"]["gpufleet"]["failures"]


EVIDENCE = ('[maintain]\ncanary_per_combo = 0\nwaves = ["10%", "100%"]\ngate = "evidence"\n'
            'gate_min_soak_s = 7200\ngate_max_soak_s = 86400\n')


@pytest.mark.slow
def test_a_bad_driver_halts_the_full_replay_at_the_evidence_gate_and_a_good_one_is_never_halted():
    # a good driver is never halted, and finishes: on 40 nodes the hard Xids are so rare that the gate
    # often has no verdict either way in its soak, and at the soak's bound a canary not worse at
    # gate_confidence goes on (it used to wait for an admin's `maintain approve` with its slots holding
    # the fleet out of service: issue #43)
    bad = _excerpt_replay((6.5, 3.0, 4.0), config=EVIDENCE, strategies=("gpufleet",))
    assert bad["strategies"]["gpufleet"]["failures"]["rollout"] == "halted", bad["strategies"]
    assert bad["assumptions"]["failures"]["gate"] == "evidence"
    for seed in (1, 2):
        good = _excerpt_replay((6.5, 3.0, 1.0), seed=seed, config=EVIDENCE, strategies=("gpufleet",))["strategies"]
        assert good["gpufleet"]["failures"]["rollout"] == "done", good
        assert good["gpufleet"]["over_budget"] == 0 and good["gpufleet"]["peak_nodes_out"] <= 4, good


@pytest.mark.slow  # four replays: the slow tier
def test_event_driven_replays_skip_steps_and_keep_every_figure(monkeypatch):
    """The engine is not stepped for a job that ends on nodes the rollout is through with: the figures
    are those of stepping on every job end, with failures drawn; with an evidence gate (judged on what
    has accumulated by each step) every event still steps."""
    from slurm_gpufleet.simulators import strategies as sim_module

    counts = {}
    original = sim_module.GpufleetController.step

    def counted(self, sim):
        counts[self.event_driven] = counts.get(self.event_driven, 0) + 1
        return original(self, sim)

    monkeypatch.setattr(sim_module.GpufleetController, "step", counted)
    for config, fewer in (("", True), (EVIDENCE, False)):
        counts.clear()
        monkeypatch.setattr(sim_module.GpufleetController, "event_driven", False)
        every = _excerpt_replay((300.0, 3.0), strategies=("gpufleet",), nodes=16, config=config)
        monkeypatch.setattr(sim_module.GpufleetController, "event_driven", True)
        driven = _excerpt_replay((300.0, 3.0), strategies=("gpufleet",), nodes=16, config=config)
        assert driven["strategies"] == every["strategies"], config
        assert (counts[True] < counts[False]) == fewer, (config, counts)


@pytest.mark.slow  # replays in subprocesses: the slow tier (make test-fast stays under 60 s)
def test_strategies_in_processes_give_the_figures_of_one_process():
    from slurm_gpufleet.common.progress import Progress

    with open_text(EXCERPT) as fh:
        trace = read_sacct(fh)
    kw = dict(nodes=16, gpus_per_node=8, strategies=("gpufleet", "reboot-asap", "drain-all"), rollout_at_h=30,
              max_unavailable="25%", policy=parse_policy(""), assumption="runtime-ceil-hour")
    said = io.StringIO()
    one = simulate(trace, **kw, jobs=1)
    two = simulate(trace, **kw, jobs=2, progress=Progress(stream=said, quiet_s=0.0))
    assert one["strategies"] == two["strategies"]
    assert said.getvalue().splitlines()[-1].startswith("strategy replays: 3/3 done")


@pytest.mark.slow  # replays in subprocesses: the slow tier (make test-fast stays under 60 s)
def test_the_seed_trials_run_without_the_full_replay():
    r = run_cli("maintain", "simulate", "--sacct", EXCERPT, "--nodes", "8", "--rollout-at", "30", "--failure-rate",
                "300", "--seeds", "1", "--no-replay", "--jobs", "1", "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["strategies"] == {} and out["gate"]["seeds"] == 1
    for args, said in ((["--no-replay"], b"give --seeds N"),
                       (["--no-replay", "--seeds", "1", "--plot", "x.html"], b"not with --no-replay")):
        r = run_cli("maintain", "simulate", "--sacct", EXCERPT, *args)
        assert r.returncode == 2 and said in r.stderr and r.stderr.count(b"\n") == 1, r.stderr


@pytest.mark.slow  # two replays, 4 s: the slow tier (make test-fast stays under 60 s)
def test_a_replay_stopped_at_a_time_says_how_far_each_rollout_got_and_counts_the_waits_until_then():
    with open_text(EXCERPT) as fh:
        trace = read_sacct(fh)
    common = dict(nodes=20, gpus_per_node=8, strategies=("gpufleet", "drain-all"), rollout_at_h=30,
                  max_unavailable="10%", policy=parse_policy(""), assumption="runtime-ceil-hour")
    full = simulate(trace, **common)["strategies"]
    cut = simulate(trace, hours=2, **common)
    json.loads(json.dumps(cut["strategies"], allow_nan=False))  # valid JSON: an unfinished makespan is null
    assert cut["hours"] == 2 and "stopped 2 h" in cut["stopped"]
    for name, m in cut["strategies"].items():
        assert full[name]["makespan_h"] > 2 and "done" not in full[name]
        assert m["done"] is False and m["makespan_h"] is None and m["stopped_at_h"] == 2
        assert 0 < m["nodes_upgraded"] < 20, (name, m)
        # by 2 h, no more than its budget's share can be through: 2 nodes at a time, 20 min each
        assert name != "gpufleet" or m["nodes_upgraded"] <= 2 * (120 // 20)
    assert cut["strategies"]["drain-all"]["gpu_hours_lost"] < full["drain-all"]["gpu_hours_lost"]


def test_waits_in_a_cut_replay_count_a_job_still_waiting_until_the_stop():
    from slurm_gpufleet.simulators.rollout import waits

    started, waiting, later = (SimJob("1", 0.0, 10.0, 100.0, 1, 8), SimJob("2", 50.0, 10.0, 100.0, 1, 8),
                               SimJob("3", 500.0, 10.0, 100.0, 1, 8))
    started.start = 30.0
    assert waits([started, waiting, later]) == {"1": 30.0}
    assert waits([started, waiting, later], until=200.0) == {"1": 30.0, "2": 150.0}


def test_failure_options_become_rates_or_one_clear_error():
    from slurm_gpufleet.simulators.failures import DELTA_SOFT_RATE, Rates, rates_of

    assert rates_of(None, None) is None
    assert rates_of(6.5, None, 3.0) == Rates(6.5, DELTA_SOFT_RATE, 3.0)  # Delta's soft rate beside a failure rate
    assert rates_of(None, 2.0) == Rates(0.0, 2.0, 1.0)
    assert rates_of(None, None, seeds=5) == Rates(0.0, 0.0, 1.0)        # the gate trials draw from zero rates
    with pytest.raises(ValueError, match="--driver-effect multiplies"):
        rates_of(None, None, 3.0)
    r = run_cli("maintain", "simulate", "--driver-effect", "3")
    assert r.returncode == 2 and r.stderr.count(b"\n") == 1 and b"--driver-effect multiplies" in r.stderr


def test_a_replay_run_here_says_how_far_it_has_gone_in_simulated_hours(monkeypatch):
    import itertools
    import types

    from slurm_gpufleet.simulators import jobsim as sim_module

    ticks = itertools.count(0, 2)  # every look at the clock is 2 s later: the watch speaks at every event
    monkeypatch.setattr(sim_module, "time", types.SimpleNamespace(monotonic=lambda: next(ticks)))
    with open_text(EXCERPT) as fh:
        trace = read_sacct(fh)
    heard: list[tuple[int, int, str]] = []
    simulate(trace, nodes=20, gpus_per_node=8, strategies=("gpufleet",), rollout_at_h=30, max_unavailable="10%",
             policy=parse_policy(""), assumption="runtime-ceil-hour", hours=2,
             progress=lambda done, total, what: heard.append((done, total, what)))
    hours = [d for d, total, what in heard if what == "gpufleet replay, simulated hours"]
    assert hours and all(t == 2 for _, t, w in heard if w.endswith("simulated hours"))
    assert hours == sorted(hours) and set(hours) <= {0, 1}  # never "2/2": the replay is not over yet
    assert heard[-1] == (1, 1, "strategy replays")  # then the pool's own count


def test_placement_through_the_index_is_the_placement_of_a_pass_over_every_node():
    import random

    rng = random.Random(7)
    for _ in range(300):
        sim = Simulator([], rng.choice([3, 12, 40]), 8)
        sim.now = 100.0
        for n in sim.nodes:
            n.free = rng.choice([0, 1, 3, 7, 8, 8, 8])
            n.weight = rng.choice([1, 1, 1, 5, 1001]) if rng.random() < 0.5 else n.weight
            n.out_since = 50.0 if rng.random() < 0.1 else None
            n.drained = rng.random() < 0.05
            n.reserved_from = rng.choice([float("inf"), 150.0, 1e6])
        for _ in range(5):
            job = SimJob("j", 0.0, 10.0, rng.choice([10.0, 100.0]), rng.choice([1, 1, 2, 3]), rng.choice([1, 4, 8]))
            assert sim._place(job) == sim._place_by_scan(job)
            placed = sim._place(job)
            if placed:  # the index follows the nodes' changes
                for i in placed:
                    sim.nodes[i].free -= job.gpn
    assert sim.partial == {i for i, n in enumerate(sim.nodes) if 0 < n.free < n.gpus}


def test_the_simulated_slurm_s_node_read_is_a_fresh_one_after_any_change():
    """SimSlurm gives an unchanged node the NodeInfo it made before: after random changes to the nodes
    and the clock, its read equals one made from nothing by a new SimSlurm."""
    import random
    from dataclasses import asdict

    from slurm_gpufleet.simulators.simslurm import SimSlurm

    rng = random.Random(11)
    sim = Simulator([], 30, 8)
    sim.now = 100.0
    slurm = SimSlurm(sim)
    for _ in range(200):
        for n in rng.sample(sim.nodes, 3):
            field, value = rng.choice([("free", rng.choice([0, 4, 8])), ("drained", rng.random() < 0.5),
                                       ("reason", rng.choice(["", "x [gpufleet]"])), ("weight", rng.choice([1, 5])),
                                       ("reserved_from", rng.choice([float("inf"), sim.now + 50])),
                                       ("reboot_requested", rng.random() < 0.3), ("boot", rng.randrange(3)),
                                       ("extra", rng.choice(["", '{"v": "ok"}'])), ("slurmd_start", sim.now)])
            setattr(n, field, value)
        sim.now += rng.choice([0.0, 30.0])
        before = [asdict(i) for i in slurm.nodes()]
        fresh = [asdict(i) for i in SimSlurm(sim).nodes()]
        assert before == fresh


def test_the_trials_alone_run_the_history_only_up_to_the_rollout_with_the_same_load():
    """--no-replay (no strategies): no baseline replay, and the history runs only to the rollout's start;
    the load the --seeds trials start from (the jobs running then) is the same as a full run's."""
    from slurm_gpufleet.simulators.failures import Rates

    with open(EXCERPT) as fh:
        trace = read_sacct(fh)
    policy = parse_policy('[maintain]\nwaves = [1, "100%"]\n')
    args = dict(nodes=12, gpus_per_node=8, rollout_at_h=12, max_unavailable=2, policy=policy,
                assumption="runtime-ceil-hour", rates=Rates(6.5, 0.18, 3.0), hours=6)
    full = simulate(trace, strategies=("reboot-asap",), **args)  # the load does not depend on the strategy
    alone = simulate(trace, strategies=(), **args)

    def load(out):
        return sorted((j.id, j.start, j.placed) for j in out["_running"])

    assert load(alone) == load(full) and len(load(full)) > 5
    assert alone["strategies"] == {}
