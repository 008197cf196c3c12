"""What a JSON document another tool or a person wrote must be before it is used: each object checked field
by field against the dataclass it becomes (a saved fleet, a plan), so that a value of the wrong kind is one
line naming where, never a crash later.  Pure."""

from __future__ import annotations

import json
from typing import Any


def kind_ok(value: Any, hint: Any) -> bool:
    """Whether a JSON value is of the kind a type hint names (lists and sets item by item; a float finite
    and a time's size; an int within 64 bits; a bool never a number)."""
    import types
    import typing

    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return any(kind_ok(value, a) for a in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(kind_ok(v, item) for v in value)
    if origin is dict:
        key, item = typing.get_args(hint) or (Any, Any)
        return isinstance(value, dict) and all(kind_ok(k, key) and kind_ok(v, item) for k, v in value.items())
    if origin is set:
        (item,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(kind_ok(v, item) for v in value)
    if hint is float:
        import math

        # a number of hundreds of digits is an int to JSON, and no time; NaN and infinities are no times
        return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < 1e18 and \
            math.isfinite(value)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63
    return isinstance(value, hint) if isinstance(hint, type) else True


def check_fields(where: str, n: Any, cls: type, key_field: str) -> None:
    """A document's object, field by field against the dataclass `cls` it becomes: ValueError naming
    `where` (and its `key_field`), never a crash later (a job whose `nodes` is a string would leave its busy
    node out of its job)."""
    import dataclasses
    import typing

    if not isinstance(n, dict):
        raise ValueError(f"{where}: expected an object, got {type(n).__name__}")
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    unknown = sorted(set(n) - {f.name for f in fields})
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")
    missing = [f.name for f in fields if f.name not in n and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{where}: no {', '.join(missing)}")
    for key, value in n.items():
        if not kind_ok(value, hints[key]):
            raise ValueError(f"{where} ({n.get(key_field)!r}): {key} is {json.dumps(value)[:60]}, not "
                             f"{str(hints[key]).replace('typing.', '')}")


# the largest document read whole: a saved fleet of 12,500 nodes with its jobs is about 10 MB
MAX_DOCUMENT_BYTES = 256 << 20


def load_json(path: str, limit: int = MAX_DOCUMENT_BYTES) -> Any:
    """A JSON document another tool or a person wrote, read whole only within `limit` bytes: ValueError
    past it (and for JSON that does not parse, or nests past the parser's depth); OSError as open raises."""
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit >> 20} MiB: not read" if limit >= 1 << 20 else
                         f"larger than {limit:,} bytes: not read")
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deep to read") from None
