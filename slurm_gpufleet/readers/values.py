"""Turning nvidia-smi's value strings ("16x", "700.00 W", "N/A", "Enabled") into snapshot values."""

from __future__ import annotations

import re

from .snapshot import UNSUPPORTED, _Unsupported

# What nvidia-smi prints in a field instead of a value, and what each means: the one table every reader
# takes these words from.  "unsupported": not there for this device (N/A); "unknown_error": the GPU answers
# other calls but not this one; "lost": the GPU fell off the bus (NVML_ERROR_GPU_IS_LOST); "requires_reset":
# NVML_ERROR_RESET_REQUIRED, the GPU answers nothing more until it is reset.
FIELD_WORDS = {
    "n/a": "unsupported", "[n/a]": "unsupported", "not supported": "unsupported",
    "[not supported]": "unsupported", "requested functionality has been deprecated": "unsupported",
    "insufficient permissions": "unsupported", "[insufficient permissions]": "unsupported",
    "not found": "unsupported", "[not found]": "unsupported",
    "unknown error": "unknown_error", "[unknown error]": "unknown_error",
    "gpu is lost": "lost", "[gpu is lost]": "lost",
    "gpu requires reset": "requires_reset", "[gpu requires reset]": "requires_reset",
}
# an "unknown error" field has its own check (judging/checks/unknown.py): not "not available"
_NOT_AVAILABLE = {word for word, meaning in FIELD_WORDS.items() if meaning in ("unsupported", "unknown_error")}
_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)")
_TRUE = {"enabled", "yes", "active", "true", "on", "1"}
_FALSE = {"disabled", "no", "not active", "false", "off", "0"}


UNKNOWN_ERROR = {word for word, meaning in FIELD_WORDS.items() if meaning == "unknown_error"}


def field_word(text: str | None) -> str | None:
    """What a field's word means (FIELD_WORDS), or None where the field holds something else."""
    return FIELD_WORDS.get(text.strip().lower()) if text is not None else None


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


# nvidia-smi's Fabric block, text and XML: field -> the words it prints
_FABRIC_STATES = {"not supported": "not_supported", "not started": "not_started", "in progress": "in_progress",
                  "completed": "completed"}
_FABRIC_SUMMARY = {"healthy": "healthy", "unhealthy": "unhealthy", "limited capacity": "limited_capacity"}
# the words nvidia-smi prints for a registration's status (nvmlErrorString of NVML's return codes) and for
# Incorrect Configuration (NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_*), as _code spells them
_FABRIC_STATUS_WORDS = {"success", "invalid_argument", "not_supported", "not_found", "timeout", "operating_system",
                        "memory", "insufficient_resources", "not_ready", "invalid_state", "unknown_error",
                        "in_progress", "uninitialized", "no_permission", "gpu_is_lost", "reset_required"}
_FABRIC_CONFIG_WORDS = {"none", "incorrect_system_guid", "incorrect_chassis_serial", "no_partition",
                        "insufficient_nvlinks", "incompatible_gpu_fw", "incompatible_gpu_firmware",
                        "invalid_location", "gpu_state_invalid"}


def _code(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.strip().lower()).strip("_")


