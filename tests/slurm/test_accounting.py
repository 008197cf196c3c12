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


def _jobstats(c, job: str, text: str) -> None:
    """What Princeton's jobstats does with a job's summary: its whole AdminComment, through sacctmgr."""
    c.run("sacctmgr", "-i", "update", "job", "where", f"jobid={job}", "set", f"AdminComment={text}")


JS1 = "JS1:H4sIAAAAAAAAA6tWKkotTi0pVbJSMDIwMNBRyC9KTgWrBACyLlM6HgAAAA=="


def _xid_job(c, node: str, seconds: float) -> str:
    job = c.start_job(node, 8, seconds)
    stamp = dt.datetime.now().astimezone().isoformat(timespec="microseconds").replace(".", ",")
    with open(c.gpus / f"{node}.kmsg", "a") as fh:  # GPU 3 is at PCI 0000:5d:00
        fh.write(f"{stamp} NVRM: Xid (PCI:0000:5d:00): 79, pid=777, name=python3, GPU has fallen off the bus.\n")
    return job


def test_beside_jobstats_the_record_goes_into_the_system_comment_in_either_order(acct):
    """jobstats writes the AdminComment whole, with capitals sacctmgr would lower-case.  Written first, the
    epilog leaves it and puts the record into the SystemComment; with job_record_field = "SystemComment"
    the record is there before jobstats writes last, and survives it.  `job` shows the record both times."""
    def system(job: str) -> str:
        out = acct.run("sacct", "-n", "-P", "-X", "-j", job, "-o", "SystemComment", check=False).stdout.strip()
        return out.splitlines()[0] if out else ""

    # jobstats first: its summary is in accounting while the job still runs (22.05's sacctmgr stores it
    # lower-cased: then the record can sit beside it in the AdminComment; otherwise it goes to SystemComment)
    job = _xid_job(acct, "n1", 8)
    acct.wait(lambda: acct.run("sacct", "-n", "-P", "-X", "-j", job, "-o", "State", check=False).stdout.strip()
              == "RUNNING", 30, f"job {job} running in accounting")
    _jobstats(acct, job, JS1)
    left = _accounted(acct, job)
    assert left.lower() == JS1.lower(), left

    def recorded() -> dict | None:
        record = json.loads(acct.gpufleet("job", job, "--json").stdout)["record"]
        return record if record.get("n", {}).get("n1") else None

    record = acct.wait(recorded, 60, lambda: f"job {job}'s record beside jobstats: AdminComment "
                       f"{_accounted(acct, job)!r}, SystemComment {system(job)!r}")
    assert record["n"]["n1"]["x"] == [[3, 79]]
    admin = _accounted(acct, job)
    assert admin == left or admin.startswith(left + " gpufleet="), f"jobstats' summary left whole: {admin!r}"
    assert "gpufleet=" in (system(job) if admin == left else admin)
    # jobstats last: configured to the SystemComment, the record is there before jobstats overwrites
    config = acct.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    config.write_text(original.replace("[slurm]\n", '[slurm]\njob_record_field = "SystemComment"\n', 1))
    try:
        job = _xid_job(acct, "n2", 3)
        acct.wait(lambda: "gpufleet=" in system(job), 60, lambda: f"job {job}'s record: {system(job)!r}")
        _jobstats(acct, job, JS1)
        assert _accounted(acct, job).lower() == JS1.lower() and "gpufleet=" in system(job)   # jobstats last: whole
        record = json.loads(acct.gpufleet("job", job, "--json").stdout)["record"]
        assert record["n"]["n2"]["x"] == [[3, 79]]
    finally:
        config.write_text(original)
