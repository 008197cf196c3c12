"""The `slurm-gpufleet` command: a thin click layer over the library."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from typing import Any

import click

from . import exitcodes
from .faultsim import ALL_STRATEGIES as FAULT_STRATEGIES
from .maintain.strategy import SIMULATED, STRATEGIES
from .readers import ReportError

INTERNAL_ERROR = 70  # EX_SOFTWARE: a bug in slurm-gpufleet, never a verdict


def _fail(message: str, code: int) -> None:
    click.echo(f"slurm-gpufleet: error: {message}", err=True)
    sys.exit(code)


def _load_policy(config: str | None, trusted: bool = False, read_only: bool = False):
    """trusted: the command runs programs or writes state as root (maintain, breaker): a config, template,
    program or state path others could write is refused in one line, exit 2 (slurm_gpufleet/trust.py), the
    config judged before it is parsed.  read_only: the command runs nothing and writes nothing as root
    (`plan --fleet`, `fleet --fleet`, `simulate`): an untrusted config is read, with one warning line."""
    from .policy import PolicyError, config_path, load_policy
    from .trust import problem, refusals

    path, required = config_path(config)
    if path is not None and not required and not os.path.exists(path):
        path = None
    if trusted and not read_only and path is not None:
        first = problem(path)  # before a byte of it is parsed
        if first:
            _fail(f"refused: {first.line()}", exitcodes.USAGE)
    try:
        policy = load_policy(path)
    except PolicyError as exc:
        _fail(str(exc), exitcodes.USAGE)
    if trusted or read_only:
        refused = refusals(policy, own_judged=trusted and not read_only and path is not None)
        if refused and read_only:
            click.echo(f"slurm-gpufleet: warning: {refused[0].line()} (read only here: nothing runs as root)",
                       err=True)
        elif refused:
            _fail(f"refused: {refused[0].line()}", exitcodes.USAGE)
    return policy


# options every command that has them spells the same way, with the same help
JSON_HELP = "Print one JSON object (machine output; the text is for people)."
CONFIG_HELP = "Config file (default $SLURM_GPUFLEET_CONFIG, then /etc/slurm-gpufleet/gpufleet.toml, else safe defaults)."
json_option = click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
config_option = click.option("--config", metavar="FILE", help=CONFIG_HELP)



def _group_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """`fleet cases --config F` as `fleet --config F cases`: the group's commands read the group's config."""
    if value is not None:
        ctx.ensure_object(dict)["config"] = value


# on a group's commands: the same --config, given after the command name
group_config_option = click.option("--config", metavar="FILE", help=CONFIG_HELP, expose_value=False,
                                   callback=_group_config)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="slurm-gpufleet")
def cli() -> None:
    """GPU health checks for Slurm nodes, and the data behind them."""


def _gather_or_exit(report: str | None, kmsg: str | None, level: str, timeout: float, live_kmsg: bool = True,
                    host_root: str | None = None, ib_sysfs: str | None = None, ibstat: str | None = None):
    """Read GPU state under the watchdog; one line and exit 3 (nothing readable) or 2 (no such file)."""
    from . import watchdog
    from .pipeline import Source, gather

    if live_kmsg and kmsg is None and not report and os.access("/dev/kmsg", os.R_OK):
        kmsg = "/dev/kmsg"  # a live check of this node: its own kernel log too
    timer = watchdog.start(timeout, "reading GPU state", exitcodes.NO_STATE)
    try:
        return gather(Source(report=report, kernel_log=kmsg, level=level, host_root=host_root, ib_sysfs=ib_sysfs,
                             ibstat=ibstat))
    except ReportError as exc:
        named = report is None or report in str(exc) or bool(kmsg and kmsg in str(exc))
        _fail(str(exc) if named else f"{report}: {exc}", exitcodes.NO_STATE)
    except OSError as exc:
        _fail(f"{exc.filename or ''}: {exc.strerror or exc}", exitcodes.USAGE)
    finally:
        if timer:
            timer.cancel()


@cli.command()
@click.option("--nvidia-smi-q", "report", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="Judge a saved `nvidia-smi -q -x` (XML) or `nvidia-smi -q` (text) report.")
@click.option("--snapshot", "snapshot_file", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="Judge a JSON snapshot written by `slurm-gpufleet snapshot`.")
@click.option("--kmsg", metavar="FILE", type=click.Path(dir_okay=False),
              help="Kernel log (dmesg, journalctl -k, syslog, /dev/kmsg) to read Xid events from "
                   "(live checks read /dev/kmsg when it is readable).")
@click.option("--config", metavar="FILE", help="Policy file (default $SLURM_GPUFLEET_CONFIG, then /etc/slurm-gpufleet/gpufleet.toml).")
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
@click.option("--timeout", type=float, default=60.0, show_default=True, metavar="SECONDS",
              help="Give up (exit 3) when reading the GPUs takes longer, e.g. a hung NVML.")
@click.option("--host-root", metavar="DIR", type=click.Path(file_okay=False, exists=True),
              help="Judge the kernels and NVIDIA modules under DIR (a mounted node image) instead of this host's; "
                   "a live check reads this host's.")
@click.option("--ib-sysfs", metavar="DIR", type=click.Path(file_okay=False),
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
    from .pipeline import evaluate, format_text

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
        click.echo(format_text(result))
    sys.exit(exitcodes.UNHEALTHY if result.verdict in ("reboot", "drain") else exitcodes.OK)


def _perf_baseline(source: str, policy) -> dict[str, dict[str, float]]:
    """{model: {"mem_bw_gbps": median}} from a JSON file, or from what the fleet publishes to Slurm."""
    if source == "slurm":
        from .perf.fleet import from_published
        from .perf.stats import median
        from .slurm import SlurmError

        try:
            samples = from_published(_backend(policy))
        except SlurmError as exc:
            _fail(f"--perf-baseline slurm: {exc}", exitcodes.USAGE)
        by_model: dict[str, list[float]] = {}
        for _key, model, value in samples:
            by_model.setdefault(model, []).append(value)
        return {m: {"mem_bw_gbps": median(v)} for m, v in by_model.items()
                if len(v) >= policy.slurm.straggler_min_peers}
    try:
        with open(source, encoding="utf-8") as fh:
            data = json.load(fh)
        return {str(m): {k: float(v) for k, v in d.items()} for m, d in data.items()}
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        _fail(f"--perf-baseline {source}: not a JSON object of models: {exc}", exitcodes.USAGE)


def _read_or_exit(path: str):
    from .readers import read_report_file

    try:
        return read_report_file(path)
    except ReportError as exc:
        _fail(f"{path}: {exc}", exitcodes.NO_STATE)
    except OSError as exc:
        _fail(f"{path}: {exc.strerror or exc}", exitcodes.USAGE)


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
    from .checks.kernel import reboot_problem
    from .readers.host import read_host

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
        click.echo(f"next boot kernel {nxt.release} has nvidia {module.version if module else '?'}"
                   f"{' (' + module.flavour + ')' if module and module.flavour else ''}: a reboot brings {driver} back")
    sys.exit(exitcodes.UNHEALTHY if problem else exitcodes.OK)


@cli.command()
@click.option("--nvidia-smi-q", "report", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="Convert a saved nvidia-smi report instead of reading live NVML.")
@click.option("--kmsg", metavar="FILE", type=click.Path(dir_okay=False), help="Kernel log to add Xid events from.")
@click.option("--level", type=click.Choice(["quick", "full"]), default="full", show_default=True,
              help="`full` includes the InfoROM checksum and validation.")
@click.option("-o", "--output", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              help="Where to write the JSON (default stdout).")
@click.option("--timeout", type=float, default=60.0, show_default=True, metavar="SECONDS",
              help="Give up (exit 3) when reading the GPUs takes longer, e.g. a hung NVML.")
@click.option("--ib-sysfs", metavar="DIR", type=click.Path(file_okay=False),
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
@click.option("--config", metavar="FILE", help="Policy file (its [slurm] programs).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the job, where its record came from, the record.")
def job(job_id: str, config: str | None, as_json: bool) -> None:
    """What happened to a job's GPUs: the record its nodes kept in its AdminComment (Xids, memory errors,
    what was done to a node, fault requeues), from `scontrol show job` while Slurm holds the job and from
    `sacct` after.

    Exit codes: 0 shown (or nothing to say), 2 no such job or Slurm unreadable.
    """
    from . import jobrecord
    from .slurm import SlurmError

    if not job_id.replace("_", "").replace("+", "").isdigit():
        _fail(f"{job_id}: not a job id", exitcodes.USAGE)
    from .hooks.jobs import LIVE_STATES

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
        except SlurmError as exc:
            if fields is None:
                _fail(f"job {job_id}: Slurm no longer knows it and accounting cannot be read: {exc}", exitcodes.USAGE)
            accounted = None
            note = (f"job {job_id} has ended and this cluster keeps no accounting (slurmdbd) where its nodes could "
                    f"write what happened: see `slurm-gpufleet history` on its nodes")
        if accounted is not None:
            source, admin = "accounting", accounted
    if admin is None:
        _fail(f"job {job_id}: Slurm does not know it (and accounting has no record of it)", exitcodes.USAGE)
    record = jobrecord.split("" if admin == "(null)" else admin)[1]
    if as_json:
        click.echo(json.dumps({"job": job_id, "source": source, "record": record, **({"note": note} if note else {})},
                              indent=1))
    else:
        for line in ([note] if note and not record else jobrecord.lines(job_id, record)):
            click.echo(line)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line: each GPU Xid event, each NVSwitch SXid event (\"sxid\": CODE), "
                   "each line that mentions an Xid and was not read (\"unparsed\": WHY).")
def xid(file: str, as_json: bool) -> None:
    """List the GPU Xid and NVSwitch SXid events in a kernel log (FILE or - for stdin), with the catalog's
    action."""
    from .catalog import nvlink5_action, sxid_action, xid_info
    from .readers.kernel_log import kernel_log_text, read_kernel_log

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
        if as_json:
            click.echo(json.dumps(row))
        else:
            label = f"{e.xid}.{e.subcode}" if e.subcode is not None else str(e.xid)
            marks = "".join(f" ({m})" for m in ((("Fatal" if e.fatal else "Nonfatal") if e.fatal is not None else ""),
                                                 (f"caused by Xid {e.caused_by}" if e.caused_by else ""),
                                                 ("partial line" if e.partial else "")) if m)
            click.echo(f"{e.line:>6}  Xid {label:<6} {e.pci or '-':<12} {row['severity']:<6} {row['action']:<16} "
                       f"{row['name']}{marks}")
    for sx in log.sxids:
        act, name = sxid_action(sx.sxid, sx.fatal)
        row = {"line": sx.line, "sxid": sx.sxid, "fatal": sx.fatal if sx.fatal is not None else act.severity != "warn",
               "switch": sx.switch, "pci": sx.pci, "link": sx.link, "name": name, "action": act.action,
               "severity": act.severity, "timestamp": sx.timestamp, "boot": sx.boot, "message": sx.message}
        if as_json:
            click.echo(json.dumps(row))
        else:
            word = "Fatal" if row["fatal"] else "Non-fatal"
            click.echo(f"{sx.line:>6}  SXid {sx.sxid:<5} nvswitch{sx.switch if sx.switch is not None else '?':<4} "
                       f"{act.severity:<6} {act.action:<16} {name} ({word})")
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
    from . import compat as compat_mod

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
        from .catalog import find_model

        names = ", ".join(a["name"] for a in compat_mod.compat_data()["architecture"])
        model = find_model(arch)
        hint = f" ({arch} is a GPU model: --arch {model.architecture})" if model and model.architecture else ""
        _fail(f"--arch {arch!r} is not an architecture{hint}; known: {names}", exitcodes.USAGE)
    result = compat_mod.evaluate(driver, arch=arch, cc=cc, cuda=cuda)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
    else:
        click.echo(f"driver {driver}: branch R{result.branch} ({result.branch_type or 'unknown type'}, "
                   f"end of life {result.branch_eol or 'unknown'}), CUDA up to {result.max_cuda or '?'}")
        for p in result.problems:
            click.echo(f"  INCOMPATIBLE: {p}")
        for n in result.notes:
            click.echo(f"  note: {n}")
        if result.cves:
            worst = max(result.cves, key=lambda c: c["cvss"] or 0)
            safe = compat_mod.safe_version(driver)
            click.echo(f"  exposed to {len(result.cves)} CVE(s) of NVIDIA's bulletins, worst {worst['id']} "
                       f"({worst['severity']} {worst['cvss']}); "
                       + (f"first safe on R{result.branch}: {safe}" if safe else f"R{result.branch} has no fix"))
        click.echo("compatible" if result.compatible else "not compatible")
    sys.exit(exitcodes.OK if result.compatible else exitcodes.UNHEALTHY)


@cli.command("slurm-conf")
@click.option("--bin-dir", default="/usr/local/sbin", show_default=True, metavar="DIR",
              help="Where slurm-gpufleet-healthcheck, -prolog and -epilog are installed.")
@click.option("--interval", type=click.IntRange(1), default=300, show_default=True,
              help="HealthCheckInterval in seconds.")
@click.option("--node-state", default="ANY", show_default=True, help="HealthCheckNodeState.")
@click.option("--reboot-program", metavar="PATH", help="RebootProgram (printed as a hint when not given).")
@click.option("--slurm-version", metavar="X.Y", help="The Slurm release that reads the lines (default: this "
                                                     "machine's `scontrol --version`).")
@click.option("--config", metavar="FILE", help="The config the programs read, for its read_timeout_s "
                                               "(default: $SLURM_GPUFLEET_CONFIG, then /etc/slurm-gpufleet).")
def slurm_conf(bin_dir: str, interval: int, node_state: str, reboot_program: str | None,
               slurm_version: str | None, config: str | None) -> None:
    """Print the slurm.conf lines that wire slurm-gpufleet into Slurm."""
    from .install import detect_slurm_version, slurm_conf_lines

    if not bin_dir.startswith("/"):
        _fail("--bin-dir must be absolute: slurmd runs these programs with no PATH", exitcodes.USAGE)
    version = slurm_version or detect_slurm_version()
    read = _read_timeout_of(config)
    click.echo(slurm_conf_lines(bin_dir, interval, node_state, reboot_program, version, read), nl=False)
    _health_check_notes(interval, read, version)
    _warn_unmatched_groups(config)


def _warn_unmatched_groups(config: str | None) -> None:
    """A [[group]] whose host list matches no node of slurm.conf ($SLURM_CONF, else /etc/slurm/slurm.conf):
    a typo that applies its settings nowhere (an observe-only group's nodes then act in full mode)."""
    from .policy import PolicyError, config_path, load_policy

    path, _ = config_path(config)
    if path is None or not os.path.exists(path):
        return
    try:
        unmatched = load_policy(path).unmatched_groups_in_slurm_conf()
    except PolicyError:
        return  # said above (_read_timeout_of)
    for name, nodes in unmatched or []:
        click.echo(f"warning: group {name} (nodes = \"{nodes}\") matches no node of slurm.conf: its settings "
                   "apply nowhere (a typo in its host list?)", err=True)


def _read_timeout_of(config: str | None) -> float:
    """The read_timeout_s the health check will run with: its config's, if one is there, else the default."""
    from .policy import PolicyError, SlurmSettings, config_path, load_policy

    path, _ = config_path(config)
    if path is None or not os.path.exists(path):
        return SlurmSettings().read_timeout_s
    try:
        return load_policy(path).slurm.read_timeout_s
    except PolicyError as exc:
        click.echo(f"note: {exc}; the slurm.conf lines assume the default read_timeout_s", err=True)
        return SlurmSettings().read_timeout_s


def _health_check_notes(interval: int, read_timeout_s: float, version: str | None) -> None:
    from .install import health_check_limit

    for note in health_check_limit(interval, read_timeout_s, version)[1]:
        click.echo(f"note: {note}", err=True)


@cli.group()
def breaker() -> None:
    """The fleet-wide drain circuit breaker: `status`, and `reset` once the cause is understood."""


@breaker.command("status")
@config_option
@json_option
def breaker_status(config: str | None, as_json: bool) -> None:
    """Exit 0 when closed, 1 when open (no node is drained by the health check until reset)."""
    from .slurm import breaker as brk

    settings = _load_policy(config, trusted=True).slurm
    record = brk.state(settings.breaker_path)
    out = {"open": record is not None, "file": settings.breaker_path,
           "threshold": settings.breaker_threshold, "window_s": settings.breaker_window_s, **(record or {})}
    if as_json:
        click.echo(json.dumps(out))
    elif record:
        click.echo(f"OPEN since {record.get('opened_at', '?')} (tripped by {record.get('node', '?')}): "
                   f"{record.get('why', '')}; `slurm-gpufleet breaker reset` closes it")
    else:
        click.echo(f"closed (threshold {settings.breaker_threshold} within {settings.breaker_window_s:g} s)")
    sys.exit(exitcodes.UNHEALTHY if record else exitcodes.OK)


@breaker.command("reset")
@config_option
def breaker_reset(config: str | None) -> None:
    """Close the breaker: the health check may drain again."""
    from .slurm import breaker as brk

    path = _load_policy(config, trusted=True).slurm.breaker_path
    try:
        was_open = brk.reset(path)
    except OSError as exc:
        _fail(f"{path}: {exc.strerror or exc}", exitcodes.USAGE)
    click.echo(f"breaker closed ({path} removed)" if was_open else "breaker was already closed")


@cli.command("install")
@click.option("--prefix", required=True, metavar="DIR", help="Where to install, e.g. /opt/gpufleet (absolute).")
@click.option("--dry-run", is_flag=True, help="Say what would be written; write nothing.")
@click.option("--python", "python", metavar="PATH", help="Interpreter the wrappers run (default: this one).")
@click.option("--config", metavar="FILE", help="Config the programs read (default: PREFIX/etc/gpufleet.toml).")
@click.option("--slurm-conf", metavar="FILE", help="Export SLURM_CONF in the wrappers (a slurm.conf outside /etc).")
@click.option("--interval", type=click.IntRange(1), default=300, show_default=True, help="HealthCheckInterval.")
@click.option("--node-state", default="ANY", show_default=True,
              help="HealthCheckNodeState (ANY,CYCLE spreads the runs over the interval instead of all at once).")
@click.option("--reboot-program", metavar="PATH", help="RebootProgram for the slurm.conf lines.")
@click.option("--slurm-version", metavar="X.Y", help="The Slurm release that reads the slurm.conf lines "
                                                     "(default: this machine's `scontrol --version`).")
def install(prefix: str, dry_run: bool, python: str | None, config: str | None, slurm_conf: str | None,
            interval: int, node_state: str, reboot_program: str | None, slurm_version: str | None) -> None:
    """Write the three programs slurmd runs (wrappers with an absolute interpreter), a commented config
    skeleton, the upgrade template sample and the slurm.conf lines for these paths.  Idempotent; an
    existing config or template is never overwritten."""
    from .install import apply_install, detect_slurm_version, plan_install

    for label, value in (("--prefix", prefix), ("--python", python), ("--config", config),
                         ("--slurm-conf", slurm_conf), ("--reboot-program", reboot_program)):
        if value is not None and not value.startswith("/"):
            _fail(f"{label} must be an absolute path: slurmd runs these programs with no PATH and another cwd",
                  exitcodes.USAGE)
    version = slurm_version or detect_slurm_version()
    read = _read_timeout_of(config or os.path.join(prefix, "etc", "gpufleet.toml"))
    items = plan_install(prefix, python or sys.executable, config, slurm_conf, interval, reboot_program,
                         version, read, node_state)
    from .install import make_state_dir
    from .trust import problem

    # what slurmd will run as root, and the config it reads, must be root's alone (trust.py); so must the
    # interpreter the wrappers name and the package it imports (this one's, when it is this interpreter)
    judged = [str(item.path) for item in items] + [python or sys.executable]
    if not python or os.path.realpath(python) == os.path.realpath(sys.executable):
        judged.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    refused = [r for r in (problem(p) for p in judged) if r]
    if refused and not dry_run:
        _fail(f"refused: {refused[0].line()}", exitcodes.USAGE)
    state_dir = _state_dir_of(config or os.path.join(prefix, "etc", "gpufleet.toml"))
    try:
        report = apply_install(items, dry_run)
        report += make_state_dir(state_dir, dry_run)
    except OSError as exc:
        _fail(f"{getattr(exc, 'filename', None) or prefix}: {exc.strerror or exc}", exitcodes.USAGE)
    for what, path in report:
        click.echo(f"{what:<14} {path}")
    for line in dict.fromkeys(f"{r.where}: {r.why}" for r in refused):
        click.echo(f"{'would refuse':<14} {line}")
    if not dry_run:
        left = [r for r in (problem(p) for p in [*judged, state_dir]) if r]
        click.echo(f"{'trusted':<14} every path above: owned by {'root' if os.geteuid() == 0 else 'you'}, "
                   "writable by no one else" if not left else f"{'refused':<14} {left[0].line()}")
    conf = items[-1]
    click.echo(f"\nAdd to slurm.conf (also in {conf.path}), then `scontrol reconfigure`:\n")
    click.echo(conf.text, nl=False)
    _health_check_notes(interval, read, version)


def _state_dir_of(config: str) -> str:
    """The state directory the installed programs will use: the config's, or the packaged default."""
    from .policy import PolicyError, default_policy, load_policy

    try:
        return (load_policy(config) if os.path.exists(config) else default_policy()).slurm.state_dir
    except PolicyError:
        return default_policy().slurm.state_dir


def _cache_dir(policy) -> str | None:
    """The state directory when this user may write it (an admin's CLI run as root; not an ordinary user)."""
    d = policy.slurm.state_dir
    return d if os.access(d if os.path.isdir(d) else os.path.dirname(d) or ".", os.W_OK) else None


def _backend(policy):
    """Slurm through the config's programs: never one a config others could write names."""
    from .slurm import SlurmError, get_backend
    from .trust import refusals

    refused = refusals(policy)
    if refused:
        _fail(f"refused: {refused[0].line()}", exitcodes.USAGE)
    try:
        return get_backend(policy.slurm.backend, policy.slurm.scontrol, cache_dir=_cache_dir(policy))
    except SlurmError as exc:
        _fail(str(exc), exitcodes.USAGE)


def _fleet(policy, fleet_file: str | None):
    from .maintain.fleet import FleetState
    from .slurm import SlurmError

    if fleet_file:
        try:
            return FleetState.from_file(fleet_file)
        except (OSError, ValueError, TypeError) as exc:
            _fail(f"{fleet_file}: not a fleet file: {exc}", exitcodes.USAGE)
    try:
        return FleetState.from_backend(_backend(policy))
    except SlurmError as exc:
        _fail(f"cannot read the fleet from Slurm: {exc}", exitcodes.USAGE)


def _domains(policy, backend, nodes=None):
    """The failure domains (maintain/domains.discover): the config's [[domain]] rows, else Slurm's blocks
    (topology/block), else the NVLink domains the nodes publish (`nodes`, the caller's one read)."""
    from .maintain.domains import discover, from_config
    from .slurm import SlurmError

    if policy.domains or backend is None:
        return discover(policy.domains, None, nodes)
    try:
        return discover((), backend.topology(), nodes)
    except SlurmError as exc:
        _fail(f"cannot read Slurm's topology: {exc}", exitcodes.USAGE)
    return from_config(())


@cli.group(invoke_without_command=True)
@click.option("--config", metavar="FILE", help="Policy file (node groups, their pinned driver and firmware).")
@click.option("--fleet", "fleet_file", metavar="FILE", help="A saved fleet (JSON) instead of asking Slurm.")
@json_option
@click.pass_context
def fleet(ctx: click.Context, config: str | None, fleet_file: str | None, as_json: bool) -> None:
    """Per node group: drivers, GPU models, firmware, verdicts, and nodes off the group's standard.

    Read from what every node's health check publishes to Slurm (one `scontrol show nodes`).
    """
    ctx.ensure_object(dict)
    ctx.obj.update(config=config, fleet_file=fleet_file, as_json=as_json)
    if ctx.invoked_subcommand is not None:
        return
    from .maintain.inventory import inventory, inventory_text

    policy = _load_policy(config, read_only=bool(fleet_file))
    inv = inventory(_fleet(policy, fleet_file), policy)
    click.echo(json.dumps(inv, indent=1) if as_json else inventory_text(inv))


@cli.group()
def maintain() -> None:
    """Staged driver upgrades between jobs: plan, apply, status, resume, abort, rollback."""


def _maintain_policy(policy_file: str | None, config: str | None, read_only: bool = False):
    return _load_policy(policy_file or config, trusted=not read_only, read_only=read_only)


@maintain.command("plan")
@click.option("--target-driver", metavar="VERSION", help="The driver to roll out, e.g. 580.159.04.")
@click.option("--target-kernel", metavar="RELEASE",
              help="The kernel to boot, in the same drain (e.g. 6.1.0-31-amd64): validated from the node's summary.")
@click.option("--target-firmware", multiple=True, metavar="[MODEL:]COMPONENT=VERSION",
              help="Firmware in the same drain, per GPU model as the fleet names it, e.g. "
                   "'NVIDIA H200:vbios=96.00.AF.00.01' (repeat it; a node whose model has none is left out; "
                   "without MODEL: every node); the template is told to power-cycle the node.")
@click.option("--nodes", "nodeset", required=True, metavar="NODESET", help="Slurm host list, e.g. gpu[001-128].")
@click.option("--strategy", type=click.Choice(list(STRATEGIES)), default="reservation", show_default=True,
              help="reservation: MAINT reservations placed when the nodes' jobs end; reboot-asap: scontrol reboot ASAP.")
@click.option("--config", metavar="FILE", help="Config with [maintain] and node groups (as for apply, status...).")
@click.option("--policy", "policy_file", metavar="FILE", hidden=True, help="Old name of --config.")
@click.option("--fleet", "fleet_file", metavar="FILE", help="Plan against a saved fleet (JSON) instead of Slurm.")
@click.option("--out", metavar="PLAN.json", help="Write the plan for `maintain apply`.")
@click.option("--html", "html_out", metavar="FILE", help="Write an HTML report with a timeline per node group.")
@click.option("--force", is_flag=True, help="Plan even when the compatibility gate refuses (and say so).")
@click.option("--deadline", metavar="DURATION|DATE",
              help="Every node done by then (72h, 3d, 2026-12-04T18:00): the running jobs that cannot end in "
                   "time are named, with what is done to each and when.")
@click.option("--stop-jobs", type=click.Choice(["earliest", "latest"]), default="earliest", show_default=True,
              help="With --deadline, when a job without a checkpoint that cannot end in time stops: at the start "
                   "(least work lost when time limits are tight) or at the last moment (loose time limits).")
@click.option("--max-unavailable", default=None, metavar="N|P%",
              help="Budget: nodes out at once (default: the config's [maintain] max_unavailable), as for simulate.")
@json_option
def maintain_plan(target_driver: str | None, target_kernel: str | None, target_firmware: tuple[str, ...], nodeset: str, strategy: str, policy_file: str | None, config: str | None,
                  fleet_file: str | None, out: str | None, html_out: str | None, force: bool, deadline: str | None,
                  stop_jobs: str, max_unavailable: str | None, as_json: bool) -> None:
    """Plan a rollout: compatibility gate, canary, growing waves within the budget, placed between jobs.

    With --deadline, the jobs that would hold a node past its last possible slot are stopped early, the
    ones that lose the least work first: checkpoint-and-requeue where the job says it can (docs/rollouts.md,
    "Deadline rollouts"), else requeue, else cancel; every other job is waited for.

    A bundle (--target-driver, --target-kernel, --target-firmware, at least one) moves in one drain per
    node; rollback returns each node's recorded bundle.

    Exit 0 with a plan, 1 when the gate refuses (without --force), 2 on bad input or a deadline that
    cannot be kept.
    """
    from ClusterShell.NodeSet import NodeSet, NodeSetException

    from .maintain import report
    from .maintain.bundle import parse_firmware_targets
    from .maintain.planner import PlanError, make_plan

    try:
        firmware, firmware_by_model = parse_firmware_targets(target_firmware)
    except ValueError as exc:
        _fail(str(exc), exitcodes.USAGE)
    policy = _with_budget(_maintain_policy(policy_file, config, read_only=bool(fleet_file)), max_unavailable)
    given = bool(target_driver or target_kernel or firmware or firmware_by_model)
    if not given and policy.bundle is not None:
        # the site's standard bundle, whole; the command line's targets, when given, replace it whole: one
        # source per plan, never a mix
        b = policy.bundle
        target_driver, target_kernel, firmware, firmware_by_model = b.driver, b.kernel, dict(b.firmware), \
            {m: dict(fw) for m, fw in b.firmware_by_model.items()}
        click.echo(f"targets from [bundle] in {policy.path}", err=True)
    elif given and policy.bundle is not None:
        click.echo(f"targets from the command line; [bundle] in {policy.path} not used", err=True)
    if not (target_driver or target_kernel or firmware or firmware_by_model):
        _fail("nothing to roll out: give --target-driver, --target-kernel or --target-firmware, or a [bundle] in "
              "the config", exitcodes.USAGE)
    if target_driver and not re.fullmatch(r"\d+\.\d+\.\d+", target_driver):
        _fail(f"--target-driver {target_driver}: a driver version is branch.minor.patch as NVIDIA numbers it "
              f"(580.172.01), never a part of one", exitcodes.USAGE)
    try:
        names = list(NodeSet(nodeset))
    except NodeSetException as exc:
        _fail(f"--nodes {nodeset!r} is not a host list: {exc}", exitcodes.USAGE)
    if not names:
        _fail(f"--nodes {nodeset!r} names no node: give a Slurm host list, e.g. gpu[001-128]", exitcodes.USAGE)
    fleet_state = _fleet(policy, fleet_file)
    now = fleet_state.taken_at if fleet_file else time.time()
    until = None
    if deadline:
        from .maintain.deadline import DeadlineError, parse_deadline

        try:
            until = parse_deadline(deadline, now)
        except DeadlineError as exc:
            _fail(str(exc), exitcodes.USAGE)
        if not fleet_file:  # whether each job may be requeued: read only for a deadline plan
            flags = _backend(policy).requeue_flags()
            for job in fleet_state.jobs:
                job.requeue = flags.get(job.job_id)
    domains = _domains(policy, None if fleet_file else _backend(policy),
                       [(n.name, n.fabric_domain) for n in fleet_state.nodes.values()])
    try:
        plan = make_plan(fleet_state, target_driver, names, policy, strategy=strategy, force=force,
                         now=now, deadline=until, stop_jobs=stop_jobs, kernel=target_kernel, firmware=firmware,
                         domains=domains, firmware_by_model=firmware_by_model)
    except (PlanError, ValueError) as exc:
        _fail(str(exc), exitcodes.USAGE)
    data = plan.to_dict()
    if out:
        _write_atomic(out, json.dumps(data, indent=1) + "\n")
    if html_out:
        _write_atomic(html_out, report.html(plan))
    click.echo(json.dumps(data, indent=1) if as_json else report.text(plan))
    sys.exit(exitcodes.UNHEALTHY if plan.refused else exitcodes.OK)


def _with_budget(policy, max_unavailable: str | None):
    """The policy with `--max-unavailable` in place of its [maintain] max_unavailable (plan and simulate)."""
    from dataclasses import replace

    from .policy import parse_budget

    if max_unavailable is None:
        return policy
    try:
        budget = parse_budget(max_unavailable)
    except ValueError as exc:
        _fail(f"--max-unavailable {exc}", exitcodes.USAGE)
    return replace(policy, maintain=replace(policy.maintain, max_unavailable=budget))


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _runner(config: str | None):
    from .maintain.runner import Runner
    from .maintain.store import Store
    from .progress import Progress

    policy = _load_policy(config, trusted=True)
    with _rollout_errors(policy.maintain.db):
        store = Store(policy.maintain.db)
    return Runner(store, _backend(policy), policy, Progress(sys.stderr)), store


@contextlib.contextmanager
def _rollout_errors(db: str):
    """What ends `apply`, `resume`, `abort` and `rollback` early, each as one line with its exit code."""
    import sqlite3

    from .maintain.runner import RolloutError
    from .slurm import SlurmError

    try:
        yield
    except RolloutError as exc:
        _fail(str(exc), exitcodes.USAGE)
    except SlurmError as exc:
        _fail(f"{exc}; the rollout's state is saved: `maintain resume` continues it", exitcodes.UNHEALTHY)
    except sqlite3.Error as exc:  # a full disk, an I/O error, a read-only file system
        _fail(f"the rollout's state cannot be written to {db} ({exc}); it stays as last saved and every step "
              "is repeatable: fix that, then `maintain resume`", exitcodes.UNHEALTHY)


def _require_rights(config: str | None) -> None:
    from .maintain.runner import can_change_slurm

    policy = _load_policy(config, trusted=True)
    ok, why = can_change_slurm(policy.slurm.scontrol)
    if not ok:
        _fail(f"maintain needs the right to change Slurm: {why}", exitcodes.USAGE)


def _finish(state: str, as_json: bool, store, runner, rollout_id: str | None = None, ok=("done", "rolled_back",
                                                                                         "aborted"), note: str = "") -> None:
    """The rollout's end, named by its own id (the latest one where the command has none); exit 0 only in
    the states `ok` (apply: done alone), with no node failed."""
    r = store.rollout(rollout_id) if rollout_id else store.rollout()
    counts = store.counts(r["id"]) if r else {}
    if as_json:
        click.echo(json.dumps({"rollout": r["id"] if r else None, "state": state, "nodes": counts,
                               **({"note": note} if note else {})}))
    else:
        click.echo(f"rollout {r['id'] if r else '-'}: {state} ({', '.join(f'{k} {v}' for k, v in counts.items())})"
                   + (f"; {note}" if note else ""))
    sys.exit(exitcodes.OK if state in ok and not counts.get("failed") else exitcodes.UNHEALTHY)


@maintain.command("apply")
@click.argument("plan_file", metavar="PLAN.json", type=click.Path(dir_okay=False, exists=True))
@config_option
@json_option
def maintain_apply(plan_file: str, config: str | None, as_json: bool) -> None:
    """Run a plan in the foreground until the rollout ends; exit 0 only when every node is done."""
    from .maintain.planner import Plan, PlanError

    try:
        with open(plan_file, encoding="utf-8") as fh:
            data = json.load(fh)
        plan = Plan.from_dict(data)
    except (OSError, ValueError, TypeError, PlanError) as exc:
        _fail(f"{plan_file}: not a plan: {exc}", exitcodes.USAGE)
    if plan.refused:
        _fail(f"{plan_file}: the compatibility gate refused this plan; re-plan with --force to override",
              exitcodes.USAGE)
    _require_rights(config)
    _preflight(plan_file, plan, config)
    runner, store = _runner(config)
    _check_soak(runner)
    before = store.rollout(plan.id)
    with _rollout_errors(runner.s.db):
        state = runner.apply(plan.to_dict())
    # a plan applied again after its rollout ended: that rollout, its state, and nothing done now
    note = f"this plan's rollout had ended already ({before['state']}): nothing was done now" \
        if before is not None and before["state"] in ("done", "rolled_back", "aborted") else ""
    _finish(state, as_json, store, runner, rollout_id=plan.id, ok=("done",), note=note)


def _preflight(plan_file: str, plan, config: str | None) -> None:
    """What `apply` checks before it records anything: the plan file is one only root could have written
    (it decides what root does to the fleet), Slurm answers within 5 s, and it has every node of the plan.
    Exit 2, nothing recorded."""
    from .slurm import SlurmError, get_backend
    from .trust import problem

    refused = problem(plan_file)
    if refused:
        _fail(f"refused: {refused.line()}; write the plan where only root can (maintain plan --out "
              "/var/lib/slurm-gpufleet/plan.json) and apply it from there", exitcodes.USAGE)
    policy = _load_policy(config, trusted=True)
    wanted = [row["node"] for row in plan.to_dict().get("nodes", [])]
    try:
        backend = get_backend(policy.slurm.backend, policy.slurm.scontrol, timeout=5.0, cache_dir=_cache_dir(policy))
        here = {n.name for n in backend.nodes()} if wanted else set()
    except SlurmError as exc:
        _fail(f"Slurm does not answer ({exc}); nothing recorded: apply again once `scontrol ping` answers",
              exitcodes.USAGE)
    missing = [n for n in wanted if n not in here]
    if missing:
        from .hostlist import fold_short

        made = time.strftime("%Y-%m-%d %H:%M", time.localtime(plan.created))
        _fail(f"{plan_file}: {len(missing)} of its {len(wanted)} node(s) are not in this cluster: "
              f"{fold_short(missing, 60)} (the plan was made {made}, from another cluster or a saved fleet?); "
              "nothing recorded", exitcodes.USAGE)


def _check_soak(runner) -> None:
    """An evidence gate's soak must outlast a health check: the counters it judges come from one."""
    from .slurm import SlurmError

    s = runner.s
    if s.gate != "evidence" or not hasattr(runner.engine.slurm, "health_check_interval"):
        return
    try:
        interval = runner.engine.slurm.health_check_interval()
    except SlurmError as exc:
        _fail(f"cannot read HealthCheckInterval for the evidence gate: {exc}", exitcodes.USAGE)
    if interval and s.gate_min_soak_s < interval:
        _fail(f"gate_min_soak_s {s.gate_min_soak_s} is shorter than HealthCheckInterval {interval}: the gate "
              "would judge counters no health check has published yet", exitcodes.USAGE)


@maintain.command("approve")
@click.argument("rollout")
@click.option("--why", required=True, metavar="TEXT", help="Why the next stage may start without a decision (logged).")
@config_option
def maintain_approve(rollout: str, why: str, config: str | None) -> None:
    """Let the stage an evidence gate holds start: at the soak's bound (gate_max_soak_h) a canary worse
    than the control at gate_confidence, short of the halt line, waits for this (gate_on_timeout =
    "wait"); meanwhile the rollout holds no node beyond those under way.  Logged with who and why.  Exit
    0, 2 when there is no such rollout or no gate waiting."""
    import getpass

    from .maintain.store import Store

    _require_rights(config)
    policy = _load_policy(config, trusted=True)
    with _rollout_errors(policy.maintain.db):
        store = Store(policy.maintain.db)
        r = store.rollout(rollout)
        if r is None:
            _fail(f"no rollout {rollout}", exitcodes.USAGE)
        state = store.gate(rollout)
        if state is None or state.get("boundary") is None:
            _fail(f"rollout {rollout} has no evidence gate holding a stage", exitcodes.USAGE)
        who = os.environ.get("SUDO_USER") or getpass.getuser()
        state["approved"][str(state["boundary"])] = f"{who}: {why}"
        store.set_gate(rollout, state, time.time(), [("gate approved", f"stage {state['boundary']} by {who}: {why}")])
    click.echo(f"rollout {rollout}: stage {state['boundary']} approved by {who}")


@maintain.command("status")
@config_option
@json_option
def maintain_status(config: str | None, as_json: bool) -> None:
    """The latest rollout: state, counts per node state, every node, the last events."""
    from .maintain.status import rollout_status, status_text
    from .maintain.store import Store

    policy = _load_policy(config, trusted=True)
    if not os.path.exists(policy.maintain.db):
        _fail(f"no rollout yet ({policy.maintain.db} does not exist)", exitcodes.USAGE)
    data = rollout_status(Store(policy.maintain.db), policy.maintain)
    if data is None:
        _fail("no rollout yet", exitcodes.USAGE)
    if as_json:
        click.echo(json.dumps(data, indent=1))
        return
    for line in status_text(data):
        click.echo(line)


for _name, _help in (("resume", "Continue the unfinished rollout (after a crash, or after a halt once fixed)."),
                     ("abort", "Stop the rollout: release nodes not yet upgraded, delete its reservations."),
                     ("rollback", "Return every upgraded node to its previous driver through the same path.")):
    def _make(name: str):
        @config_option
        @json_option
        def command(config: str | None, as_json: bool) -> None:
            _require_rights(config)
            runner, store = _runner(config)
            with _rollout_errors(runner.s.db):
                state = getattr(runner, name)()
            _finish(state, as_json, store, runner)
        return command

    maintain.command(_name, help=_help)(_make(_name))


@maintain.command("simulate")
@click.option("--sacct", "sacct_file", metavar="FILE",
              help="Job history: sacct --parsable2 -o JobIDRaw,User,Submit,Start,End,Elapsed,NNodes,AllocTRES,State[,Timelimit]"
                   " (plain or .gz).  Default: the bundled Helios trace (15,000 real jobs).")
@click.option("--nodes", "node_count", type=click.IntRange(1, 100_000), default=150, show_default=True,
              help="Nodes in the simulated fleet.")
@click.option("--gpus-per-node", type=click.IntRange(1, 64), default=8, show_default=True, help="GPUs per simulated node.")
@click.option("--strategy", "strategies", multiple=True,
              type=click.Choice(SIMULATED),
              help="Repeat to compare; default: gpufleet, reboot-asap and drain-all side by side (with "
                   "--deadline: gpufleet and wait-then-kill).")
@click.option("--rollout-at", type=float, default=240.0, show_default=True, metavar="HOURS",
              help="When the rollout starts, in hours from the first submission.")
@click.option("--max-unavailable", default=None, metavar="N|P%", help="Budget (default: the policy's).")
@click.option("--config", "policy_file", metavar="FILE", help="Config whose [maintain] table shapes the waves.")
@click.option("--policy", "policy_file", metavar="FILE", hidden=True, help="Old name of --config.")
@click.option("--time-limit-assumption", default="runtime-ceil-hour", show_default=True,
              help="For histories without Timelimit: runtime-ceil-hour, factor:X, or partition:D-HH:MM:SS.")
@click.option("--upgrade-minutes", type=click.IntRange(1, 1440), default=None, help="Per node (default: the policy's).")
@click.option("--deadline", "deadline_text", default=None, metavar="DURATION",
              help="Every node done this long after the rollout starts (72h, 3d; a bare number is hours, as for "
                   "`maintain plan --deadline`); jobs may be stopped early.")
@click.option("--checkpoint-every", "checkpoint_every_h", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="HOURS", help="Every job checkpoints this often, and says so in its comment.")
@click.option("--domain-size", type=click.IntRange(1, 100_000), default=None, metavar="N",
              help="Every N consecutive nodes form a failure domain (an NVLink rack); --config gives "
                   "whole_domain and the domain budget.")
@click.option("--failure-rate", type=click.FloatRange(min=0), default=None, metavar="R",
              help="Hard node failures per 1,000 node-days (Meta RSC-1: 6.5), in the replay from the rollout's "
                   "start and in the --seeds trials.")
@click.option("--soft-rate", type=click.FloatRange(min=0), default=None, metavar="S",
              help="Soft events per node-day (default with a failure rate: 0.18, NCSA Delta's Xid 31).")
@click.option("--driver-effect", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              metavar="K", help="Upgraded nodes' failure and soft rates times K.")
@click.option("--seeds", type=click.IntRange(1, 10_000), default=None, metavar="N",
              help="N random draws of failures with the evidence gate (and 10 without): JSON `gate`.")
@click.option("--replay/--no-replay", default=True, show_default=True,
              help="--no-replay: only the --seeds trials, without the full replay of each strategy.")
@click.option("--jobs", "jobs", type=click.IntRange(1, 1024), default=None, metavar="N",
              help="Run the strategies' replays and the seeds in N processes (default: the cores this may use).")
@click.option("--slurm-array", "slurm_array", metavar="PARTITION", default=None,
              help="Run the --seeds trials as one Slurm job array on PARTITION (each task writes its JSON under "
                   "the current directory, which the partition's nodes must see; the command waits and merges "
                   "them into the same output as a local run).")
@click.option("--hours", type=click.FloatRange(min=0, min_open=True), default=None, metavar="H",
              help="Stop every replay H hours after the rollout's start, whatever is left (a week of a "
                   "large fleet: 168); each strategy then says how many nodes it upgraded by then.")
@click.option("--plot", "plot_file", metavar="FILE.html", help="Capacity in service over time, and the waves.")
@json_option
def maintain_simulate(sacct_file: str | None, node_count: int, gpus_per_node: int, strategies: tuple[str, ...],
                      rollout_at: float, max_unavailable: str | None, policy_file: str | None,
                      time_limit_assumption: str, upgrade_minutes: int | None, deadline_text: str | None,
                      checkpoint_every_h: float | None, domain_size: int | None, failure_rate: float | None,
                      soft_rate: float | None, driver_effect: float, seeds: int | None, replay: bool,
                      jobs: int | None, slurm_array: str | None, hours: float | None, plot_file: str | None,
                      as_json: bool) -> None:
    """Replay a job history on a simulated fleet and compare rollout strategies (same planner code).
    A run that takes more than a few seconds says how far it is on stderr."""
    from .maintain.pool import default_jobs
    from .maintain.sacct import SacctError, assume_limit, read_sacct
    from .maintain.simulate import simulate
    from .progress import Progress

    jobs = jobs or default_jobs()
    progress = Progress()
    if not replay and not seeds:
        _fail("--no-replay leaves only the --seeds trials: give --seeds N", exitcodes.USAGE)
    if not replay and plot_file:
        _fail("--plot draws the replay: not with --no-replay", exitcodes.USAGE)
    if slurm_array is not None and not seeds:
        _fail("--slurm-array runs the --seeds trials: give --seeds N", exitcodes.USAGE)
    if slurm_array is not None and not slurm_array.strip():
        _fail("--slurm-array: give a partition name", exitcodes.USAGE)

    policy = _with_budget(_load_policy(policy_file, read_only=True), max_unavailable)
    budget = policy.maintain.max_unavailable
    try:
        assume_limit(3600, time_limit_assumption)
    except (ValueError, TypeError):
        _fail(f"--time-limit-assumption {time_limit_assumption!r}: use runtime-ceil-hour, factor:X or partition:LIMIT",
              exitcodes.USAGE)
    from .datafiles import HELIOS_LABEL, HELIOS_SACCT, open_text
    from .hostlist import fold

    history_label = sacct_file or HELIOS_LABEL
    sacct_file = sacct_file or str(HELIOS_SACCT)
    try:
        with open_text(sacct_file) as fh:
            trace = read_sacct(fh)
    except OSError as exc:
        _fail(f"{sacct_file}: {exc.strerror or exc}", exitcodes.USAGE)
    except SacctError as exc:
        _fail(f"{sacct_file}: {exc}", exitcodes.USAGE)
    deadline_h = None
    if deadline_text is not None:
        from .maintain.deadline import DeadlineError, parse_simulated_deadline

        try:
            deadline_h = parse_simulated_deadline(deadline_text)
        except DeadlineError as exc:
            _fail(str(exc), exitcodes.USAGE)
    if "wait-then-kill" in strategies and deadline_h is None:
        _fail("--strategy wait-then-kill needs --deadline DURATION (72h, 3d)", exitcodes.USAGE)
    from .maintain.deadline import DeadlineError
    from .maintain.failures import rates_of
    from .maintain.strategy import compared_by_default
    from .maintain.trials import gate_trials

    default = compared_by_default(deadline=deadline_h is not None)
    try:
        rates = rates_of(failure_rate, soft_rate, driver_effect, seeds)
    except ValueError as exc:
        _fail(str(exc), exitcodes.USAGE)
    replay_rates = rates if rates and (rates.failure_rate or rates.soft_rate) else None
    try:
        result = simulate(trace, nodes=node_count, gpus_per_node=gpus_per_node,
                          strategies=(strategies or default) if replay else (), rollout_at_h=rollout_at,
                          max_unavailable=budget, policy=policy, assumption=time_limit_assumption,
                          upgrade_minutes=upgrade_minutes, deadline_h=deadline_h,
                          checkpoint_every_h=checkpoint_every_h, domain_size=domain_size, rates=replay_rates,
                          jobs=jobs, progress=progress, hours=hours)
    except DeadlineError as exc:
        _fail(str(exc), exitcodes.USAGE)
    results = result.pop("_results")
    running, sim_policy = result.pop("_running"), result.pop("_policy")
    if seeds and rates:
        runner = None
        if slurm_array:
            from .maintain.pool import in_slurm_array
            from .slurm.actuator import Actuator

            backend = _backend(policy)
            actuator = Actuator(backend, "simulate")

            def runner(calls, say, what):
                return in_slurm_array(calls, slurm_array, actuator, backend, os.getcwd(), say, what)
        from .maintain.pool import ArrayError
        from .slurm import SlurmError

        try:
            result["gate"] = gate_trials(running, node_count, gpus_per_node, sim_policy, rates, seeds,
                                         rollout_at * 3600, jobs=jobs, progress=progress, runner=runner)
        except (ArrayError, SlurmError) as exc:  # only the job array talks to Slurm here
            _fail(str(exc), exitcodes.USAGE)
    result["assumptions"]["job_history"] = history_label
    result["gating_jobs"] = next((r.gating_jobs for r in results.values() if r.gating_jobs), [])
    if plot_file:
        from .maintain.plots import simulation_html

        _write_atomic(plot_file, simulation_html(result, results))
    if as_json:
        click.echo(json.dumps(result, indent=1))
        return
    a = result["assumptions"]
    click.echo(f"job history: {a['job_history']}")
    click.echo(f"{a['fleet']}, rollout at {a['rollout_at_h']:g} h, at most {a['max_unavailable_nodes']} node(s) out, "
               f"{a['upgrade_minutes']:g} min per node; time limits {a['time_limits']}")
    if result["strategies"]:
        click.echo(f"{'strategy':<12} {'makespan h':>10} {'GPU-h lost':>11} {'killed':>6} {'wait+ mean h':>12} "
                   f"{'wait+ p95 h':>11} {'peak out':>8}")
    for name, m in result["strategies"].items():
        makespan = "not done" if m["makespan_h"] is None else f"{m['makespan_h']:.2f}"
        click.echo(f"{name:<12} {makespan:>10} {m['gpu_hours_lost']:>11.1f} {m['jobs_killed']:>6} "
                   f"{m['wait_added_mean_h']:>12.3f} {m['wait_added_p95_h']:>11.3f} {m['peak_nodes_out']:>8}")
    if hours and result["strategies"]:
        click.echo(f"stopped {hours:g} h after the rollout's start: "
                   + ", ".join(f"{name} {m['nodes_upgraded']} of {node_count} nodes upgraded"
                               + ("" if m["done"] else " (not done)") for name, m in result["strategies"].items()))
    waiting = [(name, m) for name, m in result["strategies"].items() if not hours and m["makespan_h"] is None]
    if waiting:  # nothing left to happen, and not done: the rollout waits on an admin (an unjudged gate)
        click.echo("not done when nothing was left to happen (see `maintain status` on a real rollout): "
                   + ", ".join(f"{name} {m['nodes_upgraded']} of {node_count} nodes upgraded" for name, m in waiting))
    if domain_size and result["strategies"]:
        click.echo(f"{'strategy':<12} {'domains':>7} {'mixed-driver domains max':>24} {'domains in service min':>22}")
        for name, m in result["strategies"].items():
            click.echo(f"{name:<12} {m['domains']:>7} {m['mixed_driver_domains_max']:>24} "
                       f"{m['domains_in_service_min']:>22}")
    if deadline_h:
        click.echo(f"deadline {deadline_h:g} h; work the jobs that must stop early hold at the rollout (lower bound): "
                   f"{result['work_lost_lower_bound_gpu_h']:.1f} GPU-h")
        for name, m in result["strategies"].items():
            click.echo(f"{name:<14} done by deadline: {'yes' if m['done_by_deadline'] else 'NO':<3}  work lost "
                       f"{m['work_lost_gpu_h']:>8.1f} GPU-h  jobs preempted {m['jobs_preempted']:>4}  of them "
                       f"would have ended in time {m['jobs_preempted_that_would_end_in_time']}")
    if replay_rates and result["strategies"]:
        f = a["failures"]
        click.echo(f"failures from the rollout's start to the replay's end: {f['failure_per_1000_node_days']:g} per "
                   f"1,000 node-days, "
                   f"{f['soft_per_node_day']:g} soft per node-day, x{f['driver_effect']:g} on upgraded nodes "
                   f"(seed {f['seed']}, gate {f['gate']})")
        for name, m in result["strategies"].items():
            x = m["failures"]
            click.echo(f"{name:<14} node failures {x['node_failures']:>4} ({x['node_failures_in_rollout']} in the "
                       f"rollout)  jobs failed {x['jobs_failed']:>4} ({x['jobs_failed_in_rollout']})  work lost "
                       f"{x['work_lost_gpu_h']:>9.1f} GPU-h  soft events {x['soft_events']:>5}"
                       + (f"  rollout {x['rollout']}" if x.get("rollout") else ""))
    if seeds:
        g = result["gate"]
        u = g["upgraded_at_halt"]
        o, x = g["outcomes"], g["makespan_p50_vs_ungated"]
        click.echo(f"evidence gate over {g['seeds']} seed(s): finished {o['finished']:.0%}, halted {o['halted']:.0%}, "
                   f"waiting for an admin {o['waiting']:.0%}, unfinished {o['unfinished']:.0%} (ungated halted "
                   f"{g['halted_ungated']:.0%}); upgraded at halt p50 "
                   f"{u['p50'] if u['p50'] is None else format(u['p50'], '.1%')}, p90 "
                   f"{u['p90'] if u['p90'] is None else format(u['p90'], '.1%')}; makespan p50 x ungated "
                   f"{x['finished']} (finished), {x['all']} (all); {g['cpu_s_per_seed']} s CPU per seed")
    for j in result["gating_jobs"][:3]:
        click.echo(f"gating job {j['job_id']} on {fold(j['nodes'])}: runs until +{j['end_h']} h")
    click.echo(f"jobs used {a['jobs_used']}; lines skipped {a['lines_skipped'] or 'none'}; "
               f"dropped {a['jobs_dropped'] or 'none'}")


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
@click.option("--timeout", type=float, default=60.0, show_default=True, metavar="SECONDS",
              help="Give up (exit 3) when reading the GPUs takes longer, e.g. a hung NVML.")
def metrics(report: str | None, snapshot_file: str | None, kmsg: str | None, config: str | None, node: str | None,
            level: str, textfile: str, timeout: float) -> None:
    """Write Prometheus metrics (verdicts, findings, ECC/remap counters, throttle reasons, performance)."""
    from .metrics import write_textfile
    from .pipeline import evaluate

    policy = _load_policy(config)
    snap = _gather_or_exit(report or snapshot_file, kmsg, level, timeout)
    result = evaluate(snap, policy, host=node)
    from .slurm import breaker as brk

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

    from .history import HistoryError, parse_since, read_recent

    policy = _load_policy(config)
    node = node or socket.gethostname().split(".")[0]
    path = db or os.path.join(policy.slurm.state_dir, f"{node}.db")
    try:
        seen = read_recent(path, parse_since(since, time.time()) if since else 0.0, gpu, limit)
    except HistoryError as exc:
        _fail(str(exc), exitcodes.USAGE)
    runs, finds, perf = seen["runs"], seen["findings"], seen["performance"]
    if as_json:
        click.echo(json.dumps({"node": node, **seen}, indent=1))
        return
    from .history import ladder_text

    click.echo(f"{node}: {len(runs)} run(s), {len(finds)} finding(s), {len(perf)} measurement(s), "
               f"{len(seen['actions'])} action(s) of the remediation ladder")
    for r in runs[:20]:
        click.echo(f"  {r['time']}  {r['hook']:<11} {r['verdict']:<6} job {r['job_id'] or '-':<8} driver {r['driver']}")
    for f in finds[:20]:
        where = "node" if f["gpu"] is None else f"gpu{f['gpu']}"
        click.echo(f"  run {f['run_id']:<5} {f['severity']:<6} {f['check']:<12} {where:<5} {f['message']}"
                   + (f"  (job {f['job_id']})" if f["job_id"] else ""))
    for line in ladder_text(seen):
        click.echo(line)


@cli.group()
def advise() -> None:
    """Advice derived from the fleet's own history."""


@advise.command("checkpoint")
@click.option("--job-gpus", type=click.IntRange(1), required=True, metavar="N", help="The GPUs the job runs on.")
@click.option("--checkpoint-cost", type=click.FloatRange(min=0, min_open=True), required=True, metavar="SECONDS", help="How long one checkpoint takes to write.")
@click.option("--gpu-mtbf-hours", type=click.FloatRange(min=0, min_open=True), metavar="H",
              help="Per-GPU MTBF; default: the failure rate seen in the history databases.")
@click.option("--history-dir", metavar="DIR", help="Directory of node history databases (default: [slurm] state_dir).")
@config_option
@json_option
def advise_checkpoint(job_gpus: int, checkpoint_cost: float, gpu_mtbf_hours: float | None, history_dir: str | None,
                      config: str | None, as_json: bool) -> None:
    """The job's MTBF and the checkpoint interval that minimises expected lost work (Young/Daly)."""
    from .checkpoint import advise as make_advice
    from .perf.fleet import failure_history

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
    click.echo(f"{job_gpus} GPUs, per-GPU MTBF {a.gpu_mtbf_h:.0f} h ({a.mtbf_source}) -> job MTBF {a.job_mtbf_h:.2f} h")
    click.echo(f"checkpoint every {a.interval_s / 60:.1f} min (Daly; Young {a.interval_young_s / 60:.1f} min); "
               f"expected lost {a.expected_lost_fraction * 100:.1f}% of the run")
    if a.interval_s_range:
        click.echo(f"90% range from the failure count: job MTBF {a.job_mtbf_h_range[0]:.2f}-{a.job_mtbf_h_range[1]:.2f} h, "
                   f"interval {a.interval_s_range[0] / 60:.1f}-{a.interval_s_range[1] / 60:.1f} min")


@fleet.command("stragglers")
@group_config_option
@click.option("--results", metavar="FILE", help="JSON lines {node, gpu, model, mem_bw_gbps} instead of Slurm.")
@click.option("--history-dir", metavar="DIR", help="Latest measurements from node history databases.")
@click.option("--drain", is_flag=True, help="Drain the slow nodes (needs [slurm] drain_stragglers = true).")
@click.option("--telemetry", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="In-job detection over recorded samples: JSON lines {t, job, node, gpu, sm_clock_mhz, power_w, "
                   "sm_util, throttle}; prints {\"flags\": [...]}.  Exit 0 no flag, 1 flags, 2 unreadable, 3 no "
                   "sample.")
@click.option("--running", is_flag=True, help="The nodes of each running multi-node job against the job's other "
                                             "nodes, from what their in-job samplers published (one read).")
@click.option("--timings", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="The job's own per-rank timings (CSV or JSON Lines: rank, dp, stage, step, op, start, duration, "
                   "node, gpus): each worker against its data-parallel peers.  Exit 0 no flag, 1 flags, 2 "
                   "unreadable, 3 no row.")
@click.option("--json", "as_json", is_flag=True, help="JSON (as `fleet --json stragglers`).")
@click.pass_context
def fleet_stragglers(ctx: click.Context, results: str | None, history_dir: str | None, drain: bool,
                     telemetry: str | None, running: bool, timings: str | None, as_json: bool) -> None:
    """Slow GPUs per model: robust outliers (median/MAD) among at least N peers, never a fixed number.
    With --running or --telemetry: the nodes of each running job compared with that job's other nodes
    (instep.py); with --timings: each worker of a job against the workers doing the same work
    (perf/timings.py).  These flags feed no drain here (`fleet lemons` takes them)."""
    ctx.ensure_object(dict)
    if as_json:
        ctx.obj["as_json"] = True
    if timings:
        _timings(timings, bool(ctx.obj.get("as_json")))
    if telemetry:
        _instep_telemetry(telemetry, _load_policy((ctx.obj or {}).get("config")))
    if running:
        _instep_running(ctx.obj)
    from .perf.fleet import drains, from_history, from_published, from_results_file, stragglers

    opts = ctx.obj or {}
    policy = _load_policy(opts.get("config"))
    backend = None
    try:
        if results:
            samples = from_results_file(results)
        elif history_dir:
            samples = from_history(history_dir)
        else:
            backend = _backend(policy)
            samples = from_published(backend)
    except (OSError, ValueError, KeyError) as exc:
        _fail(f"cannot read the results: {exc}", exitcodes.USAGE)
    found, summary = stragglers(samples, policy.slurm)
    drained: list[str] = []
    breaker_blocked: list[str] = []
    if drain:
        if not policy.slurm.drain_stragglers:
            _fail("--drain needs drain_stragglers = true in [slurm] (opt-in)", exitcodes.USAGE)
        backend = backend or _backend(policy)
        from .hostlist import fold
        from .slurm import SlurmError
        from .slurm.actuator import Actuator
        from .slurm.ownership import STRAGGLER

        try:  # one read of the fleet: each node's state, and the breaker's count
            fleet = backend.nodes()
        except SlurmError as exc:
            _fail(f"cannot read the fleet: {exc}", exitcodes.USAGE)
        pairs, unknown = drains(found, {i.name: i for i in fleet})
        for node in unknown:
            click.echo(f"{node}: not in Slurm, not drained", err=True)
        try:
            done = Actuator(backend, STRAGGLER, policy.slurm, fleet=fleet).drain_each(pairs)
        except SlurmError as exc:
            _fail(f"could not drain: {exc}", exitcodes.USAGE)
        drained = done.done
        for node, why in done.left.items():
            click.echo(f"{node}: {why}", err=True)
        if done.blocked:
            click.echo(f"not drained, the drain breaker is open ({done.breaker}): {fold(done.blocked)}", err=True)
        breaker_blocked = done.blocked
    out = {"models": summary, "stragglers": [o.__dict__ for o in found], "drained": drained,
           "breaker_blocked": breaker_blocked}
    if opts.get("as_json"):
        click.echo(json.dumps(out, indent=1))
    else:
        for model, m in summary.items():
            click.echo(f"{model}: {m['peers']} GPU(s)" + (f", median {m['median']:.0f} GB/s, MAD {m['mad']:.1f}"
                                                          if m["judged"] else " (too few peers to judge)"))
        for o in found:
            click.echo(f"  SLOW {o.key:<20} {o.value:.0f} GB/s  -{o.drop_pct:.1f}%  z {o.z:.1f}")
        if not found:
            click.echo("  no stragglers")
    sys.exit(exitcodes.UNHEALTHY if found else exitcodes.OK)


def _instep_running(opts: dict) -> None:
    """Exit 0 no flag, 1 flags, 2 Slurm unreadable."""
    from .slurm import SlurmError

    policy = _load_policy(opts.get("config"))
    try:
        nodes = _backend(policy).nodes()
    except SlurmError as exc:
        _fail(f"cannot read the fleet: {exc}", exitcodes.USAGE)
    flags, jobs, published = _instep_flags(policy, nodes)
    if opts.get("as_json"):
        click.echo(json.dumps({"jobs": jobs, "nodes_sampled": len(published), "flags": [f.to_dict() for f in flags]},
                              indent=1))
    else:
        click.echo(f"{len(jobs)} multi-node job(s) sampled on {len(published)} node(s)")
        for f in flags:
            gpu = f" gpu{f.gpu}" if f.gpu is not None else ""
            click.echo(f"  SLOW job {f.job} {f.node}{gpu}: {f.signature} since "
                       f"{time.strftime('%H:%M:%S', time.localtime(f.t_first))} "
                       + ", ".join(f"{k} {v}" for k, v in f.evidence.items()))
        if not flags:
            click.echo("  no node apart from its job")
    sys.exit(exitcodes.UNHEALTHY if flags else exitcodes.OK)


def _instep_flags(policy, nodes) -> tuple[list, list[str], dict[str, dict]]:
    """The in-job detector over what the nodes' samplers published: (flags, the jobs sampled, node -> its
    summary with a digest)."""
    from . import summary
    from .instep import Settings, detect, samples_from_digests
    from .slurm.base import job_order

    published = {n.name: d for n in nodes if (d := summary.from_node(n)) and "is" in d}
    if policy.slurm.instep_share_dir:  # the samplers wrote their digests there, not to Slurm
        from .sampler import read_shared

        for node, data in read_shared(policy.slurm.instep_share_dir).items():
            mine = published.setdefault(node, {"gpus": data["gpus"], "is": {}})
            mine["is"] = {**summary.digests(mine.get("is")), **data["is"]}
    samples, window_s = samples_from_digests(published)
    flags = detect(samples, Settings(window_s=window_s or policy.slurm.instep_window_s,
                                     windows=policy.slurm.instep_windows)) if samples else []
    jobs = sorted({job for d in published.values() for job in summary.digests(d["is"])}, key=job_order)
    return flags, jobs, published


@fleet.command("save")
@group_config_option
@click.option("-o", "--out", "out", required=True, metavar="FLEET.json", help="Where to write the saved fleet.")
@click.pass_context
def fleet_save(ctx: click.Context, out: str) -> None:
    """Save the fleet as Slurm shows it now, for offline planning (`maintain plan --fleet FLEET.json`,
    `fleet --fleet FLEET.json`): every node with what its health check published, the running jobs and the
    reservations, in one read of each (docs/rollouts.md, "Offline planning")."""
    from .maintain.fleet import FleetState
    from .slurm import SlurmError

    policy = _load_policy(ctx.obj["config"])
    try:
        state = FleetState.from_backend(_backend(policy))
    except SlurmError as exc:
        _fail(f"cannot read the fleet from Slurm: {exc}", exitcodes.USAGE)
    try:
        _write_atomic(out, json.dumps(state.to_dict(), indent=1) + "\n")
    except OSError as exc:
        _fail(f"{out}: {exc.strerror or exc}", exitcodes.USAGE)
    click.echo(f"saved {len(state.nodes)} node(s), {len(state.jobs)} running job(s), "
               f"{len(state.reservations)} reservation(s) to {out}", err=True)


@fleet.command("cases")
@group_config_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object (as `fleet --json cases`).")
@click.pass_context
def fleet_cases(ctx: click.Context, as_json: bool) -> None:
    """The remediation ladder's open cases: per node and failure class, the attempts within the window
    (`max_attempts` in `attempt_window_s`), the first and last, the status and what it asks of you:
    `validation_failed` (drained for repair after its validation run failed: its output is kept on the
    node, `<state_dir>/validation-JOB.out`), `repair` (drained for repair: the cap, or a fault that
    survived its reboots; `fleet repaired NODE` or a resume closes the case), `running` (a reset, reboot
    or validation under way) or `watch` (remedied, still counted).  What needs you first, then the most
    recent.  Read from what every node publishes (one read of the fleet)."""
    from .maintain.fleet import FleetNode
    from .remediation import CASE_FIELDS, fleet_cases
    from .slurm import SlurmError

    policy = _load_policy(ctx.obj["config"], read_only=bool(ctx.obj["fleet_file"]))
    if ctx.obj["fleet_file"]:
        nodes = list(_fleet(policy, ctx.obj["fleet_file"]).nodes.values())
    else:
        try:  # the nodes alone: one read, no jobs or reservations
            nodes = [FleetNode.from_info(i) for i in _backend(policy).nodes()]
        except SlurmError as exc:
            _fail(f"cannot read the nodes from Slurm: {exc}", exitcodes.USAGE)
    rows = fleet_cases(nodes, policy.slurm.state_dir)
    if as_json or ctx.obj["as_json"]:
        click.echo(json.dumps({"fields": list(CASE_FIELDS), "cases": rows}, indent=1))
        return
    if not rows:
        click.echo("no open cases")
        return
    click.echo(f"{'node':<12} {'class':<16} {'attempts':>8}  {'first':<25} {'last':<25} status")
    for r in rows:
        click.echo(f"{r['node']:<12} {r['class']:<16} {r['attempts']:>8}  {r['first']:<25} {r['last']:<25} "
                   f"{r['status']}" + (f"  ({r['reason']})" if r["reason"] else ""))
        click.echo(f"{'':<12} -> {r['todo']}")


@fleet.command("repaired")
@group_config_option
@click.argument("nodeset")
@click.option("--dry-run", is_flag=True, help="Say what would be marked; write nothing.")
@click.pass_context
def fleet_repaired(ctx: click.Context, nodeset: str, dry_run: bool) -> None:
    """Hand nodes back after a repair: each node drained by the health check (for repair, or any fault of
    ours) gets the reason `gpufleet: validate after repair`, and its health check returns it to work only
    through a validation run in a maintenance reservation of its own (`validation_command`; where that is
    "", after its clean runs).  Nodes someone else drained are not touched.  Exit 1 when any was left."""
    from ClusterShell.NodeSet import NodeSet, NodeSetException

    from .hostlist import fold
    from .returning import VALIDATE_PREFIX
    from .slurm import SlurmError
    from .slurm.actuator import Actuator
    from .slurm.ownership import HEALTH

    try:
        wanted = list(NodeSet(nodeset))
    except NodeSetException as exc:
        _fail(f"{nodeset!r} is not a host list: {exc}", exitcodes.USAGE)
    if not wanted:
        _fail("no nodes given", exitcodes.USAGE)
    policy = _load_policy(ctx.obj["config"])
    backend = _backend(policy)
    try:
        nodes = {i.name: i for i in backend.nodes()}
    except SlurmError as exc:
        _fail(f"cannot read the nodes from Slurm: {exc}", exitcodes.USAGE)
    unknown = [n for n in wanted if n not in nodes]
    if unknown:
        _fail(f"{len(unknown)} node(s) not in Slurm: {fold(unknown)}", exitcodes.USAGE)
    held = [nodes[n] for n in wanted if nodes[n].drained]
    free = [n for n in wanted if not nodes[n].drained]
    if dry_run:
        from .slurm.ownership import left_alone

        ours = [i.name for i in held if Actuator(backend, HEALTH, policy.slurm).holds(i)]
        if ours:
            click.echo(f"{fold(ours)}: would be marked validate after repair")
        for info in held:
            if info.name not in ours:
                click.echo(f"{info.name}: {left_alone(info)}", err=True)
        if free:
            click.echo(f"{fold(free)}: not drained, nothing to do", err=True)
        return
    try:
        done = Actuator(backend, HEALTH, policy.slurm).set_reason(held, f"{VALIDATE_PREFIX}repair")
    except SlurmError as exc:
        _fail(f"not marked: {exc}", exitcodes.USAGE)
    if done.done:
        click.echo(f"{fold(done.done)}: validate after repair" + (
            " (a validation run, then back to work)" if policy.slurm.validation_command else
            " (back to work after clean runs: validation_command is \"\")"))
    for node, why in done.left.items():
        click.echo(f"{node}: {why}", err=True)
    if free:
        click.echo(f"{fold(free)}: not drained, nothing to do", err=True)
    if done.left:
        sys.exit(1)


@fleet.command("sweep")
@group_config_option
@click.option("--dry-run", is_flag=True, help="Say which nodes are due; submit and cancel nothing.")
@json_option
@click.pass_context
def fleet_sweep(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    """One step of the idle sweeps (run it every few minutes, e.g. from a systemd timer): nodes of groups
    with `sweep_interval_h`, idle `sweep_idle_min` and not swept within the interval, get the deep check as
    a job in `sweep_partition`, whose jobs any user job preempts (docs/slurm.md, "Idle sweeps"); at most
    `sweep_max_nodes` at once.  One read of the nodes, one of the sweep jobs."""
    from .slurm import SlurmError
    from .sweep import run_step

    policy = _load_policy(ctx.obj["config"])
    if not policy.slurm.sweep_partition and not dry_run:
        _fail("no sweep_partition in [slurm]: a sweep job must run where any user job preempts it (docs/slurm.md, "
              "\"Idle sweeps\")", exitcodes.USAGE)
    try:
        step = run_step(_backend(policy), policy, dry_run=dry_run)
    except SlurmError as exc:
        _fail(f"cannot read the nodes or the sweep jobs from Slurm: {exc}", exitcodes.USAGE)
    if as_json or ctx.obj["as_json"]:
        from dataclasses import asdict

        click.echo(json.dumps(asdict(step), indent=1))
    else:
        from .hostlist import fold

        click.echo(f"due: {fold(step.due) or 'none'}; sweeping: {fold(step.running) or 'none'}"
                   + (f"; submitted: {', '.join(f'{n} (job {j})' for n, j in step.submitted.items())}"
                      if step.submitted else "") + (f"; cancelled stale: {', '.join(step.cancelled)}"
                                                    if step.cancelled else ""))
        for e in step.errors:
            click.echo(e, err=True)
    if step.errors:
        sys.exit(1)


@fleet.command("domains")
@group_config_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object (as `fleet --json domains`).")
@click.pass_context
def fleet_domains(ctx: click.Context, as_json: bool) -> None:
    """The failure domains (NVLink racks, Slurm blocks) and where they come from: the config's [[domain]],
    else Slurm's topology blocks, else the NVLink domain each node's GPUs registered in, as its health
    check publishes it (cluster UUID and clique).  Per domain: its nodes, and those out of service."""
    from .hostlist import fold

    policy = _load_policy(ctx.obj["config"])
    fleet_file = ctx.obj["fleet_file"]
    state = _fleet(policy, fleet_file)
    domains = _domains(policy, None if fleet_file else _backend(policy),
                       [(n.name, n.fabric_domain) for n in state.nodes.values()])
    rows = [{"domain": d, "nodes": fold(members), "count": len(members),
             "out": fold([n for n in members if n in state.nodes and state.nodes[n].held])}
            for d, members in domains.members.items()]
    if as_json or ctx.obj["as_json"]:
        click.echo(json.dumps({"source": domains.source, "domains": rows}, indent=1))
        return
    if not rows:
        click.echo("no failure domains: no [[domain]] in the config, no Slurm blocks, no NVLink domain published")
        return
    click.echo(f"{len(rows)} failure domain(s), from {domains.source}")
    for r in rows:
        click.echo(f"  {r['domain']:<24} {r['count']:>4} node(s) {r['nodes']}" + (f"  out: {r['out']}" if r["out"] else ""))


@fleet.command("simulate-faults")
@group_config_option
@click.option("--one-job", "one_job_gpus", type=click.IntRange(1, 1_000_000), metavar="GPUS",
              help="One job of GPUS GPUs with exponential node failures (--node-mtbf-hours): the simulator core "
                   "against Daly's formula.  Without it: the fleet mode.")
@click.option("--node-mtbf-hours", type=click.FloatRange(min=0, min_open=True), metavar="M",
              help="(--one-job) Each node fails at exponential times of this mean.")
@click.option("--checkpoint-every", "checkpoint_every_h", type=click.FloatRange(min=0, min_open=True),
              metavar="HOURS", help="Every job checkpoints this often (fleet mode: 1 h unless given).")
@click.option("--restart-minutes", type=click.FloatRange(min=0), default=None, metavar="R",
              help="A restarted run's time before it makes progress again (one job: 0, fleet: 10; Meta: 5-20).")
@click.option("--days", type=click.FloatRange(min=0, max=3650, min_open=True), default=None, metavar="D",
              help="How long (one job: 30; fleet: the history's span).")
@click.option("--strategy", "strategies", multiple=True,
              type=click.Choice(FAULT_STRATEGIES),
              help="What to compare (fleet mode: the first four unless given; one job: none).  none: Slurm's "
                   "NODE_FAIL alone; drain-on-any: NHC-like; two-tier: Meta's; gpufleet: this project's checks and "
                   "ladder; gpufleet-reboot-first: the same ladder without its reset rung; gpufleet-no-suspect: "
                   "without its suspect rung.")
@click.option("--seed", type=int, default=0, show_default=True, metavar="S",
              help="The random seed of the failure draws (a run with the same seed gives the same figures).")
@click.option("--seeds", type=click.IntRange(1, 1000), default=1, show_default=True, metavar="N",
              help="(fleet) Run seeds S..S+N-1 and give the mean of every figure.")
@click.option("--sacct", "sacct_file", metavar="FILE", help="(fleet) A job history from sacct (default: the bundled "
                                                            "Helios trace).")
@click.option("--nodes", "node_count", type=click.IntRange(1, 20_000), default=300, show_default=True,
              help="(fleet) Nodes in the simulated fleet (with --fault-log, at least the log's).")
@click.option("--gpus-per-node", type=click.IntRange(1, 16), default=8, show_default=True, help="GPUs per simulated node.")
@click.option("--rates", "rates_file", metavar="FILE", help="(fleet) Failure classes and rates in the form of "
              "slurm_gpufleet/data/failure_classes.toml (default: that file, Llama 3's rates).")
@click.option("--health-check-interval", "hc_interval_s", type=click.FloatRange(min=1), default=300.0,
              show_default=True, metavar="SECONDS", help="(fleet) HealthCheckInterval (Meta: 5 min).")
@click.option("--lemon-share", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="(fleet) The share of nodes that fail --lemon-factor times as often (a lemon tail).")
@click.option("--lemon-factor", type=click.FloatRange(min=1, max=1000), default=1.0, show_default=True,
              help="A lemon tail: this share of the nodes (--lemon-share) fails this many times as often.")
@click.option("--big-job", "big_job_gpus", type=click.IntRange(0, 1_000_000), default=1024, show_default=True,
              metavar="GPUS", help="(fleet) A stream of training jobs of GPUS GPUs beside the history, one every "
                                   "--big-job-hours, each running that long (the ETTR of jobs of 1,024 GPUs or "
                                   "more); 0: none.")
@click.option("--big-job-hours", type=click.FloatRange(min=1, max=24 * 365), default=24.0, show_default=True,
              metavar="H", help="(fleet) How long each job of the --big-job stream runs, and how often one comes.")
@click.option("--domain-size", type=click.IntRange(0, 1024), default=0, show_default=True, metavar="N",
              help="(fleet) NVLink domains of N consecutive nodes (18: an NVL72 rack): a share of faults is "
                   "switch-side and takes its domain whole (rack-correlated events); 0: none.")
@click.option("--switch-share", type=click.FloatRange(0, 1), default=None, metavar="S",
              help="(fleet, --domain-size) The share of the domain classes' faults that are switch-side (default: "
                   "the rates file's [domain] switch_share, 0.1, an assumption).")
@click.option("--plot", "plot_file", metavar="FILE.html", help="(fleet) GPUs in service and ETTR over time, per "
                                                               "strategy.")
@click.option("--fault-log", "fault_log_file", metavar="FILE",
              help="(fleet) Replay your own cluster's faults instead of drawing them: a CSV with the header "
                   "node,start,end,class,detail (hours since the log's start, or ISO 8601 times), or the output of "
                   "`sacctmgr -P show event format=NodeName,TimeStart,TimeEnd,State,Reason`.  --nodes adds nodes "
                   "that never faulted; the history repeats to cover the log's span.")
@json_option
def fleet_simulate_faults(one_job_gpus: int | None, node_mtbf_hours: float | None, checkpoint_every_h: float | None,
                          restart_minutes: float | None, days: float | None, strategies: tuple[str, ...], seed: int,
                          seeds: int, sacct_file: str | None, node_count: int, gpus_per_node: int, rates_file: str | None,
                          hc_interval_s: float, lemon_share: float, lemon_factor: float, big_job_gpus: int,
                          big_job_hours: float,
                          domain_size: int, switch_share: float | None, plot_file: str | None,
                          fault_log_file: str | None, as_json: bool) -> None:
    """What failures cost jobs, and what the health checks save, on the simulator core of `maintain
    simulate`.  Fleet mode: a job history on a simulated fleet with failures drawn per class (Llama 3's
    rates), found and handled by each strategy; per strategy the effective training time ratio (ETTR),
    GPU-hours lost to failures, remedies and false drains, node-hours out of service, fault-to-drain time
    and how faults were resolved.  --one-job: one job against Daly's formula."""
    ctx = click.get_current_context()
    if one_job_gpus is not None:
        flag = {p.name: p.opts[0] for p in ctx.command.params}
        fleet_only = [flag[p] for p in FLEET_ONLY
                      if ctx.get_parameter_source(p) is not click.core.ParameterSource.DEFAULT]
        if fleet_only:  # never accepted and ignored: a run that says what it did not do
            _fail(f"{', '.join(fleet_only)}: for the fleet mode, not --one-job", exitcodes.USAGE)
        _simulate_one_job(one_job_gpus, node_mtbf_hours, checkpoint_every_h, restart_minutes, days, strategies, seed,
                          as_json)
        return
    if node_mtbf_hours is not None:
        _fail("--node-mtbf-hours is for --one-job; the fleet mode draws failures per class (--rates FILE)",
              exitcodes.USAGE)
    if switch_share is not None and not domain_size:
        _fail("--switch-share needs --domain-size N (the nodes a switch-side fault takes together)", exitcodes.USAGE)
    from .datafiles import HELIOS_LABEL, HELIOS_SACCT, open_text
    from .faultsim import STRATEGIES, RatesError, fleet_faults, load_model
    from .maintain.sacct import SacctError, read_sacct

    try:
        model = load_model(rates_file)
    except RatesError as exc:
        _fail(str(exc), exitcodes.USAGE)
    fleet_nodes = node_count
    fault_log = None
    if fault_log_file:
        from .faultlog import FaultLogError, read

        try:
            fault_log = read(fault_log_file)
        except FaultLogError as exc:
            _fail(str(exc), exitcodes.USAGE)
        fleet_nodes = max(node_count, len(fault_log.nodes))
    left_out = None
    if big_job_gpus > fleet_nodes * gpus_per_node and \
            ctx.get_parameter_source("big_job_gpus") is click.core.ParameterSource.DEFAULT:
        left_out = (f"note: no job of {big_job_gpus:,} GPUs fits {fleet_nodes} nodes of {gpus_per_node} GPUs: the "
                    "--big-job stream is left out")
        big_job_gpus = 0
    label = sacct_file or HELIOS_LABEL
    try:
        with open_text(sacct_file or str(HELIOS_SACCT)) as fh:
            trace = read_sacct(fh)
    except OSError as exc:
        _fail(f"{sacct_file}: {exc.strerror or exc}", exitcodes.USAGE)
    except SacctError as exc:
        _fail(f"{sacct_file}: {exc}", exitcodes.USAGE)
    from .progress import Progress

    progress = Progress(quiet_s=2.0, every_s=1.0)  # a long simulation says how far it is, from 2 s on
    try:
        out = fleet_faults(trace, nodes=node_count, gpus_per_node=gpus_per_node, days=days,
                           strategies=strategies or STRATEGIES, model=model, hc_interval_s=hc_interval_s,
                           checkpoint_every_h=checkpoint_every_h or 1.0,
                           restart_min=10.0 if restart_minutes is None else restart_minutes, seed=seed,
                           lemon_share=lemon_share, lemon_factor=lemon_factor, big_job_gpus=big_job_gpus,
                           big_job_hours=big_job_hours,
                           settings=_load_policy((ctx.obj or {}).get("config"), read_only=True).slurm, seeds=seeds,
                           domain_size=domain_size, switch_share=switch_share, fault_log=fault_log,
                           progress=lambda strategy, seed, now_s, horizon_s: progress(
                               int(now_s // 86400), max(1, round(horizon_s / 86400)),
                               f"simulate-faults: {strategy}, seed {seed}, days"))
    except ValueError as exc:
        progress.close()
        _fail(str(exc), exitcodes.USAGE)
    progress.close()
    out["assumptions"]["history"] = label
    if left_out:
        click.echo(left_out, err=True)
    series = out.pop("_series")
    if plot_file:
        from .faultsim import fleet_html

        try:
            _write_atomic(plot_file, fleet_html(out, series))
        except OSError as exc:
            _fail(f"{plot_file}: {exc.strerror or exc}", exitcodes.USAGE)
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    from .faultsim import fleet_text

    click.echo(fleet_text(out))


# simulate-faults' options of the fleet mode alone (parameter names): --one-job refuses them
FLEET_ONLY = ("sacct_file", "node_count", "gpus_per_node", "rates_file", "hc_interval_s", "lemon_share",
              "lemon_factor", "big_job_gpus", "big_job_hours", "domain_size", "switch_share", "plot_file", "seeds",
              "fault_log_file")


def _simulate_one_job(gpus: int, node_mtbf_hours: float | None, checkpoint_every_h: float | None,
                      restart_minutes: float | None, days: float | None, strategies: tuple[str, ...], seed: int,
                      as_json: bool) -> None:
    from .faultsim import one_job

    if node_mtbf_hours is None or checkpoint_every_h is None:
        _fail("--one-job needs --node-mtbf-hours M and --checkpoint-every HOURS", exitcodes.USAGE)
    if set(strategies) - {"none"}:
        _fail("--one-job compares no strategies: its failures need no finding (--strategy none)", exitcodes.USAGE)
    out = one_job(gpus, node_mtbf_hours, checkpoint_every_h, restart_minutes or 0.0, days or 30.0, seed)
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    a, m = out["assumptions"], out["strategies"]["none"]
    click.echo(f"one job of {a['gpus']} GPUs on {a['nodes']} node(s), {a['days']:g} days; node MTBF "
               f"{a['node_mtbf_h']:g} h (the job's {a['job_mtbf_h']:g} h), checkpoint every {a['checkpoint_every_h']:g} h, "
               f"restart {a['restart_minutes']:g} min")
    click.echo(f"strategy none: ETTR {m['ettr']:.4f} ({m['failures']} failures, {m['work_h']:g} h of work in "
               f"{m['wall_h']:g} h); Daly {out['daly_ettr']:.4f}")


@fleet.command("lemons")
@group_config_option
@click.option("--dry-run", is_flag=True, help="Say what this step would reserve, submit, drain and release; "
                                              "record nothing, change nothing.")
@click.option("--textfile", metavar="PATH", help="Also write Prometheus metrics (flags, lemon scores, cases) "
                                                 "for node_exporter's textfile collector.")
@click.option("--timings", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="Also a job's own per-rank timings (as `fleet stragglers --timings`): its slow workers' nodes "
                   "are flagged for that job, beside the samplers' flags.")
@click.option("--job", "timings_job", metavar="JOBID", help="The job the --timings file is of.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (as `fleet --json lemons`).")
@click.pass_context
def fleet_lemons(ctx: click.Context, dry_run: bool, textfile: str | None, timings: str | None,
                 timings_job: str | None, as_json: bool) -> None:
    """One step of the lemon record (run it every minute or so, e.g. from a systemd timer): the in-job
    detector over the running multi-node jobs (one read of the fleet); each flag recorded once per node and
    job; a node flagged in `lemon_jobs` distinct jobs is held in a maintenance reservation and its deep
    check queued there; a confirmed check drains it through the breaker, a clean one clears its score.

    Exit codes: 0 no node confirmed this step, 1 a lemon confirmed (drained, or held by the breaker),
    2 Slurm unreadable or a write failed, or a usage or config error.
    """
    import sqlite3

    from .hostlist import fold
    from .lemon_step import run_step
    from .lemon_store import LemonStore
    from .slurm import SlurmError

    opts = ctx.obj or {}
    as_json = as_json or bool(opts.get("as_json"))
    policy = _load_policy(opts.get("config"), trusted=True)
    s = policy.slurm
    backend = _backend(policy)
    try:
        nodes = backend.nodes()
    except SlurmError as exc:
        _fail(f"cannot read the fleet: {exc}", exitcodes.USAGE)
    flags, jobs, published = _instep_flags(policy, nodes)
    if timings:
        if not timings_job:
            _fail("--timings needs --job JOBID: the job the timings are of", exitcodes.USAGE)
        from .perf.timings import as_instep_flags

        result, rows = _read_timings(timings)
        flags += as_instep_flags(result, timings_job, max(r.start for r in rows))
        jobs = sorted({*jobs, timings_job})
    try:
        store = LemonStore(s.lemon_path)
    except (OSError, sqlite3.Error) as exc:
        _fail(f"{s.lemon_path}: {exc}", exitcodes.USAGE)
    try:
        step = run_step(backend, s, store, nodes, flags, time.time(), dry_run)
    except SlurmError as exc:
        _fail(f"cannot read Slurm's reservations or jobs: {exc}", exitcodes.USAGE)
    errors = step.errors
    out = {"jobs": jobs, "nodes_sampled": len(published), "flags": [f.to_dict() for f in flags],
           "new_flags": step.new_flags, "scores": step.scores, "lemon_jobs": s.lemon_jobs,
           "cases": [_case_dict(c) for c in step.cases.values()], "reserved": step.reserved,
           "submitted": step.submitted, "drained": step.drained, "breaker_blocked": step.breaker_blocked,
           "released": step.released, "notes": step.notes, "errors": errors, "dry_run": dry_run}
    if textfile:
        from .metrics import write_lemon_textfile

        try:
            write_lemon_textfile(textfile, flags, step.scores, list(step.cases.values()), s.lemon_jobs)
        except OSError as exc:
            errors.append(f"{textfile}: {exc.strerror or exc}")
    store.close()
    if as_json:
        click.echo(json.dumps(out, indent=1))
    else:
        click.echo(f"{len(jobs)} multi-node job(s) sampled on {len(published)} node(s); {len(flags)} flag(s), "
                   f"{step.new_flags} new" + (" (dry run)" if dry_run else ""))
        for node, n in sorted(step.scores.items()):
            click.echo(f"  {node}: flagged in {n} job(s) of {s.lemon_jobs}")
        for c in step.cases.values():
            click.echo(f"  case {c.node}: {c.state}" + (f", {c.detail}" if c.detail else ""))
        if step.drained:
            click.echo(f"drained: {fold(step.drained)}")
        if step.breaker_blocked:
            click.echo(f"not drained, the drain breaker is open: {fold(step.breaker_blocked)}", err=True)
        for note in step.notes:
            click.echo(f"  {note}")
    for e in errors:
        click.echo(f"slurm-gpufleet: {e}", err=True)
    if errors:
        sys.exit(exitcodes.USAGE)
    sys.exit(exitcodes.UNHEALTHY if step.drained or step.breaker_blocked else exitcodes.OK)


def _case_dict(c) -> dict:
    return {"node": c.node, "state": c.state, "jobs": c.jobs, "opened": c.opened, "check_job": c.check_job,
            "attempts": c.attempts, "detail": c.detail, "closed": c.closed}


def _read_timings(path: str):
    """The judged timings file, or one line and exit 2 (unreadable) or 3 (no row)."""
    from .perf.timings import TimingsError, judge, read_file

    try:
        rows, bad = read_file(path)
    except OSError as exc:
        _fail(f"{path}: {exc.strerror or exc}", exitcodes.USAGE)
    except TimingsError as exc:
        _fail(f"{path}: not a timings file: {exc}", exitcodes.NO_STATE if str(exc) == "no rows" else exitcodes.USAGE)
    _skipped(path, [f"{path}: {why}, skipped" for why in bad], "rows", bool(rows))
    result = judge(rows)
    result.skipped = bad
    return result, rows


def _skipped(path: str, lines: list[str], what: str, any_read: bool) -> None:
    """The malformed lines of an input file, the first 20 named and the rest counted; one line and exit 3
    where none was read."""
    for line in lines[:20]:
        click.echo(line, err=True)
    if len(lines) > 20:
        click.echo(f"{path}: {len(lines) - 20} more lines skipped", err=True)
    if not any_read:
        _fail(f"{path}: no {what}" + (f" ({len(lines)} malformed line(s) skipped)" if lines else ""), exitcodes.NO_STATE)


def _timings(path: str, as_json: bool) -> None:
    result, _ = _read_timings(path)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
    else:
        click.echo(f"{result.rows} timed operation(s)")
        for f in result.flags:
            click.echo(f"  SLOW rank {f.rank} on {f.node} gpus {f.gpus}: stage {f.stage} {f.op} {f.times_slower:.2f}x "
                       f"its peers, slower in {f.steps_slower} of {f.steps} steps")
        for j in result.job_wide:
            click.echo(f"  job-wide ({j['kind']}): stage {j['stage']} {j['op']}: {j['why']}")
        for note in result.not_judged:
            click.echo(f"  not judged: {note}")
        if not result.flags:
            click.echo("  no worker apart from its peers")
    sys.exit(exitcodes.UNHEALTHY if result.flags else exitcodes.OK)


def _instep_telemetry(path: str, policy) -> None:
    """Exit 0 no flag, 1 flags, 2 unreadable file, 3 no sample in it.  The config's in-job settings
    (`instep_window_s`, `instep_windows`) judge, as they judge the running jobs."""
    from .instep import Settings, detect, parse_telemetry

    try:
        with click.open_file(path, encoding="utf-8", errors="replace") as fh:
            samples, bad = parse_telemetry(fh)
    except OSError as exc:
        _fail(f"{path}: {exc.strerror or exc}", exitcodes.USAGE)
    _skipped(path, [f"{path}:{number}: not a sample, skipped" for number in bad], "samples", bool(samples))
    flags = detect(samples, Settings(window_s=policy.slurm.instep_window_s, windows=policy.slurm.instep_windows))
    click.echo(json.dumps({"flags": [f.to_dict() for f in flags], "samples": len(samples), "skipped": len(bad)},
                          indent=1))
    sys.exit(exitcodes.UNHEALTHY if flags else exitcodes.OK)


@fleet.command("report")
@group_config_option
@click.option("--history-dir", required=True, metavar="DIR", help="Directory of node history databases.")
@click.option("--out", required=True, metavar="FILE.html", help="Where to write the HTML report.")
@click.pass_context
def fleet_report(ctx: click.Context, history_dir: str, out: str) -> None:
    """An HTML report of the fleet's health over time and its performance outliers."""
    from .perf.report import fleet_html

    policy = _load_policy((ctx.obj or {}).get("config"))
    _write_atomic(out, fleet_html(history_dir, policy))
    click.echo(out)


def main() -> None:
    try:
        cli.main(standalone_mode=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # one line, never a traceback, unless asked for
        if os.environ.get("SLURM_GPUFLEET_DEBUG"):
            raise
        click.echo(f"slurm-gpufleet: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(INTERNAL_ERROR)


if __name__ == "__main__":
    main()
