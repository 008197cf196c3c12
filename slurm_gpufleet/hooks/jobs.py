"""What the prolog leaves for the epilog of the same job: its GPUs and their error counters at the start."""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING

from ..readers.jobgpus import slurm_id
from .common import log

if TYPE_CHECKING:
    from ..policy import SlurmSettings
    from ..readers.snapshot import NodeSnapshot


def _job_nodes() -> int:
    """How many nodes the job has, from the prolog's environment."""
    raw = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES")
    if raw and raw.isdecimal():
        return int(raw)
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST") or ""
    if not nodelist:
        return 1
    from ..slurm.commands import expand_hostlist

    return len(expand_hostlist(nodelist))


def _job_gpus() -> frozenset[int] | None:
    from ..readers.jobgpus import job_gpu_ids

    return job_gpu_ids(os.environ)


def _window_path(settings: SlurmSettings, node: str, job: str) -> str:
    return os.path.join(settings.state_dir, "jobs", f"{node}.{job}.json")


def _write_window(settings: SlurmSettings, node: str, job: str, snap: NodeSnapshot,
                  gpus: frozenset[int] | None, imex: str | None = None) -> None:
    """Start of the job's window, its GPUs' error counters and NVLink fabric state, and the IMEX state
    where the job uses IMEX: for the epilog (a small file, no database)."""
    counters, fabric = {}, {}
    for g in snap.gpus:
        sid = slurm_id(g)
        if gpus is None or sid in gpus:
            counters[str(sid)] = _counters(g)
            words = fabric_words(g)
            if words is not None:
                fabric[str(sid)] = words
    path = _window_path(settings, node, job)
    try:
        from ..common.safefile import write_file

        write_file(path, json.dumps({"start": time.time(), "gpus": sorted(gpus) if gpus else None,
                                     "counters": counters, **({"fabric": fabric} if fabric else {}),
                                     **({"imex": imex} if imex else {})}), mode=0o600, make_dirs=True)
    except OSError as exc:
        log.warning("could not write the job window: %s", exc)


def fabric_words(g) -> str | None:
    """A GPU's NVLink fabric in words, `completed/healthy` (state, then health where the driver gives it),
    or None where the GPU has no fabric (no NVLink fabric on its board, or not read)."""
    from ..readers.snapshot import known

    state = known(g.fabric.state)
    if state is None or state == "not_supported":
        return None
    summary = known(g.fabric.summary)
    return f"{state}/{summary}" if summary else str(state)


def _counters(g) -> dict[str, int | None]:
    from ..readers.snapshot import known

    def n(v):
        v = known(v)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    return {"dram_uncorrected": n(g.ecc.volatile_dram_uncorrected), "sram_uncorrected": n(g.ecc.volatile_sram_uncorrected),
            "dram_corrected": n(g.ecc.volatile_dram_corrected), "remap_uncorrectable": n(g.remapped_rows.uncorrectable),
            "remap_correctable": n(g.remapped_rows.correctable), "retired_dbe": n(g.retired_pages.double_bit)}


# a job in these states is alive in slurmctld, which takes updates of its AdminComment; any other (a
# COMPLETING job, whose epilogs run) has ended: its record is slurmdbd's
LIVE_STATES = ("PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
               "RESIZING", "SIGNALING", "STAGE_OUT")


def state_of(fields: dict[str, str]) -> str:
    """A job's base state as `scontrol show job` gives it ("COMPLETING" of "COMPLETING+..." or "")."""
    return ((fields.get("JobState") or "").split() or [""])[0]


def record_part(backend, actuator, job: str, node: str, part: dict, tries: int = 6, sleep=time.sleep,
                rand=None, field: str = "AdminComment") -> bool:
    """This node's part of the job's record (jobrecord.py) into its AdminComment, merged with what the job's
    other nodes wrote: read, merge, write, read back; a write of another node that crossed ours is merged
    again, up to `tries` times.  A job that lives is written in slurmctld; one that has ended (the epilog
    runs while its job completes) in slurmdbd, through sacct and sacctmgr.  False where the job is gone or
    the part could not be kept; SlurmError where Slurm refuses (no accounting for an ended job).

    `field`: where an ended job's record goes (`job_record_field`).  An AdminComment that holds another
    tool's text sacctmgr would alter (jobstats' `JS1:...`, written first) is left whole and the record goes
    into the job's SystemComment instead."""
    import random

    from ..records import jobrecord
    from ..slurm.effects import AdminComment

    rand = rand or random.random
    for _ in range(tries):
        fields = backend.job_fields(job)
        # a job with no readable state (an answer that is not a job's) is taken as ended: accounting has it
        ended = fields is None or state_of(fields) not in LIVE_STATES
        if ended:
            current = backend.accounted_admin_comment(job, field)
            if current is None:
                return False
        else:
            current = fields.get("AdminComment", "")
        current = "" if current == "(null)" else current
        if jobrecord.has_part(current, node, part):
            return True
        if ended and not jobrecord.safe_for_accounting(current):
            if field == "AdminComment":
                log.info("job %s: its AdminComment holds another tool's text (jobstats?): the record goes into "
                         "its SystemComment", job)
                field = "SystemComment"
                continue
            log.warning("job %s: its %s holds another tool's text that sacctmgr would lower-case: the record is "
                        "kept in %s's history only", job, field, node)
            return False
        actuator.apply(AdminComment(job, jobrecord.with_part(current, node, part), accounted=ended, field=field))
        sleep(0.05 + 0.3 * rand())
    return False