def to_fabric(state: str | None, status: str | None, clique: str | None, cluster_uuid: str | None,
              health: dict[str, str | None]) -> object:
    """The Fabric block as the snapshot's Fabric.  `health` holds the rows under Health by their XML
    names (summary, bandwidth, route_recovery_in_progress, route_unhealthy, access_timeout_recovery,
    incorrect_configuration).  N/A everywhere (no NVSwitch) is "not supported"; a value nvidia-smi
    never prints is kept as "unknown:<it>" for the check to name, never guessed."""
    from .snapshot import Fabric

    fab = Fabric()
    if state is None:
        # a block with rows but no State: something cut it; said, never taken for "no fabric"
        if any(x is not None and not is_na(x) for x in (status, clique, cluster_uuid, *health.values())):
            fab.state = "unknown:no State row"
        return fab
    if is_na(state) or state.strip().lower() == "not supported":
        fab.state = UNSUPPORTED
        return fab
    fab.state = _FABRIC_STATES.get(state.strip().lower(), f"unknown:{state.strip()[:40]}")
    if status is not None and not is_na(status):
        word = _code(status)
        fab.status = word if word in _FABRIC_STATUS_WORDS else f"unknown:{status.strip()[:40]}"
    c = to_int(clique)
    fab.clique_id = c if isinstance(c, int) else None
    u = to_str(cluster_uuid)
    fab.cluster_uuid = u if isinstance(u, str) else None

    def flag(name: str) -> bool | None:
        raw = health.get(name)
        b = to_bool(raw)
        if isinstance(b, bool):
            return b
        if raw is not None and raw.strip() and not is_na(raw):
            fab.unknown.append(f"{name}: {raw.strip()[:40]!r}")
        return None

    bandwidth = health.get("bandwidth")
    if bandwidth and not is_na(bandwidth):
        low = bandwidth.strip().lower()
        fab.degraded_bandwidth = True if low.startswith("degraded") else (False if low == "full" else None)
        if fab.degraded_bandwidth is None:
            fab.unknown.append(f"bandwidth: {bandwidth.strip()[:40]!r}")
    fab.route_recovery = flag("route_recovery_in_progress")
    fab.route_unhealthy = flag("route_unhealthy")
    fab.access_timeout_recovery = flag("access_timeout_recovery")
    config = health.get("incorrect_configuration")
    if config and not is_na(config):
        word = _code(config)
        fab.incorrect_configuration = ("incompatible_gpu_fw" if word == "incompatible_gpu_firmware" else word) \
            if word in _FABRIC_CONFIG_WORDS else f"unknown:{config.strip()[:40]}"
    summary = health.get("summary")
    if summary and not is_na(summary):
        fab.summary = _FABRIC_SUMMARY.get(summary.strip().lower(), f"unknown:{summary.strip()[:40]}")
    return fab


# The fields whose value decides a GPU's health by itself (error counters, pending and failed remaps and
# retirements), by the names the XML (ecc_errors/volatile/dram_uncorrectable) and the text (ECC Errors/
# Volatile/DRAM Uncorrectable) give their sections.
FAULT_FIELD = re.compile(r"^(ecc_errors|ecc errors|remapped_rows|remapped rows|retired_pages|retired pages)(/|$)",
                         re.I)
# what those sections also hold that is no fault value: a retired page's address and when it was retired
_NOT_A_FAULT_VALUE = re.compile(r"timestamp|address|pagelist", re.I)
# a count as nvidia-smi prints one: a whole number, maybe with a unit after it ("3072 bank(s)"), or hex
COUNT = re.compile(r"^(?:0[xX][0-9a-fA-F]+|[-+]?\d+(?:\.0+)?)(?=$|\s)")


def read_as_given(text: str) -> bool:
    """A fault field's value is a count, a yes/no, or a word of FIELD_WORDS; anything else is not read."""
    raw = text.strip()
    return (not raw or COUNT.match(raw) is not None or field_word(raw) is not None
            or isinstance(to_bool(raw), bool))


def scan_fields(gpu, fields) -> None:
    """Every (path, value) of one GPU's report, judged by FIELD_WORDS: a lost GPU is lost whichever field
    says it, a reset it requires is kept with the fields that say so, "Unknown Error" with its fields, and
    a fault field that reads neither a count, a yes/no nor a known word is kept in `gpu.unread`, named
    (the rest of the GPU is still judged; never a fault for a value alone)."""
    lost_in = []
    for path, text in fields:
        if text is None:
            continue
        meaning = field_word(text)
        if meaning == "lost":
            lost_in.append(path)
        elif meaning == "requires_reset":
            gpu.requires_reset.append(path)
        elif meaning == "unknown_error":
            gpu.unknown_errors.append(path)
        elif meaning is None and FAULT_FIELD.match(path) and not _NOT_A_FAULT_VALUE.search(path) \
                and not read_as_given(text):
            gpu.unread.append(f"{path} = {text.strip()[:30]!r}")
    if lost_in:
        gpu.lost = True
        gpu.errors.append(f"GPU is lost (nvidia-smi reads so in {len(lost_in)} field(s), {lost_in[0]} first)")
