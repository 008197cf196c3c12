"""The values a config may hold: each setting's check (a number, a path, a host list's budget, a
choice), the `setting` that declares one on a dataclass field, and the error a bad value raises."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import field, fields
from typing import Any

DEFAULT_PATH = "/etc/slurm-gpufleet/gpufleet.toml"
ENV_VAR = "SLURM_GPUFLEET_CONFIG"
SEVERITY_CHOICES = ("ok", "warn", "reboot", "drain")


class PolicyError(ValueError):
    """A config problem, already phrased as 'FILE:LINE: what is wrong'."""


def _int(min_value: int = 0) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int) or v < min_value:
            raise ValueError(f"must be an integer >= {min_value}")
        return v
    return check


def _number(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise ValueError("must be a finite number >= 0")
    return float(v)


def _dcgm_level(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 4:
        raise ValueError("must be 0 (none) or a dcgmi diag level 1 to 4")
    return v


def _positive(v: Any) -> Any:
    v = _number(v)
    if v <= 0:
        raise ValueError("must be a finite number > 0")
    return v


def _str(v: Any) -> Any:
    if not isinstance(v, str) or not v.strip():
        raise ValueError("must be a non-empty string")
    return v.strip()


def _version(v: Any) -> Any:
    v = _str(v)
    if not re.fullmatch(r"\d+(\.\d+)*", v):
        raise ValueError("must be a dotted version like 580.159.04")
    return v


def _str_list(v: Any) -> Any:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
        raise ValueError("must be a list of strings")
    return [x.strip() for x in v]


def _branch_types(v: Any) -> Any:
    if not isinstance(v, list) or any(x not in ("LTSB", "PB", "NFB") for x in v):
        raise ValueError('must be a list of branch types, e.g. ["LTSB", "PB"] (LTSB, PB, NFB)')
    return list(v)


def _version_list(v: Any) -> Any:
    return [_version(x) for x in _str_list(v)]


def _int_list(v: Any) -> Any:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        raise ValueError("must be a list of non-negative integers")
    return v


def _bool(v: Any) -> Any:
    if not isinstance(v, bool):
        raise ValueError("must be true or false")
    return v


def _choice(*choices: str) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if v not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return v
    return check


_COMPUTE_MODES = ("Default", "Exclusive_Process", "Prohibited", "Exclusive_Thread")


def _abs_path(v: Any) -> Any:
    v = _str(v)
    if not v.startswith("/"):
        raise ValueError("must be an absolute path (slurmd runs us with no PATH and no working directory)")
    return v


def _timeout(v: Any) -> Any:
    v = _number(v)
    if not 0 < v <= 55:
        raise ValueError("must be > 0 and <= 55 seconds (Slurm kills a health check after 60 s)")
    return v


def _count_or_pct(v: Any) -> Any:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return v
    if isinstance(v, str) and re.fullmatch(r"\d+(\.\d+)?%", v.strip()) and 0 < float(v.strip()[:-1]) <= 100:
        return v.strip()
    raise ValueError('must be a node count >= 1 or a percentage like "25%"')


def parse_budget(text: str) -> int | str:
    """A budget given on a command line (`--max-unavailable`): a node count or "N%"; ValueError says why."""
    return _count_or_pct(int(text) if text.strip().isdecimal() else text)


def _pct(v: Any) -> Any:
    v = _count_or_pct(v)
    if not isinstance(v, str):
        raise ValueError('must be a percentage like "25%"')
    return v


def _waves(v: Any) -> Any:
    if not isinstance(v, list) or not v:
        raise ValueError('must be a non-empty list like [1, "2%", "10%", "25%", "100%"]')
    return tuple(_count_or_pct(x) for x in v)


def _between(low: float, high: float) -> Callable[[Any], Any]:
    """A number strictly between low and high (high may be inf)."""
    def check(v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int | float) or not low < v < high:
            raise ValueError(f"must be a number above {low:g}" + (f" and below {high:g}" if high != float("inf") else ""))
        return float(v)
    return check


# the soft signals the rollout's evidence gate weighs (maintain/evidence.py), as a config names them
SIGNALS = ("xid_soft", "xid_hard", "ecc", "verdict", "job_fail", "row_remap")


def _signals(v: Any) -> Any:
    if not isinstance(v, list) or not v or not all(isinstance(s, str) for s in v):
        raise ValueError(f"must be a non-empty list of signals ({', '.join(SIGNALS)})")
    unknown = [s for s in v if s not in SIGNALS]
    if unknown:
        raise ValueError(f"has an unknown signal {unknown[0]!r} (known: {', '.join(SIGNALS)})")
    return tuple(dict.fromkeys(v))


def _tuple_of_str(v: Any) -> Any:
    return tuple(_str_list(v))


def setting(default: Any = None, check: Callable[[Any], Any] | None = None, *, factory: Any = None) -> Any:
    """A config setting: its default and the validator of its value, declared in one place."""
    if factory is not None:
        return field(default_factory=factory, metadata={"check": check})
    return field(default=default, metadata={"check": check})


def checks_of(cls: type) -> dict[str, Callable[[Any], Any]]:
    """Each setting's validator, read from the dataclass that declares it."""
    return {f.name: f.metadata["check"] for f in fields(cls) if f.metadata.get("check")}


