"""What the in-job sampler costs a node (issue 22: under 5 ms of CPU per sample of 8 GPUs, under 30 MB
resident): the sampler's own read and window code (slurm_gpufleet/slowgpus/sampler.py) over NVML, in a process of
its own.  Without a GPU it reads the recorded H200 state through tests/fake_pynvml (a replay, so the NVML
part is not a real driver's cost); on a GPU node run it with --live for nvidia-ml-py against the driver.

    python bench/sampler_cost.py [--samples 2000] [--live]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def child(samples: int) -> None:
    import pynvml

    from slurm_gpufleet.slowgpus.sampler import Digest, Links, read_gpus

    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    digest, links = Digest("bench", 60.0, 3), Links()
    t0 = time.process_time()
    now = time.time()
    for i in range(samples):
        digest.add(now + i * 15.0, read_gpus(pynvml, handles, links))
    cpu = time.process_time() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"gpus": len(handles), "samples": samples, "cpu_ms_per_sample": round(1000 * cpu / samples, 3),
                      "max_rss_mb": round(rss_mb, 1), "digest_bytes": len(json.dumps(digest.to_dict()))}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--live", action="store_true", help="the real NVML of this node (nvidia-ml-py)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.samples)
        return 0
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if not args.live:
        sys.path.insert(0, str(REPO / "tests" / "slurm"))
        import gpustate

        tmp = tempfile.mkdtemp(prefix="sampler-bench-")
        gpustate.write_atomic(gpustate.healthy_state(8, "bench"), os.path.join(tmp, "bench.json"))
        env.update(PYTHONPATH=f"{REPO / 'tests' / 'fake_pynvml' / 'recorded'}:{REPO}", GPUFLEET_FAKE_NVML_DIR=tmp,
                   SLURMD_NODENAME="bench")
    r = subprocess.run([sys.executable, __file__, "--child", "--samples", str(args.samples)], env=env,
                       capture_output=True, text=True)
    if r.returncode:
        print(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed", file=sys.stderr)
        return 1
    out = json.loads(r.stdout)
    out["nvml"] = "live" if args.live else "recorded replay (tests/fake_pynvml)"
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
