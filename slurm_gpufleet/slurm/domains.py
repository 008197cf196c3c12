"""Failure domains: NVLink racks (a GB200 NVL72 is 18 trays in one NVLink domain), IMEX domains, Slurm
blocks.  A domain is the smallest unit of change where drivers cannot be mixed, and the unit a
`--segment` job needs whole.

Read from Slurm's block topology (`scontrol show topology`, topology/block, Slurm 23.11 on), from
`[[domain]]` host lists in the config (22.05, or sites without blocks), or made of consecutive nodes
(`maintain simulate --domain-size N`).  Pure: text and lists in, a `Domains` out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

FROM_SLURM = "slurm topology/block"
FROM_CONFIG = "config [[domain]]"
FROM_FABRIC = "published NVLink fabric (cluster UUID, clique)"


@dataclass
class Domains:
    members: dict[str, list[str]] = field(default_factory=dict)   # domain -> its nodes, in Slurm's order
    source: str | None = None

    def __post_init__(self) -> None:
        self.of = {n: d for d, nodes in self.members.items() for n in nodes}

    def __bool__(self) -> bool:
        return bool(self.members)

    def restricted(self, names: Iterable[str]) -> Domains:
        """The domains that hold any of `names`, with those members only (a rollout of part of a rack
        moves that part as one; the rest of the rack is not its to touch)."""
        keep = set(names)
        return Domains({d: [n for n in nodes if n in keep] for d, nodes in self.members.items()
                        if any(n in keep for n in nodes)}, self.source)

    def to_plan(self) -> tuple[dict[str, list[str]], str | None]:
        return {d: list(nodes) for d, nodes in self.members.items()}, self.source


def parse_topology(text: str) -> Domains:
    """`scontrol show topology` with topology/block: one `BlockName=b1 BlockIndex=0 Nodes=n[1-4]
    BlockSize=4` line per block.  Anything else (topology/tree switches, "no topology") gives no domains."""
    from .commands import expand_hostlist

    members: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("BlockName="):
            continue
        values = dict(tok.partition("=")[::2] for tok in line.split() if "=" in tok)
        nodes = expand_hostlist(values.get("Nodes", ""))
        if values.get("Nodes", "(null)") not in ("", "(null)"):
            members[values["BlockName"]] = nodes
    return Domains(members, FROM_SLURM if members else None)


def from_config(specs: Iterable[Any]) -> Domains:
    """The config's [[domain]] rows (policy.DomainSpec)."""
    members = {s.name: list(s.nodes) for s in specs}
    return Domains(members, FROM_CONFIG if members else None)


def fabric_domain(published: dict[str, Any] | None) -> str | None:
    """The NVLink domain a node's published summary names (hooks.fabric_fields): its cluster UUID and
    clique.  A clique 0 with a zero UUID never joined a domain; a node that publishes none is in none."""
    data = published or {}
    uuid, clique = data.get("cuid"), data.get("clq")
    if not isinstance(uuid, str) or not isinstance(clique, int) or (clique == 0 and set(uuid) <= {"0", "-"}):
        return None
    return f"nvl-{uuid[:8]}-{clique}"


def from_fabric(nodes: Iterable[tuple[str, str | None]]) -> Domains:
    """NVLink domains as the nodes themselves report them: (node, fabric_domain) pairs."""
    members: dict[str, list[str]] = {}
    for name, domain in nodes:
        if domain:
            members.setdefault(domain, []).append(name)
    return Domains(members, FROM_FABRIC if members else None)


def discover(specs: Iterable[Any], topology: str | None, nodes: Iterable[tuple[str, str | None]] | None) -> Domains:
    """The one rule for a node's failure domain: the config's [[domain]] rows, else Slurm's blocks, else
    the NVLink fabric the nodes publish ((node, fabric_domain) pairs)."""
    found = from_config(specs)
    if not found and topology:
        found = parse_topology(topology)
    if not found and nodes is not None:
        found = from_fabric(nodes)
    return found


def consecutive(names: list[str], size: int) -> Domains:
    """Every `size` consecutive nodes form a domain (the simulator's racks)."""
    members = {f"d{i // size + 1:04d}": names[i:i + size] for i in range(0, len(names), size)}
    return Domains(members, f"consecutive nodes, {size} per domain")


def mixed_domains(domains: Domains, driver_of: dict[str, str | None], in_service: set[str]) -> int:
    """Domains whose nodes in service (the ones a job can use) run more than one driver."""
    count = 0
    for nodes in domains.members.values():
        drivers = {driver_of.get(n) for n in nodes if n in in_service}
        if len(drivers) > 1:
            count += 1
    return count


def whole_in_service(domains: Domains, in_service: set[str]) -> int:
    """Domains with every node in service: what a `--segment` job spanning a domain can use."""
    return sum(1 for nodes in domains.members.values() if all(n in in_service for n in nodes))
