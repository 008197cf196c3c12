"""The commands about one node: `check`, `reboot-check`, `snapshot`, `job`, `xid`, `compat`, `slurm-conf`,
`breaker`, `install`, `metrics`, `history`, `advise`."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import click

from ..common import exitcodes
from ..readers.report import ReportError
from .common import (
    Finite,
    _backend,
    _fail,
    _gather_or_exit,
    _load_policy,
    _read_or_exit,
    _write_atomic,
    cli,
    config_opt,
    config_option,
    json_opt,
    json_option,
)


@cli.command()
@click.option("--nvidia-smi-q", "report", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="Judge a saved `nvidia-smi -q -x` (XML) or `nvidia-smi -q` (text) report.")
@click.option("--snapshot", "snapshot_file", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="Judge a JSON snapshot written by `slurm-gpufleet snapshot`.")
@click.option("--kmsg", metavar="FILE", type=click.Path(dir_okay=False),
              help="Kernel log (dmesg, journalctl -k, syslog, /dev/kmsg) to read Xid events from "
                   "(live checks read /dev/kmsg when it is readable).")
@config_opt(help="Policy file (default $SLURM_GPUFLEET_CONFIG, then /etc/slurm-gpufleet/gpufleet.toml).")
@click.option("--node", metavar="NAME", help="Node name for group matching (default: the snapshot's host).")
@click.option("--previous", metavar="FILE", type=click.Path(dir_okay=False),
              help="An earlier JSON snapshot of this node, to judge counter growth.")
@click.option("--expect-idle", is_flag=True, help="The node runs no job now: leftover processes and memory are faults.")
@click.option("--perf-baseline", metavar="FILE|slurm",
              help="Performance baseline per GPU model: a JSON file {MODEL: {\"mem_bw_gbps\": N}}, or `slurm` for "
                   "the fleet median of what nodes publish (default: the model table's reference).")
@click.option("--level", type=click.Choice(["quick", "full", "deep"]), default="quick", show_default=True,
              help="Live NVML only: `full` adds the slow InfoROM checksum/validation (~70 ms per GPU each); "
                   "`deep` also measures each GPU (memory bandwidth, bf16 GEMM, host-to-device; <= ~2 s per GPU).")
@click.option("--timeout", type=Finite(min=0, max=86400, min_open=True), default=60.0, show_default=True, metavar="SECONDS",
              help="Give up (exit 3) when reading the GPUs takes longer, e.g. a hung NVML.")
@click.option("--host-root", metavar="DIR", type=click.Path(file_okay=False, exists=True),
              help="Judge the kernels and NVIDIA modules under DIR (a mounted node image) instead of this host's; "
                   "a live check reads this host's.")
@click.option("--ib-sysfs", metavar="DIR", type=click.Path(file_okay=False, exists=True),
              help="Judge the InfiniBand ports under DIR (a copy of /sys/class/infiniband) instead of this host's; "
                   "a live check reads this host's ([slurm] ib_sysfs, else <host root>/sys/class/infiniband).")
@click.option("--ibstat", metavar="FILE", type=click.Path(dir_okay=False, exists=True),
              help="Judge the ports of a saved `ibstat` output (state, rate, link layer; no counters) instead.")
@json_option
def check(report: str | None, snapshot_file: str | None, kmsg: str | None, config: str | None, node: str | None,
          previous: str | None, expect_idle: bool, perf_baseline: str | None, level: str, timeout: float,
          host_root: str | None, ib_sysfs: str | None, ibstat: str | None, as_json: bool) -> None:
    """Judge a node's GPUs: live NVML, or a saved report.

    Exit codes: 0 ok or warn, 1 reboot or drain, 2 usage or config error, 3 no readable GPU state.
    """
    from ..judging.pipeline import evaluate
    from .output import check_text

    if report and snapshot_file:
        _fail("give --nvidia-smi-q or --snapshot, not both", exitcodes.USAGE)
    policy = _load_policy(config)
    prev = None
    if previous:
        prev = _read_or_exit(previous)
    # a live check judges this host's kernels and modules; a saved report, those of --host-root only
    live = not (report or snapshot_file)
    root = host_root or ("/" if live else None)
    ib = ib_sysfs or (policy.slurm.ib_sysfs or os.path.join(root, "sys/class/infiniband") if root else None)
    if ibstat and ib_sysfs:
        _fail("give --ib-sysfs or --ibstat, not both", exitcodes.USAGE)
    snap = _gather_or_exit(report or snapshot_file, kmsg, level, timeout, host_root=root,
                           ib_sysfs=None if ibstat else ib, ibstat=ibstat)
    if not snap.has_gpu_state():
        _fail("no readable GPU state in the input", exitcodes.NO_STATE)
    baseline = _perf_baseline(perf_baseline, policy) if perf_baseline else None
    result = evaluate(snap, policy, host=node, previous=prev, expect_idle=expect_idle or None,
                      perf_baseline=baseline)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
    else:
        click.echo(check_text(result))
    sys.exit(exitcodes.UNHEALTHY if result.verdict in ("reboot", "drain") else exitcodes.OK)


def _perf_baseline(source: str, policy) -> dict[str, dict[str, float]]:
    """{model: {"mem_bw_gbps": median}} from a JSON file, or from what the fleet publishes to Slurm."""
    from ..slowgpus.fleet import baseline_by_model, baseline_from_file, from_published

    if source == "slurm":
        from ..slurm import SlurmError

        try:
            return baseline_by_model(from_published(_backend(policy)), policy.slurm.straggler_min_peers)
        except SlurmError as exc:
            _fail(f"--perf-baseline slurm: {exc}", exitcodes.USAGE)
    try:
        return baseline_from_file(source)
    except (OSError, ValueError) as exc:
        _fail(f"--perf-baseline {source}: not a JSON object of models: {exc}", exitcodes.USAGE)


@cli.command("reboot-check")
@click.option("--driver", required=True, metavar="VERSION", help="The driver the node must come back with.")
@click.option("--kernel", metavar="RELEASE", help="The kernel that must boot next (a rollout bundle's kernel).")
@click.option("--host-root", metavar="DIR", type=click.Path(file_okay=False, exists=True), default="/",
              show_default=True, help="Where the node's /boot, /lib/modules, /etc and /proc are (a mounted image).")
@json_option
def reboot_check(driver: str, kernel: str | None, host_root: str, as_json: bool) -> None:
    """Will a reboot now bring the GPUs back on DRIVER?  The kernel that boots next must have an nvidia
    module of that version (and a signed one under Secure Boot).  For the upgrade template, between the
    install and the reboot: a failure stops the script, and the node fails with this line, not rebooted.

    Exit codes: 0 yes, 1 no (one line says why), 2 usage error.
    """
    from ..judging.checks.kernel import reboot_problem
    from ..readers.host import read_host

    try:
        facts = read_host(host_root)
    except OSError as exc:
        _fail(f"{host_root}: cannot read the host: {exc.strerror or exc}", exitcodes.USAGE)
    problem = reboot_problem(facts, driver, kernel)
    nxt = facts.next_boot
    module = nxt.module if nxt else None
    if nxt is None and problem is None:
        problem = f"the kernel that boots next cannot be told under {host_root}"
    if problem and nxt is not None and nxt.note:  # why there is no module: DKMS built none, and its log
        problem = f"{problem}: {nxt.note}"
    if as_json:
        click.echo(json.dumps({"ok": problem is None, "driver": driver, "next_boot_kernel": nxt.release if nxt else None,
                               "next_boot_from": facts.next_boot_from,
                               "module_version": module.version if module else None,
                               "module_flavour": module.flavour if module else None,
                               "module_path": module.path if module else None,
                               "module_vermagic": module.vermagic if module else None,
                               "module_signer": module.signer if module else None, "problem": problem}))
    elif problem:
        click.echo(problem)
    else:
        from .output import reboot_check_text

        click.echo(reboot_check_text(nxt.release, module, driver))
    sys.exit(exitcodes.UNHEALTHY if problem else exitcodes.OK)


@cli.command()
@click.option("--nvidia-smi-q", "report", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="Convert a saved nvidia-smi report instead of reading live NVML.")
@click.option("--kmsg", metavar="FILE", type=click.Path(dir_okay=False), help="Kernel log to add Xid events from.")
@click.option("--level", type=click.Choice(["quick", "full"]), default="full", show_default=True,
              help="`full` includes the InfoROM checksum and validation.")
@click.option("-o", "--output", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              help="Where to write the JSON (default stdout).")
@click.option("--timeout", type=Finite(min=0, max=86400, min_open=True), default=60.0, show_default=True, metavar="SECONDS",
              help="Give up (exit 3) when reading the GPUs takes longer, e.g. a hung NVML.")
@click.option("--ib-sysfs", metavar="DIR", type=click.Path(file_okay=False, exists=True),
              help="Add the InfiniBand ports under DIR (a live snapshot reads /sys/class/infiniband).")
def snapshot(report: str | None, kmsg: str | None, level: str, output: str, timeout: float,
             ib_sysfs: str | None) -> None:
    """Dump the node's GPU state as JSON (replay it with `check --snapshot`)."""
    snap = _gather_or_exit(report, kmsg, level, timeout, live_kmsg=False,
                           ib_sysfs=ib_sysfs or (None if report else "/sys/class/infiniband"))
    text = snap.to_json()
    if output == "-":
        click.echo(text)
    else:
        _write_atomic(output, text + "\n")
    sys.exit(exitcodes.OK if snap.has_gpu_state() else exitcodes.NO_STATE)


