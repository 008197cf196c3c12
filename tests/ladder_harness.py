"""The health check's harness for one fault, run as its own process: the product's `hooks.common.act` on a
node read through NVML (the recorded-NVML pynvml on PYTHONPATH, as the mini-cluster's nodes read theirs),
with the site's reset command a real program, and the in-memory Slurm (simulators/simslurm.py, which the
contract test holds to the real one) as the backend.  Between runs it plays what the world does: time
passes (the validation job ends), a reboot asked for happens (a new boot in the kernel log, the fault
gone where a reboot clears it), an admin repairs a node drained for inspection and says `fleet repaired`.

    python tests/ladder_harness.py DIR KIND LEVEL [--validation-fails]
        KIND: memory | xid | pcie (a link trained x4: the suspect rung)   LEVEL: reset | reboot | repair
        (pcie: reset means it clears after the first run, repair that it stays)

DIR must pass the trust rule (the tests' TMPDIR does): the config and the reset command live there.

Prints, as JSON: the ladder's rungs as the node's history recorded them, in order (`rungs`); the node's
reason and its published cases at the end (`reason`, `cases`); the case's status each time it changed
(`statuses`); its actions (`actions`) and validations (`validations`).  With
--validation-fails every validation job fails (the run ends once the node is drained for repair).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NODE = "node00001"


def _xid_line() -> str:
    stamp = dt.datetime.now().astimezone().isoformat(timespec="microseconds").replace(".", ",")
    # GPU 3 of the recorded node is at PCI 0000:5d:00 (gpustate.BUSES)
    return f"{stamp} NVRM: Xid (PCI:0000:5d:00): 119, pid=4242, name=python3, Timeout after 6s of waiting for RPC\n"


RESET_SH = """#!/bin/sh
# the site's reset_command: a reset fixes a reset-level fault; a memory fault that needs more stays (the
# reset ran, the fault stayed); an Xid that needs more is a reset that fails (a reset that completes
# answers every Xid before it in the kernel log)
read kind level < "$1/fault"
if [ "$level" = reset ]; then cp "$1/healthy.json" "$1/gpus/$2.json"; exit 0; fi
[ "$kind" = xid ] && exit 1
exit 0
"""


def run(work: Path, kind: str, level: str, validation_fails: bool = False) -> dict:
    sys.path.insert(0, str(HERE / "slurm"))
    import gpustate

    gpus, state = work / "gpus", work / "state"
    gpus.mkdir(parents=True)
    (work / "fault").write_text(f"{kind} {level}")
    healthy = gpustate.healthy_state(8, NODE)
    gpustate.write_atomic(healthy, str(gpus / f"{NODE}.json"))
    gpustate.write_atomic(healthy, str(work / "healthy.json"))
    (work / "reset.sh").write_text(RESET_SH)
    kmsg = gpus / f"{NODE}.kmsg"
    kmsg.write_text("")
    # the node's host: its running kernel with the module of the driver its GPUs run (look before reboot)
    host = work / "host"
    release = "6.1.0-28-amd64"
    (host / "proc" / "sys" / "kernel").mkdir(parents=True)
    (host / "proc" / "sys" / "kernel" / "osrelease").write_text(release + "\n")
    (host / "boot").mkdir()
    (host / "boot" / f"vmlinuz-{release}").write_text("kernel")
    mod = host / "lib" / "modules" / release / "updates" / "dkms"
    mod.mkdir(parents=True)
    (mod / "nvidia.ko").write_bytes(gpustate.nvidia_module(gpustate.driver_of(str(gpus / f"{NODE}.json")),
                                                           signed=False))
    config = work / "gpufleet.toml"
    config.write_text(f"""[defaults]
