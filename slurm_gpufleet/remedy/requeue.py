"""A job that a node's fault sent back to the queue runs next elsewhere (NVIDIA Recovery excludes the blamed
nodes when it retries a job; Slurm 26.11 adds MaxNodeFailRequeue, the releases sites run today nothing).

Pure: the job as `scontrol show job` shows it, the node that failed it, the nodes of the job's partition
and the group's `max_fault_requeues` in; what to write out.  hooks/away.py carries it once Slurm has
requeued the job, on each path it comes back by (a failed prolog, its epilog, the node dying under it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequeueAway:
    exclude: tuple[str, ...] | None   # the job's new ExcNodeList; None: left as it is
    release: bool                     # let the requeued job run again (Slurm holds it after a prolog failure)
    held: str | None                  # why it stays held (its fault requeues past max_fault_requeues)
    note: str = ""                    # said in the job's record


def _nodes(value: str | None) -> list[str]:
    from ClusterShell.NodeSet import NodeSetException

    from ..slurm.commands import expand_hostlist

    try:
        return expand_hostlist(value or "")
    except (NodeSetException, ValueError):
        return []


def decide(job: dict[str, str], node: str, partition_nodes: list[str], max_fault_requeues: int | None,
           requeues_before: list[list[str]]) -> RequeueAway:
    excluded = set(_nodes(job.get("ExcNodeList"))) | {node}
    required = set(_nodes(job.get("ReqNodeList")))
    try:
        need = int((job.get("NumNodes") or "1").split("-")[0])
    except ValueError:
        need = 1
    left = [n for n in partition_nodes if n not in excluded]
    able = node not in required and len(left) >= need
    note = "" if able else (f"{node} not excluded: the job asks for it" if node in required else
                            f"{node} not excluded: {len(left)} node(s) of its partition would be left, it needs {need}")
    count = len(requeues_before) + 1
    if max_fault_requeues is not None and count > max_fault_requeues:
        blamed = ", ".join(rq[0] for rq in requeues_before if rq) + (", " if requeues_before else "") + node
        return RequeueAway(tuple(sorted(excluded)) if able else None, False,
                           f"{count} fault requeues (max_fault_requeues {max_fault_requeues}): {blamed}", note)
    return RequeueAway(tuple(sorted(excluded)) if able else None, True, None, note)
