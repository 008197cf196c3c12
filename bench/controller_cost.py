#!/usr/bin/env python3
"""What the checks cost slurmctld at fleet size (issue 46): a real slurmctld of the host's Slurm holding
--records node records (no slurmd behind them, each with the summary a health check leaves) beside 2 real
nodes, measured after its start-up settled (its first pings of the absent slurmd cost CPU).

1. The controller's CPU per call, from /proc/<slurmctld>/stat around --calls calls of each kind made one
   after the other, less its idle rate measured just before: a one-node read (`scontrol show node`, what a
   health check and a Slurm-publishing sampler read), a one-node `Extra` write (what they write), a
   one-job `squeue` (the sampler's job-gone question without cgroups or a slurmstepd), and a ping.
2. Steady state at --nodes nodes, every node in a multi-node job, for three set-ups, from those costs and
   the rates each set-up makes (node reads, node writes a second; controller CPU in cores):
   * `before issue 46`: a health check reads its node every run (HealthCheckInterval --interval), a
     sampler reads and writes its node every window (instep_window_s 60);
   * quiet checks every slurm_read_every_s (--read-every), samplers as before;
   * quiet checks as the product spaces them at this fleet size (hooks/quiet.read_every: at most
     slurm_reads_per_s reads a second from the whole fleet), samplers as before;
   * the same, the samplers writing to instep_share_dir and asking Slurm nothing;
   * `shipped defaults`: every setting as the product ships it (SlurmSettings()): quiet checks spaced by
     slurm_reads_per_s, samplers that never read their node and publish every sampler.publish_every
     windows (instep_writes_per_s), each write a node's summary with a real 8-GPU digest in it; and each
     node's unchanged summary written again once a heartbeat old (summary.heartbeat_s).
3. The last three replayed live at their own rate for --seconds (a sampler's read and write scaled down by
   --sampler-scale, its CPU scaled back up), the controller's CPU measured the same way; the shipped
   defaults beside the budget (BUDGET_CORES, BUDGET_WRITES).

Writes bench/results/controller_cost.json; prints the tables.  Starts its own cluster
(tests/slurm/minicluster.sh, ports 5817/5901) and stops it.  Measures; asserts nothing.  Root.

    python bench/controller_cost.py [--records 12500] [--calls 200] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "results" / "controller_cost.json"
TICK = os.sysconf("SC_CLK_TCK")
EXTRA = ('{"gpufleet":1,"v":"ok","drv":"580.159.04","cuda":"13.0","gpus":"8xNVIDIA H200","fw":"96.00.A5.00.1A",'
         '"t":"2026-12-01T19:24:07Z"}')
# the controller budget of the health checks and samplers together at fleet size (issue 53)
BUDGET_CORES, BUDGET_WRITES = 0.1, 20.0


def sampler_extra() -> str:
    """A node's summary with one job's digest as a sampler publishes it: 8 GPUs, the windows it keeps."""
    sys.path.insert(0, str(REPO))
    from slurm_gpufleet.policy import SlurmSettings
    from slurm_gpufleet.slowgpus import sampler

    digest = sampler.digest_for("4242", SlurmSettings())
    for t in range(0, 60 * 6, 15):
        digest.add(float(t), [[1980.0, 690.5, 97.0, 0, 1593.0, 1.2e9]] * 8)
    data = {**json.loads(EXTRA), "is": {"4242": {**digest.to_dict(), "pe": 21}}}
    return json.dumps(data, separators=(",", ":"))


SHIPPED = "shipped defaults"


def cpu_s(pid: int) -> float:
    """utime + stime of the process, in seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def idle_rate(pid: int, seconds: float) -> float:
    c0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_s(pid) - c0) / (time.monotonic() - t0)


def per_call_ms(pid: int, calls: list[list[str]], env: dict[str, str]) -> float:
    """The controller's CPU per call, less its idle rate over as long again just after (its pings of the
    absent nodes come in bursts: an idle rate measured apart from the calls is too noisy for the cheap
    ones)."""
    c0, t0 = cpu_s(pid), time.monotonic()
    for argv in calls:
        subprocess.run(argv, env=env, check=True, capture_output=True)
    spent, wall = cpu_s(pid) - c0, time.monotonic() - t0
    idle = idle_rate(pid, wall)
    return max(0.0, spent - idle * wall) / len(calls) * 1000


