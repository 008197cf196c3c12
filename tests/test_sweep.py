"""Idle sweeps (sweep.py): which nodes are due, what a step submits and cancels, against the in-memory
view of one read; the real preemption is the real-Slurm test's (tests/slurm/test_cluster.py)."""

from __future__ import annotations

import pytest

from slurm_gpufleet.policy import parse_policy
from slurm_gpufleet.remedy.sweep import due_nodes, load_last, run_step, save_last
from slurm_gpufleet.slurm.base import NodeInfo
from slurm_gpufleet.slurm.commands import parse_node_text

NOW = 1_800_000_000.0
POLICY = parse_policy('[[group]]\nname = "swept"\nnodes = "n[1-6]"\nsweep_interval_h = 24\nsweep_idle_min = 30\n')


def node(name, state="IDLE", flags=(), idle_min=60.0):
    return NodeInfo(name, state, set(flags), "x [gpufleet]" if flags else "", last_busy=NOW - idle_min * 60)


@pytest.mark.parametrize("info,last,due", [
    (node("n1"), {}, True),
    (node("n1", idle_min=10), {}, False),                       # not idle long enough
    (node("n1", "ALLOCATED"), {}, False),
    (node("n1", flags={"DRAIN"}), {}, False),
    (node("n1", flags={"MAINTENANCE", "RESERVED"}), {}, False),  # in a reservation
    (node("n1"), {"n1": NOW - 3600}, False),                     # swept an hour ago
    (node("n1"), {"n1": NOW - 25 * 3600}, True),
    (node("n7"), {}, False),                                     # its group is not swept
    (NodeInfo("n1", "IDLE"), {}, False),                         # no LastBusyTime: cannot tell
])
def test_which_nodes_are_due(info, last, due):
    assert due_nodes([info], POLICY, last, set(), NOW) == (["n1"] if due else [])


def test_the_longest_unswept_go_first_and_a_node_being_swept_is_not_due():
    nodes = [node("n1"), node("n2"), node("n3")]
    last = {"n1": NOW - 30 * 3600, "n2": NOW - 50 * 3600}
    assert due_nodes(nodes, POLICY, last, set(), NOW) == ["n3", "n2", "n1"]
    assert due_nodes(nodes, POLICY, last, {"n3"}, NOW) == ["n2", "n1"]


class FakeBackend:
    def __init__(self, nodes, jobs=()):
        self._nodes, self.jobs, self.calls = nodes, list(jobs), []

    def nodes(self):
        return self._nodes

    def jobs_named(self, name):
        return self.jobs

    def submit_job(self, *args):
        self.calls.append(("submit", args))
        return str(100 + len(self.calls))

    def cancel_jobs(self, ids):
        self.calls.append(("cancel", ids))


def test_a_step_submits_at_most_max_nodes_into_the_sweep_partition_and_records_them(tmp_path):
    policy = parse_policy(f'[slurm]\nsweep_partition = "sweep"\nsweep_max_nodes = 2\nstate_dir = "{tmp_path}"\n'
                          '[[group]]\nname = "swept"\nnodes = "n[1-6]"\nsweep_interval_h = 24\n')
    backend = FakeBackend([node(f"n{i}") for i in range(1, 5)],
                          jobs=[("90", "RUNNING", "gpufleet sweep of n4")])
    step = run_step(backend, policy, now=NOW)
    assert step.running == ["n4"] and step.due == ["n1", "n2", "n3"]
    assert list(step.submitted) == ["n1"], "one slot left beside the running sweep"
    (_, args), = backend.calls
    name, node_name, reservation, partition, command, minutes, comment, output = args
    assert (name, node_name, reservation, partition, minutes, comment, output) == (
        "gpufleet-sweep", "n1", "", "sweep", 20, "gpufleet sweep of n1", "/dev/null")
    assert command.endswith("slurm-gpufleet-healthcheck --level deep")
    assert load_last(str(tmp_path / "sweeps.json")) == {"n1": NOW}
    # the next step: n1 is no longer due
    again = run_step(FakeBackend([node(f"n{i}") for i in range(1, 5)]), policy, now=NOW + 60)
    assert "n1" not in again.due


def test_a_sweep_job_left_pending_is_cancelled(tmp_path):
    policy = parse_policy(f'[slurm]\nsweep_partition = "sweep"\nstate_dir = "{tmp_path}"\n')
    save_last(str(tmp_path / "sweeps.json"), {"n2": NOW - 3600})
    backend = FakeBackend([node("n2", "ALLOCATED")], jobs=[("77", "PENDING", "gpufleet sweep of n2")])
    step = run_step(backend, policy, now=NOW)
    assert step.cancelled == ["77"] and ("cancel", ["77"]) in backend.calls


def test_slurm_s_last_busy_time_is_read():
    text = ("NodeName=n8 Arch=x86_64\n   State=IDLE ThreadsPerCore=1\n   LastBusyTime=2026-12-02T10:00:00 "
            "ResumeAfterTime=None\n")
    info = parse_node_text(text)
    import datetime as dt

    assert info.last_busy == dt.datetime(2026, 12, 2, 10, 0, 0).timestamp()


def test_fleet_sweep_without_a_sweep_partition_is_exit_2(tmp_path):
    from support import run_cli

    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[slurm]\nstate_dir = "{tmp_path}/s"\n')
    r = run_cli("fleet", "--config", str(cfg), "sweep")
    assert r.returncode == 2 and b"sweep_partition" in r.stderr
