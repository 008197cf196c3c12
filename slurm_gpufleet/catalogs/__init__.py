"""The data with sources, loaded once and cached: the Xid and SXid catalogs, GPU models, the remediation
ladders and failure classes, base rates, DCGM's tests; the compatibility matrix and CVEs (`compat`) and the
grammar of a driver, kernel and firmware bundle (`bundle`).  It may import `common` alone."""

from __future__ import annotations

import functools
import os
import re
import tomllib
from dataclasses import dataclass
from typing import Any

# the package's own folder, as a plain path: the data ships as files beside the code, and
# importlib.resources (tempfile, zipfile, random) or pathlib cost each health check 12 ms of its start
DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")


@functools.cache
def _load(name: str) -> dict[str, Any]:
    with open(os.path.join(DATA, name), "rb") as fh:
        return tomllib.load(fh)


@dataclass(frozen=True)
class XidInfo:
    """One Xid in the catalog: its name, the action it calls for and where that comes from."""

    xid: int
    name: str
    action: str
    severity: str
    action_text: str
    source: str


@functools.cache
def xid_catalog() -> dict[int, XidInfo]:
    data = _load("xid_catalog.toml")
    actions = data["actions"]
    return {
        e["xid"]: XidInfo(e["xid"], e["name"], e["action"], actions[e["action"]]["severity"],
                          actions[e["action"]]["text"], e["source"])
        for e in data["xid"]
    }


def xid_info(xid: int) -> XidInfo | None:
    return xid_catalog().get(xid)


@dataclass(frozen=True)
class ActionInfo:
    """What a catalog row calls for: the action, its severity and words, and where that comes from."""

    name: str
    action: str
    severity: str
    action_text: str
    source: str


def _action(name: str, action: str, source: str) -> ActionInfo:
    actions = _load("xid_catalog.toml")["actions"]
    return ActionInfo(name, action, actions[action]["severity"], actions[action]["text"], source)


def nvlink5_action(xid: int, unit: str | None, fatal: bool, intrinfo: int | None = None,
                   error_status: int | None = None) -> ActionInfo | None:
    """An NVLink5 Xid line (144-150): by NVIDIA's decode sheet where the line's unit, registers and error
    status match one of its rules (data/nvlink5_decode.toml: a NETIR_LINK_EVT by its sub-code), else by
    its unit and its Fatal/Nonfatal word (data/xid_catalog.toml [[nvlink5]]); None for a unit neither
    lists (the Xid's own row, or watch, then decides)."""
    if not unit:
        return None
    rule = nvlink5_rule(xid, unit, intrinfo, error_status)
    if rule is not None:
        action = _load("nvlink5_decode.toml")["resolutions"][rule["resolution"]]
        return _action(rule["unit"], action, f"nvl5 decode: sub-code {rule['subcode']}, error status "
                                             f"{rule['error_status']:#x}: {rule['severity']}, {rule['resolution']}")
    for row in _load("xid_catalog.toml").get("nvlink5", []):
        if row["xid"] == xid and (unit.startswith(row["unit"]) or row["unit"].startswith(unit)):
            return _action(row["unit"], row["fatal" if fatal else "nonfatal"], row["source"])
    return None


def nvlink5_rule(xid: int, unit: str, intrinfo: int | None, error_status: int | None) -> dict[str, Any] | None:
    """The decode sheet's rule for this line, or None (no registers, or no rule matches them)."""
    if intrinfo is None or error_status is None:
        return None
    for rule in _nvlink5_rules().get(xid, ()):
        parts = rule["unit"].split("/")
        if not any(unit == p or unit.startswith(p) or p.startswith(unit) for p in parts):
            continue
        if rule["error_status"] == error_status and (_bits_match(rule["intrinfo_v2"], intrinfo)
                                                      or _bits_match(rule["intrinfo_v1"], intrinfo)):
            return rule
    return None


@functools.cache
def _nvlink5_rules() -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for rule in _load("nvlink5_decode.toml")["rule"]:
        out.setdefault(rule["xid"], []).append(rule)
    return out


def _bits_match(pattern: str, value: int) -> bool:
    """A 32-character pattern, bit 31 first: '1' and '0' must match, '-' is any."""
    if len(pattern) != 32:
        return False
    for i, ch in enumerate(pattern):
        if ch != "-" and ((value >> (31 - i)) & 1) != (ch == "1"):
            return False
    return True


@functools.cache
def sxid_catalog() -> dict[int, tuple[str, str]]:
    """SXid -> (name, category) (data/sxid_catalog.toml)."""
    return {row["sxid"]: (row["name"], row["category"]) for row in _load("sxid_catalog.toml")["sxid"]}


