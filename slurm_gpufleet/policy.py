"""Health-check policy: safe defaults, a site file in TOML, per-node-group overrides.

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

import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .catalog import GpuModel

DEFAULT_PATH = "/etc/slurm-gpufleet/gpufleet.toml"
ENV_VAR = "SLURM_GPUFLEET_CONFIG"
SEVERITY_CHOICES = ("ok", "warn", "reboot", "drain")


class PolicyError(ValueError):
    """A config problem, already phrased as 'FILE:LINE: what is wrong'."""


@dataclass(frozen=True)
class NodePolicy:
    """Every setting a check may read, resolved for one node.  Defaults are safe for any node."""

    # inventory
    expected_gpus: int | None = None
    expected_model: str | None = None
    # driver and compatibility
    driver_version: str | None = None
    min_cuda: str | None = None
    require_cuda: list[str] = field(default_factory=list)
    eol_branch_severity: str = "ok"
    # driver branch types the group accepts ("LTSB", "PB", "NFB"; empty: any).  Production partitions
    # usually refuse New Feature Branches: ["LTSB", "PB"].  From data/compat.toml's branch table.
    allowed_branch_types: list[str] = field(default_factory=list)
    branch_type_severity: str = "warn"
    # a driver exposed to CVEs of NVIDIA's security bulletins (data/security.toml): a note by default;
    # critical ones (CVSS >= 9) may be set to warn or drain by a site
    cve_severity: str = "ok"
    cve_critical_severity: str = "ok"
    # a node off its group's pinned driver or firmware; warn by default so that changing the target
    # in the config before a rollout never drains the fleet
    driver_mismatch_severity: str = "warn"
    firmware_mismatch_severity: str = "warn"
    # firmware: allowed values; empty means "any"
    vbios: list[str] = field(default_factory=list)
    inforom_image: list[str] = field(default_factory=list)
    gsp_firmware: list[str] = field(default_factory=list)
    # memory
    require_ecc: bool = False
    sram_uncorrectable_max: int = 4
    dram_correctable_max: int = 10_000_000
    retired_pages_max: int = 60
    # xid
    xid_escalate_after_reboots: int = 2
    xid_ignore: list[int] = field(default_factory=list)
    # thermal / power / clocks
    temperature_margin_c: int = 5
    power_limit_tolerance_pct: float = 1.0
    clock_tolerance_pct: float = 1.0
    # pcie / nvlink
    pcie_min_width: int | None = None
    pcie_replay_max: int = 10_000
    pcie_replay_growth_max: int = 100
    nvlink_error_growth_max: int = 0
    # modes
    require_persistence: bool = False
    compute_mode: str | None = None
    mig_mode: bool | None = None
    # performance (`check --level deep`): memory bandwidth this far below the baseline is a warning
    perf_tolerance_pct: float = 10.0
    # processes
    expect_idle: bool = False
    idle_memory_mib: int = 100
    # groups that matched this node, for explanations
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class SlurmSettings:
    """How the health check, prolog and epilog act through Slurm ([slurm] in the config, site-wide)."""

    # clean health-check runs in a row before a node we drained is resumed
    clean_runs_to_resume: int = 3
    # reset-fixable faults get `scontrol reboot ASAP`; still there after this many reboots -> drain
    reboots_before_drain: int = 2
    # where the node's GPU summary goes: "extra", "comment" or "none"
    publish: str = "extra"
    # hard limit for reading GPU state (NVML, nvidia-smi files); well under Slurm's own limits
    read_timeout_s: float = 20.0
    # "commands" (scontrol/sinfo), "pyslurm", or "auto" (pyslurm when it imports and matches)
    backend: str = "auto"
    # slurmd gives HealthCheckProgram no PATH: absolute paths
    scontrol: str = "/usr/bin/scontrol"
    # per-node history (SQLite) and job windows live here
    state_dir: str = "/var/lib/slurm-gpufleet"
    # the kernel log to read Xids from: /dev/kmsg, a file, or a directory holding <node>.kmsg
    kernel_log: str | None = "/dev/kmsg"
    # where the node's /boot, /lib/modules and /etc are (the kernel check; looking before a reboot)
    host_root: str = "/"
    # `fleet stragglers`: judged per GPU model against at least this many peers, robust z and drop
    straggler_min_peers: int = 8
    straggler_z: float = 4.0
    straggler_min_drop_pct: float = 5.0
    # opt-in: `fleet stragglers --drain` may drain the slow nodes (never nodes held by someone else)
    drain_stragglers: bool = False
    # fleet-wide drain circuit breaker: a drain that would make more than this many nodes (or this share
    # of the fleet or of a partition) drained by our health check within the window opens it instead
    breaker_threshold: int | str = "10%"
    breaker_window_s: float = 300.0
    # where an open breaker is recorded (default <state_dir>/breaker.json; shared storage: one reset)
    breaker_file: str | None = None
    # driver and CUDA as node features (gpufleet_drv580, gpufleet_drv580.159.04, gpufleet_cuda13.0), so
    # jobs can --constraint during a rollout; "" turns it off.  Features without the prefix are never touched
    feature_prefix: str = "gpufleet_"

    @property
    def breaker_path(self) -> str:
        import os

        return self.breaker_file or os.path.join(self.state_dir, "breaker.json")


@dataclass(frozen=True)
class MaintainSettings:
    """Staged driver rollouts ([maintain] in the config, site-wide)."""

    # canary nodes per distinct (GPU model, firmware set) combination
    canary_per_combo: int = 1
    # wave sizes after the canary: nodes, or "N%" of the nodes in the rollout; the last one repeats
    waves: tuple[int | str, ...] = (1, "2%", "10%", "25%", "100%")
    # at most this many nodes out of service at once: nodes, or "N%" of the rollout
    max_unavailable: int | str = "25%"
    # and at most this share of each partition
    max_unavailable_per_partition: str = "25%"
    # nodes in these partitions / with these features go first; critical ones last
    less_critical_partitions: tuple[str, ...] = ()
    less_critical_features: tuple[str, ...] = ()
    critical_partitions: tuple[str, ...] = ()
    # estimate for the plan's timeline: upgrade + return + validation of one wave
    upgrade_minutes: int = 20
    # failed nodes tolerated before the rollout halts; then roll back automatically?
    max_failures: int = 0
    auto_rollback: bool = False
    # upgrade a node someone else drained/downed while it sits empty?  (it is given back as it was)
    upgrade_held_nodes: bool = False
    # the site's upgrade command, a jinja2 template; every substituted value is shell-quoted
    upgrade_template: str = "/etc/slurm-gpufleet/upgrade.sh.j2"
    upgrade_timeout_s: int = 1800
    # upgrade commands run at once, each with its own timeout (0: as many as the budget lets out)
    max_parallel_upgrades: int = 0
    # Slurm writes per step of the engine, most urgent first (0: no limit); what is left waits a step
    max_slurm_writes_per_step: int = 2
    return_timeout_s: int = 900
    validate_timeout_s: int = 600
    # optional: a batch job run on each upgraded node before it is released (for example the deep
    # performance check).  The node leaves the drain but stays in its maintenance reservation, so only
    # this job can start there; it must exit 0.  A shell command line, run by sbatch --wrap.
    validation_job: str = ""
    validation_job_timeout_s: int = 1800
    # how long to wait between looks at Slurm while a rollout runs
    poll_s: float = 5.0
    # Slurm unreachable this long (slurmctld restarting, failing over) ends `apply`; `resume` continues
    slurm_outage_s: float = 600.0
    # the rollout's state (SQLite, created 0600)
    db: str = "/var/lib/slurm-gpufleet/maintain.db"


def _int(min_value: int = 0) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int) or v < min_value:
            raise ValueError(f"must be an integer >= {min_value}")
        return v
    return check


def _number(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
        raise ValueError("must be a number >= 0")
    return float(v)


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

VALIDATORS: dict[str, Callable[[Any], Any]] = {
    "expected_gpus": _int(0),
    "expected_model": _str,
    "driver_version": _version,
    "min_cuda": _version,
    "require_cuda": _version_list,
    "eol_branch_severity": _choice(*SEVERITY_CHOICES),
    "allowed_branch_types": _branch_types,
    "branch_type_severity": _choice(*SEVERITY_CHOICES),
    "cve_severity": _choice(*SEVERITY_CHOICES),
    "cve_critical_severity": _choice(*SEVERITY_CHOICES),
    "driver_mismatch_severity": _choice(*SEVERITY_CHOICES),
    "firmware_mismatch_severity": _choice(*SEVERITY_CHOICES),
    "vbios": _str_list,
    "inforom_image": _str_list,
    "gsp_firmware": _str_list,
    "require_ecc": _bool,
    "sram_uncorrectable_max": _int(0),
    "dram_correctable_max": _int(0),
    "retired_pages_max": _int(1),
    "xid_escalate_after_reboots": _int(0),
    "xid_ignore": _int_list,
    "temperature_margin_c": _int(0),
    "power_limit_tolerance_pct": _number,
    "clock_tolerance_pct": _number,
    "pcie_min_width": _int(1),
    "pcie_replay_max": _int(0),
    "pcie_replay_growth_max": _int(0),
    "nvlink_error_growth_max": _int(0),
    "require_persistence": _bool,
    "compute_mode": _choice(*_COMPUTE_MODES),
    "mig_mode": _bool,
    "perf_tolerance_pct": _number,
    "expect_idle": _bool,
    "idle_memory_mib": _int(0),
}
assert set(VALIDATORS) == {f.name for f in fields(NodePolicy)} - {"groups"}

_MODEL_KEYS = {"match": _str, "architecture": _str, "max_sm_mhz": _int(1), "mem_bw_gbps": _number}


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


def _pct(v: Any) -> Any:
    v = _count_or_pct(v)
    if not isinstance(v, str):
        raise ValueError('must be a percentage like "25%"')
    return v


def _waves(v: Any) -> Any:
    if not isinstance(v, list) or not v:
        raise ValueError('must be a non-empty list like [1, "2%", "10%", "25%", "100%"]')
    return tuple(_count_or_pct(x) for x in v)


def _tuple_of_str(v: Any) -> Any:
    return tuple(_str_list(v))


MAINTAIN_VALIDATORS: dict[str, Callable[[Any], Any]] = {
    "canary_per_combo": _int(0),
    "waves": _waves,
    "max_unavailable": _count_or_pct,
    "max_unavailable_per_partition": _pct,
    "less_critical_partitions": _tuple_of_str,
    "less_critical_features": _tuple_of_str,
    "critical_partitions": _tuple_of_str,
    "upgrade_minutes": _int(1),
    "max_failures": _int(0),
    "auto_rollback": _bool,
    "upgrade_held_nodes": _bool,
    "upgrade_template": _abs_path,
    "upgrade_timeout_s": _int(1),
    "max_parallel_upgrades": _int(0),
    "max_slurm_writes_per_step": _int(0),
    "return_timeout_s": _int(1),
    "validate_timeout_s": _int(1),
    "validation_job": lambda v: v.strip() if isinstance(v, str) else _str(v),
    "validation_job_timeout_s": _int(60),
    "poll_s": _number,
    "slurm_outage_s": _number,
    "db": _abs_path,
}
assert set(MAINTAIN_VALIDATORS) == {f.name for f in fields(MaintainSettings)}


SLURM_VALIDATORS: dict[str, Callable[[Any], Any]] = {
    "clean_runs_to_resume": _int(1),
    "reboots_before_drain": _int(0),
    "publish": _choice("extra", "comment", "none"),
    "read_timeout_s": _timeout,
    "backend": _choice("auto", "commands", "pyslurm"),
    "scontrol": _abs_path,
    "state_dir": _abs_path,
    "kernel_log": _abs_path,
    "host_root": _abs_path,
    "straggler_min_peers": _int(2),
    "straggler_z": _number,
    "straggler_min_drop_pct": _number,
    "drain_stragglers": _bool,
    "breaker_threshold": _count_or_pct,
    "breaker_window_s": _number,
    "breaker_file": _abs_path,
    "feature_prefix": _str,
}
assert set(SLURM_VALIDATORS) == {f.name for f in fields(SlurmSettings)}


@dataclass
class _Group:
    name: str
    nodes: str
    nodeset: Any
    settings: dict[str, Any]


@dataclass
class Policy:
    path: str | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    groups: list[_Group] = field(default_factory=list)
    models: tuple[GpuModel, ...] = ()
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    maintain: MaintainSettings = field(default_factory=MaintainSettings)

    def for_node(self, host: str | None) -> NodePolicy:
        resolved = replace(NodePolicy(), **self.defaults)
        matched: list[str] = []
        for group in self.groups:
            if host and host in group.nodeset:
                resolved = replace(resolved, **group.settings)
                matched.append(group.name)
        return replace(resolved, groups=tuple(matched))


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


def load_policy(path: str | None) -> Policy:
    if path is None:
        return default_policy()
    try:
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
        where = f"{path}:{line.group(1)}" if line else path
        raise PolicyError(f"{where}: invalid TOML: {str(exc).split(' (at')[0]}") from None
    lines = _KeyLines(text)
    policy = Policy(path=path)
    for key in data:
        if key not in ("defaults", "group", "models", "slurm", "maintain"):
            raise PolicyError(f"{path}:{lines.find(None, key)}: unknown section or key '{key}' "
                              "(expected [defaults], [[group]], [models.\"NAME\"], [slurm] or [maintain])")
    policy.slurm = SlurmSettings(**_site_section(data, "slurm", SLURM_VALIDATORS, path, lines))
    policy.maintain = MaintainSettings(**_site_section(data, "maintain", MAINTAIN_VALIDATORS, path, lines))
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise PolicyError(f"{path}:{lines.find(None, 'defaults')}: 'defaults' must be a table")
    policy.defaults = _settings(defaults, path, lines, ("defaults", 0))
    groups = data.get("group", [])
    if not isinstance(groups, list):
        raise PolicyError(f"{path}:{lines.find(None, 'group')}: 'group' must be an array of tables ([[group]])")
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
        extra.append(GpuModel(name, pattern, spec.get("architecture"), spec.get("max_sm_mhz"), f"policy {path}",
                              spec.get("mem_bw_gbps")))
    policy.models = tuple(extra)
    return policy


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


def _nodeset(expr: str, where: str) -> Any:
    from ClusterShell.NodeSet import NodeSet, NodeSetException  # only when a config has groups

    try:
        return NodeSet(expr)
    except (NodeSetException, ValueError) as exc:
        raise PolicyError(f"{where}: nodes is not a valid host list {expr!r}: {exc}") from None


class _KeyLines:
    """Maps (section, key) to its line number, since tomllib does not report positions."""

    _HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?")
    _KEY = re.compile(r"^\s*(\"[^\"]+\"|[A-Za-z0-9_\-]+)\s*=")

    def __init__(self, text: str):
        self.keys: dict[tuple[Any, str], int] = {}
        self.headers: dict[Any, int] = {}
        section: Any = None
        groups = -1
        for number, line in enumerate(text.splitlines(), start=1):
            h = self._HEADER.match(line)
            if h:
                name = h.group(2)
                if h.group(1) == "[[" and name == "group":
                    groups += 1
                    section = ("group", groups)
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
