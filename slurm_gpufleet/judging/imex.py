"""IMEX (cross-node NVLink memory export), judged per job: in the prolog and epilog of a job that uses
it, never on an idle node or by the periodic health check (every peer that judged IMEX on idle nodes
flagged healthy racks: DCGM issue 308, NVSentinel issue 1471).

A job uses IMEX when the site says every job does (`imex_jobs = "all"`: SwitchType=switch/nvidia_imex
gives each job a channel) or when it carries a marker: a feature it asked for (SLURM_JOB_CONSTRAINTS) or
an environment variable.  Then the node's daemon must be READY (`nvidia-imex-ctl -q`) and its domain UP
with no version mismatch (`nvidia-imex-ctl -N -j`); anything else fails the prolog (the job is
requeued) and drains the node.  A node without nvidia-imex-ctl gives no finding.  Both commands run
under the read timeout: a hung daemon cannot hang the prolog.

Light: json, os, re and subprocess only (the prolog imports it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

from .findings import Finding

NAME = "imex"


@dataclass
class ImexState:
    installed: bool = True
    daemon: str | None = None            # nvidia-imex-ctl -q: READY, INITIALIZING, UNAVAILABLE, ...
    domain: str | None = None            # -N -j "status": UP, DOWN, DEGRADED
    version_mismatch: list[str] = field(default_factory=list)   # nodes shown !V!
    not_connected: list[str] = field(default_factory=list)
    error: str | None = None             # what could not be read (timeout, garbage)


def job_uses_imex(env: Mapping[str, str], settings) -> str | None:
    """Why this job uses IMEX, or None."""
    if settings.imex_jobs == "none":
        return None
    if settings.imex_jobs == "all":
        return 'every job ([slurm] imex_jobs = "all")'
    asked = set(re.split(r"[&|,*\[\]\s()]+", env.get("SLURM_JOB_CONSTRAINTS", "")))
    for feature in settings.imex_features:
        if feature in asked:
            return f"feature {feature}"
    for marker in settings.imex_env:
        name, has_value, value = marker.partition("=")
        if name in env and (not has_value or env[name] == value):
            return f"environment {marker}"
    return None


def read_imex(ctl: str, timeout_s: float) -> ImexState:
    if not os.access(ctl, os.X_OK):
        return ImexState(installed=False)
    state = ImexState()
    try:
        q = subprocess.run([ctl, "-q"], capture_output=True, text=True, timeout=timeout_s, check=False)
        state.daemon = (q.stdout.strip().split() or ["(nothing)"])[0][:40]
        n = subprocess.run([ctl, "-N", "-j"], capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        state.error = f"{ctl} {' '.join(exc.cmd[1:])} did not answer within {timeout_s:g} s"
        return state
    except OSError as exc:
        state.error = f"{ctl}: {exc.strerror or exc}"
        return state
    parse_domain(n.stdout, state)
    return state


def parse_domain(text: str, state: ImexState) -> None:
    """`nvidia-imex-ctl -N -j`: {"status": "UP", "nodes": {"0": {"status": "READY", "host": ...,
    "connections": {"1": {"host": ..., "status": "CONNECTED"}}}}}; a !V! anywhere is a version mismatch."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        state.error = f"nvidia-imex-ctl -N -j printed no domain: {text.strip()[:80]!r}"
        return
    state.domain = str(data.get("status", "")).upper() or None
    nodes = data.get("nodes") if isinstance(data.get("nodes"), dict) else {}
    for node in nodes.values():
        if not isinstance(node, dict):
            continue
        conns = node.get("connections") if isinstance(node.get("connections"), dict) else {}
        for conn in conns.values():
            if not isinstance(conn, dict):
                continue
            status, host = str(conn.get("status", "")).upper(), str(conn.get("host", "?"))
            if "VERSION" in status or "!V!" in status:
                state.version_mismatch.append(host)
            elif status not in ("CONNECTED", "C"):
                state.not_connected.append(host)
    if "!V!" in text and not state.version_mismatch:
        state.version_mismatch.append("?")
    state.version_mismatch = sorted(set(state.version_mismatch))
    state.not_connected = sorted(set(state.not_connected))


def judge(state: ImexState, why: str) -> list[Finding]:
    """Pure: what a job that uses IMEX (`why`) meets on this node."""
    if not state.installed:
        return []
    detail = f"the job uses IMEX ({why})"
    if state.error:
        return [Finding(NAME, "drain", "drain", None, "IMEX not readable", f"{state.error}; {detail}")]
    if state.daemon != "READY":
        return [Finding(NAME, "drain", "drain", None, f"IMEX daemon {state.daemon}",
                        f"nvidia-imex-ctl -q: {state.daemon}, not READY; {detail}")]
    if state.version_mismatch:
        return [Finding(NAME, "drain", "drain", None, "IMEX version mismatch",
                        f"!V! with {', '.join(state.version_mismatch)[:100]}: nvidia-imex must match the "
                        f"driver on every node; {detail}")]
    if state.domain != "UP":
        return [Finding(NAME, "drain", "drain", None, f"IMEX domain {state.domain or 'unknown'}",
                        f"nvidia-imex-ctl -N -j: domain {state.domain}"
                        + (f", not connected: {', '.join(state.not_connected)[:80]}" if state.not_connected else "")
                        + f"; {detail}")]
    return []


def job_imex(env: Mapping[str, str], settings) -> tuple[str | None, list[Finding]]:
    """The prolog's and epilog's IMEX judgement, nothing unless the job uses IMEX: (the IMEX state in words,
    for the job's record, or None where the job does not use IMEX or the node has none; the findings).  The prolog keeps the words in the job's window; the epilog records a change."""
    why = job_uses_imex(env, settings)
    if why is None:
        return None, []
    # two commands share the read timeout: the prolog's whole read stays within it
    state = read_imex(settings.imex_ctl, settings.read_timeout_s / 2)
    return state_words(state), judge(state, why)


def state_words(state: ImexState) -> str | None:
    """`daemon READY, domain UP` (with `version mismatch` where one is shown), `not readable`, or None for
    a node without IMEX."""
    if not state.installed:
        return None
    if state.error:
        return "not readable"
    return f"daemon {state.daemon or '?'}, domain {state.domain or '?'}" + (
        ", version mismatch" if state.version_mismatch else "")
