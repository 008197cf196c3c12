"""A site's own fault log, for `fleet simulate-faults --fault-log FILE`: the faults its fleet had, to replay
instead of drawing them.

Two forms, told apart by their first line:

* CSV with the header `node,start,end,class,detail`: start and end are hours since the log's start, or ISO
  8601 times (one form per file); a row without an end lasts to the log's end;
* `sacctmgr -P show event ... format=NodeName,TimeStart,TimeEnd,State,Reason,User` (any order of those
  columns, `|` between them): node down and drain periods with their reasons; a NodeName may be a host
  list (`gpu[001-003]`); a TimeEnd of `Unknown` lasts to the log's end; events without a node are the
  cluster's own, and skipped.

A row's class (CSV) or reason (sacctmgr) is free text, mapped to a failure class by the keywords in the
rates file (data/failure_classes.toml): the longest keyword found as a whole word or phrase wins; a text
no class names is `other`.  Every bad row is a one-line error naming its line (exit 2).
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import re
from dataclasses import dataclass

CSV_HEADER = ["node", "start", "end", "class", "detail"]
EVENT_COLUMNS = ("TimeStart", "TimeEnd", "Reason")
MAX_ROWS = 1_000_000
# the longest log replayed: ten years (simulate-faults' --days takes at most 3650); a log spanning years
# 0001-9999 would be a simulation of millennia
MAX_SPAN_S = 3650 * 86400.0


class FaultLogError(ValueError):
    """A fault log that cannot be read: one line, exit 2."""


@dataclass(frozen=True)
class LoggedFault:
    node: str
    start_s: float          # seconds since the log's start
    end_s: float            # the log's end where the row has none
    text: str               # its class (CSV) or reason (sacctmgr), as written
    detail: str = ""


@dataclass(frozen=True)
class FaultLog:
    faults: tuple[LoggedFault, ...]
    span_s: float           # from the log's start to its last start or end
    nodes: tuple[str, ...]  # in order of first appearance
    form: str               # "csv" or "sacctmgr"


def read(path: str) -> FaultLog:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read(64 * 1024 * 1024 + 1)
    except OSError as exc:
        raise FaultLogError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise FaultLogError(f"{path}: not text (UTF-8)") from None
    lines = text.splitlines()
    first = next((ln for ln in lines if ln.strip()), "")
    if [c.strip().lower() for c in first.split(",")] == CSV_HEADER:
        return _csv(path, lines)
    if "|" in first and all(c in first.split("|") for c in EVENT_COLUMNS):
        return _events(path, lines)
    raise FaultLogError(f"{path}: not a fault log: the first line must be the CSV header "
                        f"'{','.join(CSV_HEADER)}' or sacctmgr -P show event's header (with "
                        f"{', '.join(EVENT_COLUMNS)} and NodeName)")


def _iso(where: str, value: str) -> float:
    try:
        t = dt.datetime.fromisoformat(value)
    except ValueError:
        raise FaultLogError(f"{where}: {value!r} is not hours or an ISO 8601 time") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()


def _hours(where: str, value: str) -> float | None:
    try:
        h = float(value)
    except ValueError:
        return None
    if not math.isfinite(h) or h < 0:
        raise FaultLogError(f"{where}: {value!r}: hours must be a finite number >= 0")
    return h * 3600


def _csv(path: str, lines: list[str]) -> FaultLog:
    rows: list[tuple[str, float, float | None, str, str]] = []
    form = None   # "hours" or "iso", one per file
    reader = csv.reader(lines)
    next(reader)
    try:
        for n, row in enumerate(reader, start=2):
            if not row or not any(c.strip() for c in row):
                continue
            if len(row) != 5:
                raise FaultLogError(f"{path}:{n}: {len(row)} columns, not 5 ({','.join(CSV_HEADER)})")
            node, start, end, cls, detail = (c.strip() for c in row)
            if not node:
                raise FaultLogError(f"{path}:{n}: no node")
            times = []
            for label, value in (("start", start), ("end", end)):
                if not value:
                    if label == "start":
                        raise FaultLogError(f"{path}:{n}: no start")
                    times.append(None)
                    continue
                h = _hours(f"{path}:{n}: {label}", value)
                kind = "hours" if h is not None else "iso"
                if form not in (None, kind):
                    raise FaultLogError(f"{path}:{n}: {label} {value!r}: hours and ISO times mixed in one log")
                form = kind
                times.append(h if h is not None else _iso(f"{path}:{n}: {label}", value))
            if times[1] is not None and times[1] < times[0]:
                raise FaultLogError(f"{path}:{n}: end before start")
            rows.append((node, times[0], times[1], cls, detail))
            if len(rows) > MAX_ROWS:
                raise FaultLogError(f"{path}: more than {MAX_ROWS:,} rows")
    except csv.Error as exc:   # a field past csv's limit (128 KiB), a NUL byte
        raise FaultLogError(f"{path}:{reader.line_num}: {exc}") from None
    return _made(path, rows, "csv")


def _events(path: str, lines: list[str]) -> FaultLog:
    header = [c.strip() for c in lines[0].split("|")]
    node_col = "NodeName" if "NodeName" in header else "ClusterNodes" if "ClusterNodes" in header else None
    if node_col is None:
        raise FaultLogError(f"{path}:1: sacctmgr's header has no NodeName (format=NodeName,TimeStart,TimeEnd,"
                            "State,Reason)")
    at = {c: header.index(c) for c in header}
    rows: list[tuple[str, float, float | None, str, str]] = []
    from ..slurm.commands import expand_hostlist

    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) < len(header):
            raise FaultLogError(f"{path}:{n}: {len(cells)} fields, not {len(header)}")
        names = cells[at[node_col]].strip()
        if not names:
            continue   # the cluster's own event (its controller), no node's
        start = _iso(f"{path}:{n}: TimeStart", cells[at["TimeStart"]].strip())
        end_text = cells[at["TimeEnd"]].strip()
        end = None if end_text in ("", "Unknown", "None") else _iso(f"{path}:{n}: TimeEnd", end_text)
        if end is not None and end < start:
            raise FaultLogError(f"{path}:{n}: TimeEnd before TimeStart")
        state = cells[at["State"]].strip() if "State" in at else ""
        try:
            nodes = expand_hostlist(names)
        except Exception:
            raise FaultLogError(f"{path}:{n}: {names!r} is not a host list") from None
        for node in nodes:
            rows.append((node, start, end, cells[at["Reason"]].strip(), state))
        if len(rows) > MAX_ROWS:
            raise FaultLogError(f"{path}: more than {MAX_ROWS:,} rows")
    return _made(path, rows, "sacctmgr")


def _made(path: str, rows, form: str) -> FaultLog:
    if not rows:
        raise FaultLogError(f"{path}: no fault in the log")
    origin = min(r[1] for r in rows)
    last = max(max(r[1], r[2] if r[2] is not None else r[1]) for r in rows) - origin
    span = max(last, 3600.0)
    if span > MAX_SPAN_S:
        raise FaultLogError(f"{path}: spans {span / 86400 / 365.25:,.0f} years; at most "
                            f"{MAX_SPAN_S / 86400 / 365.25:.0f} are replayed")
    nodes: dict[str, None] = {}
    faults = []
    for node, start, end, text, detail in sorted(rows, key=lambda r: (r[1], r[0])):
        nodes.setdefault(node, None)
        faults.append(LoggedFault(node, start - origin, (end if end is not None else origin + span) - origin, text,
                                  detail))
    return FaultLog(tuple(faults), span, tuple(nodes), form)


def class_of(text: str, classes) -> str:
    """The failure class a log's text names: the longest keyword found in it as a whole word or phrase."""
    low = text.lower()
    best, length = "other", 0
    for c in classes:
        for word in c.keywords:
            if len(word) > length and re.search(rf"(?<![a-z0-9]){re.escape(word)}(?![a-z0-9])", low):
                best, length = c.name, len(word)
    return best