expected_gpus = 8
pcie_min_width = 16
[slurm]
scontrol = "/nonexistent/scontrol"
state_dir = "{state}"
kernel_log = "{gpus}"
host_root = "{host}"
clean_runs_to_resume = 2
breaker_threshold = 10
suspect_recheck_min = 0
suspect_passes = 2
reset_command = "/bin/sh {work}/reset.sh {work} {{node}}"
""")
    os.environ.update(SLURMD_NODENAME=NODE, GPUFLEET_FAKE_NVML_DIR=str(gpus))

    from slurm_gpufleet.hooks.common import _setup, act, read_node
    from slurm_gpufleet.judging.pipeline import evaluate
    from slurm_gpufleet.remedy.handback import hand_back
    from slurm_gpufleet.simulators.rollout import Simulator
    from slurm_gpufleet.simulators.simslurm import SimSlurm
    from slurm_gpufleet.slurm.actuator import make_actuator
    from slurm_gpufleet.slurm.ownership import HEALTH

    setup = _setup("healthcheck", str(config), NODE)
    sim = Simulator([], 4, 8)
    slurm = SimSlurm(sim)
    if validation_fails:
        slurm.validation_fails = {NODE}

    def strike() -> None:
        if kind == "pcie":
            gpustate.set_value(str(gpus / f"{NODE}.json"), 2, "pcie_link_width", 4)
        elif kind == "memory":
            gpustate.fault(str(gpus / f"{NODE}.json"), 3, "row_remap_pending")
        else:
            with open(kmsg, "a") as fh:
                fh.write(_xid_line())

    strike()
    boot, repaired = sim.nodes[0].boot, False
    from slurm_gpufleet.judging.summary import parse
    from slurm_gpufleet.records.history import History, db_path

    history = History(db_path(str(state), NODE))
    statuses: list[str] = []   # the case's status as the node published it, each change
    held: list[str] = []       # the reservations Slurm showed after each run
    suspects: list[int] = []   # the `suspect` number the node published after each run (jobs select on it)
    for run_no in range(40):
        if kind == "pcie" and level == "reset" and run_no == 1:   # the link trains x16 again (a reseat)
            gpustate.write_atomic(healthy, str(gpus / f"{NODE}.json"))
        report = evaluate(read_node(setup), setup.policy, host=NODE, expect_idle=True)
        act(setup, report, "healthcheck", backend=slurm)
        held.append(",".join(sorted(r.name for r in slurm.reservations())))
        suspects.append((parse(slurm.node(NODE).extra) or {}).get("suspect"))
        published = [c[4] for c in (parse(slurm.node(NODE).extra) or {}).get("case", [])]
        if published and published[0] != (statuses[-1:] or [None])[0]:
            statuses.append(published[0])
        sim.now += 600.0   # the next run: a validation job started now has ended by then
        info = slurm.node(NODE)   # a reboot asked for happens (the node is idle)
        if sim.nodes[0].boot != boot:
            boot = sim.nodes[0].boot
            with open(kmsg, "a") as fh:
                fh.write(f"-- Boot {boot} --\n")
            if level == "reboot":
                gpustate.write_atomic(healthy, str(gpus / f"{NODE}.json"))
            elif level == "repair" and kind == "xid":
                strike()   # the fault comes back in the new boot
        pending = history.pending_remedies(NODE)
        if info.drained and any(r["rung"] == "repair" for r in pending) and not repaired:
            # an admin repairs it, and hands it back through its validation run
            gpustate.write_atomic(healthy, str(gpus / f"{NODE}.json"))
            kmsg.write_text("")
            hand_back(make_actuator(slurm, HEALTH, setup.settings), [info])   # `fleet repaired`
            repaired = True
        done = not (info.drained or info.down or info.rebooting) and history.open_validation(NODE) is None \
            and history.open_suspect(NODE) is None
        if done and report.verdict in ("ok", "warn"):
            break
        if validation_fails and info.drained and info.reason.startswith("repair validation failed"):
            break
    info = slurm.node(NODE)
    return {"statuses": statuses, "reservations": held, "suspects": suspects, "rungs": [r["rung"] for r in history._query("select rung from remedies where node = ? order by id",
                                                        [NODE])],
            "reason": info.reason if info.drained or info.down else "",
            "cases": (parse(info.extra) or {}).get("case", []),
            "actions": [(r["action"], r["reason"], r["why"]) for r in history._query(
                "select action, reason, why from actions where node = ? order by ts", [NODE])],
            "validations": [(r["cause"], r["attempt"], r["job"], r["state"], r["detail"]) for r in history._query(
                "select cause, attempt, job, state, detail from validations where node = ? order by id", [NODE])]}


if __name__ == "__main__":
    print(json.dumps(run(Path(sys.argv[1]), sys.argv[2], sys.argv[3], "--validation-fails" in sys.argv[4:])))