@cli.command()
@click.argument("job_id", metavar="JOBID")
@config_opt(help="Policy file (its [slurm] programs).")
@json_opt(help="One JSON object: the job, where its record came from, the record.")
def job(job_id: str, config: str | None, as_json: bool) -> None:
    """What happened to a job's GPUs: the record its nodes kept in its AdminComment (Xids, memory errors,
    what was done to a node, fault requeues), from `scontrol show job` while Slurm holds the job and from
    `sacct` after (its AdminComment and its SystemComment, where the record goes beside jobstats).

    Exit codes: 0 shown (or nothing to say), 2 no such job or Slurm unreadable.
    """
    from ..records import jobrecord
    from ..slurm import SlurmError
    from .output import job_text

    if not job_id.replace("_", "").replace("+", "").isdigit():
        _fail(f"{job_id}: not a job id", exitcodes.USAGE)
    from ..hooks.jobs import LIVE_STATES

    backend = _backend(_load_policy(config))
    try:
        fields = backend.job_fields(job_id)
    except SlurmError as exc:
        _fail(f"job {job_id}: {exc}", exitcodes.USAGE)
    source, admin = "slurmctld", fields.get("AdminComment", "") if fields is not None else None
    note = None
    if fields is None or (fields.get("JobState") or "").split()[0] not in LIVE_STATES:
        # ended: its nodes wrote their parts into slurmdbd's record (slurmctld's copy no longer moves)
        try:
            accounted = backend.accounted_admin_comment(job_id)
            # beside jobstats, the record is in its SystemComment (hooks/jobs.record_part)
            system = backend.accounted_admin_comment(job_id, "SystemComment") if accounted is not None else None
        except SlurmError as exc:
            if fields is None:
                _fail(f"job {job_id}: Slurm no longer knows it and accounting cannot be read: {exc}", exitcodes.USAGE)
            accounted = system = None
            note = (f"job {job_id} has ended and this cluster keeps no accounting (slurmdbd) where its nodes could "
                    f"write what happened: see `slurm-gpufleet history` on its nodes")
        if accounted is not None:
            source, admin = "accounting", accounted
    else:
        system = None
    if admin is None:
        _fail(f"job {job_id}: Slurm does not know it (and accounting has no record of it)", exitcodes.USAGE)
    record = jobrecord.merged("" if admin == "(null)" else admin, system)
    if as_json:
        click.echo(json.dumps({"job": job_id, "source": source, "record": record, **({"note": note} if note else {})},
                              indent=1))
    else:
        for line in ([note] if note and not record else job_text(job_id, record)):
            click.echo(line)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@json_opt(help="One JSON object per line: each GPU Xid event, each NVSwitch SXid event (\"sxid\": CODE), "
                   "each line that mentions an Xid and was not read (\"unparsed\": WHY).")
