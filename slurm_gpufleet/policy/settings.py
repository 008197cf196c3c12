"""The settings themselves: a node group's checks (NodePolicy), `[slurm]` (SlurmSettings), `[maintain]`
(MaintainSettings), the groups, requirements, domains and bundles, and the Policy that holds them all."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..catalogs import GpuModel
from .slurm_conf import slurm_conf_nodes
from .values import (
    _COMPUTE_MODES,
    DEFAULT_PATH,
    ENV_VAR,
    SEVERITY_CHOICES,
    _abs_path,
    _between,
    _bool,
    _branch_types,
    _choice,
    _count_or_pct,
    _dcgm_level,
    _int,
    _int_list,
    _number,
    _pct,
    _positive,
    _signals,
    _str,
    _str_list,
    _timeout,
    _tuple_of_str,
    _version,
    _version_list,
    _waves,
    checks_of,
    setting,
)


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


