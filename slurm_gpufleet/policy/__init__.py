"""Health-check policy: safe defaults, a site file in TOML, per-node-group overrides; and what root may
trust of the paths it names (`trust`).  It may import `common` and `catalogs` alone.

    [defaults]                      # applies to every node
    require_persistence = true

    [[group]]                       # later groups override earlier ones, key by key
    name = "h200"
    nodes = "gpu[001-128]"          # a Slurm host list, parsed by ClusterShell's NodeSet
    expected_gpus = 8
    driver_version = "580.159.04"

    [models."NVIDIA B200"]          # extends data/gpu_models.toml
    match = "\\bB200\\b"
    max_sm_mhz = 1965

Unknown keys and bad values are errors that name the file and line: a broken config must never
produce verdicts (and so never drain a fleet).
"""

from __future__ import annotations

import math
import os
import re
import time
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..catalogs import GpuModel, model_from

DEFAULT_PATH = "/etc/slurm-gpufleet/gpufleet.toml"
ENV_VAR = "SLURM_GPUFLEET_CONFIG"
SEVERITY_CHOICES = ("ok", "warn", "reboot", "drain")


class PolicyError(ValueError):
    """A config problem, already phrased as 'FILE:LINE: what is wrong'."""


def _int(min_value: int = 0) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int) or v < min_value:
            raise ValueError(f"must be an integer >= {min_value}")
        return v
    return check


