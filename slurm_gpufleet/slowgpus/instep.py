"""The slow node inside a running job, from machine metrics alone: each node of a multi-node job is compared
with that job's other nodes, window by window, and flagged only when it stays apart for `windows`
consecutive windows.  Pure: samples in, flags out (the sampler, `fleet stragglers --running` and
`--telemetry` feed it).

Why relative, and why against the node's own start: in a synchronous job every GPU waits for the slowest,
so a healthy job already shows a spread (up to 14% of GEMM speed between healthy GPUs, Meta): the slowest
healthy GPU is always the busiest.  A level test would flag it forever.  A node is judged instead by how
far its position among its job's nodes moved since the job's first windows, beyond a band read off the
same job's other nodes of its GPU model (their own movement): diurnal drift and a job slow everywhere move
every node alike and flag none (ByteDance's what-if study: one bad node is the main cause of only 1.7% of
straggling jobs; Minder compares machines of one job and requires persistence).

Two signatures:
- **throttled**: a GPU's SM clock below the job's median by more than `clock_drop` while NVML reports a
  slowdown reason (power cap, HW slowdown, SW/HW thermal, power brake);
- **silent slow**: clocks normal, but a GPU's (or a whole node's) utilisation relative to the job's median
  rose beyond the band since the job's first windows, its power holding where its peers' drops: its
  peers idle more, waiting for it.  Or, where the peers cannot look idle (they wait inside NCCL's
  kernels, which spin on the SMs: NVML counts them 100 % busy, NCCL issues 689 and 403), its power
  relative to the job's median rose beyond a band read the same way off the peers' power, its utilisation
  not falling: a GPU that computes draws power, one that spins does not.  Each GPU's own level is followed
  through the job: the power signature needs the peers' own power to have fallen (they wait) and the
  GPU's own to have held; a GPU whose own level rose while its peers' held (a phase of its work, a
  neighbour's heat) changed level, and a level change alone is not slowness.  One GPU is judged against every other GPU of the job, its own node's
  included (one slow GPU is the common case: a degraded HBM stack, a half-trained NVLink, a lost
  boost); a node, against the job's other nodes, and on a two-node job against the other alone.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..slurm.base import job_order

# NVML clock-event reasons that slow a GPU down (GpuIdle 0x1, application clocks 0x2 and sync boost 0x10 do
# not): SwPowerCap 0x4, HwSlowdown 0x8, SwThermalSlowdown 0x20, HwThermalSlowdown 0x40, HwPowerBrake 0x80
SLOWDOWN_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
FIELDS = ("t", "job", "node", "gpu", "sm_clock_mhz", "power_w", "sm_util", "throttle")


@dataclass(frozen=True)
class Sample:
    t: float
    job: str
    node: str
    gpu: int
    sm_clock_mhz: float
    power_w: float
    sm_util: float
    throttle: int = 0
    model: str = ""
    # shown beside a flag, never judged: where the sampler's NVML gave them
    temp_c: float | None = None
    pcie_mbps: float | None = None
    nvlink_mbps: float | None = None
    # NVML's total energy counter (nvmlDeviceGetTotalEnergyConsumption), joules, cumulative: where a GPU's
    # samples carry it, its window's power is the energy it used over the window, not the mean of
    # instantaneous readings (which one-second dips move by tens of watts)
    energy_j: float | None = None


EXTRAS = ("temp_c", "pcie_mbps", "nvlink_mbps")


@dataclass
class Settings:
    window_s: float = 60.0        # one digest: the sampler's window
    windows: int = 3              # consecutive windows apart before a node is flagged
    baseline_windows: int = 2     # the job's first windows: each node's own position in it
    clock_drop: float = 0.05      # throttled: SM clock this far below the job's median
    min_band: float = 0.04        # silent slow: the least movement that counts, whatever the peers show
    band_k: float = 6.0           # ... and this many robust deviations of the peers' own movement
    spread_windows: int = 10       # ... that deviation read over the job's last windows, not one alone
    min_nodes: int = 2            # a job on fewer nodes has no peers
    # silent slow by power: the least fall of the peers' own power (their median, against their own start)
    # that says they wait for someone; a GPU's power up against peers that held is its own level changing
    peers_fall: float = 0.01
    # a GPU's own power moving this much against the job's while the job's held: its level changed
    # (followed from then on), never slowness
    level_step: float = 0.02


@dataclass
class Flag:
    job: str
    node: str
    gpu: int | None               # the slow GPU; None when the node as a whole is slow
    t_first: float                # start of the first window of the streak
    signature: str                # throttled | silent_slow
    evidence: dict = field(default_factory=dict)
    t_flagged: float | None = None  # end of the window in which the flag was raised

    def to_dict(self) -> dict:
        return {"job": self.job, "node": self.node, "gpu": self.gpu, "t_first": self.t_first,
                "t_flagged": self.t_flagged, "signature": self.signature, "evidence": self.evidence}


def _mad(values: list[float]) -> float:
    med = statistics.median(values)
    return statistics.median(abs(v - med) for v in values)


def windows_of(samples: Iterable[Sample], window_s: float) -> dict[str, dict[int, dict[tuple[str, int], list]]]:
    """job -> window index -> (node, gpu) -> [clock, power, util, throttle OR, model, {extra: mean}]
    averaged (the extras only where samples gave them); power is the energy counter's rate over the window
    where the GPU's samples carry it (from the last reading of the window before, so that windows abut)."""
    acc: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: [0.0, 0.0, 0.0, 0, 0, "", {}])))
    energy: dict = defaultdict(lambda: [0.0, 0.0])   # (job, window, node, gpu) -> [joules, seconds]
    last: dict = {}                                    # (job, node, gpu) -> (t, joules) of its last reading
    for s in sorted(samples, key=lambda x: x.t):
        w = int(s.t // window_s)
        if s.energy_j is not None:
            before = last.get((s.job, s.node, s.gpu))
            if before is not None and s.t > before[0] and s.energy_j >= before[1]:   # a counter reset is skipped
                used = energy[(s.job, w, s.node, s.gpu)]
                used[0] += s.energy_j - before[1]
                used[1] += s.t - before[0]
            last[(s.job, s.node, s.gpu)] = (s.t, s.energy_j)
        cell = acc[s.job][w][(s.node, s.gpu)]
        cell[0] += s.sm_clock_mhz
        cell[1] += s.power_w
        cell[2] += s.sm_util
        cell[3] |= int(s.throttle)
        cell[4] += 1
        cell[5] = s.model or cell[5]
        for name in EXTRAS:
            value = getattr(s, name)
            if value is not None:
                total = cell[6].setdefault(name, [0.0, 0])
                total[0] += value
                total[1] += 1
    out: dict = {}
    for job, by_window in acc.items():
        out[job] = {w: {k: [c[0] / c[4], _power(energy.get((job, w, *k)), c[1] / c[4]), c[2] / c[4], c[3], c[5],
                            {n: v[0] / v[1] for n, v in c[6].items()}] for k, c in cells.items()}
                    for w, cells in by_window.items()}
    return out


def _power(used: list[float] | None, mean_w: float) -> float:
    """Watts over the window from the energy counter where it gave a rate, else the mean of the readings (a
    counter that did not move is stuck: a GPU with power on uses energy)."""
    return used[0] / used[1] if used is not None and used[1] > 0 and used[0] > 0 else mean_w


def _beside(cells: dict[tuple[str, int], list], key: tuple[str, int | None]) -> dict[str, float]:
    """What a flag shows beside its evidence: the flagged GPU's (or node's median) temperature, PCIe and
    NVLink throughput, with the job's median of each, where the sampler read them."""
    out: dict[str, float] = {}
    mine = [c for k, c in cells.items() if k == key or (key[1] is None and k[0] == key[0])]
    for name in EXTRAS:
        own = [c[5][name] for c in mine if len(c) > 5 and name in c[5]]
        job = [c[5][name] for c in cells.values() if len(c) > 5 and name in c[5]]
        if own and job:
            out[name] = round(statistics.median(own), 1)
            out[f"job_median_{name}"] = round(statistics.median(job), 1)
    return out


def _rise(now: float, start: float) -> float:
    """How far a power position rose, as a share of where it started (0 where the start is none)."""
    return now / start - 1.0 if start > 0 else 0.0


def _at_work(own: dict, members: list, band: float, s: Settings) -> dict:
    """Which members' power rose against their peers because the peers wait, not because their own level
    changed: the peers' own power fell (their median, each against its own start, by `peers_fall` or more:
    they spin in NCCL's kernels while a slow one computes), and this one's own level held (it fell by less
    than `band`).  A GPU whose own level rose while its peers' held (a phase of its work, a neighbour's heat)
    changed level, which alone is not slowness; one that fell with its peers, a little less, waits too."""
    out = {}
    for k in members:
        others = [own[j] for j in members if j != k and j in own]   # its peers: on a 2-node job, the other
        out[k] = bool(others) and k in own and statistics.median(others) <= -s.peers_fall and own[k] >= -band
    return out


def _band(shifts: list[float], s: Settings, spread: list[float] | None = None) -> tuple[float, float]:
    """(the peers' median movement, the band beyond it that counts): `band_k` robust deviations of the
    peers' own movement, `min_band` at least; with two members there is no spread to read: the higher
    is measured from the lower, against the least band.  The deviation is the median of this window's and the job's previous ones (`spread`, kept
    by the caller, `spread_windows` long): one window's MAD over 16 GPUs swings by half and more, so a
    single window's wide reading would break a streak that every other window sees."""
    if len(shifts) < 3:  # the lower of two is the other's reference (their median would halve the gap)
        return min(shifts), s.min_band
    med = statistics.median(shifts)
    mad = _mad(shifts)
    if spread is not None:
        spread.append(mad)
        del spread[:-s.spread_windows]
        mad = statistics.median(spread)
    return med, max(s.min_band, s.band_k * 1.4826 * mad)


def _judge_window(cells: dict[tuple[str, int], list], s: Settings, base: dict | None,
                  spread: dict[tuple[str, str], list[float]] | None = None
                  ) -> tuple[dict[tuple[str, int | None], dict], dict]:
    """One window of one job: (node, gpu or None) -> evidence of what is apart; and the positions of each
    node (its median utilisation over the job's median) and of each GPU (node, gpu), with each GPU's power
    position beside (key ("p", node, gpu)), to keep as the job's start.  `spread`: the peers' recent
    deviations per (nodes | gpus, model), carried from window to window by the caller."""
    spread = {} if spread is None else spread
    by_node, position, med_clock, med_power = _positions(cells)
    apart = _throttled(by_node, s, med_clock, med_power)
    if not base:
        return apart, position
    whole, node_band = _silent_nodes(by_node, position, base, s, spread, apart)
    _silent_gpus(cells, by_node, position, base, s, spread, apart, whole, node_band)
    apart.update({(n, None): evidence for n, evidence in whole.items()})
    return apart, position


def _positions(cells: dict[tuple[str, int], list]) -> tuple[dict[str, list], dict, float, float]:
    """(the cells by node, each node's and GPU's position against the job's medians, the median clock, the
    median power)."""
    clocks = [c[0] for c in cells.values()]
    utils = [c[2] for c in cells.values()]
    med_clock = statistics.median(clocks)
    med_util = statistics.median(utils) or 1.0
    med_power = statistics.median(c[1] for c in cells.values()) or 1.0
    by_node: dict[str, list] = defaultdict(list)
    for (node, gpu), c in cells.items():
        by_node[node].append((gpu, c))
    position: dict = {n: statistics.median(c[2] for _, c in gpus) / med_util for n, gpus in by_node.items()}
    for n, gpus in by_node.items():
        position[("pn", n)] = statistics.median(c[1] for _, c in gpus) / med_power
        position[("an", n)] = statistics.median(c[1] for _, c in gpus)
    for (node, gpu), c in cells.items():
        position[(node, gpu)] = c[2] / med_util
        position[("p", node, gpu)] = c[1] / med_power
        position[("a", node, gpu)] = c[1]   # its own level, watts: followed through the job
    return by_node, position, med_clock, med_power


def _throttled(by_node: dict[str, list], s: Settings, med_clock: float, med_power: float) -> dict:
    """GPUs whose clock dropped under the job's median with a slowdown reason set."""
    apart: dict[tuple[str, int | None], dict] = {}
    for node, gpus in by_node.items():
        for gpu, c in gpus:
            if c[0] < med_clock * (1 - s.clock_drop) and c[3] & SLOWDOWN_MASK:
                apart[(node, gpu)] = {"signature": "throttled", "sm_clock_mhz": round(c[0]),
                                      "job_median_clock_mhz": round(med_clock), "throttle": hex(c[3]),
                                      "power_position": round(c[1] / med_power, 3)}
    return apart


def _silent_nodes(by_node: dict[str, list], position: dict, base: dict, s: Settings, spread: dict,
                  apart: dict) -> tuple[dict[str, dict], dict[str, tuple[float, float, float, float]]]:
    """Whole nodes apart with no reason given: (their evidence, each one's bands), judged within a model."""
    model_of = {n: by_node[n][0][1][4] for n in by_node}
    # whole nodes: how far each moved since the job's first windows, against the same model's other nodes:
    # its utilisation, or its power where the peers' utilisation cannot move (they spin in NCCL's kernels,
    # busy to NVML, while their power falls)
    moved = {n: position[n] - base[n] for n in by_node if n in base}
    # power moved as a share of the node's own start: a node (a GPU, below) that always draws more or less
    # than its peers (tens of watts between healthy boards) moves by the same share as any other
    moved_p = {n: _rise(position[("pn", n)], base[("pn", n)]) for n in moved if ("pn", n) in base}
    models: dict[str, list[str]] = defaultdict(list)
    whole: dict[str, dict] = {}  # silent nodes, joined to `apart` once the single GPUs are judged
    node_band: dict[str, tuple[float, float, float, float]] = {}
    for n in moved:
        models[model_of[n]].append(n)
    for model, members in models.items():
        if len(members) < s.min_nodes:
            continue
        med, band = _band([moved[n] for n in members], s, spread.setdefault(("nodes", model), []))
        p_med, p_band = _band([moved_p.get(n, 0.0) for n in members], s,
                              spread.setdefault(("nodes-power", model), []))
        held = _at_work({n: _rise(position[("an", n)], base[("an", n)]) for n in members if ("an", n) in base},
                        members, p_band, s)
        for n in members:
            by_util = moved[n] - med > band
            by_power = moved_p.get(n, 0.0) - p_med > p_band and moved[n] - med >= -band and moved_p.get(n, 0.0) > 0 \
                and held[n]
            if (by_util or by_power) and not any(k[0] == n for k in apart):
                node_band[n] = (med, band, p_med, p_band)
                whole[n] = {"signature": "silent_slow", "position": round(position[n], 3),
                            "position_at_start": round(base[n], 3), "band": round(band, 3),
                            "power_position": round(position[("pn", n)], 3),
                            "power_position_at_start": round(base[("pn", n)], 3), "power_band": round(p_band, 3)}
    return whole, node_band


def _silent_gpus(cells: dict, by_node: dict[str, list], position: dict, base: dict, s: Settings, spread: dict,
                 apart: dict, whole: dict[str, dict], node_band: dict) -> None:
    """Single GPUs apart (into `apart`); a node whose few GPUs explain its own move leaves `whole`."""
    # single GPUs: one GPU that stays busy while every other GPU of the job (its own node's included)
    # waits more; its power holds too (a GPU at work), where its peers' drops
    gpu_moved = {k: position[k] - base[k] for k in cells if k in base}
    power_moved = {k: _rise(position[("p", *k)], base[("p", *k)]) for k in gpu_moved if ("p", *k) in base}
    by_model: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for k in gpu_moved:
        by_model[cells[k][4]].append(k)
    for model, members in by_model.items():
        if len(members) < 4:
            continue
        med, band = _band([gpu_moved[k] for k in members], s, spread.setdefault(("gpus", model), []))
        p_med, p_band = _band([power_moved.get(k, 0.0) for k in members], s,
                              spread.setdefault(("gpus-power", model), []))
        held = _at_work({k: _rise(position[("a", *k)], base[("a", *k)]) for k in members if ("a", *k) in base},
                        members, p_band, s)
        # busy while its peers idle (their utilisation falls), or drawing power while its peers spin (their
        # utilisation stays near 100 % in NCCL's kernels, their power falls): either way its power holds
        hot = [k for k in members if not any(a[0] == k[0] for a in apart) and (
            (gpu_moved[k] - med > band and power_moved.get(k, 0.0) >= p_med)
            or (power_moved.get(k, 0.0) - p_med > p_band and gpu_moved[k] - med >= -band
                and power_moved.get(k, 0.0) > 0 and held[k]))]  # more than at its start: at work, not less idle
        per_node: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for k in hot:
            per_node[k[0]].append(k)
        for n, ks in per_node.items():
            if 2 * len(ks) >= len(by_node[n]):
                continue  # half a node or more: the node-level signature speaks for it
            # fewer than half: where the node's other GPUs stayed, those few explain the node's own move
            # (one busy GPU of 8 shifts its median a rank, past the band), and the node key would break
            # the GPU's streak; where the others moved too, the node is slow as a whole
            if n in whole:
                others = [(n, g) for g, _ in by_node[n] if (n, g) not in ks and (n, g) in gpu_moved]
                med_n, band_n, p_med_n, p_band_n = node_band[n]
                rest_moved = bool(others) and (
                    statistics.median(gpu_moved[k] for k in others) - med_n > band_n
                    or statistics.median(power_moved.get(k, 0.0) for k in others) - p_med_n > p_band_n)
                if not rest_moved:
                    del whole[n]
                else:
                    continue
            for k in ks:
                apart[k] = {"signature": "silent_slow", "position": round(position[k], 3),
                            "position_at_start": round(base[k], 3), "band": round(band, 3),
                            "power_position": round(position[("p", *k)], 3),
                            "power_position_at_start": round(base[("p", *k)], 3)}


def _follow_levels(before: dict[tuple[str, int], list], now: dict[tuple[str, int], list], s: Settings,
                   level: dict[tuple[str, int], float], pending: dict[tuple[str, int], float],
                   moves: dict[tuple[str, int], list[float]]) -> None:
    """Each GPU's own power level, followed through the job: from one window to the next while the job's
    held (its median moved by less than `peers_fall`), a GPU's power against the job's is its own doing (a
    phase of its work, a neighbour's heat), gathered in `pending` and taken into `level` once past
    `level_step` (a step the window boundary splits in two still counts whole), where the GPU's own
    window-to-window moves (`moves`) are steady enough to tell a step from noise.  Where the job moved, what
    a GPU did beside it is the job's story (a slow GPU computes while its peers fall): nothing is taken,
    and what was gathered starts again."""
    shared = [k for k in now if k in before and before[k][1] > 0]
    if len(shared) < 4:
        return
    job = statistics.median(now[k][1] for k in shared) / (statistics.median(before[k][1] for k in shared) or 1.0)
    if abs(job - 1.0) >= s.peers_fall:
        pending.clear()
        return
    for k in shared:
        move = now[k][1] / before[k][1] / job
        seen = moves.setdefault(k, [])
        seen.append(move)
        del seen[:-s.spread_windows]
        # only where the GPU's own readings are steady enough to tell a step from noise (the energy counter's
        # windows are; single noisy readings are not, and there a level is not followed at all)
        if len(seen) < 6 or 1.4826 * _mad(seen) > s.level_step:
            pending.pop(k, None)
            continue
        step = pending.get(k, 1.0) * move
        if abs(step - 1.0) > s.level_step:
            level[k], pending[k] = level.get(k, 1.0) * step, 1.0
        else:
            pending[k] = step


def detect(samples: Iterable[Sample], settings: Settings | None = None) -> list[Flag]:
    """Every (job, node[, gpu]) apart from its job for `windows` consecutive windows, once per node, at
    the first window of its first such streak (`t_first`), raised at the end of the window that completed
    it (`t_flagged`)."""
    s = settings or Settings()
    flags: list[Flag] = []
    for job, by_window in windows_of(samples, s.window_s).items():
        nodes = {n for cells in by_window.values() for n, _ in cells}
        if len(nodes) < s.min_nodes:
            continue
        # Nodes publish at their own moments, so the newest (or oldest) window may hold only some of the
        # job's nodes: a window with too few nodes is no evidence, and a node missing from a window
        # neither extends nor ends its streak.
        order = [w for w in sorted(by_window) if len({n for n, _ in by_window[w]}) >= s.min_nodes]
        base_sum: dict = defaultdict(list)
        streak: dict[tuple[str, int | None], list] = {}
        flagged: set[str] = set()
        spread: dict[tuple[str, str], list[float]] = {}
        level: dict[tuple[str, int], float] = {}   # each GPU's own level changes since the job's start
        pending: dict[tuple[str, int], float] = {}  # ... and those not yet past `level_step`
        moves: dict[tuple[str, int], list[float]] = {}   # ... and its recent window-to-window moves
        for i, w in enumerate(order):
            if i:
                _follow_levels(by_window[order[i - 1]], by_window[w], s, level, pending, moves)
            base = {k: statistics.median(v) for k, v in base_sum.items()} if i >= s.baseline_windows else None
            if base is not None:
                for k, f in level.items():
                    for key in (("a", *k), ("p", *k)):
                        if key in base:
                            base[key] *= f
            apart, position = _judge_window(by_window[w], s, base, spread)
            if i < s.baseline_windows:
                for k, p in position.items():
                    base_sum[k].append(p)
            for key in list(streak):
                if key not in apart and key[0] in position:
                    del streak[key]
            for key, evidence in apart.items():
                run = streak.setdefault(key, [w, 0, evidence])
                run[1] += 1
                run[2] = evidence
                if run[1] == s.windows and key[0] not in flagged:
                    flagged.add(key[0])
                    shown = {k: v for k, v in evidence.items() if k != "signature"}
                    flags.append(Flag(job, key[0], key[1], run[0] * s.window_s, evidence["signature"],
                                      {**shown, **_beside(by_window[w], key)}, (w + 1) * s.window_s))
    return sorted(flags, key=lambda f: (job_order(f.job), f.t_first, f.node))


def parse_telemetry(lines: Iterable[str]) -> tuple[list[Sample], list[int]]:
    """JSON lines {"t", "job", "node", "gpu", "sm_clock_mhz", "power_w", "sm_util", "throttle"} (what the
    sampler records; `model`, the extras and `energy_j`, NVML's energy counter in joules, optional): (the
    samples, the numbers of the lines that were not one)."""
    import json
    import math

    samples, bad = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            sample = Sample(float(d["t"]), str(d["job"]), str(d["node"]), int(d["gpu"]),
                            float(d["sm_clock_mhz"]), float(d["power_w"]), float(d["sm_util"]),
                            int(d.get("throttle") or 0), str(d.get("model") or ""),
                            *(None if d.get(n) is None else float(d[n]) for n in EXTRAS),
                            None if d.get("energy_j") is None else float(d["energy_j"]))
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
            bad.append(number)
            continue
        # json reads NaN and Infinity: a value no GPU reports is a malformed line, never a window's mean
        values = (sample.t, sample.sm_clock_mhz, sample.power_w, sample.sm_util,
                  *(getattr(sample, n) for n in (*EXTRAS, "energy_j") if getattr(sample, n) is not None))
        if all(math.isfinite(v) for v in values):
            samples.append(sample)
        else:
            bad.append(number)
    return samples, bad


def samples_from_digests(published: dict[str, dict]) -> tuple[list[Sample], float | None]:
    """What the nodes' samplers published (node -> its summary, with `"is"`: per job, the window length,
    the job's first windows and the last ones, per GPU [clock, power, util, throttle] and, from samplers
that read them, [temperature, PCIe MB/s, NVLink MB/s]) as samples, one per
    GPU and window; and the window length."""
    from ..judging.summary import digests

    out: list[Sample] = []
    window_s = None
    for node, data in published.items():
        model = str(data.get("gpus") or "")
        for job, d in digests(data.get("is")).items():
            try:
                ws = float(d["ws"])
                index = d.get("g")  # the rows' GPU indices, when the job has only some of the node's
                rows = []
                seen = set()
                for i, gpus in [*d.get("b", []), *d.get("w", [])]:
                    if i in seen:
                        continue
                    seen.add(i)
                    for g, row in enumerate(gpus):
                        clock, power, util, thr = row[:4]
                        extras = [None if v is None else float(v) for v in row[4:7]]
                        rows.append(Sample(i * ws + ws / 2, job, node, int(index[g]) if index else g,
                                           float(clock), float(power), float(util), int(thr), model,
                                           *extras))
            except (KeyError, TypeError, ValueError):
                continue  # a digest this release cannot read: that job on that node is not judged
            out += rows
            window_s = window_s or ws
    return out, window_s
