"""slurm.conf's own word on the nodes: every node it names, and one node's features, read without
asking slurmctld (a group's `nodes = "slurm.conf"`, and the health check's view before a node returns)."""

from __future__ import annotations

import re


def slurm_conf_nodes(path: str) -> list[str] | None:
    """The nodes a slurm.conf defines (its NodeName= lines, host lists expanded; DEFAULT left out), or
    None where it cannot be read.  Included files are not followed."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    from ..common.hostlist import expand

    hosts: list[str] = []
    for m in re.finditer(r"^\s*NodeName=(\S+)", text, re.MULTILINE | re.IGNORECASE):
        if m.group(1).upper() == "DEFAULT":
            continue
        try:
            hosts += expand(m.group(1))
        except ValueError:
            continue
    return hosts


def slurm_conf_features(path: str, node: str) -> list[str] | None:
    """The features a slurm.conf gives `node` (its NodeName= line's Features=, or Feature=, else the last
    NodeName=DEFAULT's before it), or None where the file cannot be read or defines no such node.
    Included files are not followed."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(64 << 20)
    except OSError:
        return None
    from ..common.hostlist import expand

    default: list[str] = []
    for m in re.finditer(r"^[ \t]*NodeName=(\S+)(.*)$", text, re.MULTILINE | re.IGNORECASE):
        feats = re.search(r"\bFeatures?=(\S+)", m.group(2), re.IGNORECASE)
        given = [f for f in feats.group(1).split(",") if f] if feats else None
        if m.group(1).upper() == "DEFAULT":
            default = given if given is not None else default
            continue
        try:
            hosts = expand(m.group(1))
        except ValueError:
            continue
        if node in hosts:
            return given if given is not None else list(default)
    return None
