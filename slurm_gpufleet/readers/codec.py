"""A snapshot's values and their JSON form: UNSUPPORTED (a value the device reports as not supported,
written "unsupported"), `known`, and the typed decode of a JSON object into its dataclass, field by field,
with the path of any value of the wrong kind."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any


class _Unsupported:
    """Singleton for a value the device reports as not supported (NVML NotSupported, nvidia-smi N/A)."""

    _instance: _Unsupported | None = None

    def __new__(cls) -> _Unsupported:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSUPPORTED"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "UNSUPPORTED"


UNSUPPORTED = _Unsupported()
_JSON_UNSUPPORTED = "unsupported"

Int = int | _Unsupported | None
Float = float | _Unsupported | None
Str = str | _Unsupported | None
Bool = bool | _Unsupported | None


def known(value: Any) -> Any:
    """The value if the device reported one, else None (for checks that only act on real data)."""
    return None if value is None or value is UNSUPPORTED else value

def _encode(obj: Any) -> Any:
    if obj is UNSUPPORTED:
        return _JSON_UNSUPPORTED
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list):
        return [_encode(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): _encode(v) for k, v in obj.items()}
    return obj


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _decode(tp: Any, value: Any, where: str = "snapshot", notes: list[str] | None = None) -> Any:
    """`value` (parsed JSON) as `tp`.  A null where an object or a list belongs is taken as an empty one
    and said in `notes` (a finding names it: the rest of the input is still judged); any other value of
    the wrong kind is a ValueError naming where it is."""
    if value == _JSON_UNSUPPORTED and _allows_unsupported(tp):
        return UNSUPPORTED
    if value is None:
        if isinstance(tp, type) and dataclasses.is_dataclass(tp) or typing.get_origin(tp) in (list, dict):
            empty = _empty(tp)
            if empty is not None:
                if notes is not None:
                    notes.append(f"{where}: null where {_kind(tp)} belongs, read as empty")
                return empty
        return None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object ({tp.__name__}), got {type(value).__name__}")
        hints = _hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        unknown = set(value) - names
        if unknown:
            raise ValueError(f"{where}: {tp.__name__}: unknown field(s) {', '.join(sorted(unknown))}")
        return tp(**{k: _decode(hints[k], v, f"{where}.{k}", notes) for k, v in value.items()})
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None) and a is not _Unsupported]
        errors = []
        for arg in args:
            try:
                return _decode(arg, value, where, notes)
            except (TypeError, ValueError) as exc:
                errors.append(str(exc))
        raise ValueError("; ".join(dict.fromkeys(errors)) or f"{where}: unexpected value {value!r}"[:300])
    if origin is list:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
        (item,) = typing.get_args(tp)
        items = [_decode(item, v, f"{where}[{i}]", notes) for i, v in enumerate(value)]
        if None in items and type(None) not in typing.get_args(item):
            # a null where a list holds only values: left out, and said
            if notes is not None:
                notes.append(f"{where}: {items.count(None)} null item(s) left out")
            items = [v for v in items if v is not None]
        return items
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
        _, vt = typing.get_args(tp)
        return {str(k): _decode(vt, v, f"{where}.{k}", notes) for k, v in value.items()}
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{where}: expected a number, got {value!r}"[:300])
        return float(value)
    if tp in (int, str, bool):
        if type(value) is not tp:
            raise ValueError(f"{where}: expected {tp.__name__}, got {value!r}"[:300])
        return value
    if tp is Any:
        return value
    raise ValueError(f"{where}: cannot decode {value!r} as {tp!r}"[:300])


def _empty(tp: Any) -> Any:
    """An empty value of a dataclass (every field at its default), a list or a dict; None where the
    dataclass has a field without a default (its null stays a null, and a check reads it as unknown)."""
    origin = typing.get_origin(tp)
    if origin is list:
        return []
    if origin is dict:
        return {}
    try:
        return tp()
    except TypeError:
        return None


def _kind(tp: Any) -> str:
    origin = typing.get_origin(tp)
    return "a list" if origin is list else "an object" if origin is dict else f"an object ({tp.__name__})"


def _allows_unsupported(tp: Any) -> bool:
    return _Unsupported in typing.get_args(tp)
