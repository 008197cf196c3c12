"""What happened to a job's GPUs, kept with the job in Slurm: its `AdminComment`, which slurmdbd stores with the
job's accounting record (Princeton's jobstats keeps its per-job summary there too).

The record is one segment of the AdminComment, `gpufleet=<JSON in lower-case base32>`: sacctmgr, which
writes the record of a job that has ended into slurmdbd, turns quotes into backquotes and (22.05) lower-cases
the value, so the JSON travels in an encoding both leave alone.  Whatever else a site keeps there stays;
`safe_for_accounting` says where a write through sacctmgr would alter it.
Each node of the job writes its own part (`n`: node -> part) and a failed prolog its fault requeue (`rq`),
merged into what Slurm shows, never one node's write replacing another's: a node writes, reads back, and
writes again where another node's write crossed its own.

A node's part, compact (AdminComment travels with every job record):
  x   [[gpu, xid], ...]       Xids seen on the job's GPUs during the job (kernel log, inside the job's window)
  s   [sxid, ...]             NVSwitch SXids during the job
  m   {gpu: "dram_uncorrected +1, ..."}   memory errors that grew during the job
  t   {gpu: percent}          the share of the job's windows a GPU ran throttled (the in-job sampler's tally)
  fb  {gpu: "completed/healthy -> completed/unhealthy"}   NVLink fabric changes during the job
  ix  "daemon READY, domain UP -> daemon READY, domain DEGRADED"   an IMEX change during the job
  a   "reboot: memory gpu5 remap pending [gpufleet]"   what the epilog did about the node, where it did anything
and, for the whole job, `fl`: [[node, gpu, signature, t_first], ...], the in-job detector's flags
(`fleet lemons` writes them while the job runs).
  f   ["...", ...]            the other findings the epilog recorded against the job (the IMEX judgement, in-job flags)
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

VERSION = 1
MARK = "gpufleet="
# a record a node writes is kept short: AdminComment is stored with every job
MAX_PART_ITEMS = 16
_SEGMENT = re.compile(r"(?:^|\s)gpufleet=([A-Za-z2-7]+=*)(?=\s|$)")


def split(admin_comment: str) -> tuple[str, dict[str, Any]]:
    """(the rest of the AdminComment, our record or an empty one).  A segment that does not parse is
    dropped from the record (never raises) and left out of the rest."""
    text = admin_comment or ""
    m = _SEGMENT.search(text)
    if not m:
        return text.strip(), {}
    rest = " ".join((text[:m.start()].strip(), text[m.end():].strip())).strip()
    try:
        body = m.group(1).rstrip("=").upper()
        record = json.loads(base64.b32decode(body + "=" * (-len(body) % 8)))
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        return rest, {}
    return rest, record if isinstance(record, dict) and record.get("v") == VERSION else {}


def join(rest: str, record: dict[str, Any]) -> str:
    raw = json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
    body = base64.b32encode(raw).decode().rstrip("=").lower()
    return f"{rest} {MARK}{body}" if rest else f"{MARK}{body}"


def safe_for_accounting(admin_comment: str) -> bool:
    """Whether the AdminComment can go through sacctmgr unchanged: sacctmgr (22.05) lower-cases the value,
    so another tool's text with capitals in it would be altered; then the record is kept on the nodes only."""
    rest = split(admin_comment)[0]
    return rest == rest.lower() and '"' not in rest


def node_part(findings: list, action: str | None = None, throttled: dict[str, int] | None = None) -> dict[str, Any]:
    """A node's part from the epilog's job findings (hooks/epilog.job_findings: check "job") and the
    action it took; empty where there is nothing to say."""
    part: dict[str, Any] = {}
    xids, memory, other = [], {}, []
    for f in findings:
        if f.xid is not None and f.check == "job":
            xids.append([f.gpu, f.xid])
        elif f.check == "job" and f.message.startswith("memory errors"):
            memory[str(f.gpu)] = f.detail[:120]
        elif f.check == "sxid_job":
            if f.xid not in part.setdefault("s", []):
                part["s"].append(f.xid)
        elif f.check == "job_fabric":
            part.setdefault("fb", {})[str(f.gpu)] = f.message.removeprefix("fabric ")[:120]
        elif f.check == "job_imex":
            part["ix"] = f.message.removeprefix("IMEX ")[:160]
        else:
            other.append(f"{f.check}: {f.message}"[:120])
    if xids:
        part["x"] = sorted(map(list, {tuple(x) for x in xids}), key=lambda x: (x[0] is None, x))[:MAX_PART_ITEMS]
    if memory:
        part["m"] = memory
    if other:
        part["f"] = other[:MAX_PART_ITEMS]
    if throttled:
        part["t"] = dict(sorted(throttled.items())[:MAX_PART_ITEMS])
    if action:
        part["a"] = action[:160]
    return part


def with_part(admin_comment: str, node: str, part: dict[str, Any]) -> str:
    """The AdminComment with this node's part put in (its earlier part replaced, the others kept)."""
    rest, record = split(admin_comment)
    record = {"v": VERSION, **record}
    record.setdefault("n", {})[node] = part
    return join(rest, record)


def with_requeue(admin_comment: str, node: str, reason: str, note: str = "", held: str | None = None) -> str:
    """The AdminComment with one more fault requeue: the node that failed the job and why (and, where the
    job stays held for its fault requeues, why)."""
    rest, record = split(admin_comment)
    record = {"v": VERSION, **record}
    record.setdefault("rq", []).append([node, reason[:120]] + ([note[:160]] if note else []))
    if held:
        record["held"] = held[:200]
    return join(rest, record)


def with_flag(admin_comment: str, node: str, gpu: int | None, signature: str, t_first: float) -> str | None:
    """The AdminComment with one more in-job flag, or None where the record has it already."""
    rest, record = split(admin_comment)
    flag = [node, gpu, signature, int(t_first)]
    flags = record.get("fl", []) if isinstance(record.get("fl"), list) else []
    if any(isinstance(f, list) and f[:3] == flag[:3] for f in flags):
        return None
    record = {"v": VERSION, **record, "fl": [*flags, flag][-MAX_PART_ITEMS:]}
    return join(rest, record)


def merged(*texts: str | None) -> dict[str, Any]:
    """One record from the fields a job's record may be in (its AdminComment, and its SystemComment where a
    site's jobstats owns the AdminComment): each node's part, the fault requeues and the flags of all."""
    out: dict[str, Any] = {}
    for text in texts:
        record = split(text or "")[1]
        for key, value in record.items():
            if key == "n" and isinstance(value, dict):
                out.setdefault("n", {}).update(value)
            elif key in ("rq", "fl") and isinstance(value, list):
                out[key] = out.get(key, []) + [v for v in value if v not in out.get(key, [])]
            else:
                out[key] = value
    return out


def fault_requeues(admin_comment: str) -> list[list[str]]:
    return list(split(admin_comment)[1].get("rq", []))


def has_part(admin_comment: str, node: str, part: dict[str, Any]) -> bool:
    return split(admin_comment)[1].get("n", {}).get(node) == part
