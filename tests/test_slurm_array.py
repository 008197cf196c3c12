"""pool.in_slurm_array at its Slurm edge (the real array: tests/slurm/test_simulate_array.py): results
merge in the calls' order, and a task that left no result is named with its log, its directory kept."""

from __future__ import annotations

import functools
import os

import pytest

from slurm_gpufleet.maintain.pool import ArrayError, in_slurm_array, run_task


class Slurm:
    """Runs the array's tasks at submission, as Slurm would on the partition's nodes, except `lost`."""

    def __init__(self, lost=()):
        self.lost, self.submitted = set(lost), []

    def submit_array(self, name, partition, tasks, command, output, chdir):
        assert command.endswith(" $SLURM_ARRAY_TASK_ID")
        folder = command.split()[-2]
        self.submitted.append((name, partition, tasks, folder))
        for i in range(tasks):
            if i not in self.lost:
                run_task(folder, i)
        return "42"

    def jobs_named(self, name):
        return [(f"42_{i}", "COMPLETED", "") for i in range(self.submitted[-1][2])]


def test_results_merge_in_order_and_the_directory_goes(tmp_path):
    slurm = Slurm()
    calls = [functools.partial(pow, 2, i) for i in range(5)]
    assert in_slurm_array(calls, "gpu", slurm, slurm, str(tmp_path), sleep=lambda _: None) == [1, 2, 4, 8, 16]
    (name, partition, tasks, folder) = slurm.submitted[0]
    assert (partition, tasks) == ("gpu", 5) and name.startswith("gpufleet-") and not os.path.exists(folder)


def test_a_task_without_a_result_is_named_with_its_log(tmp_path):
    slurm = Slurm(lost={1})
    with pytest.raises(ArrayError, match=r"task 1 of job array 42 left no result .*1\.log"):
        in_slurm_array([functools.partial(abs, -3)] * 3, "gpu", slurm, slurm, str(tmp_path), sleep=lambda _: None)
    (folder,) = tmp_path.iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["0.json", "2.json", "calls.pkl"]  # kept to look at


def test_a_task_reads_calls_only_from_a_private_directory(tmp_path):
    os.chmod(tmp_path, 0o777)
    with pytest.raises(SystemExit, match="not a private directory"):
        run_task(str(tmp_path), 0)


def test_an_array_squeue_does_not_show_yet_is_waited_for(tmp_path):
    """squeue may list nothing for a moment after sbatch: not taken for "every task ended"."""

    class Late(Slurm):
        polls = 0

        def submit_array(self, name, partition, tasks, command, output, chdir):
            self.submitted.append((name, partition, tasks, command.split()[-2]))
            return "42"

        def jobs_named(self, name):
            self.polls += 1
            if self.polls == 1:
                return []  # not shown yet
            folder = self.submitted[-1][3]
            for i in range(self.submitted[-1][2]):
                run_task(folder, i)
            return [(f"42_{i}", "COMPLETED", "") for i in range(self.submitted[-1][2])]

    slurm = Late()
    assert in_slurm_array([functools.partial(abs, -2)] * 2, "gpu", slurm, slurm, str(tmp_path),
                          sleep=lambda _: None) == [2, 2]
    assert slurm.polls == 2