def _number(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise ValueError("must be a finite number >= 0")
    return float(v)


def _dcgm_level(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 4:
        raise ValueError("must be 0 (none) or a dcgmi diag level 1 to 4")
    return v


def _positive(v: Any) -> Any:
    v = _number(v)
    if v <= 0:
        raise ValueError("must be a finite number > 0")
    return v


def _str(v: Any) -> Any:
    if not isinstance(v, str) or not v.strip():
        raise ValueError("must be a non-empty string")
    return v.strip()


def _version(v: Any) -> Any:
    v = _str(v)
    if not re.fullmatch(r"\d+(\.\d+)*", v):
        raise ValueError("must be a dotted version like 580.159.04")
    return v


def _str_list(v: Any) -> Any:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
        raise ValueError("must be a list of strings")
    return [x.strip() for x in v]


def _branch_types(v: Any) -> Any:
    if not isinstance(v, list) or any(x not in ("LTSB", "PB", "NFB") for x in v):
        raise ValueError('must be a list of branch types, e.g. ["LTSB", "PB"] (LTSB, PB, NFB)')
    return list(v)


def _version_list(v: Any) -> Any:
    return [_version(x) for x in _str_list(v)]


def _int_list(v: Any) -> Any:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        raise ValueError("must be a list of non-negative integers")
    return v


def _bool(v: Any) -> Any:
    if not isinstance(v, bool):
        raise ValueError("must be true or false")
    return v


def _choice(*choices: str) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if v not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return v
    return check


_COMPUTE_MODES = ("Default", "Exclusive_Process", "Prohibited", "Exclusive_Thread")


def _abs_path(v: Any) -> Any:
    v = _str(v)
    if not v.startswith("/"):
        raise ValueError("must be an absolute path (slurmd runs us with no PATH and no working directory)")
    return v


def _timeout(v: Any) -> Any:
    v = _number(v)
    if not 0 < v <= 55:
        raise ValueError("must be > 0 and <= 55 seconds (Slurm kills a health check after 60 s)")
    return v


def _count_or_pct(v: Any) -> Any:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return v
    if isinstance(v, str) and re.fullmatch(r"\d+(\.\d+)?%", v.strip()) and 0 < float(v.strip()[:-1]) <= 100:
        return v.strip()
    raise ValueError('must be a node count >= 1 or a percentage like "25%"')


def parse_budget(text: str) -> int | str:
    """A budget given on a command line (`--max-unavailable`): a node count or "N%"; ValueError says why."""
    return _count_or_pct(int(text) if text.strip().isdecimal() else text)


def _pct(v: Any) -> Any:
    v = _count_or_pct(v)
    if not isinstance(v, str):
        raise ValueError('must be a percentage like "25%"')
    return v


def _waves(v: Any) -> Any:
    if not isinstance(v, list) or not v:
        raise ValueError('must be a non-empty list like [1, "2%", "10%", "25%", "100%"]')
    return tuple(_count_or_pct(x) for x in v)


def _between(low: float, high: float) -> Callable[[Any], Any]:
    """A number strictly between low and high (high may be inf)."""
    def check(v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int | float) or not low < v < high:
            raise ValueError(f"must be a number above {low:g}" + (f" and below {high:g}" if high != float("inf") else ""))
        return float(v)
    return check


# the soft signals the rollout's evidence gate weighs (maintain/evidence.py), as a config names them
SIGNALS = ("xid_soft", "xid_hard", "ecc", "verdict", "job_fail", "row_remap")


def _signals(v: Any) -> Any:
    if not isinstance(v, list) or not v or not all(isinstance(s, str) for s in v):
        raise ValueError(f"must be a non-empty list of signals ({', '.join(SIGNALS)})")
    unknown = [s for s in v if s not in SIGNALS]
    if unknown:
        raise ValueError(f"has an unknown signal {unknown[0]!r} (known: {', '.join(SIGNALS)})")
    return tuple(dict.fromkeys(v))


def _tuple_of_str(v: Any) -> Any:
    return tuple(_str_list(v))


def setting(default: Any = None, check: Callable[[Any], Any] | None = None, *, factory: Any = None) -> Any:
    """A config setting: its default and the validator of its value, declared in one place."""
    if factory is not None:
        return field(default_factory=factory, metadata={"check": check})
    return field(default=default, metadata={"check": check})


def checks_of(cls: type) -> dict[str, Callable[[Any], Any]]:
    """Each setting's validator, read from the dataclass that declares it."""
    return {f.name: f.metadata["check"] for f in fields(cls) if f.metadata.get("check")}


@dataclass(frozen=True)
class NodePolicy:
    """Every setting a check may read, resolved for one node.  Defaults are safe for any node."""

    # inventory
    expected_gpus: int | None = setting(None, _int(0))
    expected_model: str | None = setting(None, _str)
    # driver and compatibility
    driver_version: str | None = setting(None, _version)
    min_cuda: str | None = setting(None, _version)
    require_cuda: list[str] = setting(check=_version_list, factory=list)
    eol_branch_severity: str = setting("ok", _choice(*SEVERITY_CHOICES))
    # driver branch types the group accepts ("LTSB", "PB", "NFB"; empty: any).  Production partitions
    # usually refuse New Feature Branches: ["LTSB", "PB"].  From data/compat.toml's branch table.
    allowed_branch_types: list[str] = setting(check=_branch_types, factory=list)
    branch_type_severity: str = setting("warn", _choice(*SEVERITY_CHOICES))
    # a driver exposed to CVEs of NVIDIA's security bulletins (data/security.toml): a note by default;
    # critical ones (CVSS >= 9) may be set to warn or drain by a site
    cve_severity: str = setting("ok", _choice(*SEVERITY_CHOICES))
    cve_critical_severity: str = setting("ok", _choice(*SEVERITY_CHOICES))
    # a node off its group's pinned driver or firmware; warn by default so that changing the target
    # in the config before a rollout never drains the fleet
    driver_mismatch_severity: str = setting("warn", _choice(*SEVERITY_CHOICES))
    firmware_mismatch_severity: str = setting("warn", _choice(*SEVERITY_CHOICES))
    # firmware: allowed values; empty means "any"
    vbios: list[str] = setting(check=_str_list, factory=list)
    inforom_image: list[str] = setting(check=_str_list, factory=list)
    gsp_firmware: list[str] = setting(check=_str_list, factory=list)
    # memory
    require_ecc: bool = setting(False, _bool)
    sram_uncorrectable_max: int = setting(4, _int(0))
    dram_correctable_max: int = setting(10_000_000, _int(0))
    retired_pages_max: int = setting(60, _int(1))
    # xid
    xid_escalate_after_reboots: int = setting(2, _int(0))
    xid_ignore: list[int] = setting(check=_int_list, factory=list)
    # thermal / power / clocks
    temperature_margin_c: int = setting(5, _int(0))
    power_limit_tolerance_pct: float = setting(1.0, _number)
    clock_tolerance_pct: float = setting(1.0, _number)
    # pcie / nvlink
    pcie_min_width: int | None = setting(None, _int(1))
    pcie_replay_max: int = setting(10_000, _int(0))
    pcie_replay_growth_max: int = setting(100, _int(0))
    nvlink_error_growth_max: int = setting(0, _int(0))
    # NVLinks running below the model's speed (data/gpu_models.toml nvlink_gbps)
    nvlink_slow_severity: str = setting("drain", _choice(*SEVERITY_CHOICES))
    # NVLink fabric (checks/fabric.py): a registration still in progress this long after boot is stuck
    fabric_grace_s: int = setting(300, _int(0))
    # degraded bandwidth / limited capacity: "drain" where NCCL uses multi-node NVLink (it fails on
    # degraded paths, NVIDIA/nccl issue 2186)
    fabric_degraded: str = setting("warn", _choice(*SEVERITY_CHOICES))
    # the GPUs sit in a multi-node NVLink domain (clique 0 with a zero cluster UUID never joined it);
    # unset: as the GPU model says (GB200/GB300 do)
    fabric_multinode: bool | None = setting(None, _bool)
    # nvidia-fabricmanager on HGX boards: inactive after this grace from boot drains, once confirmed by
    # `fabric_manager_probes` failed probes at least `fabric_manager_probe_s` apart (over several runs of the
    # health check); this many restarts within the window is flapping (NVSentinel: 300 s grace, 3 probes
    # 30 s apart, 3 restarts in 600 s)
    fabric_manager_grace_s: int = setting(300, _int(0))
    fabric_manager_probes: int = setting(3, _int(1))
    fabric_manager_probe_s: int = setting(30, _int(0))
    fabric_manager_flap_restarts: int = setting(3, _int(1))
    fabric_manager_flap_window_s: int = setting(600, _int(1))
    # InfiniBand and RoCE (checks/infiniband.py): the ports expected ACTIVE and LinkUp (unset: not judged),
    # the rate each must run at, what a slower one calls for, and devices left out (management and
    # front-end NICs: globs such as "mlx5_bond_*")
    ib_ports: int | None = setting(None, _int(0))
    ib_rate_gbps: float | None = setting(None, _positive)
    ib_degraded_action: str = setting("warn", _choice(*SEVERITY_CHOICES))
    ib_exclude: list[str] = setting(check=_str_list, factory=list)
    # the link layer of the ports ib_ports counts: "InfiniBand", or "Ethernet" on a RoCE fabric (where the
    # front-end bond is left out by ib_exclude)
    ib_link_layer: str = setting("InfiniBand", _choice("InfiniBand", "Ethernet"))
    # a job that this many fault requeues sent back (a failed prolog on its node, each time) stays held
    # with the nodes that failed it named in its record (unset: never held for it)
    max_fault_requeues: int | None = setting(None, _int(1))
    # modes
    require_persistence: bool = setting(False, _bool)
    compute_mode: str | None = setting(None, _choice(*_COMPUTE_MODES))
    mig_mode: bool | None = setting(None, _bool)
    # performance (`check --level deep`): memory bandwidth this far below the baseline is a warning
    perf_tolerance_pct: float = setting(10.0, _number)
    # staged enablement: "observe" decides and publishes what it would do and touches nothing (a prolog
    # never fails), "quarantine" drains but never resets or reboots, "full" does everything
    mode: str = setting("full", _choice("observe", "quarantine", "full"))
    # idle sweeps (sweep.py, `fleet sweep`): a node idle this long gets the deep check as a preemptable job
    # once every sweep_interval_h (unset: the group is not swept)
    sweep_interval_h: float | None = setting(None, _number)
    sweep_idle_min: float = setting(30.0, _number)
    # processes
    expect_idle: bool = setting(False, _bool)
    idle_memory_mib: int = setting(100, _int(0))
    # groups that matched this node, for explanations
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class SlurmSettings:
    """How the health check, prolog and epilog act through Slurm ([slurm] in the config, site-wide)."""

    # clean health-check runs in a row before a node we drained is resumed
    clean_runs_to_resume: int = setting(3, _int(1))
    # the remediation ladder (remedy/ladder.py, data/remediation.toml): a reset-fixable fault first gets
    # reset_command on its idle GPUs ({gpus}: the comma list, every GPU of an NVSwitch board; {node}), killed
    # after reset_timeout_s (a health check runs the reset and reads the GPUs again within slurmd's 60 s);
    # then `scontrol reboot ASAP`; still there after this many reboots -> drain
    reboots_before_drain: int = setting(2, _int(0))
    reset_command: str = setting("nvidia-smi -r -i {gpus}", lambda v: v.strip() if isinstance(v, str) else _str(v))
    reset_timeout_s: float = setting(30.0, _timeout)
    # attempts per failure class: the max_attempts-th fault of a class within attempt_window_s is not
    # remedied again: the node is drained for repair and only an admin resumes it (`fleet cases`)
    max_attempts: int = setting(3, _int(1))
    attempt_window_s: float = setting(7 * 86400.0, _number)
    # the suspect rung (data/remediation.toml [suspect]): a node held in a maintenance reservation of its own
    # is re-checked by its health check every suspect_recheck_min; suspect_passes clean re-checks release it
    suspect_recheck_min: float = setting(10.0, _number)
    suspect_passes: int = setting(3, _int(1))
    # a cool-off hold (data/remediation.toml [ladder.cool_off]: heat) lasts this long, then Slurm resumes the
    # node by itself (ResumeAfter, 23.02 on; before, the health check resumes it after its clean runs)
    cool_off_min: float = setting(30.0, _number)
    # validation before return (returning.py): a node the ladder reset, or one `fleet repaired` names, runs
    # this as a job in a maintenance reservation of its own before it takes work again ("" turns it off);
    # a failure is retried validation_retries times, then the node is drained for repair
    validation_command: str = setting("/usr/local/sbin/slurm-gpufleet-healthcheck --level deep --nhc",
                                      lambda v: v.strip() if isinstance(v, str) else _str(v))
    validation_timeout_minutes: int = setting(30, _int(1))
    validation_retries: int = setting(1, _int(0))
    validation_partition: str = setting("", _str)
    # idle sweeps (sweep.py): their jobs go to sweep_partition, a partition over the same nodes whose jobs
    # any user job preempts (PreemptType=preempt/partition_prio, a lower PriorityTier, PreemptMode=CANCEL);
    # at most sweep_max_nodes at once, each sweep_minutes at most
    sweep_partition: str = setting("", _str)
    sweep_command: str = setting("/usr/local/sbin/slurm-gpufleet-healthcheck --level deep",
                                 lambda v: v.strip() if isinstance(v, str) else _str(v))
    sweep_max_nodes: int = setting(2, _int(1))
    sweep_minutes: int = setting(20, _int(1))
    sweep_db: str | None = setting(None, _abs_path)
    # where the node's GPU summary goes: "extra", "comment" or "none"
    publish: str = setting("extra", _choice("extra", "comment", "none"))
    # where an ended job's record goes in accounting (jobrecord.py): its AdminComment, or its SystemComment
    # beside Princeton's jobstats, which owns the AdminComment and writes it whole after the job
    job_record_field: str = setting("AdminComment", _choice("AdminComment", "SystemComment"))
    # a quiet health-check run (its verdict and summary as the last run that read Slurm saw them, the node
    # in service) asks slurmctld nothing for this long after that read (hooks/quiet.py); 0: every run reads
    slurm_read_every_s: int = setting(600, _int(0))
    # ... and never more often than the fleet's quiet runs together make this many reads a second: at
    # 12,500 nodes (slurm.conf's count) a quiet node reads every 12,500 / 2 = 6,250 s (a node read costs
    # slurmctld 10-33 ms of CPU at that size, so 2 a second and the samplers' writes stay within a tenth
    # of a core: bench/controller_cost.py)
    slurm_reads_per_s: float = setting(2.0, _positive)
    # where the node's InfiniBand devices are (readers/ib.py); "" is <host_root>/sys/class/infiniband
    ib_sysfs: str = setting("", lambda v: "" if v == "" else _abs_path(v))
    # hard limit for reading GPU state (NVML, nvidia-smi files); well under Slurm's own limits
    read_timeout_s: float = setting(20.0, _timeout)
    # "commands" (scontrol/sinfo), "pyslurm", or "auto" (pyslurm when it imports and matches)
    backend: str = setting("auto", _choice("auto", "commands", "pyslurm"))
    # slurmd gives HealthCheckProgram no PATH: absolute paths
    scontrol: str = setting("/usr/bin/scontrol", _abs_path)
    # per-node history (SQLite) and job windows live here
    state_dir: str = setting("/var/lib/slurm-gpufleet", _abs_path)
    # the kernel log to read Xids from: /dev/kmsg, a file, or a directory holding <node>.kmsg
    kernel_log: str | None = setting("/dev/kmsg", _abs_path)
    # where the node's /boot, /lib/modules and /etc are (the kernel check; looking before a reboot);
    # %n is the node's name, as in slurm.conf (node images mounted side by side)
    host_root: str = setting("/", _abs_path)
    # `fleet stragglers`: judged per GPU model against at least this many peers, robust z and drop
    straggler_min_peers: int = setting(8, _int(2))
    straggler_z: float = setting(4.0, _number)
    straggler_min_drop_pct: float = setting(5.0, _number)
    # opt-in: `fleet stragglers --drain` may drain the slow nodes (never nodes held by someone else)
    drain_stragglers: bool = setting(False, _bool)
    # fleet-wide drain circuit breaker: a drain that would make more than this many nodes (or this share
    # of the fleet or of a partition) drained for a fault by us (health check, stragglers) within the window
    # opens it instead
    breaker_threshold: int | str = setting("10%", _count_or_pct)
    breaker_window_s: float = setting(300.0, _number)
    # rack escalation (remedy/escalation.py): a failure domain (NVLink rack, Slurm block) is drained whole,
    # with one reason, when this many of its nodes were drained for fabric or NVLink faults within the
    # window, or when 2 or more show the same fabric fault at once (a switch-side signature)
    rack_escalate_nodes: int = setting(3, _int(2))
    rack_escalate_window_s: float = setting(600.0, _number)
    # where an open breaker is recorded (default <state_dir>/breaker.json; shared storage: one reset)
    breaker_file: str | None = setting(None, _abs_path)
    # driver and CUDA as node features (gpufleet_drv580, gpufleet_drv580.159.04, gpufleet_cuda13.0), so
    # jobs can --constraint during a rollout; "" turns it off.  Features without the prefix are never touched
    feature_prefix: str = setting("gpufleet_", _str)
    # the in-job sampler (sampler.py, for jobs on 2 nodes or more): one NVML read every instep_sample_s,
    # a digest published every instep_window_s, a node flagged after instep_windows windows apart (instep.py)
    instep_sample_s: float = setting(15.0, _positive)
    instep_window_s: float = setting(60.0, _positive)
    instep_windows: int = setting(3, _int(1))
    # the samplers of the whole fleet publish their digests to Slurm at most this many times a second
    # together (never reading their node: they merge into the copy of its summary kept on the node), so a
    # large fleet publishes every few windows (sampler.publish_every: every 21st 60 s window at 12,500
    # nodes); a shared directory (instep_share_dir) publishes every window and asks Slurm nothing
    instep_writes_per_s: float = setting(10.0, _positive)
    # where the samplers write their digests instead of Slurm: a directory every node of a job and the host
    # of `fleet stragglers --running` see (a shared file system); None: each node's summary in Slurm
    instep_share_dir: str | None = setting(None, _abs_path)
    # lemons (lemon.py, `fleet lemons`): a node flagged in this many distinct jobs is held in a maintenance
    # reservation (lemon_hold_hours at most, its running job goes on) and the deep check (lemon_check, a
    # shell command run by sbatch --wrap; it exits 1 with its finding as the job's comment) runs there when
    # it frees; drained only if the check confirms.  lemon_db: the record, on the host running the command
    lemon_jobs: int = setting(2, _int(1))
    lemon_check: str = setting("/usr/local/sbin/slurm-gpufleet-healthcheck --level deep --confirm",
                               lambda v: v.strip() if isinstance(v, str) else _str(v))
    lemon_check_minutes: int = setting(30, _int(1))
    lemon_hold_hours: float = setting(48.0, _number)
    lemon_partition: str = setting("", _str)
    lemon_db: str | None = setting(None, _abs_path)
    # IMEX (imex.py), judged only in the prolog and epilog of a job that uses it, never on an idle node:
    # "all" where SwitchType=switch/nvidia_imex gives every job a channel, "marked" for jobs that ask for
    # one of imex_features (--constraint) or carry one of imex_env (NAME or NAME=VALUE, e.g. set by a
    # job_submit plugin from --network or a GRES), "none" to never judge it
    imex_jobs: str = setting("marked", _choice("none", "marked", "all"))
    imex_features: tuple[str, ...] = setting((), _tuple_of_str)
    imex_env: tuple[str, ...] = setting((), _tuple_of_str)
    imex_ctl: str = setting("/usr/bin/nvidia-imex-ctl", _abs_path)
    # the systemctl asked about nvidia-fabricmanager on HGX boards: "" is root's own (trust.ROOT_PATH), asked
    # only where the node's host is read at / (host_root); a path is asked wherever the health check runs
    systemctl: str = setting("", lambda v: v if _str(v) == "" else _abs_path(v))
    # DCGM's diagnostic at the deep level (a validation run, a lemon's deep check): `dcgmi diag -r LEVEL -j`,
    # read as data (checks/dcgm.py); 0 runs none.  A DCGM that cannot judge the GPUs (dcgmi missing or hung,
    # its host engine unreachable or of another version) is said in the node's summary, never a drain.
    dcgm_diag_level: int = setting(0, _dcgm_level)
    dcgmi: str = setting("/usr/bin/dcgmi", _abs_path)
    dcgm_timeout_s: float = setting(2400.0, _positive)
    # the one exception to "root trusts only root's files" (slurm_gpufleet/policy/trust.py): this group may hold
    # group write on the paths the config names (never on the config itself)
    trusted_group: str | None = setting(None, _str)

    @property
    def breaker_path(self) -> str:
        import os

        return self.breaker_file or os.path.join(self.state_dir, "breaker.json")

    @property
    def sweep_path(self) -> str:
        import os

        return self.sweep_db or os.path.join(self.state_dir, "sweeps.json")

    @property
    def lemon_path(self) -> str:
        import os

        return self.lemon_db or os.path.join(self.state_dir, "lemons.db")


@dataclass(frozen=True)
class MaintainSettings:
    """Staged driver rollouts ([maintain] in the config, site-wide)."""

    # canary nodes per distinct (GPU model, firmware set) combination
    canary_per_combo: int = setting(1, _int(0))
    # wave sizes after the canary: nodes, or "N%" of the nodes in the rollout; the last one repeats
    waves: tuple[int | str, ...] = setting((1, "2%", "10%", "25%", "100%"), _waves)
    # at most this many nodes out of service at once: nodes, or "N%" of the rollout
    max_unavailable: int | str = setting("25%", _count_or_pct)
    # and at most this share of each partition
    max_unavailable_per_partition: str = setting("25%", _pct)
    # nodes in these partitions / with these features go first; critical ones last
    less_critical_partitions: tuple[str, ...] = setting((), _tuple_of_str)
    less_critical_features: tuple[str, ...] = setting((), _tuple_of_str)
    critical_partitions: tuple[str, ...] = setting((), _tuple_of_str)
    # one node's upgrade + return + validation: the length of its slot (maintain/schedule.py)
    upgrade_minutes: int = setting(20, _int(1))
    # failed nodes tolerated before the rollout halts; then roll back automatically?
    max_failures: int = setting(0, _int(0))
    auto_rollback: bool = setting(False, _bool)
    # upgrade a node someone else drained/downed while it sits empty?  (it is given back as it was)
    upgrade_held_nodes: bool = setting(False, _bool)
    # the site's upgrade command, a jinja2 template; every substituted value is shell-quoted
    upgrade_template: str = setting("/etc/slurm-gpufleet/upgrade.sh.j2", _abs_path)
    upgrade_timeout_s: int = setting(1800, _int(1))
    # upgrade commands run at once, each with its own timeout (0: as many as the budget lets out)
    max_parallel_upgrades: int = setting(0, _int(0))
    # Slurm writes per step of the engine, most urgent first (0: no limit); what is left waits a step
    max_slurm_writes_per_step: int = setting(2, _int(0))
    return_timeout_s: int = setting(900, _int(1))
    validate_timeout_s: int = setting(600, _int(1))
    # optional: a batch job run on each upgraded node before it is released (for example the deep
    # performance check).  The node leaves the drain but stays in its maintenance reservation, so only
    # this job can start there; it must exit 0.  A shell command line, run by sbatch --wrap.
    validation_job: str = setting("", lambda v: v.strip() if isinstance(v, str) else _str(v))
    validation_job_timeout_s: int = setting(1800, _int(60))
    # failure domains (NVLink racks, Slurm blocks; slurm/domains.py): a domain drains, upgrades,
    # validates and returns as one; the canary is a whole domain
    whole_domain: bool = setting(False, _bool)
    # a domain taken whole with a member someone else holds (an admin's drain, another reservation):
    # "skip" the domain whole, or "wait" (plan it; it goes once that member is released).  Never a
    # domain on two drivers.
    domain_member_held: str = setting("skip", _choice("skip", "wait"))
    # at most this many domains with any node out at once (0: only the node budget counts)
    max_unavailable_domains: int = setting(0, _int(0))
    # whole domains kept fully in service at every moment, for --segment and --exclusive=topo jobs
    keep_free_domains: int = setting(0, _int(0))
    # firmware components that are one per domain (an NVSwitch tray's firmware touches its whole rack):
    # a bundle that changes one takes whole domains whatever whole_domain says
    domain_wide: tuple[str, ...] = setting((), _tuple_of_str)
    # what widens a wave: "validated" (its nodes came back healthy on the new driver) or "evidence"
    # (also: canary against control over the same hours, maintain/evidence.py, rules "worse" out)
    gate: str = setting("validated", _choice("validated", "evidence"))
    gate_signals: tuple[str, ...] = setting(("xid_soft", "xid_hard", "ecc", "verdict", "job_fail", "row_remap"),
                                            _signals)
    # "worse" means this many times the control's rate, judged at this confidence
    gate_worse_ratio: float = setting(2.0, _between(1.0, float("inf")))
    gate_confidence: float = setting(0.95, _between(0.5, 1.0))
    # a signal with at least this many events must rule "worse" out before the window widens
    gate_min_events: int = setting(5, _int(1))
    # "not worse" means at most 1 + gate_margin times the control's rate (the sequential test's H0)
    gate_margin: float = setting(0.0, _number)
    # no wave widens before this soak, in seconds of the cohort in service; the soak is bounded: at
    # gate_max_soak_h (hours; gate_max_soak_s is the same bound in seconds) without a decision the stage
    # proceeds unless the canary is worse at gate_confidence, and only then waits for `maintain approve`
    # (or proceeds: gate_on_timeout = "proceed").  36 h: on the Helios load at 300 nodes a 3x worse
    # driver is held at a few canary nodes in 23 of 25 seeds (24 h: 21) while a good one finishes at
    # 1.11x the ungated makespan (48 h: 1.25x); bench/gate_trials.py
    gate_min_soak_s: int = setting(3600, _int(1))
    gate_max_soak_s: int = setting(129600, _int(1))
    gate_on_timeout: str = setting("wait", _choice("wait", "proceed"))
    # how long to wait between looks at Slurm while a rollout runs
    poll_s: float = setting(5.0, _number)
    # Slurm unreachable this long (slurmctld restarting, failing over) ends `apply`; `resume` continues
    slurm_outage_s: float = setting(600.0, _number)
    # a running `apply` with nothing new to say says what it waits for this often (node, job or slot)
    progress_s: float = setting(30.0, _number)
    # the rollout's state (SQLite, created 0600)
    db: str = setting("/var/lib/slurm-gpufleet/maintain.db", _abs_path)


VALIDATORS = checks_of(NodePolicy)
MAINTAIN_VALIDATORS = checks_of(MaintainSettings)
SLURM_VALIDATORS = checks_of(SlurmSettings)
assert set(VALIDATORS) == {f.name for f in fields(NodePolicy)} - {"groups"}
assert set(MAINTAIN_VALIDATORS) == {f.name for f in fields(MaintainSettings)}
assert set(SLURM_VALIDATORS) == {f.name for f in fields(SlurmSettings)}

_MODEL_KEYS = {"match": _str, "architecture": _str, "max_sm_mhz": _int(1), "mem_bw_gbps": _number,
               "memory_gb": _number, "nvlink_links": _int(0), "nvlink_gbps": _number, "multinode_nvlink": _bool,
               "nvswitch_board": _bool, "nvlink_bridge": _bool}


@dataclass
class _Group:
    """A [groups.NAME] table: its nodes and the settings it overrides."""

    name: str
    nodes: str
    nodeset: Any
    settings: dict[str, Any]


@dataclass(frozen=True)
class Requirement:
    """[[requires]]: what firmware a driver branch needs (`driver = "580"`, `vbios = "96.00.74.00.01"`)."""

    driver: str                    # a branch ("580") or a version prefix ("580.95")
    minimum: dict[str, str]        # firmware component -> the lowest version that works
    where: str                     # file:line, for the plan's refusal

    def applies_to(self, driver: str) -> bool:
        return driver == self.driver or driver.startswith(self.driver + ".")


@dataclass(frozen=True)
class DomainSpec:
    """[[domain]]: a failure domain (an NVLink rack, an IMEX domain) for Slurm releases or sites without
    topology/block: `name = "rack1"`, `nodes = "gpu[001-018]"`."""

    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class BundleSpec:
    """[bundle]: what `maintain plan` rolls out when its command line names no target (a site keeps its
    standard bundle in the config).  firmware: for every node; firmware_by_model: per GPU model, as the
    fleet names it (the same forms as --target-firmware)."""

    driver: str | None = None
    kernel: str | None = None
    firmware: dict[str, str] = field(default_factory=dict)
    firmware_by_model: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class Policy:
    """The site's config: defaults, groups and the settings outside them."""

    path: str | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    groups: list[_Group] = field(default_factory=list)
    models: tuple[GpuModel, ...] = ()
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    maintain: MaintainSettings = field(default_factory=MaintainSettings)
    requires: tuple[Requirement, ...] = ()
    domains: tuple[DomainSpec, ...] = ()
    bundle: BundleSpec | None = None

    def unmatched_groups_in_slurm_conf(self, path: str | None = None) -> list[tuple[str, str]] | None:
        """unmatched_groups over the nodes slurm.conf defines (`path`, else $SLURM_CONF, else
        /etc/slurm/slurm.conf): a file read, no call to slurmctld.  None where it cannot be read."""
        if not self.groups:
            return []
        hosts = slurm_conf_nodes(path or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf")
        return None if hosts is None else self.unmatched_groups(hosts)

    def unmatched_groups(self, hosts: Iterable[str]) -> list[tuple[str, str]]:
        """(name, host list) of each [[group]] that matches none of `hosts`: a typo in its `nodes` leaves
        its settings applied nowhere, an observe-only group's nodes in full mode among them."""
        hosts = list(hosts)
        return [(g.name, g.nodes) for g in self.groups if not any(h in g.nodeset for h in hosts)]

    def for_node(self, host: str | None) -> NodePolicy:
        resolved = replace(NodePolicy(), **self.defaults)
        matched: list[str] = []
        for group in self.groups:
            if host and host in group.nodeset:
                resolved = replace(resolved, **group.settings)
                matched.append(group.name)
        return replace(resolved, groups=tuple(matched))

    def mode_of(self, host: str) -> str:
        """The node group's `mode` of this node: what the actuator lets any actor write about it."""
        return self.for_node(host).mode


def default_policy() -> Policy:
    return Policy()


def config_path(explicit: str | None) -> tuple[str | None, bool]:
    """(path, required): --config wins, then $SLURM_GPUFLEET_CONFIG, then the default if it exists."""
    if explicit:
        return explicit, True
    env = os.environ.get(ENV_VAR)
    if env:
        return env, True
    return (DEFAULT_PATH, False) if os.path.exists(DEFAULT_PATH) else (None, False)


# An empty config is read once more after this pause: a file rewritten in place (`>`, most editors'
# save) is empty between its truncate and its write, and empty is valid TOML, the packaged defaults.  A
# health check that read it then ran without the site's groups (CI saw an observe-only node drained).
EMPTY_CONFIG_REREAD_S = 0.2


def load_policy(path: str | None) -> Policy:
    if path is None:
        return default_policy()
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        if not raw.strip():
            time.sleep(EMPTY_CONFIG_REREAD_S)
            with open(path, "rb") as fh:
                raw = fh.read()
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    return parse_policy(raw.decode("utf-8", "replace"), path)


def parse_policy(text: str, path: str = "<config>") -> Policy:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"line (\d+)", str(exc))
        # every error names a line (FILE:LINE): "at end of document" is the last one
        where = f"{path}:{line.group(1) if line else max(1, text.count(chr(10)) + (not text.endswith(chr(10))))}"
        raise PolicyError(f"{where}: invalid TOML: {str(exc).split(' (at')[0]}") from None
    except RecursionError:  # arrays or tables nested past Python's stack (tomllib recurses)
        raise PolicyError(f"{path}:1: invalid TOML: nested too deeply") from None
    lines = _KeyLines(text)
    policy = Policy(path=path)
    for key in data:
        if key not in ("defaults", "group", "models", "slurm", "maintain", "requires", "domain", "bundle"):
            raise PolicyError(f"{path}:{lines.find(None, key)}: unknown section or key '{key}' "
                              "(expected [defaults], [[group]], [models.\"NAME\"], [slurm], [maintain], "
                              "[bundle], [[requires]] or [[domain]])")
    if "bundle" in data:
        policy.bundle = _bundle(data["bundle"], path, lines)
    policy.slurm = SlurmSettings(**_site_section(data, "slurm", SLURM_VALIDATORS, path, lines))
    maintain = data.get("maintain")
    soak_key = "gate_max_soak_s"
    if isinstance(maintain, dict) and "gate_max_soak_h" in maintain:
        soak_key = "gate_max_soak_h"
        maintain = dict(maintain)  # the bound in hours, kept as gate_max_soak_s (one value, two spellings)
        where = f"{path}:{lines.find(('maintain', None), 'gate_max_soak_h')}"
        if "gate_max_soak_s" in maintain:
            raise PolicyError(f"{where}: gate_max_soak_h and gate_max_soak_s are the same bound: give one")
        hours = maintain.pop("gate_max_soak_h")
        if isinstance(hours, bool) or not isinstance(hours, int | float) or not 0 < hours < 1e6:
            raise PolicyError(f"{where}: gate_max_soak_h must be a number of hours above 0")
        maintain["gate_max_soak_s"] = max(1, round(hours * 3600))
        data = {**data, "maintain": maintain}
    policy.maintain = MaintainSettings(**_site_section(data, "maintain", MAINTAIN_VALIDATORS, path, lines))
    if policy.maintain.gate_max_soak_s < policy.maintain.gate_min_soak_s:
        raise PolicyError(f"{path}:{lines.find(('maintain', None), soak_key)}: {soak_key} "
                          f"({policy.maintain.gate_max_soak_s} s) is shorter than gate_min_soak_s "
                          f"{policy.maintain.gate_min_soak_s}")
    if policy.maintain.gate_worse_ratio <= 1 + policy.maintain.gate_margin:
        raise PolicyError(f"{path}:{lines.find(('maintain', None), 'gate_margin')}: gate_margin "
                          f"{policy.maintain.gate_margin:g} leaves nothing between \"not worse\" (1 + margin) and "
                          f"\"worse\" (gate_worse_ratio {policy.maintain.gate_worse_ratio:g})")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise PolicyError(f"{path}:{lines.find(None, 'defaults')}: 'defaults' must be a table")
    policy.defaults = _settings(defaults, path, lines, ("defaults", 0))
    groups = _rows(data.get("group", []), "group", path, lines)
    for i, group in enumerate(groups):
        section = ("group", i)
        nodes = group.get("nodes")
        if not isinstance(nodes, str) or not nodes.strip():
            raise PolicyError(f"{path}:{lines.header(section)}: [[group]] #{i + 1} needs 'nodes', a Slurm host list")
        nodeset = _nodeset(nodes, f"{path}:{lines.find(section, 'nodes')}")
        name = group.get("name", nodes)
        if not isinstance(name, str):
            raise PolicyError(f"{path}:{lines.find(section, 'name')}: 'name' must be a string")
        body = {k: v for k, v in group.items() if k not in ("nodes", "name")}
        policy.groups.append(_Group(name, nodes, nodeset, _settings(body, path, lines, section)))
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise PolicyError(f"{path}:{lines.find(None, 'models')}: 'models' must be a table of [models.\"NAME\"]")
    extra = []
    for name, spec in models.items():
        section = ("models", name)
        if not isinstance(spec, dict):
            raise PolicyError(f"{path}:{lines.header(section)}: [models.\"{name}\"] must be a table")
        for key, value in spec.items():
            if key not in _MODEL_KEYS:
                raise PolicyError(f"{path}:{lines.find(section, key)}: unknown key '{key}' in [models.\"{name}\"] "
                                  f"(known: {', '.join(_MODEL_KEYS)})")
            try:
                _MODEL_KEYS[key](value)
            except ValueError as exc:
                raise PolicyError(f"{path}:{lines.find(section, key)}: {key} {exc}") from None
        try:
            pattern = re.compile(spec.get("match", re.escape(name)), re.I)
        except re.error as exc:
            raise PolicyError(f"{path}:{lines.find(section, 'match')}: match is not a valid regular expression: {exc}") from None
        extra.append(model_from(name, pattern, {k: _MODEL_KEYS[k](v) for k, v in spec.items()}, f"policy {path}"))
    policy.models = tuple(extra)
    policy.requires = tuple(_requirements(data.get("requires", []), path, lines))
    policy.domains = tuple(_domains(data.get("domain", []), path, lines))
    return policy


def _bundle(table: Any, path: str, lines: _KeyLines) -> BundleSpec:
    from ..catalogs.bundle import parse_firmware_targets

    where = f"{path}:{lines.find(None, 'bundle')}"
    if not isinstance(table, dict):
        raise PolicyError(f"{where}: [bundle] must be a table")
    unknown = set(table) - {"driver", "kernel", "firmware"}
    if unknown:
        raise PolicyError(f"{where}: unknown key '{sorted(unknown)[0]}' in [bundle] (known: driver, kernel, firmware)")
    try:
        driver = _version(table["driver"]) if "driver" in table else None
        kernel = _str(table["kernel"]) if "kernel" in table else None
    except ValueError as exc:
        raise PolicyError(f"{where}: [bundle] {exc}") from None
    firmware = table.get("firmware", {})
    if not isinstance(firmware, dict):
        raise PolicyError(f"{where}: [bundle] firmware must be a table: COMPONENT = VERSION, or a table per GPU model")
    specs = []
    for key, value in firmware.items():
        if isinstance(value, dict):  # [bundle.firmware."NVIDIA H200"]
            specs += [f"{key}:{comp}={ver}" for comp, ver in value.items()]
        else:
            specs.append(f"{key}={value}")
    try:
        common, by_model = parse_firmware_targets(specs)
    except ValueError as exc:
        raise PolicyError(f"{where}: [bundle] {str(exc).replace('--target-firmware ', 'firmware ')}") from None
    if not (driver or kernel or common or by_model):
        raise PolicyError(f"{where}: [bundle] names nothing to roll out (driver, kernel or firmware)")
    return BundleSpec(driver, kernel, common, by_model)


def _rows(data: Any, name: str, path: str, lines: _KeyLines) -> list[dict[str, Any]]:
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise PolicyError(f"{path}:{lines.find(None, name)}: '{name}' must be an array of tables ([[{name}]])")
    return data


def _requirements(data: Any, path: str, lines: _KeyLines) -> list[Requirement]:
    out = []
    for i, row in enumerate(_rows(data, "requires", path, lines)):
        section = ("requires", i)
        driver = row.get("driver")
        if not isinstance(driver, str) or not re.fullmatch(r"\d+(\.\d+)*", driver.strip()):
            raise PolicyError(f"{path}:{lines.find(section, 'driver')}: [[requires]] #{i + 1} needs 'driver', "
                              "a branch or version prefix such as \"580\"")
        minimum = {}
        for key, value in row.items():
            if key == "driver":
                continue
            if not isinstance(value, str) or not value.strip() or not re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", key):
                raise PolicyError(f"{path}:{lines.find(section, key)}: [[requires]] {key} must be a firmware "
                                  f"component with its minimum version as a string (got {value!r})")
            minimum[key] = value.strip()
        if not minimum:
            raise PolicyError(f"{path}:{lines.header(section)}: [[requires]] #{i + 1} names no firmware "
                              "(e.g. vbios = \"96.00.74.00.01\")")
        out.append(Requirement(driver.strip(), minimum, f"{path}:{lines.header(section)}"))
    return out


def _domains(data: Any, path: str, lines: _KeyLines) -> list[DomainSpec]:
    out: list[DomainSpec] = []
    seen: dict[str, str] = {}
    for i, row in enumerate(_rows(data, "domain", path, lines)):
        section = ("domain", i)
        unknown = sorted(set(row) - {"name", "nodes"})
        if unknown:
            raise PolicyError(f"{path}:{lines.find(section, unknown[0])}: unknown key '{unknown[0]}' in "
                              "[[domain]] (known: name, nodes)")
        nodes = row.get("nodes")
        if not isinstance(nodes, str) or not nodes.strip():
            raise PolicyError(f"{path}:{lines.header(section)}: [[domain]] #{i + 1} needs 'nodes', a Slurm host list")
        members = tuple(_nodeset(nodes, f"{path}:{lines.find(section, 'nodes')}"))
        name = row.get("name", f"domain{i + 1}")
        if not isinstance(name, str) or not name.strip():
            raise PolicyError(f"{path}:{lines.find(section, 'name')}: [[domain]] name must be a string")
        for n in members:
            if n in seen:
                raise PolicyError(f"{path}:{lines.find(section, 'nodes')}: {n} is in [[domain]] {seen[n]} "
                                  f"and {name}: a node is in one domain")
            seen[n] = name
        out.append(DomainSpec(name, members))
    return out


def _site_section(data: dict[str, Any], name: str, validators: dict[str, Callable[[Any], Any]], path: str,
                  lines: _KeyLines) -> dict[str, Any]:
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise PolicyError(f"{path}:{lines.find(None, name)}: '{name}' must be a table")
    values = {}
    for key, value in table.items():
        validator = validators.get(key)
        if validator is None:
            raise PolicyError(f"{path}:{lines.find((name, None), key)}: unknown key '{key}' in [{name}] "
                              f"(known: {', '.join(validators)})")
        try:
            values[key] = validator(value)
        except ValueError as exc:
            raise PolicyError(f"{path}:{lines.find((name, None), key)}: {key} {exc} (got {value!r})") from None
    return values


def _settings(table: dict[str, Any], path: str, lines: _KeyLines, section: tuple[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        validator = VALIDATORS.get(key)
        if validator is None:
            close = [k for k in VALIDATORS if k.startswith(key[:4])]
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise PolicyError(f"{path}:{lines.find(section, key)}: unknown key '{key}'{hint}")
        try:
            out[key] = validator(value)
        except ValueError as exc:
            raise PolicyError(f"{path}:{lines.find(section, key)}: {key} {exc} (got {value!r})") from None
    return out


def slurm_conf_nodes(path: str) -> list[str] | None:
    """The nodes a slurm.conf defines (its NodeName= lines, host lists expanded; DEFAULT left out), or
    None where it cannot be read.  Included files are not followed."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    from ..common.hostlist import expand

    hosts: list[str] = []
    for m in re.finditer(r"^\s*NodeName=(\S+)", text, re.MULTILINE | re.IGNORECASE):
        if m.group(1).upper() == "DEFAULT":
            continue
        try:
            hosts += expand(m.group(1))
        except ValueError:
            continue
    return hosts


def slurm_conf_features(path: str, node: str) -> list[str] | None:
    """The features a slurm.conf gives `node` (its NodeName= line's Features=, or Feature=, else the last
    NodeName=DEFAULT's before it), or None where the file cannot be read or defines no such node.
    Included files are not followed."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(64 << 20)
    except OSError:
        return None
    from ..common.hostlist import expand

    default: list[str] = []
    for m in re.finditer(r"^[ \t]*NodeName=(\S+)(.*)$", text, re.MULTILINE | re.IGNORECASE):
        feats = re.search(r"\bFeatures?=(\S+)", m.group(2), re.IGNORECASE)
        given = [f for f in feats.group(1).split(",") if f] if feats else None
        if m.group(1).upper() == "DEFAULT":
            default = given if given is not None else default
            continue
        try:
            hosts = expand(m.group(1))
        except ValueError:
            continue
        if node in hosts:
            return given if given is not None else list(default)
    return None


def _nodeset(expr: str, where: str) -> Any:
    from ClusterShell.NodeSet import NodeSet, NodeSetException  # only when a config has groups

    from ..common.hostlist import MAX_HOSTS, size

    if size(expr) > MAX_HOSTS:
        raise PolicyError(f"{where}: nodes {expr[:80]!r} names {size(expr):,} hosts; at most {MAX_HOSTS:,}")
    try:
        return NodeSet(expr)
    except (NodeSetException, ValueError, AssertionError, MemoryError, OverflowError) as exc:
        # ClusterShell asserts on a range past its bound ("range too large")
        raise PolicyError(f"{where}: nodes is not a valid host list {expr[:80]!r}: {exc or type(exc).__name__}") \
            from None


class _KeyLines:
    """Maps (section, key) to its line number, since tomllib does not report positions."""

    _HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?")
    _KEY = re.compile(r"^\s*(\"[^\"]+\"|[A-Za-z0-9_\-]+)\s*=")

    def __init__(self, text: str):
        self.keys: dict[tuple[Any, str], int] = {}
        self.headers: dict[Any, int] = {}
        section: Any = None
        groups = -1
        rows: dict[str, int] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            h = self._HEADER.match(line)
            if h:
                name = h.group(2)
                if h.group(1) == "[[" and name == "group":
                    groups += 1
                    section = ("group", groups)
                elif h.group(1) == "[[" and name in ("requires", "domain"):
                    rows[name] = rows.get(name, -1) + 1
                    section = (name, rows[name])
                elif name.startswith("models."):
                    section = ("models", name[len("models."):].strip().strip('"'))
                else:
                    section = (name, 0) if name == "defaults" else (name, None)
                self.headers.setdefault(section, number)
                self.keys.setdefault((None, name.split(".")[0]), number)
                continue
            k = self._KEY.match(line)
            if k:
                self.keys.setdefault((section, k.group(1).strip('"')), number)

    def find(self, section: Any, key: str) -> int:
        return self.keys.get((section, key)) or self.headers.get(section) or 1

    def header(self, section: Any) -> int:
        return self.headers.get(section, 1)
