"""Node lists for people: folded into Slurm host lists (`g[10001-12500]`), nodes that share a reason on
one line.  Machine output (`--json`) keeps full lists; only human-readable text goes through here."""

from __future__ import annotations

from collections.abc import Hashable, Iterable


def fold(nodes: Iterable[str]) -> str:
    """`["g1", "g2", "g3", "h7"]` -> `"g[1-3],h7"`, the form scontrol and sinfo accept."""
    names = [n for n in nodes if n]
    if not names:
        return ""
    from ClusterShell.NodeSet import NodeSet, NodeSetException

    try:
        return str(NodeSet.fromlist(names))
    except NodeSetException:  # a name ClusterShell cannot parse is still a node: show it as it is
        return ",".join(sorted(set(names)))


def fold_short(nodes: Iterable[str], width: int) -> str:
    """A folded list cut to `width` characters, saying how many nodes it holds when cut."""
    names = list(nodes)
    text = fold(names)
    if len(text) <= width:
        return text
    suffix = f"... ({len(names)} nodes)"
    return text[: max(width - len(suffix), 8)] + suffix


def grouped(pairs: Iterable[tuple[str, Hashable]]) -> list[tuple[Hashable, int, str]]:
    """(node, key) pairs -> one (key, count, folded nodes) per distinct key, largest group first."""
    by_key: dict[Hashable, list[str]] = {}
    for node, key in pairs:
        by_key.setdefault(key, []).append(node)
    rows = [(key, len(nodes), fold(nodes)) for key, nodes in by_key.items()]
    return sorted(rows, key=lambda r: -r[1])