def xid(file: str, as_json: bool) -> None:
    """List the GPU Xid and NVSwitch SXid events in a kernel log (FILE or - for stdin), with the catalog's
    action."""
    from ..catalogs import nvlink5_action, sxid_action, xid_info
    from ..readers.kernel_log import kernel_log_text, read_kernel_log
    from .output import sxid_text, xid_text

    try:
        data = sys.stdin.buffer.read() if file == "-" else open(file, "rb").read()
    except OSError as exc:
        _fail(f"{file}: {exc.strerror or exc}", exitcodes.USAGE)
    try:
        text = kernel_log_text(data, "standard input" if file == "-" else file)
    except ReportError as exc:
        _fail(str(exc), exitcodes.NO_STATE)
    log = read_kernel_log(text.splitlines())
    for e in log.events:
        info = xid_info(e.xid)
        nonfatal = e.fatal is False
        unit = nvlink5_action(e.xid, e.unit, bool(e.fatal)) if e.fatal is not None else None
        action = unit.action if unit else (info.action if info and not nonfatal else "watch")
        severity = unit.severity if unit else (info.severity if info and not nonfatal else "warn")
        if nonfatal and severity not in ("ok", "warn"):
            action, severity = "watch", "warn"
        row: dict[str, Any] = {
            "line": e.line, "xid": e.xid, "pci": e.pci, "name": info.name if info else "unknown Xid",
            "action": action, "severity": severity,
            "pid": e.pid, "process": e.process, "timestamp": e.timestamp, "boot": e.boot,
            "message": e.message,
        }
        # NVLink5 marks, a repeat of an earlier Xid, a line read only in part: said where they apply
        row.update({k: v for k, v in (("fatal", e.fatal), ("unit", e.unit), ("subcode", e.subcode),
                                       ("caused_by", e.caused_by), ("partial", e.partial or None)) if v is not None})
        click.echo(json.dumps(row) if as_json else xid_text(row))
    for sx in log.sxids:
        act, name = sxid_action(sx.sxid, sx.fatal)
        row = {"line": sx.line, "sxid": sx.sxid, "fatal": sx.fatal if sx.fatal is not None else act.severity != "warn",
               "switch": sx.switch, "pci": sx.pci, "link": sx.link, "name": name, "action": act.action,
               "severity": act.severity, "timestamp": sx.timestamp, "boot": sx.boot, "message": sx.message}
        click.echo(json.dumps(row) if as_json else sxid_text(row))
    for why in log.unparsed:
        if as_json:
            number, _, rest = why.partition(": ")
            click.echo(json.dumps({"line": int(number.split()[1]), "unparsed": rest}))
    if not as_json:
        click.echo(f"{len(log.events)} GPU Xid event(s), {len(log.sxids)} NVSwitch SXid event(s) in {log.boots} "
                   f"boot(s)" + (f"; {len(log.unparsed)} line(s) mentioning an Xid not read (first: "
                                 f"{log.unparsed[0]})" if log.unparsed else ""), err=True)


