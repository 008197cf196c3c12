"""Turning nvidia-smi's value strings ("16x", "700.00 W", "N/A", "Enabled") into snapshot values."""

from __future__ import annotations

import re

from ..snapshot import UNSUPPORTED, _Unsupported

# nvidia-smi prints these when a value is not there for this device or cannot be read.
_NOT_AVAILABLE = {"n/a", "[n/a]", "not supported", "[not supported]", "unknown error", "[unknown error]",
                  "requested functionality has been deprecated", "insufficient permissions",
                  "not found"}
_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)")
_TRUE = {"enabled", "yes", "active", "true", "on", "1"}
_FALSE = {"disabled", "no", "not active", "false", "off", "0"}


UNKNOWN_ERROR = {"unknown error", "[unknown error]"}


def is_unknown_error(text: str | None) -> bool:
    return text is not None and text.strip().lower() in UNKNOWN_ERROR


def is_na(text: str | None) -> bool:
    return text is not None and text.strip().lower() in _NOT_AVAILABLE


def to_int(text: str | None) -> int | _Unsupported | None:
    """'16x' -> 16, '3072 bank(s)' -> 3072, '0x6' -> 6, 'N/A' -> UNSUPPORTED, missing -> None."""
    if text is None:
        return None
    raw = text.strip()
    if not raw:
        return None
    if is_na(raw) or raw.lower() == "none":
        return UNSUPPORTED
    if raw.lower().startswith("0x"):
        try:
            return int(raw.split()[0], 16)
        except ValueError:
            return None
    match = _NUMBER.match(raw)
    if not match:
        return None
    return int(float(match.group(1)))


def to_float(text: str | None) -> float | _Unsupported | None:
    if text is None or not text.strip():
        return None
    if is_na(text):
        return UNSUPPORTED
    match = _NUMBER.match(text)
    return float(match.group(1)) if match else None


_FIRST_WORDS = re.compile(r"^(not active|[a-z0-9/\[\]]+)(?=$|[\s,;(#<-])")


def to_bool(text: str | None) -> bool | _Unsupported | None:
    if text is None or not text.strip():
        return None
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    if is_na(low):
        return UNSUPPORTED
    # "Yes   <-- replaced in ticket 123": a value followed by someone's note on the same line
    m = _FIRST_WORDS.match(low)
    if m and m.group(1) != low:
        return to_bool(m.group(1))
    return None


def to_str(text: str | None) -> str | _Unsupported | None:
    if text is None:
        return None
    raw = text.strip()
    if not raw:
        return None
    if is_na(raw):
        return UNSUPPORTED
    return raw


def to_recovery_action(text: str | None) -> str | _Unsupported | None:
    """'None', 'GPU Reset', 'Node Reboot', 'Drain P2P', 'Drain and Reset' -> snake_case codes."""
    if text is None or not text.strip():
        return None
    raw = text.strip()
    if raw.lower() in {"n/a", "[n/a]", "not supported"}:
        return UNSUPPORTED
    return re.sub(r"[^a-z0-9]+", "_", raw.lower()).strip("_")


def add_ints(*values: object) -> int | _Unsupported | None:
    """Sum of counters that are known; UNSUPPORTED if all were unsupported; None if none reported."""
    nums = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if nums:
        return sum(nums)
    if any(v is UNSUPPORTED for v in values):
        return UNSUPPORTED
    return None


def below_limit(limit: int, relative: object) -> object:
    """R550+ prints temperature thresholds as distances below T.Limit; turn one into degrees C."""
    return limit - relative if isinstance(relative, int) else relative
