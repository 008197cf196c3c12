"""Lemons (issue 22, part 4): flags feed a score, a suspect is checked in a maintenance reservation, and
only a confirmed check drains.  The pure decision over one step's reads, and the record that feeds it."""

from __future__ import annotations

import pytest

from slurm_gpufleet.judging.findings import Finding
from slurm_gpufleet.slowgpus import lemon as L
from slurm_gpufleet.slowgpus.instep import Flag
from slurm_gpufleet.slowgpus.lemon_store import LemonStore
from slurm_gpufleet.slurm.base import NodeInfo

NOW = 1_800_000_000.0


def node(name: str, state: str = "ALLOCATED", flags: set[str] | None = None, reason: str = "") -> NodeInfo:
    return NodeInfo(name, state, flags or set(), reason)


def fleet(*infos: NodeInfo) -> dict[str, NodeInfo]:
    return {i.name: i for i in infos}


def test_a_node_flagged_in_one_job_is_only_a_score_and_in_two_it_is_reserved_and_checked():
    one = L.decide_cases(NOW, {"n1": ["10"]}, {}, fleet(node("n1")), set(), {}, lemon_jobs=2)
    assert (one.reserve, one.submit, one.drain, one.cases) == ([], [], [], {})
    two = L.decide_cases(NOW, {"n1": ["10", "11"]}, {}, fleet(node("n1")), set(), {}, lemon_jobs=2)
    assert two.reserve == ["n1"] and two.submit == ["n1"] and two.drain == []
    assert two.cases["n1"].state == L.CHECKING and two.cases["n1"].jobs == ["10", "11"]


def test_a_case_lists_its_jobs_in_slurm_s_order_not_as_text():
    # job 99 came before job 100; as text "100" < "99" (CI stop 38's real-Slurm drain reason read "100,99")
    d = L.decide_cases(NOW, {"n1": ["100", "99", "7_12", "7_3"]}, {}, fleet(node("n1")), set(), {}, lemon_jobs=2)
    assert d.cases["n1"].jobs == ["7_3", "7_12", "99", "100"]
    assert "slow in jobs 7_3,7_12,99,100;" in L.drain_reason(d.cases["n1"], "thermal")


@pytest.mark.parametrize("held", [
    node("n1", "IDLE", {"DRAIN"}, "bad cable, ticket 4711"),      # an admin's drain
    node("n1", "DOWN", set(), "Not responding"),
    node("n1", "IDLE", {"DRAIN"}, "maintain 7b0c upgrading [gpufleet]"),  # a rollout holds it
])
def test_a_suspect_someone_else_holds_is_left_alone_and_said_so(held):
    d = L.decide_cases(NOW, {"n1": ["10", "11"]}, {}, fleet(held), set(), {}, lemon_jobs=2)
    assert (d.reserve, d.submit, d.cases) == ([], [], {})
    assert "left alone" in d.notes[0]


def checking(job: str | None = "77", attempts: int = 1) -> L.Case:
    return L.Case("n1", L.CHECKING, ["10", "11"], NOW - 600, job, attempts)


def test_a_check_still_pending_or_running_waits():
    for state in ("PENDING", "RUNNING", "COMPLETING"):
        d = L.decide_cases(NOW, {}, {"n1": checking()}, fleet(node("n1")), {"gpufleet-lemon-n1"}, {"77": (state, "")}, 2)
        assert (d.reserve, d.submit, d.drain, d.release, d.cases) == ([], [], [], [], {})


def test_a_confirmed_check_drains_with_its_finding_and_releases_the_reservation():
    comment = "gpufleet confirmed: thermal gpu3: HW thermal slowdown active"
    d = L.decide_cases(NOW, {}, {"n1": checking()}, fleet(node("n1", "IDLE")), {"gpufleet-lemon-n1"},
                 {"77": ("FAILED", comment)}, 2)
    assert d.drain == [("n1", "performance lemon: slow in jobs 10,11; deep check: thermal gpu3: "
                               "HW thermal slowdown active [gpufleet]")]
    assert d.release == ["gpufleet-lemon-n1"] and d.cases["n1"].state == L.CONFIRMED


def test_a_clean_check_clears_the_case_and_drains_nothing():
    d = L.decide_cases(NOW, {}, {"n1": checking()}, fleet(node("n1", "IDLE")), {"gpufleet-lemon-n1"},
                 {"77": ("COMPLETED", "gpufleet lemon check of n1")}, 2)
    assert d.drain == [] and d.release == ["gpufleet-lemon-n1"]
    assert d.cases["n1"].state == L.CLEARED and d.cases["n1"].closed == NOW