@cli.command()
@click.option("--driver", required=True, metavar="VERSION", help="Driver version, e.g. 580.159.04.")
@click.option("--arch", metavar="NAME", help="GPU architecture: Volta, Ampere, Hopper, Blackwell, ...")
@click.option("--cc", metavar="X.Y", help="Compute capability instead of --arch.")
@click.option("--cuda", metavar="X.Y", help="CUDA toolkit version that must run.")
@json_option
def compat(driver: str, arch: str | None, cc: str | None, cuda: str | None, as_json: bool) -> None:
    """Can DRIVER run this architecture and CUDA version?  Exit 0 yes, 1 no, 2 bad input."""
    from ..catalogs import compat as compat_mod

    if arch and cc:
        _fail("give --arch or --cc, not both", exitcodes.USAGE)
    for label, value in (("--driver", driver), ("--cc", cc), ("--cuda", cuda)):
        if value is None:
            continue
        try:
            compat_mod.parse_version(value)
        except ValueError:
            _fail(f"{label} {value!r} is not a version number", exitcodes.USAGE)
    if arch and compat_mod.architecture(arch) is None:
        from ..catalogs import find_model

        names = ", ".join(a["name"] for a in compat_mod.compat_data()["architecture"])
        model = find_model(arch)
        hint = f" ({arch} is a GPU model: --arch {model.architecture})" if model and model.architecture else ""
        _fail(f"--arch {arch!r} is not an architecture{hint}; known: {names}", exitcodes.USAGE)
    result = compat_mod.evaluate(driver, arch=arch, cc=cc, cuda=cuda)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
    else:
        from .output import compat_text

        safe = compat_mod.safe_version(driver) if result.cves else None
        click.echo("\n".join(compat_text(driver, result, safe)))
    sys.exit(exitcodes.OK if result.compatible else exitcodes.UNHEALTHY)


