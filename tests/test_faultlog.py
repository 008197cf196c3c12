"""`fleet simulate-faults --fault-log FILE`: a site's own faults replayed (faultlog.py, faultsim.logged_faults)."""

from __future__ import annotations

import pytest
from support import run_cli

from slurm_gpufleet.simulators.faultlog import FaultLogError, class_of, read
from slurm_gpufleet.simulators.faultmodel import load_model

CSV = """node,start,end,class,detail
gpu001,10,58,GPU Xid 79 fallen off the bus,replaced
gpu002,100.5,101,ECC DBE,reset
gpu003,200,,PSU failure,
gpu001,300,310,cable link down,
gpu004,400,402,stress test failed,
"""

EVENTS = """NodeName|TimeStart|TimeEnd|State|Reason|User
|2026-01-01T00:00:00|2026-01-01T00:10:00|DOWN|Cluster Registered TRES|slurm(64030)
gpu[001-002]|2026-01-01T10:00:00|2026-01-03T10:00:00|DRAIN|gpufleet: xid gpu3 Xid 79 GPU has fallen off the bus|root(0)
gpu003|2026-01-05T00:00:00|Unknown|DOWN|Not responding|slurm(64030)
gpu004|2026-01-06T00:00:00|2026-01-06T04:00:00|DRAIN|IB port down mlx5_0|root(0)
"""


def test_a_csv_log_in_hours(tmp_path):
    f = tmp_path / "log.csv"
    f.write_text(CSV)
    log = read(str(f))
    assert log.form == "csv" and log.nodes == ("gpu001", "gpu002", "gpu003", "gpu004")
    assert [(x.node, x.start_s / 3600, x.end_s / 3600) for x in log.faults] == [
        ("gpu001", 0.0, 48.0), ("gpu002", 90.5, 91.0), ("gpu003", 190.0, 392.0), ("gpu001", 290.0, 300.0),
        ("gpu004", 390.0, 392.0)]   # hours from the log's start; gpu003's has no end: the log's end


def test_sacctmgr_events_with_host_lists_and_an_open_end(tmp_path):
    f = tmp_path / "events.txt"
    f.write_text(EVENTS)
    log = read(str(f))
    assert log.form == "sacctmgr" and log.nodes == ("gpu001", "gpu002", "gpu003", "gpu004")  # the cluster's own skipped
    assert [(x.node, x.start_s / 3600, x.end_s / 3600) for x in log.faults] == [
        ("gpu001", 0.0, 48.0), ("gpu002", 0.0, 48.0), ("gpu003", 86.0, 114.0), ("gpu004", 110.0, 114.0)]


@pytest.mark.parametrize("text,cls", [
    ("GPU Xid 79 fallen off the bus", "gpu"), ("Xid 48 DBE", "hbm"), ("GSP RPC timeout", "gsp"),
    ("SRAM ECC", "sram"), ("ECC DBE", "hbm"), ("fan failure", "thermal"), ("ib link flap", "network"),
    ("IB port down mlx5_0", "nic"), ("PSU failure", "psu"), ("Not responding", "other"),
    ("libfabric ribbon", "other"),   # a keyword counts as a whole word only ("ib" is not in "libfabric")
])
def test_free_text_maps_to_a_class_by_the_rates_file_s_keywords(text, cls):
    assert class_of(text, load_model().classes) == cls


@pytest.mark.parametrize("body,says", [
    ("node,start\ngpu1,1\n", "not a fault log"),
    ("node,start,end,class,detail\ngpu1,2,1,gpu,\n", "log.csv:2: end before start"),
    ("node,start,end,class,detail\ngpu1,nan,,gpu,\n", "hours must be a finite number >= 0"),
    ("node,start,end,class,detail\ngpu1,-1,,gpu,\n", "hours must be a finite number >= 0"),
    ("node,start,end,class,detail\ngpu1,1,2026-01-01T00:00,gpu,\n", "hours and ISO times mixed"),
    ("node,start,end,class,detail\ngpu1,yesterday,,gpu,\n", "'yesterday' is not hours or an ISO 8601 time"),
    ("node,start,end,class,detail\n,1,2,gpu,\n", "log.csv:2: no node"),
    ("node,start,end,class,detail\ngpu1,1,2,gpu\n", "4 columns, not 5"),
    ("node,start,end,class,detail\n", "no fault in the log"),
    ("node,start,end,class,detail\ngpu1,1,2,gpu," + "x" * 200_000 + "\n", "log.csv:2: field larger than field limit"),
    ("node,start,end,class,detail\ngpu1,0001-01-01T00:00,9999-01-01T00:00,gpu,\n", "spans 9,998 years; at most 10"),
])
def test_a_bad_fault_log_is_exit_2_in_one_line(tmp_path, body, says):
    f = tmp_path / "log.csv"
    f.write_text(body)
    with pytest.raises(FaultLogError) as raised:
        read(str(f))
    assert says in str(raised.value) and "\n" not in str(raised.value)
    r = run_cli("fleet", "simulate-faults", "--fault-log", str(f))
    err = r.stderr.decode()
    assert r.returncode == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_a_logged_fault_keeps_its_node_out_until_its_end_whatever_the_strategy(tmp_path):
    """One GPU fault lasting 48 h on a 12-node fleet: every strategy meets it; each one that takes the node
    out keeps it out until the logged end at least (nothing on the node fixes it sooner), and the checks
    take it out within an interval where Slurm alone waits for an admin."""
    from slurm_gpufleet.common.datafiles import HELIOS_SACCT, open_text
    from slurm_gpufleet.maintain.sacct import read_sacct
    from slurm_gpufleet.simulators.faultmodel import STRATEGIES
    from slurm_gpufleet.simulators.faultsim import fleet_faults

    f = tmp_path / "log.csv"
    f.write_text("node,start,end,class,detail\ngpu001,5,53,GPU Xid 79 fallen off the bus,\n"
                 "gpu002,120,121,ECC DBE,\n")
    with open_text(HELIOS_SACCT) as fh:
        trace = read_sacct(fh)
    out = fleet_faults(trace, nodes=12, gpus_per_node=8, days=None, strategies=STRATEGIES, model=load_model(),
                       hc_interval_s=300.0, checkpoint_every_h=1.0, restart_min=10.0, seed=0, fault_log=read(str(f)))
    a = out["assumptions"]
    assert a["fault_log"]["faults"] == 2 and a["faults_drawn"] == {"gpu": 1, "hbm": 1}
    assert a["days"] == round(116 / 24, 2)   # the log's span, from its first start to its last end
    s = out["strategies"]
    for name, m in s.items():
        assert m["faults"] == 2 and m["resolved"]["repair"] == 1.0, name
    for name in ("drain-on-any", "two-tier", "gpufleet"):
        assert s[name]["node_hours_out"] >= 48 + 1, name
        assert s[name]["fault_to_drain_min"]["p90"] <= 5.0, name
    assert s["none"]["fault_to_drain_min"]["p50"] == 240.0
    assert 0 < s["gpufleet"]["availability"] < 1 and 0 < s["gpufleet"]["goodput"] <= 1
