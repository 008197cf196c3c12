"""`fleet simulate-faults --one-job`: the simulator core of `maintain simulate` (checkpoints, requeues,
restarts, exponential failures) against Daly's (2006) expected ETTR."""

from __future__ import annotations

import json
import math

import pytest
from support import run_cli

from slurm_gpufleet.simulators.faultsim import daly_ettr, one_job


def test_dalys_formula_as_the_reference_writes_it():
    m, t, r = 5 * 3600.0, 3600.0, 600.0
    expected_t = m * math.exp(r / m) * (math.exp(t / m) - 1) / t  # E[T] per unit of work W
    assert daly_ettr(m, t, r) == pytest.approx(1 / expected_t)
    assert daly_ettr(1e12, 3600.0, 0.0) == pytest.approx(1.0)  # no failures: every hour is work


@pytest.mark.parametrize("mtbf_h,every_h,restart_min", [(5.0, 1.0, 5.0), (2.0, 4.0, 20.0), (50.0, 0.25, 10.0)])
def test_the_one_job_mode_is_within_two_hundredths_of_daly(mtbf_h, every_h, restart_min):
    r = run_cli("fleet", "simulate-faults", "--one-job", "8", "--node-mtbf-hours", str(mtbf_h), "--checkpoint-every",
                str(every_h), "--restart-minutes", str(restart_min), "--days", "300", "--strategy", "none",
                "--seed", "3", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert abs(out["strategies"]["none"]["ettr"] - out["daly_ettr"]) <= 0.02, out
    assert out["strategies"]["none"]["failures"] > 0


def test_a_job_on_more_nodes_fails_as_often_as_they_all_do():
    one, eight = one_job(8, 40.0, 1.0, 5.0, 200.0, seed=1), one_job(64, 40.0, 1.0, 5.0, 200.0, seed=1)
    assert eight["assumptions"]["job_mtbf_h"] == 5.0 and eight["assumptions"]["nodes"] == 8
    assert eight["strategies"]["none"]["failures"] > 5 * one["strategies"]["none"]["failures"]
    assert abs(eight["strategies"]["none"]["ettr"] - eight["daly_ettr"]) <= 0.02


@pytest.mark.parametrize("args,said", [
    (["--one-job", "8", "--node-mtbf-hours", "0", "--checkpoint-every", "1"], b"--node-mtbf-hours"),
    (["--node-mtbf-hours", "5", "--checkpoint-every", "1"], b"--one-job"),
    (["--one-job", "8", "--node-mtbf-hours", "5", "--checkpoint-every", "1", "--strategy", "gpufleet"], b"--strategy"),
    (["--switch-share", "0.5", "--days", "1"], b"--switch-share needs --domain-size"),
    # one-job mode refuses the fleet's options instead of ignoring them
    (["--one-job", "8", "--node-mtbf-hours", "5", "--checkpoint-every", "1", "--nodes", "40", "--seeds", "3"],
     b"--nodes, --seeds: for the fleet mode, not --one-job"),
    (["--one-job", "8", "--node-mtbf-hours", "5", "--checkpoint-every", "1", "--rates", "x.toml"], b"--rates"),
    # every size has a bound: these ran without end
    (["--days", "1e12"], b"--days"),
    (["--lemon-factor", "1e9"], b"--lemon-factor"),
])
def test_bad_input_is_exit_2(args, said):
    r = run_cli("fleet", "simulate-faults", *args)
    assert r.returncode == 2 and said in r.stderr, r.stderr


# ---------------------------------------------------------------- the fleet mode
def _fleet(**kw):
    from slurm_gpufleet.common.datafiles import HELIOS_SACCT, open_text
    from slurm_gpufleet.maintain.sacct import read_sacct
    from slurm_gpufleet.simulators.faultmodel import STRATEGIES, load_model
    from slurm_gpufleet.simulators.faultsim import fleet_faults

    with open_text(HELIOS_SACCT) as fh:
        trace = read_sacct(fh)
    args = dict(nodes=120, gpus_per_node=8, days=12.0, strategies=STRATEGIES, model=load_model(), hc_interval_s=300.0,
                checkpoint_every_h=1.0, restart_min=10.0, seed=3)
    args.update(kw)
    return fleet_faults(trace, **args)


@pytest.mark.slow  # a fault simulation of seconds: the slow tier (make test-fast stays under 60 s)
def test_the_fleet_mode_compares_the_strategies_on_the_same_faults():
    out = _fleet(lemon_share=0.05, lemon_factor=50.0)
    s = out["strategies"]
    assert set(s) == {"none", "drain-on-any", "two-tier", "gpufleet"}
    assert sum(out["assumptions"]["faults_drawn"].values()) >= 10, out["assumptions"]["faults_drawn"]
    # no strategy but drain-on-any drains on a warning
    assert s["drain-on-any"]["false_drains"] > 0 and s["drain-on-any"]["gpu_hours_lost"]["false_drains"] > 0
    assert all(s[k]["false_drains"] == 0 for k in ("none", "two-tier", "gpufleet"))
    assert s["gpufleet"]["breaker_trips"] == 0  # independent faults never look like a fleet problem
    # with no check, a failed GPU waits for an admin (4 h), and jobs keep landing on it
    assert s["none"]["fault_to_drain_min"]["p50"] == 240.0
    assert s["none"]["black_hole_crashes"] > s["gpufleet"]["black_hole_crashes"]
    # checks before and after each job find a GPU fault within a health-check interval at most
    assert s["gpufleet"]["fault_to_drain_min"]["p90"] <= 5.0
    # only the ladder resets, and it resolves some faults so; the same drawn faults need repair everywhere
    assert s["gpufleet"]["resolved"]["reset"] > 0
    assert all(s[k]["resolved"]["reset"] == 0 for k in ("none", "drain-on-any", "two-tier"))
    for k in ("ettr", "node_hours_out"):
        assert all(isinstance(s[n][k], float) for n in s), k
    # the figures `fleet report` reads from a fleet's history, from the ladder's own: only where it ran
    rel = s["gpufleet"]["reliability"]
    assert rel["incidents_per_node_day"] > 0 and rel["mtbi_hours"] > 0 and rel["ttr_automatic_p50_h"] is not None
    assert rel["ttr_manual_p50_h"] >= rel["ttr_automatic_p50_h"], rel   # a repair waits for an admin
    assert all(v is None for v in s["none"]["reliability"].values())


def test_the_ladder_in_the_fleet_mode_is_the_project_s_decide_with_its_settings():
    """max_attempts = 1: decide sends every fault straight to repair, so nothing is reset or rebooted."""
    from slurm_gpufleet.policy import SlurmSettings

    capped = _fleet(strategies=("gpufleet",), settings=SlurmSettings(max_attempts=1))["strategies"]["gpufleet"]
    assert capped["resolved"]["reset"] == 0 and capped["resolved"]["repair"] == 1.0, capped
    reboot_first = _fleet(strategies=("gpufleet-reboot-first",))["strategies"]["gpufleet-reboot-first"]
    assert reboot_first["resolved"]["reset"] == 0 and reboot_first["resolved"]["reboot"] > 0


@pytest.mark.slow  # a fault simulation of seconds: the slow tier (make test-fast stays under 60 s)
def test_a_big_job_gives_the_ettr_of_jobs_of_1024_gpus():
    out = _fleet(nodes=140, big_job_gpus=1024, strategies=("gpufleet",), days=6.0)
    m = out["strategies"]["gpufleet"]
    # the stream: one of 24 h a day, beside the history
    assert m["jobs_1024"] == 6 and 0 < m["ettr_1024"] <= 1 and m["waiting_1024_h"] >= 0
    assert out["assumptions"]["big_jobs"]["jobs"] == 6


@pytest.mark.parametrize("body,says", [
    ('[[class]]\nname = "gpu"\nrate = -1.0\n', "class gpu: rate must be a finite number >= 0, not -1.0"),
    ('[[class]]\nname = "gpu"\nrate = nan\n', "rate must be a finite number >= 0, not nan"),  # it hung
    ('[[class]]\nname = "gpu"\nrate = inf\n', "rate must be a finite number >= 0, not inf"),  # exit 70
    ('[[class]]\nname = "gpu"\nrate = true\n', "rate must be a finite number >= 0, not True"),  # taken as 1
    ('[times]\nadmin_hours = "four"\n', "times.admin_hours must be a finite number >= 0, not 'four'"),  # exit 70
    ("[times]\nrepair_hours = -48\n", "times.repair_hours must be a finite number >= 0, not -48"),  # accepted
    ("[times]\nrepair_days = 2\n", "times: unknown key(s) repair_days"),
    ("[false_alarm]\nrate_per_node_day = nan\n", "false_alarm.rate_per_node_day must be a finite number"),
    ('[[class]]\nname = "gpu"\n[[class]]\nname = "gpu"\n', "a class is given twice"),
    ('[[class]]\nname = "cosmic_rays"\nrate = 1.0\n', "unknown failure class 'cosmic_rays'"),
    ('[[class]]\nname = "gpu"\nfixed_by = { reset = 0.8, reboot = 0.5 }\n', "shares above 1"),
    ('[[class]]\nname = "gpu"\nprecursor_share = 1.5\n', "shares above 1"),
    ("not toml [", "not TOML"),
    ("[domain]\nswitch_share = 1.5\n", "domain.switch_share must be a number from 0 to 1"),
    ('[domain]\nclasses = ["cosmic_rays"]\n', "domain.classes: unknown failure class(es) cosmic_rays"),
])
def test_a_bad_rates_file_is_exit_2_in_one_line(tmp_path, body, says):
    f = tmp_path / "rates.toml"
    f.write_text(body)
    r = run_cli("fleet", "simulate-faults", "--rates", str(f), "--days", "1")
    err = r.stderr.decode()
    assert r.returncode == 2 and says in err and err.count("\n") == 1, err


@pytest.mark.slow  # a fault simulation of seconds: the slow tier (make test-fast stays under 60 s)
def test_the_fleet_mode_text_and_json_from_the_cli():
    r = run_cli("fleet", "simulate-faults", "--nodes", "60", "--days", "3", "--strategy", "gpufleet", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert list(out["strategies"]) == ["gpufleet"] and out["assumptions"]["mode"] == "fleet"
    text = run_cli("fleet", "simulate-faults", "--nodes", "60", "--days", "3", "--strategy", "none")
    assert text.returncode == 0 and b"strategy" in text.stdout and b"none" in text.stdout
    # the default stream of 1,024-GPU jobs needs 128 nodes: left out, and said so
    assert b"no job of 1,024 GPUs fits 60 nodes of 8 GPUs" in text.stderr
    assert run_cli("fleet", "simulate-faults", "--nodes", "60", "--days", "3", "--big-job", "1024").returncode == 2
    bad = run_cli("fleet", "simulate-faults", "--one-job", "8", "--node-mtbf-hours", "10", "--checkpoint-every", "1",
                  "--strategy", "gpufleet")
    assert bad.returncode == 2


@pytest.mark.slow  # a fault simulation of seconds: the slow tier (make test-fast stays under 60 s)
def test_the_fleet_plot_draws_capacity_and_ettr_per_strategy_on_one_axis(tmp_path):
    import re

    out = tmp_path / "f.html"
    r = run_cli("fleet", "simulate-faults", "--nodes", "60", "--days", "4", "--strategy", "none", "--strategy",
                "gpufleet", "--plot", str(out))
    assert r.returncode == 0, r.stderr
    page = out.read_text()
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    assert len(svgs) == 2
    for svg in svgs:
        assert svg.count("<polyline") == 2 and ">none<" in svg and ">gpufleet<" in svg
    # one hours axis: the same tick labels on both charts
    ticks = [re.findall(r'text-anchor="middle">(\d+)<', svg) for svg in svgs]
    assert ticks[0] == ticks[1] and ticks[0][-1] == "96"
    bad = run_cli("fleet", "simulate-faults", "--one-job", "8", "--node-mtbf-hours", "10", "--checkpoint-every", "1",
                  "--plot", str(out))
    assert bad.returncode == 2


# ---------------------------------------------------------------- rack-correlated events
def test_a_switch_side_fault_strikes_every_node_of_its_domain_and_none_else():
    """The same faults are drawn with or without domains; with them, each switch-side one (all of the domain
    classes' at share 1) strikes every node of its domain at once, and only those."""
    from slurm_gpufleet.simulators.faultmodel import draw_faults, load_model

    model = load_model()
    plain, _ = draw_faults(model, 36, 30 * 86400, 7)
    assert draw_faults(model, 36, 30 * 86400, 7, domain_size=0, switch_share=1.0)[0] == plain
    faults, _ = draw_faults(model, 36, 30 * 86400, 7, domain_size=18, switch_share=1.0)
    gpu = [f for f in plain if f.cls.name == "gpu"]
    events = {(f.t, f.domain) for f in faults if f.domain is not None}
    assert gpu and len(events) == len(gpu) and not any(f.cls.name == "gpu" for f in faults)
    assert sorted((t, dom) for t, dom in events) == sorted((f.t, f.node // 18) for f in gpu)
    for t, dom in events:
        struck = sorted(f.node for f in faults if f.t == t and f.domain == dom)
        assert struck == list(range(dom * 18, dom * 18 + 18)), (t, dom, struck)
        assert {f.level for f in faults if f.t == t} == {"rack"}
    others = sorted((f.t, f.node, f.cls.name) for f in faults if f.domain is None)
    assert others == sorted((f.t, f.node, f.cls.name) for f in plain if f.cls.name != "gpu")
    half, _ = draw_faults(model, 36, 30 * 86400, 7, domain_size=18, switch_share=0.5)
    assert len({(f.t, f.domain) for f in half if f.domain is not None}) < len(gpu)


@pytest.mark.slow  # 20 s: the slow tier (make test, CI) keeps the fast one under 60 s
def test_the_gpufleet_strategy_drains_a_struck_rack_whole_through_the_project_s_escalation():
    from slurm_gpufleet.policy import SlurmSettings

    # a breaker of 20% of the 126 nodes (25) lets a rack of 18 go whole
    roomy = SlurmSettings(breaker_threshold="20%")
    out = _fleet(nodes=126, days=20.0, domain_size=18, switch_share=1.0, settings=roomy)
    a, s = out["assumptions"], out["strategies"]
    assert a["switch_events_drawn"] >= 1 and a["domain_size"] == 18, a
    assert s["gpufleet"]["rack_escalations"] >= 1 and s["gpufleet"]["breaker_trips"] == 0, s["gpufleet"]
    assert all(s[k]["rack_escalations"] == 0 for k in ("none", "drain-on-any", "two-tier"))
    # only the switch-tray swap fixes a switch-side fault, in every strategy
    assert all(s[k]["resolved"]["rack"] > 0 for k in s), {k: s[k]["resolved"] for k in s}
    # the escalation is the project's trigger, with its settings: with no window it never fires, and each
    # tray climbs its own ladder (a reset and a reboot that fix nothing) until a repair finds the switch
    never = _fleet(nodes=126, days=20.0, domain_size=18, switch_share=1.0, strategies=("gpufleet",),
                   settings=SlurmSettings(rack_escalate_nodes=19, rack_escalate_window_s=-1.0,
                                          breaker_threshold="20%"))["strategies"]["gpufleet"]
    assert never["rack_escalations"] == 0 and never["resolved"]["repair"] > 0.5, never["resolved"]
    # the breaker counts a rack by its nodes: at 10% of the fleet (12 nodes) a rack of 18 is held, never drained
    held = _fleet(nodes=126, days=20.0, domain_size=18, switch_share=1.0,
                  strategies=("gpufleet",))["strategies"]["gpufleet"]
    assert held["rack_escalations"] == 0 and held["breaker_trips"] >= 1, held
    text = run_cli("fleet", "simulate-faults", "--nodes", "54", "--days", "3", "--domain-size", "18",
                   "--switch-share", "1", "--strategy", "gpufleet")
    assert text.returncode == 0 and b"domains of 18 nodes: 1 of the domain classes" in text.stdout, text.stderr


def test_a_rates_file_overrides_only_the_classes_it_names(tmp_path):
    from slurm_gpufleet.simulators.faultmodel import load_model

    f = tmp_path / "rates.toml"
    f.write_text('[[class]]\nname = "gpu"\nrate = 2.0\n\n[times]\nrepair_hours = 24\n')
    packaged, site = load_model(), load_model(str(f))
    assert [c.name for c in site.classes] == [c.name for c in packaged.classes]  # before: gpu alone
    rates = {c.name: c.rate for c in site.classes}
    assert rates["gpu"] == 2.0 and rates["hbm"] == next(c.rate for c in packaged.classes if c.name == "hbm")
    gpu = next(c for c in site.classes if c.name == "gpu")
    assert gpu.seen_by == next(c for c in packaged.classes if c.name == "gpu").seen_by  # key by key
    assert site.times["repair_hours"] == 24 and site.times["admin_hours"] == packaged.times["admin_hours"]


def test_the_fleet_group_s_config_is_read(tmp_path):
    r = run_cli("fleet", "--config", str(tmp_path / "missing.toml"), "simulate-faults", "--days", "1", "--nodes", "4")
    err = r.stderr.decode()
    assert r.returncode == 2 and "missing.toml: cannot read config" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("level,moves", [
    # a reset fixes it: reset, then back only through a validation run
    ("reset", [("in_service", "resetting"), ("resetting", "returning"), ("returning", "validating"),
               ("validating", "in_service")]),
    # the reset does not, the reboot does: the reboot comes back DOWN into its validation run
    ("reboot", [("in_service", "resetting"), ("resetting", "rebooting"), ("returning", "validating"),
                ("validating", "in_service")]),
    # nothing on the node does: two reboots, then a drain for inspection; the admin's repair and
    # `fleet repaired` send it through its validation run
    ("repair", [("in_service", "resetting"), ("resetting", "rebooting"), ("returning", "rebooting"),
                ("returning", "drained"), ("returning", "validating"), ("validating", "in_service")]),
])
def test_the_fault_simulator_climbs_the_product_s_ladder_through_its_carrier(level, moves):
    """One GPU fault on an idle 4-node fleet, found by the health check: the moves the carrier makes on
    the in-memory Slurm, in order, are the ladder's (remedy/table.py), validation before return included."""
    from slurm_gpufleet.remedy import table as T
    from slurm_gpufleet.simulators.faultmodel import Fault, load_model
    from slurm_gpufleet.simulators.faultsim import _fault_run

    model = load_model()
    gpu = next(c for c in model.classes if c.name == "gpu")
    out = _fault_run("gpufleet", model, [], 4, 8, 10 * 86400.0, [Fault(3600.0, 1, gpu, level, 0.5)], [],
                     hc_interval_s=300.0, checkpoint_every_h=1.0, restart_min=10.0, seed=0, big_jobs=frozenset())
    made = [(a, b) for node, _, a, b in out["_moves"] if a != b]
    assert all(node == 1 for node, *_ in out["_moves"])
    assert made == moves
    assert all(T.legal(T.RemedyState(a), T.RemedyState(b)) for a, b in made)
    assert out["resolved"][level] == 1.0 and out["faults"] == 1
    # the node is back in service at the end, after its hours out
    assert out["node_hours_out"] > 0


def test_a_low_severity_fault_lets_the_running_job_end_under_two_tier_and_gpufleet():
    """Meta's low tier: a GPU at its slowdown temperature (thermal, severity low) degrades the node without
    ending its job; two-tier and gpufleet drain it and let the job end (Llama 3's thermal class is the
    thermal interface or a sensor, found for inspection: not a transient's cool-off).  No job fails for it;
    the node goes out of service either way."""
    from slurm_gpufleet.simulators.faultmodel import Fault, load_model
    from slurm_gpufleet.simulators.faultsim import _fault_run
    from slurm_gpufleet.simulators.rollout import SimJob

    model = load_model()
    thermal = next(c for c in model.classes if c.name == "thermal")
    assert thermal.severity == "low"
    for strategy in ("two-tier", "gpufleet"):
        job = SimJob("j1", 0.0, run=6 * 3600.0, limit=8 * 3600.0, nodes=1, gpn=8)
        out = _fault_run(strategy, model, [job], 2, 8, 2 * 86400.0, [Fault(3600.0, 0, thermal, "repair", 0.5)], [],
                         hc_interval_s=300.0, checkpoint_every_h=1.0, restart_min=10.0, seed=0, big_jobs=frozenset())
        assert out["jobs_failed"] == 0, strategy
        assert out["node_hours_out"] > 0, strategy
        if strategy == "gpufleet":
            assert [b for _, _, a, b in out["_moves"] if a != b][:1] == ["drained"], out["_moves"]
        # the same job under a high-severity GPU fault fails
        gpu = next(c for c in model.classes if c.name == "gpu")
        job = SimJob("j1", 0.0, run=6 * 3600.0, limit=8 * 3600.0, nodes=1, gpn=8)
        high = _fault_run(strategy, model, [job], 2, 8, 2 * 86400.0, [Fault(3600.0, 0, gpu, "repair", 0.5)], [],
                          hc_interval_s=300.0, checkpoint_every_h=1.0, restart_min=10.0, seed=0, big_jobs=frozenset())
        assert high["jobs_failed"] >= 1, strategy
