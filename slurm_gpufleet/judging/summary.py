"""The GPU summary a node's health check publishes to Slurm (its Extra, or its Comment): one JSON object
marked `"gpufleet": 1`, with `t`, the UTC time of the check; its keys are `Summary`'s.  Made by `encode`
(the health check, the prolog and the epilog), with the in-job sampler's digest `is` added by
sampler.py; read by a rollout's validation and evidence gate, `fleet`, the straggler views, the rack
escalation and the health check itself (it writes only news).

Light on purpose (json and time only): the health check imports it on every run; `encode` imports the
engine's pieces it needs when it runs.
"""

from __future__ import annotations

import calendar
import json
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from ..readers.snapshot import NodeSnapshot
    from .pipeline import Report

# The published keys: short, because slurmctld sends a node's Extra in every node record it answers with.
# (The functional form: "is" is a keyword.)
Summary = TypedDict("Summary", {
    "gpufleet": int,              # 1: the mark that the text is ours
    "v": str,                     # the verdict: ok, warn, reboot, drain
    "t": str,                     # when the check ran (UTC, TIME_FORMAT)
    "drv": str | None,            # driver version, as NVML reports it
    "cuda": str | None,           # the driver's CUDA version
    "gpus": str,                  # "8xNVIDIA H200": count and models
    "fw": str,                    # VBIOS versions, comma-separated
    "gsp": str,                   # GSP firmware versions
    "ifr": str,                   # InfoROM image versions
    "kern": str,                  # the running kernel
    "modf": str,                  # the nvidia module's flavour (open, proprietary)
    "cdmm": str,                  # coherent driver memory management mode (Grace systems)
    "fab": str,                   # NVLink fabric registration states, one letter each (C, P, N, ?)
    "clq": int,                   # the fabric clique the node's GPUs joined
    "cuid": str,                  # the fabric's cluster UUID: the NVLink domain
    "fdl": int,                   # 1: clq and cuid are the domain last published (no GPU joined this run)
    "xs": int,                    # soft Xid events since boot (the evidence gate)
    "xh": int,                    # hard Xid events since boot
    "ecc": int,                   # volatile ECC errors since the driver loaded
    "rr": int,                    # rows remapped, correctable and uncorrectable, all GPUs (kept across boots)
    "f": str,                     # the worst finding's message, when it is reboot or drain
    "w": str,                     # the warnings' messages, when the verdict is warn (a rollout's validation)
    "cb": int,                    # 1: Slurm shows the node coming back, not registered yet: judged on a later run
    "bw": int,                    # the slowest GPU's memory bandwidth, GB/s (deep check)
    "bwgpu": int,                 # which GPU that is
    "cfg": str,                   # "refused": the node runs on the packaged defaults (trust.py)
    "err": str,                   # the tool's own faults on the node ("config: FILE:LINE: ...", "history ...: ...")
    "brk": int,                   # 1: a drain was held by the open breaker
    "obs": str,                   # observe mode: what would have been done ("drain: <reason>")
    # numbers a job selects on (`sbatch --extra "suspect=0&lemon<2"`, SchedulerParameters=extra_constraints,
    # Slurm 23.11+): each written only when it changes, as the whole summary is
    "suspect": int,               # 1: held under the ladder's suspect rung (remedy/table.py SUSPECT)
    "lemon": int,                 # the node's lemon score: jobs that flagged it slow (`fleet lemons` writes it)
    "fw_ok": int,                 # 1: on its group's pinned driver and firmware (0: a check said it is not)
    # InfiniBand (checks/infiniband.network): ports down "d", slow "s", counters grew "c" ("mlx5_4/1"),
    # ports missing "m"
    "ib": dict[str, Any],
    # the remediation ladder's open cases (remedy/ladder.py): [class, attempts, first, last (epoch s), status]
    "case": list[list[Any]],
    # the in-job samplers' digests (sampler.py), one per job running here: job -> window length, first
    # and last windows per GPU
    "is": dict[str, Any],
}, total=False)


