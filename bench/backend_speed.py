#!/usr/bin/env python3
"""The two Slurm backends side by side on a real mini-cluster of the host's Slurm (issue 23), through
scontrol (`commands`) and through pyslurm (a build for the running release: tests/slurm/pyslurm_build.sh):

- one node read in-process;
- a health check and a prolog as slurmd runs them: wall time and the Slurm processes each starts, on a
  quiet node and on a fault (the health check drains; the prolog fails the job);
- the rollout engine's three fleet reads (every node, the running jobs, the reservations) at fleet size:
  slurmctld holds --records node records beside the 2 real nodes (no slurmd behind them, each with a
  summary in Extra as the health check leaves it) and --jobs held jobs; time per read (median) and the
  memory each read costs (the reading process's resident peak over its baseline, and the peak of the
  scontrol/squeue it forked), each read in a fresh process.

    bench/backend_speed.py [--repeat N] [--records 12500] [--jobs 5000]

`bench/check_speed.py --backends` runs this.  Starts its own cluster (tests/slurm/minicluster.sh, ports
4817/4901, health checks every 300 s so that slurmd's own runs stay out of the way) and stops it at the
end.  Prints tables and one JSON line; asserts nothing.  Root.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SLURM_TESTS = REPO / "tests" / "slurm"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(SLURM_TESTS))

import gpustate  # noqa: E402
from bench_cluster import start, stop  # noqa: E402  (bench/, beside this script)
from check_speed import median_ms  # noqa: E402

COUNTER = """#!/bin/sh
echo "$*" >> {log}
exec {real} "$@"
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--records", type=int, default=12500, help="node records beside the 2 real nodes")
    ap.add_argument("--jobs", type=int, default=5000, help="held jobs in the queue")
    ap.add_argument("--read-worker", nargs=3, metavar=("BACKEND", "SCONTROL", "READ"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.read_worker:
        return read_worker(*args.read_worker, args.repeat)
    if os.geteuid() != 0:
        print("backend_speed: needs root (the mini-cluster)", file=sys.stderr)
        return 2
    release = subprocess.run(["slurmctld", "-V"], capture_output=True, text=True).stdout.split()[1]
    major_minor = ".".join(release.split(".")[:2])
    found = subprocess.run([str(SLURM_TESTS / "pyslurm_build.sh"), "path", major_minor], capture_output=True,
                           text=True)
    site = found.stdout.strip() if found.returncode == 0 else None
    started = start("backends", args.records, 4817, hc_interval=300)
    if started is None:
        return 2
    base, env = started
    os.environ["SLURM_CONF"] = env["SLURM_CONF"]
    cdir, gpus = base / "c", Path(env["GPUFLEET_STATE_DIR"])
    try:
        return measure(args.repeat, release, site, cdir, gpus, env, args.records, args.jobs)
    finally:
        stop(base, env)


def measure(repeat: int, release: str, site: str | None, cdir: Path, gpus: Path, env: dict[str, str],
            records: int, jobs: int) -> int:
    real = subprocess.run(["which", "scontrol"], capture_output=True, text=True).stdout.strip()
    log = cdir / "scontrol-calls.log"
    counter = cdir / "bin" / "counting-scontrol"
    counter.write_text(COUNTER.format(log=log, real=real))
    counter.chmod(0o755)
    if site:
        sys.path.insert(0, site)
    from slurm_gpufleet.slurm.commands import CommandBackend

    backends = {"commands": CommandBackend(real)}
    if site:
        from slurm_gpufleet.slurm.pyslurm_backend import PyslurmBackend, pyslurm_usable

        usable, why = pyslurm_usable(real)
        if usable:
            backends["pyslurm"] = PyslurmBackend(real)
        print(f"pyslurm: {why}")
    else:
        print(f"pyslurm: no build for Slurm {release} (tests/slurm/pyslurm_build.sh build); commands only")
    print(f"Slurm {release}, 2 real nodes and {records} node records, {jobs} held jobs; median of {repeat} runs\n")
    fill_fleet(real, env, records, jobs)
    reads = {name: median_ms(lambda b=b: b.node("n1"), repeat * 5) for name, b in backends.items()}
    py_env = {"SLURMD_NODENAME": "n1", "GPUFLEET_FAKE_NVML_DIR": str(gpus), "SLURM_CONF": env["SLURM_CONF"],
              "PYTHONPATH": ":".join(p for p in (str(REPO / "tests" / "fake_pynvml" / "recorded"), str(REPO), site) if p),
              "PATH": "/usr/bin:/bin"}
    importing = {}
    for name in backends:
        module = "pyslurm" if name == "pyslurm" else "subprocess"
        importing[name] = median_ms(lambda m=module: subprocess.run(
            [sys.executable, "-c", f"import {m}"], env=py_env, check=True), 3)
    config = (cdir / "etc" / "gpufleet.toml").read_text()
    rows, prologs = [], []
    for name in backends:
        cfg = cdir / "etc" / f"gpufleet-{name}.toml"
        cfg.write_text(config.replace("[slurm]\n", f'[slurm]\nbackend = "{name}"\n', 1)
                       .replace(f'scontrol = "{real}"', f'scontrol = "{counter}"'))
        cfg.chmod(0o600)
        quiet, qforks, drain, drain_calls = health_checks(name, cfg, log, py_env, gpus, real, env, repeat)
        rows.append((name, reads[name], importing[name], quiet, qforks, drain, len(drain_calls), drain_calls))
        prologs.append((name, *prolog_runs(name, cfg, log, py_env, gpus, repeat)))
    print("health check")
    print(f"{'backend':<10} {'node read ms':>12} {'import ms':>10} {'quiet run ms':>13} {'forks':>6} "
          f"{'drain run ms':>13} {'forks':>6}")
    for name, read, imp, quiet, qforks, drain, dforks, _ in rows:
        print(f"{name:<10} {read:>12.2f} {imp:>10.0f} {quiet:>13.0f} {qforks:>6} {drain:>13.0f} {dforks:>6}")
    print("(node read: one backend.node() in this process; import: `python -c 'import pyslurm'` beside "
          "`import subprocess`; forks: scontrol processes the run started)")
    for name, *_, drain_calls in rows:
        print(f"  {name} drain run's scontrol calls: " + "; ".join(c[:60] for c in drain_calls))
    print("\nprolog (8 GPUs, a 1-node job)")
    print(f"{'backend':<10} {'success ms':>11} {'forks':>6} {'failing ms':>11} {'forks':>6}")
    for name, ok, ok_forks, bad, bad_forks in prologs:
        print(f"{name:<10} {ok:>11.0f} {ok_forks:>6} {bad:>11.0f} {bad_forks:>6}")
    print("(failing: a row-remap failure on GPU 5; its wall time and the scontrol processes until it exits; "
          "the reason helper it leaves runs after)")
    fleet = {name: {read: json.loads(subprocess.run(
        [sys.executable, __file__, "--read-worker", name, real, read, "--repeat", str(repeat)],
        env={**env, "PYTHONPATH": site or ""},
        capture_output=True, text=True, check=True, timeout=600).stdout) for read in FLEET_READS}
        for name in backends}
    print(f"\nthe engine's fleet reads ({records + 2} nodes, {jobs} held jobs)")
    print(f"{'backend':<10} {'read':<14} {'items':>6} {'ms':>8} {'own MB':>7} {'child MB':>9}")
    for name, per_read in fleet.items():
        for read, r in per_read.items():
            print(f"{name:<10} {read:<14} {r['items']:>6} {r['ms']:>8.1f} {r['own_mb']:>7.1f} {r['child_mb']:>9.1f}")
    print("(own MB: the reading process's resident peak over its baseline; child MB: the peak of the "
          "scontrol/squeue it forked)")
    print(json.dumps({name: {"node_read_ms": round(r, 2), "quiet_ms": round(q), "quiet_forks": qf,
                             "drain_ms": round(d), "drain_forks": df} for name, r, _, q, qf, d, df, _ in rows}
                     | {"prolog": {name: {"success_ms": round(a), "success_forks": af, "failing_ms": round(b),
                                          "failing_forks": bf} for name, a, af, b, bf in prologs},
                        "fleet": fleet, "records": records, "jobs": jobs}))
    return 0


FLEET_READS = ("nodes", "running_jobs", "reservations")


def fill_fleet(scontrol: str, env: dict[str, str], records: int, jobs: int) -> None:
    """Every record with the summary a health check leaves, a tenth drained by an admin;
    held jobs in the queue, two running on the real nodes; one maintenance reservation."""
    if records:
        extra = ('{"gpufleet":1,"v":"ok","drv":"580.159.04","cuda":"13.0","gpus":"8xNVIDIA H200",'
                 '"fw":"96.00.A5.00.1A","t":"2026-12-01T19:24:07Z","kern":"6.1.0-28-amd64","modf":"open"}')
        subprocess.run([scontrol, "update", f"nodename=g[00001-{records:05d}]", f"extra={extra}"], env=env, check=True)
        subprocess.run([scontrol, "update", f"nodename=g[00001-{max(1, records // 10):05d}]", "state=drain",
                        "reason=hw: PSU fault, ticket 4711"], env=env, check=True)
        subprocess.run([scontrol, "create", "reservation", "reservationname=gpufleet-bench", "starttime=now+1hour",
                        "duration=60", f"nodes=g[00001-{min(records, 500):05d}]", "users=root", "flags=maint,ignore_jobs"],
                       env=env, check=True, capture_output=True)
    for node in ("n1", "n2"):
        subprocess.run(["sbatch", "-w", node, "--gres=gpu:4", "-t", "60", "--comment", "ckpt=SIGUSR1@600",
                        "--wrap", "sleep 3600"], env=env, check=True, capture_output=True)
    # sbatch one job a process, four at a time: a queue of pending work as a busy cluster has
    script = "seq 1 $1 | xargs -P 4 -n 50 sh -c 'for x; do sbatch -H -p gpu -t 60 --gres=gpu:8 --wrap true " \
             ">/dev/null || exit 255; done' sh"
    subprocess.run(["bash", "-c", script, "fill", str(jobs)], env=env, check=True, timeout=1800)
    queued = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True).stdout.split()
    if len(queued) < jobs:
        raise SystemExit(f"backend_speed: {len(queued)} jobs queued, not {jobs + 2}")


def read_worker(name: str, scontrol: str, read: str, repeat: int) -> int:
    """One fleet read in this fresh process: its median time, and what it cost in memory."""
    import resource

    from slurm_gpufleet.slurm.commands import CommandBackend

    backend = CommandBackend(scontrol)
    if name == "pyslurm":
        from slurm_gpufleet.slurm.pyslurm_backend import PyslurmBackend

        backend = PyslurmBackend(scontrol)
    base = _status_kb("VmRSS")
    fn = getattr(backend, read)
    items = len(fn())
    ms = median_ms(fn, repeat)
    print(json.dumps({"items": items, "ms": round(ms, 1), "own_mb": round((_status_kb("VmHWM") - base) / 1024, 1),
                      "child_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)}))
    return 0


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def prolog_runs(name: str, cfg: Path, log: Path, py_env: dict[str, str], gpus: Path,
                repeat: int) -> tuple[float, int, float, int]:
    """(success ms, its scontrol processes at most, a failing run's ms, its scontrol processes until it exits)."""
    argv = [sys.executable, str(REPO / "prolog_epilog" / "slurm-gpufleet-prolog")]
    job_env = {**py_env, "SLURM_GPUFLEET_CONFIG": str(cfg), "SLURM_JOB_ID": "900001", "SLURM_JOB_NUM_NODES": "1",
               "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7", "SLURM_JOB_USER": "root"}

    def run(expect: int) -> list[str]:
        log.unlink(missing_ok=True)
        r = subprocess.run(argv, env=job_env, capture_output=True, text=True, timeout=60)
        if r.returncode != expect or "internal error" in r.stderr:
            raise SystemExit(f"backend_speed: the prolog exited {r.returncode} with {name}: {r.stdout[-200:]}"
                             f"{r.stderr[-300:]}")
        return log.read_text().splitlines() if log.exists() else []

    calls: list[list[str]] = []
    ok = median_ms(lambda: calls.append(run(0)), repeat)
    gpustate.fault(str(gpus / "n1.json"), 5, "row_remap_failure")
    t = time.perf_counter()
    failing = run(1)
    bad = (time.perf_counter() - t) * 1000
    subprocess.run(["pkill", "-f", "replace_hook_reason"], check=False)  # the reason helper: no drain comes here
    gpustate.write_atomic(gpustate.healthy_state(8, "n1"), str(gpus / "n1.json"))
    return ok, max(len(c) for c in calls), bad, len(failing)


def health_checks(name: str, cfg: Path, log: Path, py_env: dict[str, str], gpus: Path, real: str,
                  env: dict[str, str], repeat: int) -> tuple[float, int, float, list[str]]:
    """(quiet run ms, its scontrol processes at most, a drain run's ms, its scontrol calls) with this backend."""
    argv = [sys.executable, str(REPO / "healthcheck" / "slurm-gpufleet-healthcheck"), "--node", "n1",
            "--config", str(cfg)]

    def run() -> list[str]:
        log.unlink(missing_ok=True)
        r = subprocess.run(argv, env=py_env, capture_output=True, text=True, timeout=60)
        if r.returncode or "internal error" in r.stderr:
            raise SystemExit(f"backend_speed: the health check failed with {name}: {r.stderr[-300:]}")
        return log.read_text().splitlines() if log.exists() else []

    run()  # publishes its first summary; the release is learned
    calls: list[list[str]] = []
    quiet = median_ms(lambda: calls.append(run()), repeat)
    gpustate.fault(str(gpus / "n1.json"), 5, "row_remap_failure")
    t = time.perf_counter()
    drain_calls = run()
    drain = (time.perf_counter() - t) * 1000
    subprocess.run([real, "update", "nodename=n1", "state=resume"], env=env, check=False)
    gpustate.write_atomic(gpustate.healthy_state(8, "n1"), str(gpus / "n1.json"))
    for _ in range(3):  # back to healthy and published, for the next backend
        run()
    return quiet, max(len(c) for c in calls), drain, drain_calls


if __name__ == "__main__":
    sys.exit(main())
