"""Field-by-field comparison of two snapshots of the same node (live NVML vs nvidia-smi, text vs XML)."""

from __future__ import annotations

from typing import Any

from .snapshot import UNSUPPORTED, NodeSnapshot

# Fields that differ between sources by design, not by error.
VOLATILE = {"timestamp", "source", "level", "host", "kernel_release", "errors", "error_text",
            "partial", "xid_events", "boots_seen"}
# Readings that move from one second to the next on a live GPU.
MOVING = {"draw_w", "gpu_c", "memory_c", "graphics_mhz", "sm_mhz", "memory_mhz", "utilization_gpu_pct",
          "memory_used_mib"}


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    data = obj.to_dict() if isinstance(obj, NodeSnapshot) else obj
    out: dict[str, Any] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        for i, value in enumerate(data):
            out.update(flatten(value, f"{prefix}[{i}]"))
    else:
        out[prefix] = data
    return out


def diff_snapshots(a: NodeSnapshot, b: NodeSnapshot, *, include_moving: bool = False) -> tuple[list, int]:
    """(differences, fields compared).  A field is compared only when both sides reported it."""
    fa, fb = flatten(a), flatten(b)
    diffs = []
    compared = 0
    for key in sorted(set(fa) & set(fb)):
        leaf = key.rsplit(".", 1)[-1]
        top = key.split(".", 1)[0]
        if top in VOLATILE or leaf in VOLATILE or (leaf in MOVING and not include_moving):
            continue
        va, vb = fa[key], fb[key]
        if va is None or vb is None:
            continue
        compared += 1
        if _norm(va) != _norm(vb):
            diffs.append((key, va, vb))
    return diffs, compared


def _norm(value: Any) -> Any:
    if value is UNSUPPORTED or value == "unsupported":
        return "unsupported"
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.lower().startswith("00000000:"):
        return value.lower()[4:]
    if isinstance(value, str):
        return value.lower()
    return value