def test_a_check_that_ended_without_a_verdict_runs_again_then_closes_unchecked():
    # a FAILED job without our comment did not judge (the command was missing, the node failed)
    again = L.decide_cases(NOW, {}, {"n1": checking(attempts=1)}, fleet(node("n1")), {"gpufleet-lemon-n1"},
                     {"77": ("FAILED", "gpufleet lemon check of n1")}, 2)
    assert again.submit == ["n1"] and again.drain == [] and again.release == []
    gone = L.decide_cases(NOW, {}, {"n1": checking(attempts=L.ATTEMPTS)}, fleet(node("n1")), {"gpufleet-lemon-n1"},
                    {}, 2)
    assert gone.cases["n1"].state == L.UNCHECKED and gone.release == ["gpufleet-lemon-n1"]
    assert "gone from squeue" in gone.cases["n1"].detail and gone.drain == []


def test_a_case_whose_reservation_someone_deleted_closes_and_its_job_is_cancelled():
    d = L.decide_cases(NOW, {}, {"n1": checking()}, fleet(node("n1")), set(), {"77": ("PENDING", "")}, 2)
    assert d.cases["n1"].state == L.UNCHECKED and d.cancel == ["77"] and d.release == []


def test_a_step_that_crashed_after_recording_the_case_reserves_and_submits_again():
    d = L.decide_cases(NOW, {}, {"n1": checking(job=None, attempts=0)}, fleet(node("n1")), set(), {}, 2)
    assert d.reserve == ["n1"] and d.submit == ["n1"]


def test_what_confirms_a_lemon():
    slow = Finding("performance", "warn", "inspect_hardware", 2, "memory bandwidth 3900 GB/s, -18%")
    hot = Finding("thermal", "warn", "none", 1, "HW thermal slowdown active")
    unrelated = Finding("firmware", "warn", "none", None, "VBIOS differs from the group's")
    fault = Finding("memory", "drain", "drain", 0, "row remapping failed")
    note = Finding("performance", "ok", "none", 0, "performance not measured")
    assert L.confirming([unrelated, note]) is None
    assert L.confirming([unrelated, slow]) is slow
    assert L.confirming([hot, fault]) is fault


def flag(node: str, job: str, t: float = NOW) -> Flag:
    return Flag(job, node, 3, t, "throttled", {"throttle": "0x20"})


def test_the_record_counts_distinct_jobs_since_the_last_case_closed(tmp_path):
    store = LemonStore(str(tmp_path / "lemons.db"))
    assert store.record_flags([flag("n1", "10"), flag("n2", "10")], NOW) == 2
    assert store.record_flags([flag("n1", "10", NOW - 60)], NOW + 60) == 0  # the same job seen again
    assert store.suspects() == {"n1": ["10"], "n2": ["10"]}
    store.record_flags([flag("n1", "11")], NOW + 120)
    assert store.scores() == {"n1": 2, "n2": 1}
    store.save([L.Case("n1", L.CHECKING, ["10", "11"], NOW + 130, "77", 1)])
    assert set(store.open_cases()) == {"n1"}
    store.save([L.Case("n1", L.CLEARED, ["10", "11"], NOW + 130, "77", 1, "nothing slow", NOW + 900)])
    assert store.open_cases() == {} and store.scores() == {"n2": 1}  # cleared: n1 starts again from nothing
    store.record_flags([flag("n1", "12")], NOW + 1000)
    assert store.suspects() == {"n1": ["12"], "n2": ["10"]}
    assert [c.state for c in store.cases()] == [L.CLEARED]
    row = next(store.db.query("select t_first from flags where node = 'n1' and job = '10'"))
    assert row["t_first"] == NOW - 60  # the earliest window kept


def test_metrics_export_the_flags_the_scores_and_the_cases():
    from prometheus_client import generate_latest

    from slurm_gpufleet.records.metrics import lemon_registry

    text = generate_latest(lemon_registry([flag("n1", "11"), Flag("11", "n2", None, NOW, "silent_slow")],
                                          {"n1": 2, "n2": 1}, [checking()], 2)).decode()
    assert 'gpufleet_instep_flag{gpu="3",job="11",node="n1",signature="throttled"} 1.0' in text
    assert 'gpufleet_instep_flag{gpu="",job="11",node="n2",signature="silent_slow"} 1.0' in text
    assert 'gpufleet_lemon_score{node="n1"} 2.0' in text and 'gpufleet_lemon_score{node="n2"} 1.0' in text
    assert 'gpufleet_lemon_case{node="n1",state="checking"} 1.0' in text and "gpufleet_lemon_jobs 2.0" in text