def sxid_action(sxid: int, fatal: bool | None) -> tuple[ActionInfo, str]:
    """What an SXid line calls for: by the line's own Fatal / Non-fatal word, else by the catalog's
    category (an unknown code that says neither is watched).  Returns the action and the SXid's name."""
    data = _load("sxid_catalog.toml")
    name, category = sxid_catalog().get(sxid, ("unknown SXid", "other"))
    kind = ("fatal" if fatal else "non_fatal") if fatal is not None else data["categories"][category]
    row = data["actions"][kind]
    return _action(name, row["action"], row["source"]), name




def ib_counters() -> list[dict[str, Any]]:
    """The InfiniBand error counters judged by their growth, with the growth that makes a finding
    (data/ib_counters.toml)."""
    return _load("ib_counters.toml")["counter"]


def mlx5_events() -> list[dict[str, Any]]:
    """The mlx5 driver's kernel-log lines of failed cards and links (data/mlx5_events.toml)."""
    return _load("mlx5_events.toml")["event"]


def mlx5_event(name: str) -> dict[str, Any] | None:
    return next((row for row in mlx5_events() if row["name"] == name), None)


def failure_classes_data() -> dict[str, Any]:
    return _load("failure_classes.toml")


def base_rates() -> dict[str, float]:
    """signal -> events per 8-GPU node-day of a healthy fleet (data/base_rates.toml)."""
    return {sig: float(row["per_node_day"]) for sig, row in _load("base_rates.toml").items()}


def remediation_data() -> dict[str, Any]:
    return _load("remediation.toml")


@functools.cache
def dcgm_severities() -> dict[int, dict[str, str]]:
    """dcgmErrorSeverity_t -> its name, meaning, and the finding's severity and action (data/dcgm.toml)."""
    return {int(k): v for k, v in _load("dcgm.toml")["severity"].items()}


@dataclass(frozen=True)
class DcgmError:
    """One error of DCGM's own table (data/dcgm_errors.toml): its id, name, severity class and message."""

    id: int
    name: str
    severity: int
    category: int
    pattern: re.Pattern | None   # its message format as a pattern (None where DCGM gives it none)


def _format_pattern(message: str) -> re.Pattern | None:
    """A printf format as a pattern: each conversion (%u, %s, %.2f, %llu) any text, the rest as written."""
    if not message:
        return None
    parts = re.split(r"%[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z)?[diouxXeEfgGsc]", message)
    return re.compile(".*?".join(re.escape(p) for p in parts), re.S)


@functools.cache
def dcgm_errors() -> dict[int, DcgmError]:
    """DCGM's error table by id (data/dcgm_errors.toml, from DCGM's dcgm_errors.h and dcgm_errors.c)."""
    return {int(k): DcgmError(int(k), e["name"], int(e["severity"]), int(e["category"]),
                              _format_pattern(e["message"]))
            for k, e in _load("dcgm_errors.toml")["error"].items()}


@functools.cache
def dcgm_test_errors() -> dict[str, tuple[str, ...]]:
    """A DCGM test's name (lower case) -> the errors it can report (data/dcgm.toml [test])."""
    return {name.lower(): tuple(row["errors"]) for name, row in _load("dcgm.toml")["test"].items()}


def compat_data() -> dict[str, Any]:
    return _load("compat.toml")


def security_data() -> dict[str, Any]:
    return _load("security.toml")


@dataclass(frozen=True)
class GpuModel:
    """One GPU model in the table: how to recognise it and what it should reach."""

    name: str
    pattern: re.Pattern[str]
    architecture: str | None
    max_sm_mhz: int | None
    source: str
    mem_bw_gbps: float | None = None
    memory_gb: float | None = None
    nvlink_links: int | None = None
    nvlink_gbps: float | None = None
    # an NVL72-style multi-node NVLink domain (GB200/GB300); an HGX board with NVSwitch (fabric manager)
    multinode_nvlink: bool = False
    nvswitch_board: bool = False
    # a PCIe card whose NVLinks go through an optional bridge: no link active is a card without one
    nvlink_bridge: bool = False


_MODEL_FIELDS = ("mem_bw_gbps", "memory_gb", "nvlink_links", "nvlink_gbps", "multinode_nvlink", "nvswitch_board",
                 "nvlink_bridge")


def model_from(name: str, pattern: re.Pattern[str], spec: dict[str, Any], source: str) -> GpuModel:
    """One [[model]] row (data file) or [models."NAME"] table (policy) as a GpuModel."""
    return GpuModel(name, pattern, spec.get("architecture"), spec.get("max_sm_mhz"), source,
                    **{k: spec[k] for k in _MODEL_FIELDS if k in spec})


@functools.cache
def gpu_models() -> tuple[GpuModel, ...]:
    return tuple(model_from(m["name"], re.compile(m["match"], re.I), m, m["source"])
                 for m in _load("gpu_models.toml")["model"])


def find_model(product_name: str | None, extra: tuple[GpuModel, ...] = ()) -> GpuModel | None:
    """The site's own models (policy) first, then the shipped table."""
    if not product_name:
        return None
    for model in (*extra, *gpu_models()):
        if model.pattern.search(product_name):
            return model
    return None
