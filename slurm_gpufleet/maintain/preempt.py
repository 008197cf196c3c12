"""A deadline plan's jobs, each stopped at its moment (maintain/deadline.py chose them): only the jobs the
plan named, the owner told first, a job stopped only once each of its rollout nodes sits in a reservation
of ours (else the requeued job, or any other, could start again on the node it just left)."""

from __future__ import annotations

import time
from typing import Any

from ..slurm import effects as E
from ..slurm.actions import JOB_COMMENT_MAX, job_comment
from . import states as S
from .units import StepView
from .world import same_run
from .writes import Writes


def preempt(v: StepView, jobs: list[dict[str, Any]], writes: Writes) -> list[tuple[str, dict[str, Any], str]]:
    """Each job's next state (job id, fields, detail); the Slurm calls go into `writes`."""
    changes: list[tuple[str, dict[str, Any], str]] = []
    now = v.world.now
    target = v.plan.target.named()
    ours = {n for r in v.mine.values() for n in r.nodes}
    rollout_nodes = set(v.state)
    deadline = time.strftime("%Y-%m-%dT%H:%M", time.localtime(v.plan.deadline["at"]))
    for j in jobs:
        job = v.world.jobs.get(j["job"])
        running = job is not None and same_run(job, j["run_start"])
        st = j["state"]
        if not running:
            done = st in (S.J_SIGNALLED, S.J_STOPPING)
            changes.append((j["job"], {"state": S.J_STOPPED if done else S.J_ENDED},
                            "stopped" if done else "ended before its moment: nothing done"))
            continue
        # the owner reads it in the job's comment (squeue -o %k, scontrol show job); written again if a
        # crash lost the call
        when = time.strftime("%Y-%m-%dT%H:%M", time.localtime(j["at"]))
        what = {"checkpoint-requeue": f"SIG{j['signal']} to checkpoint at {when}, then requeued",
                "requeue": f"requeued at {when}", "cancel": f"cancelled at {when}"}[j["action"]]
        note = f"gpufleet {v.rid}: {what} for {target} on all nodes by {deadline}"
        told = f"{job.comment} | {note}" if job.comment else note
        # the owner's text is never cut: where ours does not fit beside it, the plan and audit say it
        if f"gpufleet {v.rid}:" not in job.comment and len(job_comment(told)) <= JOB_COMMENT_MAX:
            writes.add(E.JobComment(j["job"], told))
        if st == S.J_PLANNED:
            changes.append((j["job"], {"state": S.J_TOLD}, note))
            st = S.J_TOLD
        if now < j["at"] or not all(n in ours for n in job.nodes if n in rollout_nodes):
            continue
        elif st == S.J_TOLD and j["action"] == "checkpoint-requeue":
            writes.add(E.Signal(j["job"], j["signal"], bool(j["batch"])))
            changes.append((j["job"], {"state": S.J_SIGNALLED, "since": now},
                            f"SIG{j['signal']}; requeued after {j['grace']:g} s"))
        elif st == S.J_SIGNALLED and now < (j["since"] or now) + j["grace"]:
            continue
        else:  # told (requeue / cancel), signalled past its grace, or stopping and still there
            if st != S.J_STOPPING:
                changes.append((j["job"], {"state": S.J_STOPPING, "since": now}, j["action"]))
            writes.add(E.Cancel((j["job"],)) if j["action"] == "cancel" else E.Requeue((j["job"],)))
    return changes
