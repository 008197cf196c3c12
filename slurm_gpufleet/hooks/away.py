"""A job that a node's fault sent back to the queue runs next elsewhere, on every path by which it comes back:

* the prolog failed on the node: slurmd drains it and Slurm requeues the job (the prolog's helper,
  hooks/prolog.py, sends it away once it is requeued);
* the job was requeued as it ended on a node the tool holds for a fault (NODE_FAIL with `--requeue`, a
  requeue from inside the job): the epilog that finds the node held starts a helper that waits for the
  job to be pending again (it is not while its epilogs run) and sends it away;
* the node failed under the job and came back without its epilog (slurmd or the node died: NODE_FAIL):
  the next check that finds the node held for a fault sends away the jobs its prologs started and no
  epilog ended, once Slurm has requeued them.

`requeue.decide` says what each job gets (the node excluded, held past `max_fault_requeues`); each job
is handled once, kept in the node's history as a `requeue` action whose text begins `job N:`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from .common import Setup, log
from .jobs import state_of

REQUEUE_WAIT_S = 120.0
# the states of a job Slurm sent back to the queue; REQUEUED: still completing (its epilogs run)
REQUEUED_STATES = ("PENDING", "REQUEUE_HOLD", "REQUEUED", "REQUEUE_FED")
# how many left-behind jobs one check reads (one `scontrol show job` each), and how far back it looks
LEFT_PER_RUN = 8
LEFT_WINDOW_S = 7 * 86400.0
# the states of a job that may still hold the node
_LIVE = ("RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT")


def pause(started: float) -> None:
    """Polls back off: twice a second at first, then every 2 s (one `scontrol show` each)."""
    time.sleep(0.5 if time.monotonic() - started < 10 else 2.0)


# job states in which Slurm holds a job its prolog failed, requeued (22.05: "launch_failed_requeued_held")
_HELD_REASONS = ("launch_failed_requeued_held", "JobHeldAdmin", "JobHeldUser")


def requeue_away(backend, setup: Setup, job: str, node: str, reason: str, deadline: float) -> str | None:
    """A job this node's fault sent back to the queue, once Slurm has requeued it: the node excluded (requeue.decide),
    the job released to run elsewhere, or held where its fault requeues passed `max_fault_requeues`; both
    said in the job's record.  Returns what was done, for the node's history."""
    from ..records import jobrecord
    from ..remedy.requeue import decide
    from ..slurm import SlurmError
    from ..slurm import effects as E
    from .common import actuator_for

    started = time.monotonic()
    try:
        while True:
            fields = backend.job_fields(job)
            if fields is None:
                return None  # gone (cancelled, purged): nothing to send anywhere
            if fields.get("JobState") in ("PENDING", "REQUEUE_HOLD", "REQUEUED"):
                break
            if time.monotonic() > deadline:
                return f"job {job} not requeued within the wait ({fields.get('JobState')}): left as it is"
            pause(started)
        admin = fields.get("AdminComment", "")
        admin = "" if admin == "(null)" else admin
        before = jobrecord.fault_requeues(admin)
        if before and before[-1][:1] == [node] and len(before) >= _restarts(fields):
            # another path (the prolog's helper, the epilog's, a check) sent it away for this requeue
            return f"job {job}: already sent away from {node} for this requeue"
        partitions = set((fields.get("Partition") or "").split(","))
        members = [n.name for n in backend.nodes() if partitions & set(n.partitions)]
        policy = setup.policy.for_node(node)
        away = decide(fields, node, members, policy.max_fault_requeues, before)
        actuator = actuator_for(setup, backend)
        effects: list = [E.AdminComment(job, jobrecord.with_requeue(admin, node, reason, away.note, away.held))]
        if away.exclude is not None:
            effects.append(E.Exclude(job, away.exclude))
        held = fields.get("Reason") in _HELD_REASONS or fields.get("JobState") == "REQUEUE_HOLD"
        if away.release and held:
            effects.append(E.ReleaseJobs((job,)))
        elif not away.release and not held:
            effects.append(E.HoldJobs((job,)))
        actuator.apply(*effects)
    except SlurmError as exc:
        log.warning("job %s not sent away from %s: %s", job, node, exc)
        return None
    done = f"job {job}: " + (f"held: {away.held}" if away.held else "released to run elsewhere")
    return done + (f"; excluded {node}" if away.exclude is not None else f"; {away.note}")


def after_step(setup: Setup, backend, history, step, carried, hook: str, job: str | None) -> list[str]:
    """After a check's step: where the node is held for a fault, the epilog's job (if Slurm is requeuing it)
    and the jobs the node died under are sent away.  Nothing is read where the node is in service."""
    from ..remedy.table import HELD_FOR_FAULT
    from ..slurm.reasons import words_of

    if not carried.ok or carried.blocked or (step.after or step.before) not in HELD_FOR_FAULT:
        return []
    reason = carried.action.reason or words_of(step.info.reason or "") or step.info.reason or "held for a fault"
    if hook == "epilog" and job:
        start_helper(setup, job, reason)
    done = send_away_left(backend, setup, history, setup.node, reason, skip=job, hook=hook)
    for said in done:
        log.info("%s", said)
    return done


def detach(code: str, args: list[str], what: str) -> None:
    """Run `code` (Python) in a detached helper with `args` as its argv, this package importable: the hook
    that starts it exits at once (slurmd waits for the hook, and Slurm acts only after it)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root + (":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    try:
        subprocess.Popen([sys.executable, "-c", code, *args], start_new_session=True, env=env,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as exc:
        log.warning("could not start %s: %s", what, exc)


def start_helper(setup: Setup, job: str, reason: str) -> None:
    """The epilog's job, once Slurm has requeued it: a detached helper waits for it (the job is pending only
    after its epilogs end) and sends it away; the epilog's exit is not delayed."""
    detach("import sys; from slurm_gpufleet.hooks.away import send_away_when_requeued; "
           "sys.exit(send_away_when_requeued(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] or None))",
           [setup.node, job, reason, setup.policy.path or ""], f"the requeue helper for job {job}")


def send_away_when_requeued(node: str, job: str, reason: str, config: str | None) -> int:
    """The helper the epilog starts: a job that is not being requeued (it completed, failed, was cancelled)
    is left at the first read; one that is, is sent away once it is pending."""
    from ..records.history import History, db_path
    from ..slurm import SlurmError
    from .common import KeptHistory, _backend, _setup

    setup = _setup("epilog", config, node)
    if setup is None:
        return 0
    backend = _backend(setup.settings)
    try:
        fields = backend.job_fields(job)
    except SlurmError as exc:
        log.warning("job %s not read: %s", job, exc)
        return 0
    if fields is None or state_of(fields) not in REQUEUED_STATES:
        return 0
    said = requeue_away(backend, setup, job, node, reason, time.monotonic() + REQUEUE_WAIT_S)
    if said:
        history = KeptHistory(History, db_path(setup.settings.state_dir, node))
        history.record_action(node, "epilog", "requeue", reason, said, True)
        history.close()
    return 0


def send_away_left(backend, setup: Setup, history, node: str, reason: str, skip: str | None = None,
                   now: float | None = None, hook: str = "healthcheck") -> list[str]:
    """The jobs this node's prologs started and no epilog ended (the node or its slurmd died under them),
    read once each: one Slurm requeued is sent away; one still running here is read again at a later check;
    one gone, ended or running elsewhere needs nothing.  Returns what was done, each kept in the history
    so that no job is handled twice."""
    from ..slurm import SlurmError
    from ..slurm.commands import expand_hostlist

    now = time.time() if now is None else now
    done = []
    for job in history.jobs_left_behind(node, now - LEFT_WINDOW_S)[:LEFT_PER_RUN]:
        if job == skip:
            continue
        try:
            fields = backend.job_fields(job)
        except SlurmError as exc:
            log.warning("job %s not read: %s", job, exc)
            break   # Slurm does not answer: the next check reads them
        state = state_of(fields) if fields is not None else ""
        if fields is not None and state in _LIVE and node in expand_hostlist(fields.get("NodeList") or ""):
            continue   # still running here (a drain lets it finish): its epilog ends it
        if state == "REQUEUED":
            continue   # requeued, still completing: pending at a later check
        if fields is not None and state in ("PENDING", "REQUEUE_HOLD") and _restarts(fields) > 0:
            said = requeue_away(backend, setup, job, node, reason, time.monotonic())
            if said is None:
                continue
        else:
            said = f"job {job}: {state.lower() or 'gone'}, not requeued from {node}: nothing to send away"
        history.record_action(node, hook, "requeue", reason, said, True)
        done.append(said)
    return done


def _restarts(fields: dict[str, str]) -> int:
    try:
        return int(fields.get("Restarts") or 0)
    except ValueError:
        return 0