# the key a driver or firmware check puts in a finding's `extra` when the node is off its group's pins
OFF_STANDARD = "std"

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_MINUTES_FORMAT = "%Y-%m-%dT%H:%MZ"  # what older versions published


def digests(value: Any) -> dict[str, dict[str, Any]]:
    """The `is` value as job -> digest.  (Releases before per-job digests published one digest, with its
    job under "j".)"""
    if not isinstance(value, dict):
        return {}
    if "j" in value:
        return {str(value["j"]): value}
    return {str(job): d for job, d in value.items() if isinstance(d, dict)}


def live_digests(value: Any, now: float, windows: int = 5) -> dict[str, dict[str, Any]]:
    """The digests whose sampler published within the last `windows` windows (and the windows it waits
    between publications, `pe`, on a large fleet: sampler.publish_every): a health check carries these
    forward, and lets the digest of a job whose sampler is gone (a write that raced the epilog's) fall away."""
    out = {}
    for job, d in digests(value).items():
        try:
            newest = max(int(i) for i, _ in d.get("w", []))
            span = windows + max(0, min(int(d.get("pe") or 0), 10_000))
            if (newest + 1) * float(d["ws"]) >= now - span * float(d["ws"]):
                out[job] = d
        except (KeyError, TypeError, ValueError):
            continue
    return out


def stamp(at: float | None = None) -> str:
    return time.strftime(TIME_FORMAT, time.gmtime(at))


def parse(text: str | None) -> Summary | None:
    """Our summary, or None: empty, not JSON, or someone else's text."""
    if not text or not text.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) and "gpufleet" in data else None  # type: ignore[return-value]


def lemon_news(nodes: list[Any], scores: dict[str, int], field: str) -> list[tuple[str, str]]:
    """Pure: (node, the summary to write) for each node whose published lemon score is not `scores`' (0 where
    the node has none): the node's own summary with only `lemon` changed.  A node publishing no summary of
    ours is left alone (its health check writes the score's 0 with its first summary)."""
    out = []
    for info in nodes:
        data = parse(getattr(info, field, None))
        if data is None:
            continue
        score = int(scores.get(info.name, 0))
        if data.get("lemon", 0) != score:
            out.append((info.name, json.dumps({**data, "lemon": score}, separators=(",", ":"))))
    return out


def from_node(info: Any) -> Summary | None:
    """The summary a node carries: its Extra first, then its Comment."""
    for text in (info.extra, info.comment):
        data = parse(text)
        if data is not None:
            return data
    return None


def quiet_read_bound(settings: Any, fleet_nodes: int | None) -> float:
    """How long a quiet node goes without reading Slurm (hooks/quiet.py): `slurm_read_every_s`, stretched
    so that a fleet of `fleet_nodes` makes at most `slurm_reads_per_s` reads a second; 0: every run reads."""
    every = float(settings.slurm_read_every_s)
    if every <= 0:
        return 0.0
    return max(every, (fleet_nodes or 0) / settings.slurm_reads_per_s)


# a summary unchanged this long (or longer, on a large fleet) is written again at the node's next read of
# Slurm, its `t` renewed: no news is then told from a node that stopped checking
HEARTBEAT_MIN_S = 600.0
# `fleet` calls a node silent when its summary is older than this many heartbeats (or health-check intervals)
SILENT_AFTER = 3


def heartbeat_s(settings: Any, fleet_nodes: int | None) -> float:
    """How long a node's summary may stand unchanged in Slurm before it is written again."""
    return max(HEARTBEAT_MIN_S, quiet_read_bound(settings, fleet_nodes))


# What Slurm shows of the node's summary, as the last writer on the node left it (the health check, the
# prolog or epilog, a sampler): a sampler merges its digest into this copy instead of reading its node from
# slurmctld every window (a one-node read costs slurmctld as much as a read of the whole fleet)
def published_path(state_dir: str, node: str) -> str:
    import os

    return os.path.join(state_dir, f"published-{node}.json")