def replay(pid: int, idle: float, rates: dict[str, tuple[float, list[str]]], seconds: float,
           env: dict[str, str]) -> dict[str, float]:
    """Each kind of call at its rate (a second) for `seconds`, from one thread per kind, spread evenly;
    the controller's CPU over the replay, less its idle rate, in cores, and the calls made per kind."""
    made = {kind: 0 for kind in rates}
    stop = time.monotonic() + seconds

    def drive(kind: str, rate: float, argv: list[str]) -> None:
        gap = 1.0 / rate
        due = time.monotonic()
        while due < stop:
            subprocess.run(argv(made[kind]) if callable(argv) else argv, env=env, capture_output=True)
            made[kind] += 1
            due += gap
            time.sleep(max(0.0, due - time.monotonic()))

    c0, t0 = cpu_s(pid), time.monotonic()
    threads = [threading.Thread(target=drive, args=(k, r, a)) for k, (r, a) in rates.items() if r > 0]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    return {"cores": max(0.0, (cpu_s(pid) - c0) / wall - idle), "wall_s": round(wall, 1),
            **{f"{k}_per_s": round(n / wall, 2) for k, n in made.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=12500)
    ap.add_argument("--nodes", type=int, default=12500, help="the fleet the steady state is computed for")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--settle", type=float, default=90.0, help="seconds after start-up before measuring")
    ap.add_argument("--interval", type=float, default=300.0, help="HealthCheckInterval")
    ap.add_argument("--read-every", type=float, default=None,
                    help="slurm_read_every_s (default: the product's default)")
    ap.add_argument("--window", type=float, default=60.0, help="instep_window_s")
    ap.add_argument("--reads-per-s", type=float, default=None,
                    help="slurm_reads_per_s for the set-ups before issue 53 (default: the product's default)")
    ap.add_argument("--sampler-scale", type=float, default=8.0,
                    help="the live replay drives samplers' Slurm calls at 1/this of their rate")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("controller_cost: needs root (the mini-cluster)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    from bench_cluster import start, stop

    from slurm_gpufleet.policy import SlurmSettings

    read_every = args.read_every or float(SlurmSettings().slurm_read_every_s)
    reads_per_s = float(SlurmSettings().slurm_reads_per_s)
    if args.reads_per_s is not None:
        reads_per_s = args.reads_per_s
    started = start("controller_cost", args.records, 5817, hc_interval=3600)
    if started is None:
        return 2
    base, env = started
    try:
        return measure(args, env, base / "c", read_every, reads_per_s)
    finally:
        stop(base, env)


def measure(args, env: dict[str, str], cdir: Path, read_every: float, reads_per_s: float) -> int:
    pid = int((cdir / "run" / "slurmctld.pid").read_text())
    release = subprocess.run(["slurmctld", "-V"], capture_output=True, text=True).stdout.split()[1]
    n = args.records
    subprocess.run(["scontrol", "update", f"nodename=g[00001-{n:05d}]", f"extra={EXTRA}"], env=env, check=True)
    job = subprocess.run(["sbatch", "--parsable", "-w", "n1", "-N", "1", "-t", "60", "--wrap", "sleep 3600"], env=env,
                         check=True, capture_output=True, text=True).stdout.strip().split(";")[0]
    time.sleep(args.settle)
    idle = idle_rate(pid, 20.0)
    names = [f"g{1 + (i * 7919) % n:05d}" for i in range(args.calls)]
    many = [f"g{1 + (i * 7919) % n:05d}" for i in range(5 * args.calls)]   # the cheap calls: more of them
    costs = {
        "node_read": per_call_ms(pid, [["scontrol", "show", "node", x] for x in names], env),
        "node_write": per_call_ms(pid, [["scontrol", "update", f"nodename={x}", f"extra={EXTRA}"] for x in many], env),
        "digest_write": per_call_ms(pid, [["scontrol", "update", f"nodename={x}", f"extra={sampler_extra()}"]
                                          for x in many], env),
        "job_read": per_call_ms(pid, [["squeue", "-h", "-j", job, "-o", "%T"]] * (5 * args.calls), env),
        "ping": per_call_ms(pid, [["scontrol", "ping"]] * (5 * args.calls), env),
    }
    nodes = args.nodes
    fleet_every = max(read_every, nodes / reads_per_s)   # hooks/quiet.read_every at this fleet size
    setups = {
        "before issue 46": {"reads": nodes / args.interval + nodes / args.window, "writes": nodes / args.window},
        f"quiet checks every {read_every:g} s, samplers through Slurm": {
            "reads": nodes / read_every + nodes / args.window, "writes": nodes / args.window},
        f"quiet checks every {fleet_every:g} s, samplers through Slurm": {
            "reads": nodes / fleet_every + nodes / args.window, "writes": nodes / args.window},
        f"quiet checks every {fleet_every:g} s, shared directory": {"reads": nodes / fleet_every, "writes": 0.0},
    }
    from slurm_gpufleet.judging.summary import heartbeat_s, quiet_read_bound
    from slurm_gpufleet.policy import SlurmSettings
    from slurm_gpufleet.slowgpus import sampler

    shipped = SlurmSettings()   # the product's defaults, by name: nothing of this bench's own
    shipped_every = quiet_read_bound(shipped, nodes)
    publish_every = sampler.publish_every(shipped, nodes)
    beat = heartbeat_s(shipped, nodes)   # each node's unchanged summary written again this often
    setups[SHIPPED] = {"reads": nodes / shipped_every,
                       "writes": nodes / (publish_every * shipped.instep_window_s) + nodes / beat,
                       "publish_every_windows": publish_every, "quiet_read_every_s": shipped_every,
                       "heartbeat_s": beat}
    for name, s in setups.items():
        write_ms = costs["digest_write"] if name == SHIPPED else costs["node_write"]
        s["cores"] = (s["reads"] * costs["node_read"] + s["writes"] * write_ms) / 1000
    print(f"Slurm {release}: slurmctld with {n} node records and 2 real nodes; idle {idle * 100:.1f} % of a core "
          f"after {args.settle:g} s settling\n")
    print(f"controller CPU per call (ms): the mean over {args.calls} node reads, {5 * args.calls} of each other call")
    for kind, ms in costs.items():
        print(f"  {kind:<11} {ms:7.2f}")
    print(f"\nsteady state at {nodes} nodes, all in multi-node jobs (HealthCheckInterval {args.interval:g} s, "
          f"slurm_read_every_s {read_every:g} s, slurm_reads_per_s {reads_per_s:g}: a quiet node reads every "
          f"{fleet_every:g} s; instep_window_s {args.window:g} s)")
    print(f"{'set-up':<56} {'reads/s':>8} {'writes/s':>9} {'cores':>7}")
    for name, s in setups.items():
        print(f"{name:<56} {s['reads']:>8.1f} {s['writes']:>9.1f} {s['cores']:>7.3f}")
    print(f"  ({SHIPPED}: a quiet node reads every {shipped_every:g} s and writes its summary again every {beat:g} s, "
          f"a sampler publishes every {publish_every} windows and never reads)")
    scale = args.sampler_scale
    live = {}
    for name in list(setups)[2:]:
        sampled = name.endswith("through Slurm")
        if name == SHIPPED:
            rates = {"check_read": (setups[name]["reads"], ["scontrol", "show", "node", "g00042"]),
                     "sampler_write": (setups[name]["writes"], lambda i: [
                         "scontrol", "update", f"nodename=g{1 + (i * 7919) % n:05d}", f"extra={sampler_extra()}"])}
            live[name] = {**replay(pid, idle, rates, args.seconds, env)}
            live[name]["cores"] = round(live[name]["cores"], 3)
            continue
        rates = {"check_read": (nodes / fleet_every, ["scontrol", "show", "node", "g00042"])}
        if sampled:
            rates["sampler_read"] = (nodes / args.window / scale, ["scontrol", "show", "node", "g00043"])
            rates["sampler_write"] = (nodes / args.window / scale,
                                      ["scontrol", "update", "nodename=g00043", f"extra={EXTRA}"])
        got = replay(pid, idle, rates, args.seconds, env)
        if sampled:  # the samplers' share measured at 1/scale: scaled back, beside the checks' own
            check_only = replay(pid, idle, {"check_read": rates["check_read"]}, args.seconds, env)
            got["cores"] = check_only["cores"] + (got["cores"] - check_only["cores"]) * scale
            got["sampler_scale"] = scale
        got["cores"] = round(got["cores"], 3)
        live[name] = got
    print(f"\nreplayed live for {args.seconds:g} s each (samplers' calls through Slurm at 1/{scale:g}, their CPU "
          f"scaled back; the shipped defaults at their own rate)")
    for name, got in live.items():
        print(f"  {name:<56} {got['cores']:.3f} cores  " + json.dumps({k: v for k, v in got.items() if k != 'cores'}))
    got, model = live[SHIPPED], setups[SHIPPED]
    writes = model["writes"]
    budget = {"cores": BUDGET_CORES, "writes_per_s": BUDGET_WRITES, "live_cores": got["cores"],
              "modelled_cores": round(model["cores"], 3), "writes_per_s_at_fleet": round(writes, 2),
              "within": got["cores"] <= BUDGET_CORES and model["cores"] <= BUDGET_CORES and writes <= BUDGET_WRITES}
    print(f"\nbudget at {nodes} nodes (health checks and samplers together): {BUDGET_CORES:g} core, "
          f"{BUDGET_WRITES:g} writes/s")
    print(f"  {SHIPPED:<24} live {got['cores']:.3f} cores, modelled {model['cores']:.3f} cores, {writes:.1f} writes/s: "
          f"{'within' if budget['within'] else 'OVER'}")
    result = {"release": release, "records": n, "idle_cores": round(idle, 4),
              "per_call_ms": {k: round(v, 3) for k, v in costs.items()},
              "steady_state": {"nodes": nodes, "interval_s": args.interval, "read_every_s": read_every,
                               "reads_per_s": reads_per_s, "quiet_read_every_s": fleet_every,
                               "window_s": args.window,
                               "setups": {k: {m: round(v, 3) for m, v in s.items()} for k, s in setups.items()}},
              "live": live, "budget": budget}
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
