"""Node lists for people: folded into Slurm host lists (`g[10001-12500]`), nodes that share a reason on
one line.  Machine output (`--json`) keeps full lists; only human-readable text goes through here."""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable

# the most hosts one list may name: eight times the fleet this tool is built for (12,500 nodes).  ClusterShell
# builds a set of every name as it parses, so a list is sized before it is parsed: gpu[1-99999999] took 17 GB
MAX_HOSTS = 100_000
_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?(?:/\s*(\d+)\s*)?$")


def size(expr: str) -> int:
    """How many names a Slurm host list holds, counted from its ranges without making them (a range
    that cannot be read counts 1: the parser that follows says what is wrong with it)."""
    total = 0
    for part in _top_level(expr):
        count = 1
        for group in re.findall(r"\[([^\]]*)\]", part):
            inner = 0
            for item in group.split(","):
                m = _RANGE.match(item)
                if m is None:
                    inner += 1
                    continue
                lo, hi, step = int(m.group(1)), int(m.group(2) or m.group(1)), int(m.group(3) or 1)
                inner += max(0, (hi - lo) // max(step, 1) + 1)
            count *= max(inner, 1)
        total += count
    return total


def _top_level(expr: str) -> list[str]:
    """The list's parts at its top level: commas inside brackets do not split."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(expr):
        depth += c == "["
        depth -= c == "]"
        if c == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    parts.append(expr[start:])
    return [p for p in parts if p.strip()]


def expand(expr: str, limit: int = MAX_HOSTS) -> list[str]:
    """A Slurm host list's names, sized before they are made: ValueError where it is no host list, or
    names more than `limit` nodes."""
    n = size(expr)
    if n > limit:
        raise ValueError(f"host list {expr[:80]!r} names {n:,} nodes; at most {limit:,} are taken")
    from ClusterShell.NodeSet import NodeSet, NodeSetException

    try:
        return list(NodeSet(expr))
    except (NodeSetException, ValueError, AssertionError, MemoryError, OverflowError) as exc:
        raise ValueError(f"not a host list {expr[:80]!r}: {exc or type(exc).__name__}") from None


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
