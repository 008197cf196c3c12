"""A count given as a number or a share ("10%"): one rule for every such setting (a rollout's budget and
wave sizes, the drain breaker's threshold)."""

from __future__ import annotations

import math


def count_of(spec: int | str, total: int, *, round_up: bool) -> int:
    """`spec` nodes, or `spec` percent of `total`, at least 1.  A share rounds up where it grants (a rollout's
    budget: 10 % of 8 nodes is 1, never none) and down where it guards (the breaker: 10 % of 15 drains is 1,
    never 2)."""
    if isinstance(spec, int):
        return spec
    share = float(spec.rstrip("%")) * total / 100
    return max(1, math.ceil(share) if round_up else math.floor(share))
