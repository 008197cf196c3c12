"""GB300 nodes of one NVLink domain on real Slurm: a fabric fault drains its node, three trays drain the
rack once (the breaker counts it by its nodes) and it comes back whole; IMEX is judged per job, never on idle nodes."""

from __future__ import annotations

import json
import time

import pytest

RACK = ["n5", "n6", "n7", "n8"]


def _gb300_rack(mc) -> str:
    """n5-n8 become GB300 boards of one NVLink domain; returns the domain's name once all four publish it
    (22.05 has no blocks: the domain is discovered from what the nodes publish; 24.11 has block n[5-8])."""
    for n in RACK:
        mc.gb300(n)

    def published() -> bool:
        return all('"cuid":"9a8b7c6d-' in mc.node(n).get("Extra", "") for n in RACK)

    mc.wait(published, 4 * mc.hc_interval, "n5-n8 publishing their NVLink fabric")
    summary = json.loads(mc.node("n5")["Extra"])
    assert (summary["fab"], summary["clq"]) == ("C", 32766) and summary["v"] == "ok", summary
    # Slurm's blocks come before what the nodes publish: block b2 is n[5-8] where the release has blocks
    return "b2" if mc.release >= (23, 11) else f"nvl-9a8b7c6d-{summary['clq']}"


def test_route_unhealthy_on_one_gpu_drains_its_tray_naming_the_gpu(mc, tmp_path):
    domain = _gb300_rack(mc)
    # a saved fleet names the same domains offline as Slurm does live
    saved = tmp_path / "fleet.json"
    r = mc.gpufleet("fleet", "save", "-o", str(saved))
    assert r.returncode == 0 and "saved 8 node(s)" in r.stderr, r.stderr
    live = json.loads(mc.gpufleet("fleet", "domains", "--json").stdout)
    offline = json.loads(mc.gpufleet("fleet", "--fleet", str(saved), "domains", "--json").stdout)
    assert [d["nodes"] for d in live["domains"] if d["domain"] == domain] == ["n[5-8]"]
    if mc.release < (23, 11):  # without blocks both read what the nodes publish
        assert offline == live
    mc.fabric_fault("n6", 2, "route_unhealthy")
    mc.wait(lambda: "DRAIN" in mc.state("n6"), 3 * mc.hc_interval, "n6 drained")
    assert mc.node("n6")["Reason"].startswith("fabric gpu2 fabric route unhealthy [gpufleet]")
    time.sleep(mc.hc_interval + 1)
    assert [mc.state(n) for n in ("n5", "n7", "n8")] == ["IDLE"] * 3  # one tray is not the rack


@pytest.mark.release("the domain from a block where Slurm has them")
def test_three_trays_drain_the_rack_once_and_it_returns_whole(mc):
    domain = _gb300_rack(mc)
    for node, fault in (("n5", "not_started"), ("n6", "access_timeout_recovery"), ("n7", "insufficient_nvlinks")):
        mc.fabric_fault(node, 1, fault)
    mc.wait(lambda: all("DRAIN" in mc.state(n) for n in RACK), 6 * mc.hc_interval, "the whole rack drained")
    reasons = {n: mc.node(n)["Reason"].rsplit(" [", 1)[0] for n in RACK}
    assert len(set(reasons.values())) == 1, reasons  # one reason, on every member, n8 included
    reason = reasons["n8"]
    assert reason.startswith(f"rack {domain} 3 trays with fabric/NVLink faults"), reason
    escalations = [row for n in RACK for row in mc.history(n, "select why from actions where action = 'rack'")]
    assert escalations and all(w.startswith(f"rack {domain} drained") for (w,) in escalations), escalations
    # the breaker counts the rack by its 4 nodes: under a threshold of 4 nodes a fifth drain is held, and
    # the breaker opens (rack drains and single drains together never pass the node fraction)
    breaker_file = mc.dir / "state" / "gpufleet" / "breaker.json"
    mc.fault("n1", 0, "row_remap_failure")
    mc.wait(breaker_file.exists, 4 * mc.hc_interval, "the breaker opening at the fifth node")
    assert "DRAIN" not in mc.state("n1") and "5 of 8 nodes" in json.loads(breaker_file.read_text())["why"]
    mc.heal("n1")
    assert mc.gpufleet("breaker", "reset").returncode == 0
    # n8 has no fault of its own, yet stays out while its rack is out
    time.sleep(3 * mc.hc_interval)
    assert "DRAIN" in mc.state("n8")
    # the faults clear: the rack returns as one
    for n in RACK:
        mc.gb300(n)
    samples = []

    def back() -> bool:
        # the four states in one read (one sinfo): four reads apart could straddle the one resume write
        out = mc.run("sinfo", "-h", "-N", "-n", ",".join(RACK), "-o", "%N %T", check=False).stdout
        states = dict(line.split(None, 1) for line in out.splitlines() if line.strip())
        samples.append(states)
        return sorted(states) == RACK and all(st.strip() == "idle" for st in states.values())

    mc.wait(back, 8 * mc.hc_interval, "the rack resumed")
    mixed = [s for s in samples if len({st.startswith("drain") for st in s.values()}) > 1]
    assert not mixed, f"the rack came back in parts: {mixed}"
    assert all(mc.node(n).get("Reason", "") in ("", "(null)") or mc.release >= (24, 11) for n in RACK)


@pytest.mark.release("the prolog's SLURM_JOB_CONSTRAINTS")
def test_a_job_that_asks_for_imex_fails_its_prolog_while_imex_is_not_ready(mc):
    mc.run("scontrol", "update", "nodename=n6", "availablefeatures=imex", "activefeatures=imex")
    try:
        (mc.gpus / "n6.imex-q").write_text("WAITING_FOR_PEERS\n")
        job = mc.sbatch("-w", "n6", "--constraint=imex", "--time=2", "--wrap", "true")
        mc.wait(lambda: mc.job(job).get("Restarts") == "1", 60, "the job requeued")
        mc.wait(lambda: mc.node("n6").get("Reason", "").startswith("imex node IMEX daemon WAITING_FOR_PEERS"),
                25, "our reason in place of 'Prolog error'")
        assert "DRAIN" in mc.state("n6")
        rows = mc.history("n6", "select hook, verdict, job_id from runs where hook='prolog'")
        assert rows == [("prolog", "drain", job)]
    finally:
        mc.run("scancel", "--user=root", check=False)
        mc.run("scontrol", "update", "nodename=n6", "availablefeatures=", "activefeatures=", check=False)


@pytest.mark.release("the prolog's and epilog's job environment")
def test_idle_nodes_and_jobs_without_imex_never_judge_it(mc):
    for n in RACK:
        (mc.gpus / f"{n}.imex-q").write_text("UNAVAILABLE\n")
        (mc.gpus / f"{n}.imex-n").write_text('{"status": "DOWN", "nodes": {}}')
    # health checks on idle nodes with IMEX down: nothing
    mc.wait(lambda: all(len(mc.history(n, "select 1 from runs where hook='healthcheck'")) >= 2 for n in RACK),
            6 * mc.hc_interval, "two health checks on n5-n8")
    # a job that does not ask for IMEX: its prolog passes
    job = mc.sbatch("-w", "n5", "--time=2", "--wrap", "true")
    mc.wait(lambda: mc.job(job).get("JobState") == "COMPLETED", 60, "the job without IMEX completed")
    time.sleep(mc.hc_interval)
    assert [mc.state(n) for n in RACK] == ["IDLE"] * 4
    assert all(mc.history(n, "select count(*) from actions") == [(0,)] for n in RACK)
