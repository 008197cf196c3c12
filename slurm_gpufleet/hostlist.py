"""Node lists for people: folded into Slurm host lists (`g[10001-12500]`), nodes that share a reason on
one line.  Machine output (`--json`) keeps full lists; only human-readable text goes through here."""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable

_SIMPLE = re.compile(r"([A-Za-z_-]+)(\d+)")


def fold(nodes: Iterable[str]) -> str:
    """`["g1", "g2", "g3", "h7"]` -> `"g[1-3],h7"`, the form scontrol and sinfo accept."""
    names = [n for n in nodes if n]
    if not names:
        return ""
    simple = _fold_simple(names)
    if simple is not None:
        return simple
    from ClusterShell.NodeSet import NodeSet, NodeSetException

    try:
        return str(NodeSet.fromlist(names))
    except NodeSetException:  # a name ClusterShell cannot parse is still a node: show it as it is
        return ",".join(sorted(set(names)))


def _fold_simple(names: list[str]) -> str | None:
    """ClusterShell's folding of names that are letters then one number (`node00042`), without parsing
    each name through it: at 12,500 nodes that parse cost over a second a rollout step.  None for any
    other list (two numbers in a name, padding that differs within a prefix): ClusterShell folds those."""
    by_prefix: dict[str, set[str]] = {}
    for name in names:
        m = _SIMPLE.fullmatch(name)
        if m is None:
            return None
        by_prefix.setdefault(m.group(1), set()).add(m.group(2))
    parts = []
    for prefix in sorted(by_prefix, key=lambda p: p + "%s"):  # as ClusterShell orders its patterns
        digits = by_prefix[prefix]
        widths = {len(d) for d in digits}
        if len(widths) == 1:
            pad = widths.pop()
        elif any(len(d) > 1 and d.startswith("0") for d in digits):
            return None
        else:
            pad = 0
        values = sorted(int(d) for d in digits)
        if len(values) == 1:
            parts.append(f"{prefix}{values[0]:0{pad}d}" if pad else f"{prefix}{values[0]}")
            continue
        ranges, start, prev = [], values[0], values[0]
        for v in values[1:] + [None]:
            if v is not None and v == prev + 1:
                prev = v
                continue
            ranges.append(f"{start:0{pad}d}" if start == prev else f"{start:0{pad}d}-{prev:0{pad}d}")
            if v is not None:
                start = prev = v
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)


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