def keep_published(state_dir: str, node: str, field: str, data: dict[str, Any] | None,
                   now: float | None = None) -> None:
    """The summary Slurm now shows in `field` (None: not known, the copy goes and the next writer reads)."""
    import os

    path = published_path(state_dir, node)
    try:
        if data is None:
            os.unlink(path)
            return
        write_private(path, json.dumps({"at": time.time() if now is None else now, "field": field, "summary": data},
                                       separators=(",", ":")).encode())
    except OSError:
        pass  # not kept: the next writer reads Slurm


def write_private(path: str, data: bytes) -> None:
    """A file only root reads, replaced whole: written beside it under a name no one else's link can stand
    in for (O_EXCL, O_NOFOLLOW), then renamed over it; its directory made where missing.  Raises OSError."""
    from ..common.safefile import write_file

    write_file(path, data, mode=0o600, make_dirs=True)


def read_fresh(path: str, stamp: str, max_age_s: float, now: float | None = None) -> dict[str, Any] | None:
    """A JSON object a run kept on the node, where its `stamp` (epoch s) is younger than `max_age_s` (and
    not in the future: a clock that went back); None otherwise, or where it cannot be read."""
    try:
        with open(path, encoding="utf-8") as fh:
            kept = json.load(fh)
    except (OSError, ValueError):
        return None
    now = time.time() if now is None else now
    if not isinstance(kept, dict) or not isinstance(kept.get(stamp), int | float):
        return None
    return kept if 0 <= now - kept[stamp] < max_age_s else None


def kept_published(state_dir: str, node: str, field: str, max_age_s: float, now: float | None = None
                   ) -> dict[str, Any] | None:
    """The kept copy, where it is of `field` and younger than `max_age_s`; None otherwise."""
    kept = read_fresh(published_path(state_dir, node), "at", max_age_s, now)
    data = kept.get("summary") if kept is not None and kept.get("field") == field else None
    return data if isinstance(data, dict) and data.get("gpufleet") == 1 else None


def published_at(data: dict[str, Any]) -> float | None:
    """The summary's `t` as epoch seconds, or None where it cannot be read."""
    text = str(data.get("t") or "")
    for fmt in (TIME_FORMAT, _MINUTES_FORMAT):
        try:
            return float(calendar.timegm(time.strptime(text, fmt)))
        except ValueError:
            continue
    return None


def encode(report: Report, final: str) -> Summary:
    """What the health check publishes about the node it judged (`final`: the run's verdict)."""
    from ..readers.snapshot import known
    from .findings import RANK

    s = report.snapshot
    names = sorted({known(g.name) or "?" for g in s.gpus})
    vbios = sorted({known(g.vbios) for g in s.gpus if known(g.vbios)})
    data: Summary = {"gpufleet": 1, "v": final, "drv": known(s.driver_version), "cuda": known(s.cuda_driver_version),
            "gpus": f"{len(s.gpus)}x{'/'.join(names)}", "fw": ",".join(vbios),
            "t": stamp()}
    # what a rollout compares against its canary after each upgrade
    gsp = sorted({known(g.gsp_firmware) for g in s.gpus if known(g.gsp_firmware)})
    if gsp:
        data["gsp"] = ",".join(gsp)
    inforom = sorted({known(g.inforom.image) for g in s.gpus if known(g.inforom.image)})
    if inforom:  # a firmware component a rollout bundle may move (catalogs/bundle.py)
        data["ifr"] = ",".join(inforom)
    host = s.host_facts
    if host is not None and host.running is not None:
        data["kern"] = host.running.release
        if host.running.module is not None and host.running.module.flavour:
            data["modf"] = host.running.module.flavour
    if host is not None and host.cdmm is not None:
        data["cdmm"] = host.cdmm
    data.update(fabric_fields(s))
    data.update(event_counters(s))
    # the numbers jobs select on: this run's own (the suspect rung and the lemon score are set by those who
    # know them: hooks/common.act and lemon_step)
    data["suspect"], data["lemon"] = 0, 0
    data["fw_ok"] = 0 if any(f.extra and f.extra.get(OFF_STANDARD) for f in report.findings) else 1
    worst = [f for f in report.findings if RANK[f.severity] >= RANK["reboot"]]
    if worst:  # why, for a rollout's validation and for `fleet`
        data["f"] = max(worst, key=lambda f: RANK[f.severity]).message[:80]
    elif final == "warn":  # a rollout fails a node whose warning names its own target (a failed DKMS build)
        said = list(dict.fromkeys(f.message for f in report.findings if f.severity == "warn"))
        data["w"] = "; ".join(said)[:120]
    if any(f.action == "wait" for f in report.findings):   # a rollout's validation waits for it, as the ladder does
        data["cb"] = 1
    from .checks.infiniband import network

    ib = network(report.findings)
    if ib:
        data["ib"] = ib
    bw = [p.mem_bw_gbps for p in s.performance if p.mem_bw_gbps]
    if bw:  # the slowest GPU is what stalls a synchronous job: the fleet's straggler view reads this
        data["bw"] = round(min(bw))
        data["bwgpu"] = min((p for p in s.performance if p.mem_bw_gbps), key=lambda p: p.mem_bw_gbps).gpu
    return data


