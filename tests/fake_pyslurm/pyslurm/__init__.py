"""A stand-in for pyslurm's 22.5 Node and Job API (pyslurm.Node.load / Node(**changes) / node.modify,
Nodes.load, Jobs.load), on the library boundary: tests put this folder first on PYTHONPATH.  The nodes
live in the JSON file named by $FAKE_PYSLURM_NODES (name -> fields, as pyslurm returns them: gres a
mapping, features lists, times in epoch seconds), the jobs in $FAKE_PYSLURM_NODES.jobs (id -> fields,
absent: none); every call is appended to $FAKE_PYSLURM_NODES.calls.  $FAKE_PYSLURM_VERSION is
the version (default 22.5.3), as 22.5's `__version__` and `version()`."""

from __future__ import annotations

import json
import os

FIELDS = ("name", "state", "reason", "reason_user", "reason_time", "comment", "extra", "boot_time",
          "slurmd_start_time", "configured_gres", "partitions", "available_features", "active_features",
          "weight", "allocated_cpus", "effective_cpus")


def version() -> str:
    return os.environ.get("FAKE_PYSLURM_VERSION", "22.5.3")


def __getattr__(name: str) -> str:  # __version__, read when asked: a test may change the variable
    if name == "__version__":
        return version()
    raise AttributeError(name)


class RPCError(Exception):
    pass


def _path() -> str:
    return os.environ["FAKE_PYSLURM_NODES"]


def _log(*call) -> None:
    with open(_path() + ".calls", "a") as fh:
        fh.write(json.dumps(call) + "\n")


def _nodes() -> dict:
    with open(_path()) as fh:
        return json.load(fh)


class Node:
    def __init__(self, name: str | None = None, **changes) -> None:
        self.name = name
        self._changes = changes
        for k in FIELDS:
            if k != "name":
                setattr(self, k, changes.get(k))

    @staticmethod
    def load(name: str) -> Node:
        _log("load", name)
        data = _nodes().get(name)
        if data is None:
            raise RPCError(f"Node '{name}' does not exist")
        return _node(name, data)

    def modify(self, changes: Node) -> None:
        _log("modify", self.name, changes._changes)
        nodes = _nodes()
        node = nodes[self.name]
        for k, v in changes._changes.items():
            if k == "state":
                base = node["state"].split("+")[0]
                node["state"] = f"{base}+DRAIN" if v == "DRAIN" else base
                if v == "RESUME":
                    node["reason"] = None
            else:
                node[k] = v
        with open(_path(), "w") as fh:
            json.dump(nodes, fh)


def _node(name: str, data: dict) -> Node:
    node = Node(name)
    for k in FIELDS:
        if k in data:
            setattr(node, k, data[k])
    return node


class Nodes(dict):
    """name -> Node, as pyslurm's collection (its values() is every node of the cluster)."""

    @staticmethod
    def load() -> Nodes:
        _log("Nodes.load")
        return Nodes({name: _node(name, data) for name, data in _nodes().items()})


JOB_FIELDS = ("id", "state", "allocated_nodes", "end_time", "start_time", "partition", "gres_per_node", "comment")


class Job:
    def __init__(self, data: dict) -> None:
        for k in JOB_FIELDS:
            setattr(self, k, data.get(k))


class Jobs(dict):
    @staticmethod
    def load() -> Jobs:
        _log("Jobs.load")
        try:
            with open(_path() + ".jobs") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            data = {}
        return Jobs({int(k): Job({"id": int(k), **v}) for k, v in data.items()})
