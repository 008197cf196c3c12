"""The tool's own faults are not GPU faults: slurmctld that does not answer, a state directory that cannot
be written, a history that is corrupt.  Each run ends in bounded time, changes nothing for the tool's own
sake, still drains for a real GPU fault, and says what failed in the node's summary (`err`)."""

from __future__ import annotations

import json
import sys

import pytest
from support import REPO

sys.path.insert(0, str(REPO / "tests"))
from fake_slurm.node import fault, healthcheck, setup  # noqa: E402


def _node(tmp_path, extra: str = ""):
    bin_dir, gpus, env = setup(tmp_path)
    with open(env["SLURM_GPUFLEET_CONFIG"], "a") as fh:
        fh.write(f'validation_command = ""\nkernel_log = "{tmp_path}/kmsg"\n{extra}')
    (tmp_path / "kmsg").mkdir()
    return bin_dir, gpus, env


def _shown(bin_dir) -> dict:
    return json.loads((bin_dir / "node.json").read_text())


def test_a_corrupt_history_is_said_and_a_real_fault_still_drains(tmp_path):
    bin_dir, gpus, env = _node(tmp_path)
    healthcheck(bin_dir, env)
    (tmp_path / "state" / "n9.db").write_bytes(b"not a database " * 100)
    calls, wall, r = healthcheck(bin_dir, env)
    assert r.returncode == 0 and "internal error" not in r.stderr, r.stderr
    assert not _shown(bin_dir).get("drain"), "the tool's own fault drains nothing"
    summary = json.loads(_shown(bin_dir)["extra"])
    assert summary["v"] == "ok" and summary["err"].startswith("history ") and "not a database" in summary["err"]
    fault(gpus, 5, "row_remap_failure")
    calls, wall, r = healthcheck(bin_dir, env)
    assert _shown(bin_dir)["drain"] and _shown(bin_dir)["reason"] == "memory gpu5 row remapping failed [gpufleet]"


def test_a_state_directory_whose_files_cannot_be_written_blinds_no_check(tmp_path):
    """Every file the run keeps in the state directory unwritable (root ignores modes: a directory stands
    where each file goes): the history, the breaker's lock, the quiet view and the kept summary all fail;
    the fault is drained all the same, and the summary says the history failed."""
    bin_dir, gpus, env = _node(tmp_path)
    state = tmp_path / "state"
    for name in ("n9.db", "breaker.json.lock", "slurm-view-n9.json", "published-n9.json", "last-good-config.toml",
                 "remedy-n9.lock", "internal-errors.log"):
        (state / name).mkdir(parents=True)
    fault(gpus, 5, "row_remap_failure")
    calls, wall, r = healthcheck(bin_dir, env)
    assert r.returncode == 0 and "internal error" not in r.stderr, r.stderr
    assert _shown(bin_dir)["drain"], r.stderr
    assert json.loads(_shown(bin_dir)["extra"])["err"].startswith("history ")


@pytest.mark.slow  # 20 s: two Slurm calls wait out their 10 s timeouts
def test_a_slurmctld_that_does_not_answer_ends_the_run_in_bounded_time_and_changes_nothing(tmp_path):
    bin_dir, gpus, env = _node(tmp_path)
    healthcheck(bin_dir, env)
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(scontrol.read_text().replace("argv = sys.argv[1:]\n", "argv = sys.argv[1:]\n"
                                                     "import time\ntime.sleep(120)\n", 1))
    (tmp_path / "state" / "slurm-view-n9.json").unlink(missing_ok=True)
    before = _shown(bin_dir)
    fault(gpus, 5, "row_remap_failure")
    calls, wall, r = healthcheck(bin_dir, env)
    assert wall < 45 and r.returncode == 0 and "internal error" not in r.stderr, (wall, r.stderr)
    assert "cannot read node state from Slurm" in r.stderr and "timed out" in r.stderr
    assert _shown(bin_dir) == before
