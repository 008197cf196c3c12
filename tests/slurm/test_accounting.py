"""Issue 47 with Slurm's accounting: a mini-cluster of its own with slurmdbd and a MariaDB of its own
(minicluster.sh ACCOUNTING=1, both stopped by pid).  What happened to a job's GPUs lands in its accounting
record (`sacct -o AdminComment`), written by the epilog of the job's node, and `slurm-gpufleet job` shows
it after slurmctld has forgotten the job; a quiet job's record says nothing."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from conftest import start_cluster


@pytest.fixture(scope="module")
def acct():
    # MinJobAge 10: slurmctld forgets an ended job within seconds, and only accounting remembers it
    yield from start_cluster("acct", 2, 30817, 31001, ACCOUNTING="1", MIN_JOB_AGE="10")


def _accounted(c, job: str) -> str:
    out = c.run("sacct", "-n", "-P", "-X", "-j", job, "-o", "AdminComment", check=False).stdout.strip()
    return out.splitlines()[0] if out else ""


def test_an_xid_during_a_job_lands_in_its_accounting_record_and_job_shows_it(acct):
    job = acct.start_job("n1", 8, 3)
    stamp = dt.datetime.now().astimezone().isoformat(timespec="microseconds").replace(".", ",")
    with open(acct.gpus / "n1.kmsg", "a") as fh:  # GPU 3 is at PCI 0000:5d:00
        fh.write(f"{stamp} NVRM: Xid (PCI:0000:5d:00): 79, pid=777, name=python3, GPU has fallen off the bus.\n")
    acct.wait(lambda: "gpufleet=" in _accounted(acct, job), 60,
              lambda: f"job {job}'s record in accounting: {_accounted(acct, job)!r}; slurmd-n1.log: "
                      + (acct.dir / "log" / "slurmd-n1.log").read_text()[-1500:])
    # slurmctld forgets the job (MinJobAge): accounting still has it
    acct.wait(lambda: acct.run("scontrol", "show", "job", job, check=False).returncode != 0, 60,
              f"slurmctld to forget job {job}")
    shown = acct.gpufleet("job", job)
    assert shown.returncode == 0, shown.stderr
    assert "  n1 gpu 3: Xid 79 (GPU has fallen off the bus)" in shown.stdout.splitlines(), shown.stdout
    record = json.loads(acct.gpufleet("job", job, "--json").stdout)
    assert record["source"] == "accounting" and record["record"]["n"]["n1"]["x"] == [[3, 79]]
    assert record["record"]["n"]["n1"]["a"].startswith("reboot: "), record


def test_a_quiet_job_writes_nothing_and_its_record_says_so(acct):
    job = acct.start_job("n2", 8, 1)
    acct.wait(lambda: acct.run("sacct", "-n", "-P", "-X", "-j", job, "-o", "State", check=False).stdout.strip()
              == "COMPLETED", 60, f"job {job} completed in accounting")
    assert _accounted(acct, job) == ""
    assert acct.gpufleet("job", job).stdout.strip() == f"job {job}: nothing happened to its GPUs that slurm-gpufleet saw"