# the fabric state as the summary carries it: one letter a state
_FABRIC_CODES = {"completed": "C", "in_progress": "P", "not_started": "N"}


def fabric_fields(s: NodeSnapshot) -> dict[str, str | int]:
    """The node's NVLink fabric as `fleet` and a rollout discover domains from it (slurm/domains.py):
    `fab` the GPUs' registration states (C completed, P in progress, N not started, ? other), `clq` the
    clique, `cuid` the cluster UUID.  Nothing where no GPU has a fabric (single GPUs, no NVSwitch)."""
    from ..readers.snapshot import known

    fabrics = [g.fabric for g in s.gpus if not g.lost and isinstance(known(g.fabric.state), str)]
    if not fabrics:
        return {}
    out: dict[str, str | int] = {"fab": "".join(sorted({_FABRIC_CODES.get(f.state, "?") for f in fabrics}))}
    # the domain the node's registered GPUs joined: a GPU whose registration failed (clique 0, a zero
    # UUID) must not take its node out of the domain, or a faulty tray would hide from its rack
    joined = Counter((f.cluster_uuid, f.clique_id) for f in fabrics
                     if isinstance(known(f.cluster_uuid), str) and isinstance(f.clique_id, int)
                     and f.cluster_uuid.strip("0-") != "")
    if joined:
        (uuid, clique), _ = joined.most_common(1)[0]
        out["clq"], out["cuid"] = clique, uuid
    return out


def event_counters(s: NodeSnapshot) -> dict[str, int]:
    """Counters since this boot, for a rollout's evidence gate (maintain/evidence.py), which counts their
    increase per node-hour: `xs` soft Xid events (the catalog's severity below reboot), `xh` the others,
    `ecc` volatile ECC errors (reset by the reboot or driver reload), `rr` rows remapped (kept across boots:
    only their growth counts).  Zero counters are left out."""
    from ..catalogs import xid_info
    from .findings import RANK

    events = s.xid_events
    out: dict[str, int] = {}
    if events:
        boot = max(e.boot for e in events) if s.boots_seen <= 1 else s.boots_seen - 1
        causes = {(e.xid, e.pci, e.boot) for e in events}
        for e in events:
            if e.boot != boot or (e.caused_by is not None and (e.caused_by, e.pci, e.boot) in causes):
                continue
            info = xid_info(e.xid)
            hard = info is not None and RANK[info.severity] >= RANK["reboot"] and e.fatal is not False
            key = "xh" if hard else "xs"
            out[key] = out.get(key, 0) + 1
    ecc = sum(v for g in s.gpus for v in (g.ecc.volatile_dram_corrected, g.ecc.volatile_dram_uncorrected,
                                          g.ecc.volatile_sram_corrected, g.ecc.volatile_sram_uncorrected)
              if isinstance(v, int) and not isinstance(v, bool))
    if ecc:
        out["ecc"] = ecc
    remapped = sum(v for g in s.gpus for v in (g.remapped_rows.correctable, g.remapped_rows.uncorrectable)
                   if isinstance(v, int) and not isinstance(v, bool))
    if remapped:  # HBM rows retired by the driver: their growth under a new driver is a signal
        out["rr"] = remapped
    return out
