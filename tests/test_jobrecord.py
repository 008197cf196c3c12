"""A record per job in its AdminComment (jobrecord.py), merged across the job's nodes, and a requeue away
from the node that failed the job (requeue.py)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from support import run_cli

from slurm_gpufleet.cli.output import job_text
from slurm_gpufleet.judging.findings import Finding
from slurm_gpufleet.records import jobrecord
from slurm_gpufleet.remedy.requeue import decide


def test_the_record_is_one_segment_of_the_admin_comment_and_leaves_the_rest_alone():
    site = "JS1:H4sIAAAAAAAAA6tWKkotTi0pVbJSMDIwMNBRyC9KTgWrBACyLlM6HgAAAA=="   # a jobstats summary
    text = jobrecord.with_part(site, "n1", {"x": [[5, 79]]})
    assert text.startswith(site + " gpufleet=") and " " not in text[len(site) + 1:] and '"' not in text
    text = jobrecord.with_part(text, "n2", {"m": {"3": "dram_uncorrected +1"}})
    rest, record = jobrecord.split(text)
    assert rest == site and record == {"v": 1, "n": {"n1": {"x": [[5, 79]]}, "n2": {"m": {"3": "dram_uncorrected +1"}}}}
    # a node writing again replaces its own part only
    again = jobrecord.with_part(text, "n1", {"x": [[5, 79], [6, 79]]})
    assert jobrecord.split(again)[1]["n"]["n2"] == {"m": {"3": "dram_uncorrected +1"}}
    assert jobrecord.has_part(again, "n1", {"x": [[5, 79], [6, 79]]})
    # not ours, or not a version we read: nothing of it is taken
    assert jobrecord.split("gpufleet=nzxxiidkonxw4")[1] == {}   # base32 of "not json"
    assert jobrecord.split("gpufleet=" + __import__("base64").b32encode(b'{"v":9}').decode().lower())[1] == {}
    # what sacctmgr leaves of it (22.05 lower-cases the value): the same record
    assert jobrecord.split(text.lower().replace(site.lower(), site))[1] == record
    assert not jobrecord.safe_for_accounting(text) and jobrecord.safe_for_accounting(jobrecord.with_part("", "n1", {}))
    # a segment in the middle: the text after it is kept too
    assert jobrecord.split(jobrecord.join("before", {"v": 1}) + " after") == ("before after", {"v": 1})
    assert jobrecord.split("") == ("", {})


def test_a_nodes_part_says_what_the_epilog_found_against_the_job():
    findings = [Finding("job", "ok", "none", 5, "Xid 79 during job 42", "", xid=79),
                Finding("job", "ok", "none", 5, "Xid 79 during job 42", "", xid=79),
                Finding("job", "ok", "none", 3, "memory errors during job 42", "dram_uncorrected +2"),
                Finding("imex", "warn", "watch", None, "IMEX domain degraded", ""),
                Finding("sxid_job", "ok", "none", None, "SXid 20034 during job 42", "", xid=20034)]
    part = jobrecord.node_part(findings, "reboot: inventory gpu5 fallen off the bus [gpufleet]")
    assert part == {"x": [[5, 79]], "m": {"3": "dram_uncorrected +2"}, "f": ["imex: IMEX domain degraded"],
                    "s": [20034], "a": "reboot: inventory gpu5 fallen off the bus [gpufleet]"}
    assert jobrecord.node_part([]) == {}
    text = jobrecord.with_requeue(jobrecord.with_part("", "n2", part), "n1", "memory gpu5 remap failed [gpufleet]")
    out = job_text("42", jobrecord.split(text)[1])
    assert out[0] == "job 42:" and "  requeued: n1 failed it (memory gpu5 remap failed [gpufleet])" in out
    assert "  n2 gpu 5: Xid 79 (GPU has fallen off the bus)" in out
    assert "  n2: then reboot: inventory gpu5 fallen off the bus [gpufleet]" in out
    assert job_text("7", {}) == ["job 7: nothing happened to its GPUs that slurm-gpufleet saw"]


def test_two_nodes_writing_at_once_both_keep_their_part():
    """Each node reads, merges and writes the whole AdminComment (of an ended job: slurmdbd's, through sacct
    and sacctmgr); a write that crosses another's is seen at the read-back and merged again, so neither
    node's part is lost (Slurm keeps the last write)."""
    from slurm_gpufleet.hooks.jobs import record_part

    class Slurm:
        admin = "site text"
        lock = threading.Lock()

        def job_fields(self, job):   # the epilog runs while its job completes: slurmctld's copy is frozen
            return {"JobState": "COMPLETING", "AdminComment": "(null)"}

        def accounted_admin_comment(self, job, field="AdminComment"):   # slurmdbd's record takes the writes
            with self.lock:
                return self.admin

    slurm = Slurm()

    class Writer:
        def apply(self, effect):
            assert effect.accounted
            time.sleep(0.01)   # between the read and this write, the other node reads the same
            with slurm.lock:
                slurm.admin = effect.text

    parts = {f"n{i}": {"x": [[i, 79]]} for i in range(4)}
    done: dict[str, bool] = {}
    threads = [threading.Thread(target=lambda n=n: done.update({n: record_part(
        slurm, Writer(), "42", n, parts[n], tries=20, sleep=lambda s: time.sleep(s / 5))})) for n in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rest, record = jobrecord.split(slurm.admin)
    assert rest == "site text" and record["n"] == parts and all(done.values()), (done, slurm.admin)


def test_a_requeued_job_excludes_the_node_unless_it_could_not_run_then_and_is_held_past_its_limit():
    job = {"JobState": "PENDING", "NumNodes": "2", "ReqNodeList": "(null)", "ExcNodeList": "n9"}
    members = [f"n{i}" for i in range(1, 5)]
    away = decide(job, "n1", members, None, [])
    assert (away.exclude, away.release, away.held, away.note) == (("n1", "n9"), True, None, "")
    # the job asked for n1 by name: excluding it would leave it unable to run
    away = decide({**job, "ReqNodeList": "n[1-2]"}, "n1", members, None, [])
    assert away.exclude is None and away.release and "asks for it" in away.note
    # two of its partition's four nodes are excluded already and it needs three
    away = decide({**job, "NumNodes": "3", "ExcNodeList": "n2"}, "n1", members, None, [])
    assert away.exclude is None and "2 node(s) of its partition would be left, it needs 3" in away.note
    # max_fault_requeues = 1: the first fault requeue runs again, the second stays held naming both nodes
    assert decide(job, "n1", members, 1, []).release
    held = decide(job, "n2", members, 1, [["n1", "memory gpu5 remap failed [gpufleet]"]])
    assert not held.release and held.held == "2 fault requeues (max_fault_requeues 1): n1, n2"


def test_slurm_gpufleet_job_shows_the_record_from_slurm_and_after_it_from_accounting(tmp_path):
    record = jobrecord.with_part("", "n3", {"x": [[5, 79]], "a": "reboot: inventory gpu5 fallen off the bus [gpufleet]"})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\ncase \"$3\" in\n"
        f"  42) printf 'JobId=42 JobName=train\\n   JobState=COMPLETED Reason=None\\n   AdminComment=%s\\n' '{record}';;\n"
        "  43) printf 'JobId=43 JobName=quiet\\n   JobState=COMPLETED Reason=None\\n';;\n"
        "  *) echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1;;\nesac\n")
    (bin_dir / "sacct").write_text(f"#!/bin/sh\ncase \"$5\" in 44) echo '44|{record}';; 46) echo '46|';; 42|43) "
                                   "echo 'sacct: error: Slurm accounting storage is disabled' >&2; exit 1;; esac\n")
    for exe in ("scontrol", "sacct"):
        (bin_dir / exe).chmod(0o755)
    config = tmp_path / "gpufleet.toml"
    config.write_text(f'[slurm]\nscontrol = "{bin_dir / "scontrol"}"\nstate_dir = "{tmp_path}/state"\n')
    r = run_cli("job", "42", "--config", str(config))
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines() == ["job 42:", "  n3 gpu 5: Xid 79 (GPU has fallen off the bus)",
                                              "  n3: then reboot: inventory gpu5 fallen off the bus [gpufleet]"]
    r = run_cli("job", "43", "--config", str(config))   # ended, and no accounting to have kept its record
    assert r.returncode == 0 and r.stdout.decode().strip().startswith(
        "job 43 has ended and this cluster keeps no accounting (slurmdbd)"), r.stdout
    r = run_cli("job", "44", "--config", str(config), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["source"] == "accounting", r.stderr
    assert json.loads(r.stdout)["record"]["n"]["n3"]["x"] == [[5, 79]]
    r = run_cli("job", "46", "--config", str(config))   # accounting knows it, with nothing in its record
    assert r.returncode == 0 and r.stdout.decode().strip() == "job 46: nothing happened to its GPUs that slurm-gpufleet saw"
    r = run_cli("job", "45", "--config", str(config))
    assert r.returncode == 2 and r.stderr.decode().strip().endswith("Slurm does not know it (and accounting has no record of it)")
    r = run_cli("job", "4;2", "--config", str(config))
    assert r.returncode == 2 and "not a job id" in r.stderr.decode()


def test_the_samplers_throttling_tally_reaches_the_nodes_part(tmp_path):
    """The in-job sampler counts, over the whole job, the windows each GPU ran with a slowdown reason; the
    epilog turns the tally into the share per GPU (where at least 10 %) in its node's part, and removes it."""
    from types import SimpleNamespace

    from slurm_gpufleet.slowgpus import sampler

    digest = sampler.digest_for("42", SimpleNamespace(instep_window_s=1.0, instep_windows=3), gpus=[2, 5])
    for tick in range(41):   # 10 windows of four samples; GPU 5 under SwThermalSlowdown in the last four
        t = tick * 0.25
        digest.add(t, [[1980.0, 600.0, 96.0, 0], [1650.0 if t >= 6 else 1980.0, 600.0, 96.0, 0x20 if t >= 6 else 0]])
    assert digest.windows == 10 and digest.throttled == [0, 4]
    sampler.write_tally(str(tmp_path), "n1", digest)
    shares = sampler.throttle_shares(str(tmp_path), "42", "n1")
    assert shares == {"5": 40}
    assert not (tmp_path / "instep-42-n1.tally.json").exists()
    part = jobrecord.node_part([], None, shares)
    assert part == {"t": {"5": 40}}
    assert job_text("42", {"n": {"n1": part}}) == ["job 42:", "  n1 gpu 5: throttled in 40% of the job's windows"]
    assert sampler.throttle_shares(str(tmp_path), "42", "n1") == {}   # read once


def test_the_epilog_attributes_an_nvswitch_sxid_inside_the_jobs_window_to_it():
    import datetime as dt
    import time as time_

    from slurm_gpufleet.hooks.epilog import job_findings
    from slurm_gpufleet.readers.kernel_log import read_kernel_log
    from slurm_gpufleet.readers.snapshot import NodeSnapshot

    start = time_.time() - 60
    inside = dt.datetime.fromtimestamp(start + 30).astimezone().isoformat()
    before = dt.datetime.fromtimestamp(start - 3600).astimezone().isoformat()
    log = read_kernel_log([f"{before} nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up",
                           f"{inside} nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 19084, Non-fatal, Link 29 AN1 "
                           "Heartbeat Timeout Error (First)"])
    snap = NodeSnapshot(host="n1", sxid_events=log.sxids)
    found = job_findings(snap, "42", None, {"start": start, "counters": {}})
    assert [(f.check, f.xid) for f in found] == [("sxid_job", 19084)]
    assert jobrecord.node_part(found) == {"s": [19084]}


def test_a_fabric_or_imex_change_during_the_job_reaches_its_record(tmp_path):
    """The prolog keeps each job GPU's NVLink fabric, and the IMEX state where the job uses IMEX, in the job's
    window; the epilog records what changed, in the node's part (`fb`, `ix`) and in `slurm-gpufleet job`."""
    import os
    import time as time_

    from test_escalation import _fake_ctl, settings

    from slurm_gpufleet.hooks.epilog import imex_change, job_findings
    from slurm_gpufleet.hooks.jobs import _window_path, _write_window
    from slurm_gpufleet.judging.imex import job_imex
    from slurm_gpufleet.readers.snapshot import Fabric, Gpu, NodeSnapshot

    def node(*summaries):
        return NodeSnapshot(host="n1", gpus=[Gpu(index=i, minor_number=i,
                                                         fabric=Fabric(state="completed", summary=s))
                                             for i, s in enumerate(summaries)])

    ctl = _fake_ctl(tmp_path)
    s = settings(imex_features=("imex",), imex_ctl=ctl, state_dir=str(tmp_path / "state"))
    env = {"SLURM_JOB_CONSTRAINTS": "imex"}
    words, found = job_imex(env, s)
    assert (words, found) == ("daemon READY, domain UP", [])
    _write_window(s, "n1", "42", node("healthy", "healthy"), frozenset({0, 1}), words)
    with open(_window_path(s, "n1", "42")) as fh:
        window = json.load(fh)
    assert window["fabric"] == {"0": "completed/healthy", "1": "completed/healthy"} and window["imex"] == words

    (tmp_path / "q").write_text("UNAVAILABLE\n")
    now, judged = job_imex(env, s)
    assert now == "daemon UNAVAILABLE, domain UP" and [f.message for f in judged] == ["IMEX daemon UNAVAILABLE"]
    record = job_findings(node("healthy", "unhealthy"), "42", frozenset({0, 1}), window) + imex_change(window, now, "42")
    part = jobrecord.node_part(record)
    assert part == {"fb": {"1": "completed/healthy -> completed/unhealthy"},
                    "ix": "daemon READY, domain UP -> daemon UNAVAILABLE, domain UP"}
    lines = job_text("42", jobrecord.split(jobrecord.with_part("", "n1", part))[1])
    assert "  n1 gpu 1: NVLink fabric completed/healthy -> completed/unhealthy" in lines
    assert "  n1: IMEX daemon READY, domain UP -> daemon UNAVAILABLE, domain UP" in lines
    # nothing changed: nothing to say (a quiet job writes no record)
    assert job_findings(node("healthy", "healthy"), "42", None, window) == [] and imex_change(window, words, "42") == []
    assert imex_change({}, now, "42") == []   # the job did not use IMEX at its start
    os.unlink(_window_path(s, "n1", "42"))
    assert time_.time() > window["start"]


@pytest.mark.parametrize("configured", ["AdminComment", "SystemComment"])
def test_beside_jobstats_the_record_goes_into_the_system_comment_and_js1_stays_whole(configured):
    """Princeton's jobstats owns the AdminComment (`JS1:` and base64 that sacctmgr would lower-case): written
    first, it is left whole and the record goes into the SystemComment; configured (`job_record_field`),
    the record goes there whatever jobstats does later.  `job` reads both."""
    from slurm_gpufleet.hooks.jobs import record_part

    site = "JS1:H4sIAAAAAAAAA6tWKkotTi0pVbJSMDIwMNBRyC9KTgWrBACyLlM6HgAAAA=="

    class Slurm:
        fields = {"AdminComment": site, "SystemComment": ""}

        def job_fields(self, job):
            return {"JobState": "COMPLETING", "AdminComment": "(null)"}

        def accounted_admin_comment(self, job, field="AdminComment"):
            return self.fields[field]

    slurm = Slurm()
    written = []

    class Writer:
        def apply(self, effect):
            written.append(effect.field)
            slurm.fields[effect.field] = effect.text

    assert record_part(slurm, Writer(), "42", "n1", {"x": [[3, 79]]}, sleep=lambda s: None, field=configured)
    assert written == ["SystemComment"] and slurm.fields["AdminComment"] == site
    slurm.fields["AdminComment"] = "JS1:overwritten-after"   # jobstats writes last: ours is elsewhere
    record = jobrecord.merged(slurm.fields["AdminComment"], slurm.fields["SystemComment"])
    assert record["n"] == {"n1": {"x": [[3, 79]]}}
    # a record in both (a live job's fault requeue, the epilog's part after jobstats' first write): one
    both = jobrecord.merged(jobrecord.with_requeue("", "n2", "processes gpu4 ..."), slurm.fields["SystemComment"])
    assert both["rq"] == [["n2", "processes gpu4 ..."]] and both["n"] == {"n1": {"x": [[3, 79]]}}