class LemonSlurm:
    """The calls a lemon step makes, over an in-memory Slurm at the backend interface (what the simulator's
    Slurm is to the rollout engine); `fail` names calls that answer an error."""

    def __init__(self, nodes: list[NodeInfo], fail: set[str] = frozenset()):
        self.nodes_ = {n.name: n for n in nodes}
        self.reservations_: dict[str, list[str]] = {}
        self.jobs: dict[str, tuple[str, str, str]] = {}   # id -> name, state, comment
        self.fail = fail
        self.calls: list[tuple] = []
        self.admin_comments: dict[str, str] = {}   # running jobs whose record a step may write

    def _call(self, *call) -> None:
        from slurm_gpufleet.slurm import SlurmError

        self.calls.append(call)
        if call[0] in self.fail:
            raise SlurmError(f"{call[0]}: Requested reservation is invalid")

    def nodes(self) -> list[NodeInfo]:
        return list(self.nodes_.values())

    def reservations(self):
        from slurm_gpufleet.slurm.base import Reservation

        self._call("reservations")
        return [Reservation(name, nodes, None, None, {"MAINT"}, "ACTIVE") for name, nodes in self.reservations_.items()]

    def job_fields(self, job_id: str):
        self._call("job_fields", job_id)
        comment = self.admin_comments.get(job_id)
        return None if comment is None else {"JobState": "RUNNING", "AdminComment": comment}

    def set_admin_comment(self, job_id: str, text: str) -> None:
        self._call("set_admin_comment", job_id)
        self.admin_comments[job_id] = text

    def jobs_named(self, name: str):
        self._call("jobs_named", name)
        return [(jid, state, comment) for jid, (jname, state, comment) in self.jobs.items() if jname == name]

    def create_reservation(self, name, nodes, start, minutes) -> None:
        self._call("create_reservation", name, tuple(nodes), minutes)
        self.reservations_[name] = list(nodes)

    def delete_reservation(self, name) -> None:
        self._call("delete_reservation", name)
        del self.reservations_[name]

    def submit_job(self, name, node, reservation, partition, command, minutes, comment, output="/dev/null") -> str:
        self._call("submit_job", name, node, reservation, command)
        job_id = str(500 + len(self.jobs))
        self.jobs[job_id] = (name, "PENDING", "")
        return job_id

    def cancel_jobs(self, job_ids) -> None:
        self._call("cancel_jobs", tuple(job_ids))

    def drain_nodes(self, names, reason) -> None:
        self._call("drain_nodes", tuple(names), reason)
        for name in names:
            n = self.nodes_[name]
            self.nodes_[name] = NodeInfo(name, n.state, n.flags | {"DRAIN"}, reason)


def lemon_settings(tmp_path):
    from slurm_gpufleet.policy import SlurmSettings

    return SlurmSettings(state_dir=str(tmp_path), lemon_jobs=2, lemon_hold_hours=24.0)


def test_a_step_reserves_and_submits_then_a_confirmed_check_drains_and_releases(tmp_path):
    from slurm_gpufleet.slowgpus.lemon_step import run_step

    slurm = LemonSlurm([node("n1"), *(node(f"n{i}", "IDLE") for i in range(2, 41))])
    store = LemonStore(str(tmp_path / "lemons.db"))
    settings = lemon_settings(tmp_path)
    first = run_step(slurm, settings, store, slurm.nodes(), [flag("n1", "10")], NOW)
    # a score, and one read of the flagged job (gone: nothing written)
    assert (first.new_flags, first.scores, first.reserved, slurm.calls) == (1, {"n1": 1}, [], [("job_fields", "10")])
    dry = run_step(slurm, settings, store, slurm.nodes(), [flag("n1", "11")], NOW + 60, dry_run=True)
    assert dry.reserved == ["n1"] and dry.submitted == {} and store.scores() == {"n1": 1}  # nothing written
    assert all(c[0] in ("reservations", "jobs_named", "job_fields") for c in slurm.calls)
    second = run_step(slurm, settings, store, slurm.nodes(), [flag("n1", "11")], NOW + 60)
    assert second.reserved == ["n1"] and second.submitted == {"n1": "500"}
    assert ("create_reservation", "gpufleet-lemon-n1", ("n1",), 1440) in slurm.calls
    assert store.open_cases()["n1"].check_job == "500"
    # the check ran on the freed node and confirmed: drained through the actuator, the reservation goes
    slurm.jobs["500"] = (L.JOB_NAME, "FAILED", "gpufleet confirmed: clocks gpu3: SM clock 1650 MHz")
    third = run_step(slurm, settings, store, slurm.nodes(), [], NOW + 3600)
    assert third.drained == ["n1"] and third.released == ["gpufleet-lemon-n1"] and not third.errors
    assert slurm.nodes_["n1"].drained and slurm.nodes_["n1"].reason.startswith("performance lemon")
    assert slurm.reservations_ == {} and third.cases["n1"].state == L.CONFIRMED and store.open_cases() == {}


