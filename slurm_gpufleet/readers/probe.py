"""Short measurements on the node's GPUs (<= ~2 s per GPU): device memory bandwidth, a bf16 GEMM rate,
pinned host-to-device bandwidth, through whichever GPU library the node has (PyTorch or CuPy).  NVML
readings taken during the run say whether a slow result was throttling (clocks, power, temperature).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from .snapshot import PerfSample, clock_reasons_from_mask


def available_library() -> str | None:
    for name in ("torch", "cupy"):
        try:
            __import__(name)
        except Exception:
            continue
        return name
    return None


def measure(gpus: list[int], library: str | None = None) -> list[PerfSample]:
    lib = library or available_library()
    if lib is None:
        return [PerfSample(gpu=g, error="no GPU library (PyTorch, CuPy) on this node: performance not measured")
                for g in gpus]
    runner: Callable[[int], PerfSample] = _torch if lib == "torch" else _cupy
    out = []
    for g in gpus:
        try:
            out.append(runner(g))
        except Exception as exc:
            out.append(PerfSample(gpu=g, library=lib, error=f"{type(exc).__name__}: {exc}"[:200]))
    return out


def _nvml_watch(index: int):
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        return pynvml, h
    except Exception:
        return None, None


def _sample_nvml(nvml, h, s: PerfSample) -> None:
    if nvml is None:
        return
    try:
        s.sm_clock_mhz = nvml.nvmlDeviceGetClockInfo(h, 1)
        s.power_w = round(nvml.nvmlDeviceGetPowerUsage(h) / 1000, 1)
        s.temperature_c = nvml.nvmlDeviceGetTemperature(h, 0)
        s.clock_event_reasons = clock_reasons_from_mask(nvml.nvmlDeviceGetCurrentClocksEventReasons(h))
    except Exception:
        pass


def _torch(index: int) -> PerfSample:
    import torch

    t0 = time.perf_counter()
    dev = torch.device(f"cuda:{index}")
    s = PerfSample(gpu=index, library=f"torch {torch.__version__}")
    nvml, h = _nvml_watch(index)
    with torch.cuda.device(dev):
        n = 256 << 20
        a = torch.empty(n, dtype=torch.uint8, device=dev)
        b = torch.empty_like(a)
        b.copy_(a)
        torch.cuda.synchronize()
        s.mem_bw_gbps = round(statistics.median(_torch_rates(torch, lambda: b.copy_(a), 2 * n)) / 1e9, 1)
        m = 4096
        x = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
        y = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
        x @ y
        torch.cuda.synchronize()
        s.gemm_tflops = round(statistics.median(_torch_rates(torch, lambda: x @ y, 2 * m**3)) / 1e12, 1)
        _sample_nvml(nvml, h, s)  # clocks, power and reasons right after the busiest part
        host = torch.empty(128 << 20, dtype=torch.uint8, pin_memory=True)
        d = torch.empty(128 << 20, dtype=torch.uint8, device=dev)
        h2d = []
        for _ in range(5):
            st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            st.record()
            d.copy_(host, non_blocking=True)
            en.record()
            en.synchronize()
            h2d.append((128 << 20) / (st.elapsed_time(en) / 1000) / 1e9)
        s.h2d_gbps = round(statistics.median(h2d), 1)
    s.duration_s = round(time.perf_counter() - t0, 3)
    return s


def _torch_rates(torch, fn, work: float, reps: int = 7, inner: int = 10) -> list[float]:
    """`work` units per second of `fn`, timed with CUDA events, `reps` samples of `inner` calls."""
    rates = []
    for _ in range(reps):
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        st.record()
        for _ in range(inner):
            fn()
        en.record()
        en.synchronize()
        rates.append(work * inner / (st.elapsed_time(en) / 1000))
    return rates


def _cupy(index: int) -> PerfSample:
    import cupy as cp

    t0 = time.perf_counter()
    s = PerfSample(gpu=index, library=f"cupy {cp.__version__}")
    nvml, h = _nvml_watch(index)
    with cp.cuda.Device(index):
        n = 256 << 20
        a = cp.empty(n, dtype=cp.uint8)
        b = cp.empty_like(a)
        bw = []
        for _ in range(7):
            st, en = cp.cuda.Event(), cp.cuda.Event()
            st.record()
            for _ in range(10):
                b[...] = a
            en.record()
            en.synchronize()
            bw.append(2 * n * 10 / (cp.cuda.get_elapsed_time(st, en) / 1000) / 1e9)
        s.mem_bw_gbps = round(statistics.median(bw), 1)
        m = 4096
        x = cp.random.random((m, m)).astype(cp.float16)
        y = cp.random.random((m, m)).astype(cp.float16)
        rates = []
        for _ in range(5):
            st, en = cp.cuda.Event(), cp.cuda.Event()
            st.record()
            for _ in range(10):
                x @ y
            en.record()
            en.synchronize()
            _sample_nvml(nvml, h, s)
            rates.append(2 * m**3 * 10 / (cp.cuda.get_elapsed_time(st, en) / 1000) / 1e12)
        s.gemm_tflops = round(statistics.median(rates), 1)
        host = cp.cuda.alloc_pinned_memory(128 << 20)
        d = cp.cuda.alloc(128 << 20)
        h2d = []
        for _ in range(5):
            st, en = cp.cuda.Event(), cp.cuda.Event()
            st.record()
            d.copy_from_host_async(host.ptr, 128 << 20)
            en.record()
            en.synchronize()
            h2d.append((128 << 20) / (cp.cuda.get_elapsed_time(st, en) / 1000) / 1e9)
        s.h2d_gbps = round(statistics.median(h2d), 1)
    s.duration_s = round(time.perf_counter() - t0, 3)
    return s
