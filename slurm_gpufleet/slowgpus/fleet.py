"""Fleet-wide performance: collect the latest results, find stragglers per GPU model, read failure history."""

from __future__ import annotations

import glob
import json
import os
import sqlite3
from typing import Any

from ..common.stats import Outlier, outliers
from ..judging import summary


def from_published(backend) -> list[tuple[str, str, float]]:
    """(node/gpuN, model, GB/s) from what health checks publish to Slurm: each node's slowest GPU."""
    out = []
    for info in backend.nodes():
        for text in (info.extra, info.comment):
            data = summary.parse(text)
            if data and data.get("bw"):
                model = str(data.get("gpus", "")).split("x", 1)[-1] or "unknown"
                out.append((f"{info.name}/gpu{data.get('bwgpu', '?')}", model, float(data["bw"])))
                break
    return out


def baseline_by_model(samples: list[tuple[str, str, float]], min_peers: int) -> dict[str, dict[str, float]]:
    """{model: {"mem_bw_gbps": median}} over the models with at least `min_peers` samples: what `check
    --perf-baseline slurm` judges a node's GPUs against."""
    from ..common.stats import median

    by_model: dict[str, list[float]] = {}
    for _key, model, value in samples:
        by_model.setdefault(model, []).append(value)
    return {m: {"mem_bw_gbps": median(v)} for m, v in by_model.items() if len(v) >= min_peers}


def baseline_from_file(path: str) -> dict[str, dict[str, float]]:
    """{model: {figure: value}} from a JSON object of models; ValueError (or OSError) when it is not one."""
    from ..common.shapes import load_json

    data = load_json(path)
    try:
        return {str(m): {k: float(v) for k, v in d.items()} for m, d in data.items()}
    except (AttributeError, TypeError) as exc:
        raise ValueError(exc) from None


def from_results_file(path: str) -> list[tuple[str, str, float]]:
    """JSON lines: {"node", "gpu", "model", "mem_bw_gbps"} (e.g. collected with pdsh from `check --level deep --json`)."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            row = json.loads(line)
            out.append((f"{row['node']}/gpu{row['gpu']}", row.get("model") or "unknown", float(row["mem_bw_gbps"])))
    return out


def _dbs(history_dir: str) -> list[str]:
    return sorted(glob.glob(os.path.join(history_dir, "*.db")))


def from_history(history_dir: str) -> list[tuple[str, str, float]]:
    """The latest measurement of every GPU in every node's history database."""
    out = []
    for db in _dbs(history_dir):
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
                rows = conn.execute(
                    "select node, gpu, model, mem_bw_gbps from performance p where mem_bw_gbps is not null and "
                    "ts = (select max(ts) from performance q where q.node = p.node and q.gpu = p.gpu)").fetchall()
        except sqlite3.Error:
            continue
        out += [(f"{node}/gpu{gpu}", model or "unknown", bw) for node, gpu, model, bw in rows]
    return out


def stragglers(samples: list[tuple[str, str, float]], settings) -> tuple[list[Outlier], dict[str, Any]]:
    return outliers(samples, min_peers=settings.straggler_min_peers, z_threshold=settings.straggler_z,
                    min_drop_pct=settings.straggler_min_drop_pct)


def drains(found: list[Outlier], infos: dict[str, Any]) -> tuple[list[tuple[Any, str]], list[str]]:
    """What `fleet stragglers --drain` asks the actuator for: (node info, reason) once per node, naming its
    first outlier GPU, and the nodes Slurm does not know (not drained)."""
    from ..slurm.reasons import PERFORMANCE, ours

    pairs: list[tuple[Any, str]] = []
    unknown: list[str] = []
    for o in found:
        node, _, gpu = o.key.partition("/")
        if node not in infos:
            unknown += [] if node in unknown else [node]
        elif all(p[0].name != node for p in pairs):
            pairs.append((infos[node], ours(f"{PERFORMANCE} {gpu} memory bandwidth {o.value:.0f} GB/s, "
                                            f"-{o.drop_pct:.0f}% vs {o.peers} peers")))
    return pairs, unknown


def failure_history(history_dir: str) -> tuple[int, float, int]:
    """(GPU incidents, GPU-hours observed, nodes) over every node's history: an incident is a run of
    reboot/drain-worthy health checks on one GPU that follows a clean one."""
    incidents = 0
    gpu_hours = 0.0
    nodes = 0
    for db in _dbs(history_dir):
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
                runs = conn.execute("select id, ts, verdict, gpus from runs where hook = 'healthcheck' order by id").fetchall()
                bad = conn.execute("select run_id, gpu from findings where severity in ('reboot', 'drain') "
                                   "and gpu is not null").fetchall()
        except sqlite3.Error:
            continue
        if not runs:
            continue
        nodes += 1
        gpus = max(r[3] or 0 for r in runs)
        gpu_hours += (runs[-1][1] - runs[0][1]) / 3600 * gpus
        bad_by_run: dict[int, set[int]] = {}
        for run_id, gpu in bad:
            bad_by_run.setdefault(run_id, set()).add(gpu)
        failing: set[int] = set()
        for run_id, _ts, _v, _g in runs:
            now = bad_by_run.get(run_id, set())
            incidents += len(now - failing)
            failing = now
    return incidents, gpu_hours, nodes
