#!/usr/bin/env python3
"""Check time per GPU for the replay readers (read + all checks), against a bare parse of the same
input run side by side.  Prints a table; asserts nothing (targets live in the README, not in tests).

    python bench/check_speed.py [--repeat N] [--backends]

Also: the kernel facts of a node whose NVIDIA module is as large as Debian's nvidia-current.ko (65 MB),
read through its ELF section headers, beside a scan of the whole file (what the reader did before); the
health check as slurmd runs it against a recording scontrol.  --backends adds the health check's and the
prolog's wall time and Slurm-call cost through each Slurm backend (scontrol, pyslurm) and the engine's
fleet reads at 12,500 node records, on a real mini-cluster (bench/backend_speed.py; root, minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_gpufleet import evaluate  # noqa: E402
from slurm_gpufleet.common.datafiles import CAPTURES as SHARED  # noqa: E402
from slurm_gpufleet.readers.nvml import NvmlReader  # noqa: E402
from slurm_gpufleet.readers.nvml_replay import NvmlReplay  # noqa: E402
from slurm_gpufleet.readers.report import read_report  # noqa: E402


def median_ms(fn, repeat: int, clock=time.perf_counter) -> float:
    """The median of `repeat` calls, in ms, by `clock` (wall time; time.process_time for CPU)."""
    times = []
    for _ in range(repeat):
        t = clock()
        fn()
        times.append(clock() - t)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--backends", action="store_true", help="also bench/backend_speed.py (root, a real cluster)")
    args = ap.parse_args()
    h200_xml = (SHARED / "h200-real/nvidia-smi-q.xml").read_text()
    h200_txt = (SHARED / "h200-real/nvidia-smi-q.txt").read_text()
    h100x8 = (SHARED / "public/nvidia-smi/healthy_h100x8_2.txt").read_text()
    k80x4 = (SHARED / "public/nvidia-smi/ecc_dbe_aggregate_retired_k80x4_1.xml").read_text()
    snap_json = read_report(h200_xml).to_json()
    probe = json.loads((SHARED / "h200-real/nvml_probe.json").read_text())

    cases = [
        ("nvidia-smi -q -x, H200", 1, lambda: evaluate(read_report(h200_xml)), lambda: ET.fromstring(h200_xml)),
        ("nvidia-smi -q -x, K80 x4", 4, lambda: evaluate(read_report(k80x4)), lambda: ET.fromstring(k80x4)),
        ("nvidia-smi -q, H200", 1, lambda: evaluate(read_report(h200_txt)),
         lambda: [ln.split(":", 1) for ln in h200_txt.splitlines()]),
        ("nvidia-smi -q, H100 x8", 8, lambda: evaluate(read_report(h100x8)),
         lambda: [ln.split(":", 1) for ln in h100x8.splitlines()]),
        ("snapshot JSON, H200", 1, lambda: evaluate(read_report(snap_json)), lambda: json.loads(snap_json)),
        ("NVML replay (full), H200", 1, lambda: evaluate(NvmlReader(nvml=NvmlReplay(probe), level="full").read()),
         lambda: NvmlReplay(probe).nvmlDeviceGetName(0)),
    ]
    print(f"{'input':<28} {'GPUs':>4} {'check ms':>9} {'ms/GPU':>8} {'bare parse ms':>14} {'ratio':>6}")
    rows = []
    for name, gpus, fn, baseline in cases:
        fn()  # warm caches (data files, regexes)
        ours = median_ms(fn, args.repeat)
        base = median_ms(baseline, args.repeat)
        print(f"{name:<28} {gpus:>4} {ours:>9.2f} {ours / gpus:>8.2f} {base:>14.2f} {ours / base:>6.1f}x")
        rows.append({"input": name, "gpus": gpus, "check_ms": round(ours, 3), "bare_parse_ms": round(base, 3)})
    network = network_cost(args.repeat)
    out = REPO / "bench" / "results" / "check_speed.json"
    out.write_text(json.dumps({"repeat": args.repeat, "checks": rows, "network": network}, indent=1) + "\n")
    print(f"(median of {args.repeat} runs; 'bare parse' is ElementTree / line split / json.loads of the same input;"
          " NVML replay's baseline is one replayed call)")
    kernel_facts(max(3, args.repeat // 10))
    hook_calls(max(3, args.repeat // 10))
    if args.backends:
        import subprocess

        print("\n== bench/backend_speed.py", flush=True)
        subprocess.run([sys.executable, str(REPO / "bench" / "backend_speed.py")], check=False)


def network_cost(repeat: int) -> dict:
    """What the InfiniBand check adds to a health check: reading a real H100 node's /sys/class/infiniband
    (8 NDR ports and an Ethernet bond), keeping its counters between runs, and judging them, in CPU time,
    beside the same check of the H200 without it."""
    import tempfile

    from slurm_gpufleet.readers.ib import read_ib, remember

    tree = REPO / "slurm_gpufleet" / "data" / "captures" / "public" / "infiniband" / "h100-gpud"
    snap = read_report((SHARED / "h200-real/nvidia-smi-q.xml").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        memory = str(Path(tmp) / "ib-counters-n1.json")

        def with_ib():
            snap.ib = read_ib(str(tree))
            remember(snap.ib, memory)
            return evaluate(snap)

        def without():
            snap.ib = None
            return evaluate(snap)

        with_ib()
        base = median_ms(without, repeat, time.process_time)
        ib = median_ms(with_ib, repeat, time.process_time)
    print(f"\n{'InfiniBand, 9 ports (H100)':<28} {'check ms':>9} {'with IB ms':>11} {'added ms':>9}")
    print(f"{'':<28} {base:>9.2f} {ib:>11.2f} {ib - base:>9.2f}   (CPU time, median of {repeat})")
    return {"check_cpu_ms": round(base, 3), "with_ib_cpu_ms": round(ib, 3), "added_cpu_ms": round(ib - base, 3)}


def kernel_facts(repeat: int) -> None:
    """read_host over a node root whose module is 65 MB (code, then .modinfo, as the kernel links it),
    beside the scan of the whole file the reader did before."""
    import re
    import tempfile

    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO / "tests" / "slurm"))
    from gpustate import elf_module
    from test_kernel import tree

    from slurm_gpufleet.readers.host import read_host

    with tempfile.TemporaryDirectory() as tmp:
        data = elf_module(b"version=535.261.03\x00license=NVIDIA\x00vermagic=6.1.0-28-amd64 SMP\x00",
                          code=bytes(range(256)) * (65 << 12))
        root = tree(Path(tmp), modules={"6.1.0-28-amd64": ("updates/dkms/nvidia-current.ko", data)})
        path = next(root.glob("lib/modules/*/updates/dkms/nvidia-current.ko"))
        if read_host(str(root)).running.module.version != "535.261.03":
            raise SystemExit("check_speed: the module's version was not read")
        ours = median_ms(lambda: read_host(str(root)), repeat)
        scan = median_ms(lambda: re.findall(rb"(?:^|\x00)(version|license|vermagic)=([^\x00]*)",
                                            path.read_bytes()), repeat)
    print(f"\n{'kernel facts, 65 MB module':<28} {'read_host ms':>12} {'whole-file scan ms':>19} {'ratio':>6}")
    print(f"{'':<28} {ours:>12.1f} {scan:>19.1f} {ours / scan:>5.3f}x")


def hook_calls(repeat: int) -> None:
    """The health check as slurmd runs it (8 recorded H200s behind the fake pynvml), against a recording
    scontrol: the Slurm command processes each run starts, and its wall time beside a bare `python -c
    pass` (the interpreter's own start-up) run side by side."""
    import subprocess
    import tempfile

    sys.path.insert(0, str(REPO / "tests"))
    from fake_slurm.node import fault, healthcheck, setup

    def bare() -> None:
        subprocess.run([sys.executable, "-c", "pass"], check=True)

    base = median_ms(bare, repeat)
    print(f"\n{'health check run':<28} {'Slurm processes':>15} {'wall ms':>9} {'python -c pass ms':>18} {'ratio':>6}")
    # not under /tmp: the health check refuses a config in a directory others can write (trust.py) and
    # runs on the packaged defaults, and this table would count the Slurm calls of a node with no config
    trusted = "/var/lib/gpufleet-bench" if os.geteuid() == 0 else os.path.expanduser("~/.cache/gpufleet-bench")
    os.makedirs(trusted, mode=0o755, exist_ok=True)
    os.chmod(trusted, 0o755)
    with tempfile.TemporaryDirectory(dir=trusted) as tmp:
        bin_dir, gpus, env = setup(Path(tmp))
        first, wall, _ = healthcheck(bin_dir, env)
        print(f"{'first (learns the release)':<28} {len(first):>15} {wall * 1000:>9.0f} {base:>18.0f} {wall * 1000 / base:>5.1f}x")
        quiet = [healthcheck(bin_dir, env) for _ in range(repeat)]
        wall = statistics.median(w for _, w, _ in quiet) * 1000
        print(f"{'quiet':<28} {max(len(c) for c, _, _ in quiet):>15} {wall:>9.0f} {base:>18.0f} {wall / base:>5.1f}x")
        fault(gpus, 5, "row_remap_failure")
        calls, wall, _ = healthcheck(bin_dir, env)
        print(f"{'drain (breaker counts fleet)':<28} {len(calls):>15} {wall * 1000:>9.0f} {base:>18.0f} "
              f"{wall * 1000 / base:>5.1f}x")
        print("  drain run's Slurm commands: " + "; ".join(" ".join(c)[:60] for c in calls))


if __name__ == "__main__":
    main()
