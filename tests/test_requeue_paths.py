"""Requeues away on every path (hooks/away.py): a job Slurm requeued from a node the tool holds for a fault
runs next elsewhere, whether it came back through the node's failed prolog, its epilog, or the node dying
under it (NODE_FAIL with no epilog), each job once, bounded by `max_fault_requeues`, and never in observe."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from slurm_gpufleet.hooks.away import after_step, send_away_left
from slurm_gpufleet.hooks.common import Setup
from slurm_gpufleet.policy import load_policy
from slurm_gpufleet.records.history import History
from slurm_gpufleet.records.jobrecord import with_requeue
from slurm_gpufleet.remedy.table import DRAINED, IN_SERVICE, SUSPECT
from slurm_gpufleet.slurm.base import NodeInfo


class Jobs:
    """A backend that knows some jobs (as `scontrol show job` gives their fields) and records each write."""

    def __init__(self, jobs: dict[str, dict[str, str]], nodes=("n1", "n2", "n3")):
        self.jobs, self.writes = jobs, []
        self.fleet = [NodeInfo(name=n, state="IDLE", partitions=["gpu"]) for n in nodes]

    def nodes(self):
        return list(self.fleet)

    def job_fields(self, job):
        return self.jobs.get(job)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kw: self.writes.append((name, *args))


def _setup(tmp_path, mode="full", max_fault_requeues=None):
    cfg = tmp_path / "gpufleet.toml"
    cfg.write_text(f'[defaults]\nmode = "{mode}"\n' +
                   (f"max_fault_requeues = {max_fault_requeues}\n" if max_fault_requeues else "") +
                   f'[slurm]\nstate_dir = "{tmp_path}/state"\n')
    policy = load_policy(str(cfg))
    return Setup("n1", policy, policy.slurm)


def _history(tmp_path):
    return History(str(tmp_path / "n1.db"))


def _job(state, nodes="n1", restarts="1", **more):
    return {"JobState": state, "NodeList": nodes, "Restarts": restarts, "Partition": "gpu", "NumNodes": "1",
            "AdminComment": "(null)", **more}


def test_jobs_the_node_died_under_are_sent_away_once_and_the_others_left(tmp_path):
    h = _history(tmp_path)
    for job in ("11", "12", "13", "14", "15"):
        h.record_run("n1", "prolog", "ok", [], job_id=job)
    h.record_run("n1", "epilog", "ok", [], job_id="15")      # ended here: not left behind
    backend = Jobs({"11": _job("PENDING", nodes="(null)"),    # NODE_FAIL, requeued: sent away
                    "12": _job("RUNNING"),                     # still running here: read again later
                    "13": _job("COMPLETED", restarts="0"),     # ended (its epilog lost): nothing to do
                    "14": _job("RUNNING", nodes="n2")})        # requeued earlier and running elsewhere
    done = send_away_left(backend, _setup(tmp_path), h, "n1", "xid 79 gpu3")
    assert [d.split(":")[0] for d in done] == ["job 11", "job 13", "job 14"]
    assert done[0] == "job 11: released to run elsewhere; excluded n1"
    assert ("set_excluded_nodes", "11", ["n1"]) in backend.writes
    assert not [w for w in backend.writes if w[1] != "11"]
    # handled jobs are never read again; the running one is, at the next check
    assert h.jobs_left_behind("n1", 0) == ["12"]
    backend.writes.clear()
    assert send_away_left(backend, _setup(tmp_path), h, "n1", "xid 79 gpu3") == []
    assert backend.writes == []


def test_a_job_past_max_fault_requeues_is_held_naming_the_node(tmp_path):
    h = _history(tmp_path)
    h.record_run("n1", "prolog", "ok", [], job_id="21")
    record = with_requeue("", "n2", "processes gpu4")
    backend = Jobs({"21": _job("PENDING", nodes="(null)", restarts="2", AdminComment=record)})
    done = send_away_left(backend, _setup(tmp_path, max_fault_requeues=1), h, "n1", "row remap failure gpu5")
    assert done and done[0].startswith("job 21: held: 2 fault requeues (max_fault_requeues 1): n2, n1"), done
    assert ("hold_jobs", ["21"]) in [(w[0], list(w[1])) for w in backend.writes if w[0] == "hold_jobs"]


def test_observe_mode_sends_nothing_away(tmp_path):
    h = _history(tmp_path)
    h.record_run("n1", "prolog", "ok", [], job_id="31")
    backend = Jobs({"31": _job("PENDING", nodes="(null)")})
    send_away_left(backend, _setup(tmp_path, mode="observe"), h, "n1", "xid 79 gpu3")
    assert not [w for w in backend.writes if w[0] in ("set_excluded_nodes", "release_jobs", "hold_jobs")]


@pytest.mark.parametrize("after, reads", [(DRAINED, True), (IN_SERVICE, False), (SUSPECT, False)])
def test_only_a_node_held_for_a_fault_reads_its_left_jobs(tmp_path, after, reads):
    h = _history(tmp_path)
    h.record_run("n1", "prolog", "ok", [], job_id="41")
    backend = Jobs({"41": _job("PENDING", nodes="(null)")})
    read = []
    backend.job_fields = lambda job: read.append(job) or backend.jobs.get(job)
    info = NodeInfo(name="n1", state="IDLE+DRAIN", reason="xid 79 gpu3 [gpufleet]")
    step = SimpleNamespace(after=after, before=after, info=info)
    carried = SimpleNamespace(ok=True, blocked=None, action=SimpleNamespace(reason=""))
    after_step(_setup(tmp_path), backend, h, step, carried, "healthcheck", None)
    assert bool(read) is reads
    if reads:
        assert ("set_excluded_nodes", "41", ["n1"]) in backend.writes
        assert h.jobs_left_behind("n1", 0) == []


def test_a_job_another_path_sent_away_for_this_requeue_is_not_sent_again(tmp_path):
    """The prolog's helper, the epilog's and a check can each meet the same requeued job: one record each
    requeue, never two (seen on real Slurm: a failed prolog's job recorded twice)."""
    h = _history(tmp_path)
    h.record_run("n1", "prolog", "ok", [], job_id="51")
    record = with_requeue("", "n1", "processes gpu4")
    backend = Jobs({"51": _job("PENDING", nodes="(null)", restarts="1", AdminComment=record)})
    done = send_away_left(backend, _setup(tmp_path), h, "n1", "processes gpu4")
    assert done == ["job 51: already sent away from n1 for this requeue"] and backend.writes == [], backend.writes
    assert h.jobs_left_behind("n1", 0) == []   # handled: the history keeps it
