"""A saved report read into a NodeSnapshot: our own snapshot JSON, or nvidia-smi's XML or text output."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .errors import ReportError

if TYPE_CHECKING:
    from .snapshot import NodeSnapshot

__all__ = ["ReportError", "read_report", "read_report_file", "read_snapshot_json"]

MAX_REPORT_BYTES = 64 << 20


def read_snapshot_json(text: str, source: str = "snapshot") -> NodeSnapshot:
    from .snapshot import NodeSnapshot

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"snapshot JSON is not valid: {exc}") from None
    try:
        snap = NodeSnapshot.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise ReportError(f"snapshot JSON does not match the schema: {exc}") from None
    snap.source = f"{source} (was {snap.source})" if snap.source and source not in snap.source else source
    return snap


def read_report(data: bytes | str, source: str = "file") -> NodeSnapshot:
    """Any saved report: our JSON snapshot, `nvidia-smi -q -x`, `nvidia-smi -q`, table, `nvlink -s`."""
    if isinstance(data, bytes):
        if b"\x00" in data[:4096]:
            raise ReportError("input is binary, not an nvidia-smi report or snapshot")
        text = data.decode("utf-8", "replace")
    else:
        text = data
    head = text.lstrip()[:200]
    if head.startswith("{"):
        return read_snapshot_json(text, source)
    # the parsers load only when a saved report is read: the hooks import this package on every run
    if head.startswith("<?xml") or head.startswith("<nvidia_smi_log") or head.startswith("<!DOCTYPE nvidia_smi_log"):
        from .smi_xml import read_xml

        snap = read_xml(text, source)
        if not snap.has_gpu_state():
            from .failures import apply_failure_texts

            apply_failure_texts(text, snap)
        return snap
    from .smi_text import read_text

    return read_text(text, source)


def read_report_file(path: str) -> NodeSnapshot:
    if path == "-":
        import sys

        data = sys.stdin.buffer.read(MAX_REPORT_BYTES + 1)
    else:
        with open(path, "rb") as fh:
            data = fh.read(MAX_REPORT_BYTES + 1)
    if len(data) > MAX_REPORT_BYTES:
        raise ReportError(f"{path}: larger than {MAX_REPORT_BYTES >> 20} MiB; not an nvidia-smi report")
    if not data.strip():
        raise ReportError(f"{path}: empty file")
    return read_report(data, source=path)