@cli.command()
@click.option("--nvidia-smi-q", "report", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="A saved report instead of live NVML.")
@click.option("--snapshot", "snapshot_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="A JSON snapshot (`slurm-gpufleet snapshot`) instead of live NVML.")
@click.option("--kmsg", metavar="FILE", type=click.Path(dir_okay=False), help="Kernel log to read Xid events from.")
@config_option
@click.option("--node", metavar="NAME", help="Node name for the labels and group matching (default: the snapshot's host).")
@click.option("--level", type=click.Choice(["quick", "full", "deep"]), default="quick", show_default=True,
              help="`full` adds the InfoROM checks; `deep` measures each GPU (as for check).")
@click.option("--textfile", required=True, metavar="PATH",
              help="Where node_exporter's textfile collector reads, e.g. /var/lib/node_exporter/gpufleet.prom")
@click.option("--timeout", type=Finite(min=0, max=86400, min_open=True), default=60.0, show_default=True, metavar="SECONDS",
              help="Give up (exit 3) when reading the GPUs takes longer, e.g. a hung NVML.")
def metrics(report: str | None, snapshot_file: str | None, kmsg: str | None, config: str | None, node: str | None,
            level: str, textfile: str, timeout: float) -> None:
    """Write Prometheus metrics (verdicts, findings, ECC/remap counters, throttle reasons, performance)."""
    from ..judging.pipeline import evaluate
    from ..records.metrics import write_textfile

    policy = _load_policy(config)
    snap = _gather_or_exit(report or snapshot_file, kmsg, level, timeout)
    result = evaluate(snap, policy, host=node)
    from ..slurm import breaker as brk

    try:
        write_textfile(textfile, result, node, brk.state(policy.slurm.breaker_path) is not None)
    except OSError as exc:
        _fail(f"{textfile}: {exc.strerror or exc}", exitcodes.USAGE)


@cli.command()
@config_option
@click.option("--node", metavar="NAME", help="Whose history (default: this host).")
@click.option("--db", metavar="FILE", help="A history database instead of <state_dir>/<node>.db.")
@click.option("--since", metavar="WHEN", help="ISO time, or an age like 2h, 3d.")
@click.option("--gpu", type=int, metavar="N", help="Only findings and measurements of this GPU.")
@click.option("--limit", type=int, default=50, show_default=True, help="At most this many rows of each kind.")
@json_option
def history(config: str | None, node: str | None, db: str | None, since: str | None, gpu: int | None, limit: int,
            as_json: bool) -> None:
    """The node's own history: check runs, findings, Xids attributed to jobs, performance results, and the
    remediation ladder's steps: each drain, reset, reboot, reason, validation run and resume, with why and
    its outcome (in observe mode, what full mode would have done)."""
    import socket

    from ..records.history import HistoryError, parse_since, read_recent

    policy = _load_policy(config)
    node = node or socket.gethostname().split(".")[0]
    path = db or os.path.join(policy.slurm.state_dir, f"{node}.db")
    try:
        seen = read_recent(path, parse_since(since, time.time()) if since else 0.0, gpu, limit)
    except HistoryError as exc:
        _fail(str(exc), exitcodes.USAGE)
    if as_json:
        click.echo(json.dumps({"node": node, **seen}, indent=1))
        return
    from .output import history_text

    click.echo("\n".join(history_text(node, seen)))


@cli.group()
def advise() -> None:
    """Advice derived from the fleet's own history."""


@advise.command("checkpoint")
@click.option("--job-gpus", type=click.IntRange(1), required=True, metavar="N", help="The GPUs the job runs on.")
@click.option("--checkpoint-cost", type=Finite(min=0, min_open=True), required=True, metavar="SECONDS", help="How long one checkpoint takes to write.")
@click.option("--gpu-mtbf-hours", type=Finite(min=0, min_open=True), metavar="H",
              help="Per-GPU MTBF; default: the failure rate seen in the history databases.")
@click.option("--history-dir", metavar="DIR", help="Directory of node history databases (default: [slurm] state_dir).")
@config_option
@json_option
def advise_checkpoint(job_gpus: int, checkpoint_cost: float, gpu_mtbf_hours: float | None, history_dir: str | None,
                      config: str | None, as_json: bool) -> None:
    """The job's MTBF and the checkpoint interval that minimises expected lost work (Young/Daly)."""
    from ..records.checkpoint import advise as make_advice
    from ..slowgpus.fleet import failure_history

    failures = gpu_hours = None
    if gpu_mtbf_hours is None:
        directory = history_dir or _load_policy(config).slurm.state_dir
        failures, gpu_hours, _ = failure_history(directory)
    try:
        a = make_advice(job_gpus, checkpoint_cost, gpu_mtbf_hours, failures, gpu_hours)
    except ValueError as exc:
        _fail(str(exc), exitcodes.USAGE)
    if as_json:
        click.echo(json.dumps(a.to_dict(), indent=1))
        return
    from .output import checkpoint_text

    click.echo("\n".join(checkpoint_text(job_gpus, a)))
