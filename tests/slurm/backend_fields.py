"""One node, every node and the running jobs as both backends read them, and pyslurm's writes read back,
printed as JSON: run by the
cluster's node interpreter (inside the release root for another release, where pyslurm must link against
that release's libslurm), with pyslurm's build for the release on the path (tests/slurm/pyslurm_build.sh).

    backend_fields.py SCONTROL READ_NODE WRITE_NODE [PYSLURM_DIR]
"""

import dataclasses
import json
import sys

sys.path[:0] = sys.argv[4:5]  # node-python sets PYTHONPATH itself (the fake pynvml, the repository)

from slurm_gpufleet.slurm.commands import CommandBackend  # noqa: E402
from slurm_gpufleet.slurm.pyslurm_backend import PyslurmBackend, pyslurm_usable, pyslurm_version  # noqa: E402

scontrol, read_node, write_node = sys.argv[1:4]
usable, why = pyslurm_usable(scontrol)
commands = CommandBackend(scontrol)
out = {"usable": usable, "why": why, "commands": dataclasses.asdict(commands.node(read_node))}
if usable:
    import pyslurm

    backend = PyslurmBackend(scontrol)
    out["pyslurm_version"] = pyslurm_version(pyslurm)
    out["pyslurm"] = dataclasses.asdict(backend.node(read_node))
    # the rollout engine's fleet reads: every node, the running jobs
    out["fleet"] = {name: {"nodes": [dataclasses.asdict(n) for n in b.nodes()],
                           "jobs": [dataclasses.asdict(j) for j in b.running_jobs()]}
                    for name, b in (("commands", commands), ("pyslurm", backend))}
    # the contract's writes through libslurm, each read back by scontrol
    steps = []
    backend.drain(write_node, "contract: memory gpu2 row remapping failed")
    steps.append(("drain", commands.node(write_node)))
    backend.set_reason(write_node, "contract: memory gpu2 row remapping failed after 2 reboots")
    steps.append(("set_reason", commands.node(write_node)))
    backend.set_field(write_node, "extra", '{"gpufleet":1,"v":"drain"}')
    backend.set_field(write_node, "comment", "rack 12")
    steps.append(("set_field", commands.node(write_node)))
    backend.resume(write_node)
    steps.append(("resume", commands.node(write_node)))
    try:
        backend.node("nosuchnode")
        steps.append(("unknown node", "read"))
    except Exception as exc:
        steps.append(("unknown node", type(exc).__name__))
    out["writes"] = [(name, dataclasses.asdict(info) if not isinstance(info, str) else info) for name, info in steps]
print(json.dumps(out, default=sorted))