def test_a_reservation_slurm_refuses_is_named_and_no_check_is_submitted(tmp_path):
    from slurm_gpufleet.slowgpus.lemon_step import run_step

    slurm = LemonSlurm([node("n1")], fail={"create_reservation"})
    store = LemonStore(str(tmp_path / "lemons.db"))
    step = run_step(slurm, lemon_settings(tmp_path), store, slurm.nodes(), [flag("n1", "10"), flag("n1", "11")], NOW)
    assert step.errors == ["n1: reservation not made: create_reservation: Requested reservation is invalid"]
    assert step.submitted == {} and not any(c[0] == "submit_job" for c in slurm.calls)
    slurm.fail = set()  # the next step makes the reservation and submits the check
    again = run_step(slurm, lemon_settings(tmp_path), store, slurm.nodes(), [], NOW + 60)
    assert again.reserved == ["n1"] and again.submitted == {"n1": "500"} and not again.errors


def test_a_new_flag_goes_into_its_running_jobs_record_once(tmp_path):
    """Issue 47: what the in-job detector found goes into the job's own record while it runs, beside what
    another tool keeps in its AdminComment; a flag seen again writes nothing."""
    from slurm_gpufleet.cli.output import job_text
    from slurm_gpufleet.records import jobrecord
    from slurm_gpufleet.slowgpus.lemon_step import run_step

    slurm = LemonSlurm([node("n1"), node("n2")])
    slurm.admin_comments["10"] = "site note"
    store = LemonStore(str(tmp_path / "lemons.db"))
    run_step(slurm, lemon_settings(tmp_path), store, slurm.nodes(), [flag("n1", "10")], NOW)
    rest, record = jobrecord.split(slurm.admin_comments["10"])
    assert rest == "site note" and [f[:3] for f in record["fl"]] == [["n1", 3, "throttled"]], record
    assert "  n1 gpu 3: flagged throttled while the job ran (in-job detector)" in job_text("10", record)
    writes = [c for c in slurm.calls if c[0] == "set_admin_comment"]
    run_step(slurm, lemon_settings(tmp_path), store, slurm.nodes(), [flag("n1", "10")], NOW + 60)
    assert [c for c in slurm.calls if c[0] == "set_admin_comment"] == writes   # seen again: nothing more



def test_a_node_s_lemon_score_is_written_into_its_summary_only_when_it_changes(tmp_path):
    """The number a job selects on (`sbatch --extra "lemon<2"`): the step writes each node's score into the
    summary the node published, only where it differs; a node publishing nothing of ours is left alone."""
    import json
    from dataclasses import replace

    from slurm_gpufleet.judging.summary import lemon_news
    from slurm_gpufleet.slowgpus.lemon_step import run_step

    class Publishing(LemonSlurm):
        def set_fields(self, name, fields):
            self._call("set_fields", name, dict(fields))
            self.nodes_[name] = replace(self.nodes_[name], extra=fields["extra"])

    ours = json.dumps({"gpufleet": 1, "v": "ok", "suspect": 0, "lemon": 0, "fw_ok": 1})
    slurm = Publishing([replace(node("n1"), extra=ours), replace(node("n2", "IDLE"), extra=ours),
                        replace(node("n3", "IDLE"), extra="site text")])
    assert lemon_news(slurm.nodes(), {"n1": 0}, "extra") == []
    store = LemonStore(str(tmp_path / "lemons.db"))
    run_step(slurm, lemon_settings(tmp_path), store, slurm.nodes(), [flag("n1", "10")], NOW)
    written = [c for c in slurm.calls if c[0] == "set_fields"]
    assert [(c[1], json.loads(c[2]["extra"])["lemon"]) for c in written] == [("n1", 1)], written
    assert json.loads(slurm.nodes_["n1"].extra) == {**json.loads(ours), "lemon": 1}
    assert slurm.nodes_["n3"].extra == "site text"
    slurm.calls.clear()
    run_step(slurm, lemon_settings(tmp_path), store, slurm.nodes(), [], NOW + 60)   # unchanged: nothing written
    assert [c for c in slurm.calls if c[0] == "set_fields"] == []
