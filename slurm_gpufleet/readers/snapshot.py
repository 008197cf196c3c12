"""A node's GPU state at one moment, as plain dataclasses.

Every reader (live NVML, nvidia-smi XML or text, our own JSON) fills the same shape, so checks never
know where the data came from.  Three kinds of "no number" are kept apart, because they mean different
things to a health check:

* ``None``        -- the source did not report the field at all (older driver, trimmed report);
* ``UNSUPPORTED`` -- the device answered "not supported" / "N/A" (e.g. retired pages on Hopper);
* a real value    -- including a real 0.

An unsupported counter is never recorded as 0: a check that reads 0 would call a device healthy that
never told us anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .codec import UNSUPPORTED, Bool, Float, Int, Str, _decode, _encode, _Unsupported, known  # noqa: F401  (as callers name them)

SCHEMA_VERSION = 1



@dataclass
class InfoRom:
    """The InfoROM's image and object versions, and whether it is valid."""

    image: Str = None
    oem: Str = None
    ecc: Str = None
    power: Str = None
    # nvmlDeviceValidateInforom / the "infoROM is corrupted" warning; only read at level "full" on NVML
    valid: Bool = None
    checksum: Int = None


@dataclass
class Temperatures:
    """GPU and memory temperatures and the GPU's slowdown, shutdown and operating limits, in C."""

    gpu_c: Int = None
    memory_c: Int = None
    slowdown_c: Int = None
    shutdown_c: Int = None
    gpu_max_operating_c: Int = None
    memory_max_operating_c: Int = None
    fan_error: Bool = None


@dataclass
class Power:
    """Power draw and limits, in W."""

    draw_w: Float = None
    limit_w: Float = None
    default_limit_w: Float = None
    enforced_limit_w: Float = None
    min_limit_w: Float = None
    max_limit_w: Float = None


@dataclass
class Clocks:
    """Current, maximum and application clocks, in MHz."""

    graphics_mhz: Int = None
    sm_mhz: Int = None
    memory_mhz: Int = None
    max_graphics_mhz: Int = None
    max_sm_mhz: Int = None
    max_memory_mhz: Int = None
    app_graphics_mhz: Int = None
    app_memory_mhz: Int = None
    default_app_graphics_mhz: Int = None
    default_app_memory_mhz: Int = None


@dataclass
class Ecc:
    """ECC mode and error counts (volatile: since the driver loaded; aggregate: the GPU's life)."""

    mode_current: Bool = None
    mode_pending: Bool = None
    volatile_dram_corrected: Int = None
    volatile_dram_uncorrected: Int = None
    volatile_sram_corrected: Int = None
    volatile_sram_uncorrected: Int = None
    aggregate_dram_corrected: Int = None
    aggregate_dram_uncorrected: Int = None
    aggregate_sram_corrected: Int = None
    aggregate_sram_uncorrected: Int = None
    sram_threshold_exceeded: Bool = None


@dataclass
class RetiredPages:
    """Pages retired for ECC errors (before Ampere)."""

    single_bit: Int = None
    double_bit: Int = None
    pending: Bool = None


@dataclass
class RemappedRows:
    """Rows remapped for memory errors (Ampere on); pending means a reset applies them."""

    correctable: Int = None
    uncorrectable: Int = None
    pending: Bool = None
    failure: Bool = None
    # bank availability histogram: banks with max / high / partial / low / no spare rows left
    histogram: dict[str, int] | _Unsupported | None = None


@dataclass
class Pcie:
    """The PCIe link: its generation and width now and at most."""

    gen_current: Int = None
    gen_max: Int = None
    width_current: Int = None
    width_max: Int = None
    replay_counter: Int = None


@dataclass
class NvLink:
    """One NVLink link: up or not, and its speed."""

    link: int
    active: bool
    speed_gbps: Float = None
    # replay / recovery / crc counters, as the driver names them
    errors: dict[str, int] = field(default_factory=dict)


@dataclass
class Fabric:
    """A GPU's NVLink fabric registration and health (NVML nvmlDeviceGetGpuFabricInfoV, nvidia-smi's
    Fabric block).  Text values are normalised: state not_supported / not_started / in_progress /
    completed; status "success" or the failure NVML names; a value no reader understood is kept as
    "unknown:<what it said>" so the check can say so instead of guessing."""

    state: Str = None
    status: Str = None
    clique_id: Int = None
    cluster_uuid: Str = None
    health_mask: Int = None          # NVML's raw mask (0 = the driver reported no health at all)
    summary: Str = None              # healthy / unhealthy / limited_capacity
    # True / False where the driver reported the field (NVML mask or nvidia-smi's Health rows)
    degraded_bandwidth: Bool = None
    route_recovery: Bool = None
    route_unhealthy: Bool = None
    access_timeout_recovery: Bool = None
    incorrect_configuration: Str = None   # "none" or the cause: insufficient_nvlinks, incompatible_gpu_fw, ...
    partition_assigned: Bool = None       # the fabric placed the GPU in a partition (NVML mask, 2 bits at 12)
    gfm_connected: Bool = None            # the global fabric manager is connected (NVML mask, 2 bits at 14)
    # "field: value" for each value the reader got and no NVML or nvidia-smi release defines (a 2-bit
    # field of 3, a Health row that is neither Yes nor No): judged "unknown fabric value", never guessed
    unknown: list[str] = field(default_factory=list)
    # how the driver was asked: "v3", or "v1" where it refused the v3 struct (a version mismatch)
    read_as: Str = None


@dataclass
class Process:
    """A process holding a GPU."""

    pid: int
    name: str | None = None
    used_memory_mib: Int = None


@dataclass
class Gpu:
    """One GPU as NVML or nvidia-smi reports it."""

    # NVML / nvidia-smi index (PCI bus order), what CUDA_VISIBLE_DEVICES and SLURM_JOB_GPUS count
    index: int
    # /dev/nvidiaN, what Slurm's gres.conf File= names; not always equal to the index
    minor_number: Int = None
    uuid: Str = None
    serial: Str = None
    pci_bus_id: Str = None
    name: Str = None
    architecture: Str = None
    compute_capability: Str = None
    vbios: Str = None
    inforom: InfoRom = field(default_factory=InfoRom)
    gsp_firmware: Str = None
    memory_total_mib: Int = None
    memory_used_mib: Int = None
    temperature: Temperatures = field(default_factory=Temperatures)
    power: Power = field(default_factory=Power)
    clocks: Clocks = field(default_factory=Clocks)
    # names of the active clock-event (throttle) reasons, e.g. ["gpu_idle"]; see CLOCK_EVENT_REASONS
    clock_event_reasons: list[str] | _Unsupported | None = None
    performance_state: Str = None
    utilization_gpu_pct: Int = None
    ecc: Ecc = field(default_factory=Ecc)
    retired_pages: RetiredPages = field(default_factory=RetiredPages)
    remapped_rows: RemappedRows = field(default_factory=RemappedRows)
    pcie: Pcie = field(default_factory=Pcie)
    nvlinks: list[NvLink] | _Unsupported | None = None
    persistence_mode: Bool = None
    compute_mode: Str = None
    mig_mode_current: Bool = None
    mig_mode_pending: Bool = None
    processes: list[Process] | None = None
    fabric: Fabric = field(default_factory=Fabric)
    # none, gpu_reset, node_reboot, drain_p2p, drain_and_reset (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
    recovery_action: Str = None
    # set when the GPU answered nothing useful ("GPU is lost", NVML_ERROR_GPU_IS_LOST)
    lost: bool = False
    errors: list[str] = field(default_factory=list)
    # fields the GPU answered with "Unknown Error" (nvidia-smi) or NVML_ERROR_UNKNOWN: a GPU that answers
    # some calls but fails others in this way is in a bad state, unlike one that says "not supported"
    unknown_errors: list[str] = field(default_factory=list)
    # fields that read "[GPU requires reset]" (NVML_ERROR_RESET_REQUIRED): the GPU needs a reset
    requires_reset: list[str] = field(default_factory=list)
    # fault fields (error counters, pending and failed remaps) whose value was neither a count, a yes/no nor
    # a word nvidia-smi prints: "path = 'value'"; the GPU was judged in part
    unread: list[str] = field(default_factory=list)


@dataclass
class PerfSample:
    """One GPU's short performance measurement (`check --level deep`), with what the GPU did meanwhile."""

    gpu: int
    library: str | None = None
    mem_bw_gbps: float | None = None       # device-to-device copy, read + write bytes per second
    gemm_tflops: float | None = None       # bf16 matrix multiply
    h2d_gbps: float | None = None          # pinned host-to-device copy
    sm_clock_mhz: int | None = None        # seen during the measurement
    power_w: float | None = None
    temperature_c: int | None = None
    clock_event_reasons: list[str] = field(default_factory=list)
    duration_s: float | None = None
    error: str | None = None


@dataclass
class XidEvent:
    """One Xid (or fallen-off-the-bus) line of the kernel log."""

    line: int
    xid: int
    pci: str | None
    message: str = ""
    pid: int | None = None
    process: str | None = None
    # seconds since boot (dmesg) or an ISO time, whichever the log carried
    timestamp: str | None = None
    boot: int = 0
    raw: str = ""
    # NVLink5 Xids (144-150) say "Fatal" or "Nonfatal"; None where the line does not
    fatal: bool | None = None
    # NVLink5 Xids: the sub-code from the first register ("149.37" names Xid 149, sub-code 37)
    subcode: int | None = None
    # NVLink5 Xids: the unit the line names first (NETIR_LINK_EVT, RLW_REMAP, ...)
    unit: str | None = None
    # NVLink5 Xids: the line's first register (intrinfo) and second (the error status), which NVIDIA's
    # decode sheet reads with the unit (catalog.nvlink5_action)
    intrinfo: int | None = None
    error_status: int | None = None
    # "... caused by previous Xid N": this line repeats an event already counted
    caused_by: int | None = None
    # the line is an Xid header the parser could read only in part (cut, or a form it does not know)
    partial: bool = False
    # a GPU reset of this GPU was logged after it in the same boot (RESET_MARK): the reset answered it
    cleared: bool = False


@dataclass
class SXidEvent:
    """One NVSwitch SXid of the kernel log (`nvidia-nvswitchN: SXid (PCI:...): CODE, Fatal|Non-fatal, ...`):
    the switch's own fault on an HGX board.  Its `Severity ...` and `Data {...}` continuation lines are
    folded into it."""

    line: int
    sxid: int
    switch: int | None
    pci: str | None
    # the line says "Fatal" or "Non-fatal"; None where it says neither (the catalog's category decides)
    fatal: bool | None = None
    message: str = ""
    link: int | None = None
    timestamp: str | None = None
    boot: int = 0
    raw: str = ""


@dataclass
class KernelModule:
    """The NVIDIA kernel module installed for one kernel, as its .modinfo and signature say."""

    path: str
    version: str | None = None
    flavour: str | None = None     # "open" (Dual MIT/GPL) or "proprietary" (NVIDIA)
    source: str | None = None      # "dkms" or "precompiled"
    signed: bool | None = None
    signer: str | None = None      # the signing key's name (CN), as modinfo's "signer:" shows it
    vermagic: str | None = None    # the kernel it was built for, first word ("6.1.0-50-amd64 SMP ...")


@dataclass
class KernelFacts:
    """One kernel (the running one, or the next boot's) and the NVIDIA module it would load."""

    release: str
    module: KernelModule | None = None
    note: str | None = None        # e.g. a DKMS build that left no module


@dataclass
class FabricManager:
    """The nvidia-fabricmanager service as systemd shows it (readers/host.py)."""

    installed: bool = False
    active: str | None = None          # systemd ActiveState: active, inactive, failed, activating, ...
    restarts: int | None = None        # NRestarts since the unit was loaded
    active_since_s: float | None = None  # seconds the service has been in its current state
    # from the probes of earlier runs (readers/host.remember_fabric_manager), where a caller keeps them:
    # failed probes in a row (this one counted), and restarts within the flapping window
    failed_probes: int | None = None
    restarts_in_window: int | None = None


@dataclass
class HostFacts:
    """What decides whether a reboot brings the GPUs back: the kernel that boots next and its module."""

    running: KernelFacts | None = None
    next_boot: KernelFacts | None = None
    next_boot_from: str | None = None   # "grubenv", "/etc/default/grub", "newest in /boot", "running"
    secure_boot: bool | None = None
    auto_updates: list[str] = field(default_factory=list)   # "unattended-upgrades", "dnf-automatic"
    # GB200/GH200 coherent memory: the loaded driver's NVreg_CoherentGPUMemoryMode ("driver" = CDMM, "numa",
    # "default" when unset); None where the driver does not report the parameter
    cdmm: str | None = None
    # names (CN) of the keys the running kernel trusts for modules (/proc/keys); None where unreadable
    trusted_keys: list[str] | None = None
    # nvidia-fabricmanager on the node (HGX boards with NVSwitch): None where not read
    fabric_manager: FabricManager | None = None
    root: str = "/"
    # what was there but did not read as given (a kernel release no kernel has): said, never judged
    unread: list[str] = field(default_factory=list)


@dataclass
class NicEvent:
    """A kernel-log line of the mlx5 driver that means an InfiniBand or RoCE card or its link failed
    (data/mlx5_events.toml)."""

    line: int
    name: str                        # the event's name in the data file: health_compromised, module_error, ...
    pci: str | None = None
    what: str = ""                   # the line's own detail (High Temperature, 27W)
    boot: int = 0
    raw: str = ""


@dataclass
class IbPort:
    """One InfiniBand or RoCE port as sysfs shows it (readers/ib.py)."""

    device: str = ""
    port: int = 0
    state: str = ""                  # ACTIVE, DOWN, INIT, ARMED
    state_code: int | None = None    # 4: ACTIVE
    phys_state: str = ""             # LinkUp, Polling, Disabled
    phys_code: int | None = None     # 5: LinkUp
    rate: str = ""                   # "400 Gb/sec (4X NDR)"
    rate_gbps: float | None = None
    link_layer: str = ""             # InfiniBand, Ethernet
    counters: dict[str, int] = field(default_factory=dict)   # error counters since the driver loaded
    grew: dict[str, int] = field(default_factory=dict)       # what grew since the previous run
    since_s: float | None = None     # how long ago that run was (None: no previous run kept)


@dataclass
class SlurmView:
    """The node as slurmctld registered it, read by the health check with the node's state: what must hold
    before a node that was held goes back into service (checks/slurm_view.py)."""

    state: str = ""                  # IDLE, DOWN, ...
    flags: list[str] = field(default_factory=list)   # DRAIN, NOT_RESPONDING, INVALID_REG, ...
    gres: str = ""                   # as Slurm shows it: gpu:h200:8(S:0-1)
    gpus: int | None = None          # the GPUs in it, every type summed (MIG instances as Slurm counts them);
                                     # None: its Gres names no GPU (GPUs not scheduled as GRES)
    held: bool = False               # out of service (drained, down, rebooting): its return is what is judged
    version: str | None = None       # the slurmd that registered it
    features: list[str] = field(default_factory=list)   # AvailableFeatures as registered
    # read only when a held node would return (hooks/healthcheck.py): the slurmd version most of its node
    # group's nodes in service run, and the features slurm.conf gives it; None: not read, never judged
    peers_version: str | None = None
    configured_features: list[str] | None = None

    @property
    def gpu_types(self) -> list[str]:
        """The GPU types its Gres names ("gpu:h200:4(S:0),gpu:1g.18gb:2" -> ["h200", "1g.18gb"])."""
        import re

        return [m.group(1) for m in re.finditer(r"(?:^|,)gpu:([^:,()]+):\d+", self.gres or "")]


@dataclass
class DcgmResult:
    """One test's result for one entity in DCGM's diagnostic (readers/dcgm.py)."""

    category: str = ""               # Deployment, Integration, Hardware, Stress, ...
    test: str = ""                   # software, pcie, memory, diagnostic, targeted_power, ...
    gpu: int | None = None           # the GPU it judged; None for another entity (a CPU, a switch)
    status: str = "skip"             # pass | fail | warn | skip
    severity: int | None = None      # the worst dcgmErrorSeverity_t among its errors; None: DCGM gave none
    errors: list[str] = field(default_factory=list)   # DCGM's words for what it found
    entity: str = "GPU"              # DCGM's entity group


@dataclass
class DcgmDiag:
    """DCGM's diagnostic of the node (`dcgmi diag -r N -j`), run at the deep level where configured."""

    results: list[DcgmResult] = field(default_factory=list)
    error: str | None = None         # DCGM could not judge the GPUs (a broken dependency): why, in one line
    version: str | None = None
    level: int | None = None
    # the GPUs the run judged (4.x lists its entities; before, the GPUs its results name); None: not known
    covered: list[int] | None = None


@dataclass
class IbState:
    """The node's InfiniBand devices and ports, read from `root`."""

    root: str = "/sys/class/infiniband"
    present: bool = True             # False: no such directory (no HCA, or no driver)
    devices: list[str] = field(default_factory=list)
    ports: list[IbPort] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)


@dataclass
class NodeSnapshot:
    """Everything the checks judge on one node: its GPUs, driver, kernel log and host facts."""

    host: str | None = None
    kernel_release: str | None = None
    driver_version: Str = None
    kernel_module_version: Str = None
    nvml_version: Str = None
    cuda_driver_version: Str = None
    attached_gpus: int | None = None
    gpus: list[Gpu] = field(default_factory=list)
    source: str = "unknown"
    timestamp: str | None = None
    # node-level failures the source reported, as stable codes: see NODE_ERRORS
    errors: list[str] = field(default_factory=list)
    error_text: str | None = None
    # "full" or "quick" (NVML level), "partial" for a report trimmed by its author
    level: str = "quick"
    partial: bool = False
    xid_events: list[XidEvent] = field(default_factory=list)
    # boots seen in the kernel log that supplied xid_events (journalctl/syslog can span several)
    boots_seen: int = 0
    # `check --level deep` only: per-GPU performance measurements
    performance: list[PerfSample] = field(default_factory=list)
    # the host's kernels and NVIDIA modules (readers/host.py), when read
    host_facts: HostFacts | None = None
    # what could not be read for a node's own health check (a kernel log, the host): said in its log
    unread: list[str] = field(default_factory=list)
    # seconds since the node booted, where the reader knows (live reads); grace periods after boot use it
    uptime_s: Float = None
    # NVSwitch SXids from the same kernel log
    sxid_events: list[SXidEvent] = field(default_factory=list)
    # lines of that log that mention an Xid or SXid and could not be read as one: "line N: why: text"
    # (counted in one note, never dropped silently)
    xid_unparsed: list[str] = field(default_factory=list)
    # values of the input that could not be taken as they are (a null where an object belongs, a number
    # out of range): "where: what", each judged as a finding naming it, the rest of the input still read
    input_notes: list[str] = field(default_factory=list)
    # InfiniBand and RoCE ports (readers/ib.py), when read
    ib: IbState | None = None
    # what slurmctld shows of the node, where the health check read it (never on a quiet run)
    slurm: SlurmView | None = None
    # mlx5 driver lines of the same kernel log (cards and links that failed)
    nic_events: list[NicEvent] = field(default_factory=list)
    # the GPUs' lifetime counters when the node was last repaired (kept on the node: hooks/common.py), by
    # checks/memory.counter_key: only what rose since counts again
    repaired_counters: dict[str, dict[str, int]] = field(default_factory=dict)
    # DCGM's diagnostic, at the deep level where `[slurm] dcgm_diag_level` asks for it
    dcgm: DcgmDiag | None = None

    def gpu_by_pci(self, pci: str | None) -> Gpu | None:
        if not pci:
            return None
        want = normalize_pci(pci)
        for gpu in self.gpus:
            if isinstance(gpu.pci_bus_id, str) and normalize_pci(gpu.pci_bus_id) == want:
                return gpu
        return None

    def has_gpu_state(self) -> bool:
        """True when the source said anything at all about the node's GPUs (even "no devices")."""
        return bool(self.gpus or self.errors)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA_VERSION, **_encode(self)}

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeSnapshot:
        if not isinstance(data, dict):
            raise ValueError("snapshot JSON must be an object")
        schema = data.get("schema", SCHEMA_VERSION)
        if schema != SCHEMA_VERSION:
            raise ValueError(f"snapshot schema {schema!r} is not {SCHEMA_VERSION}")
        body = {k: v for k, v in data.items() if k != "schema"}
        notes: list[str] = []
        snap = _decode(cls, body, "snapshot", notes)
        snap.input_notes.extend(notes)
        return snap


# Node-level error codes a reader may report, with the text admins see in nvidia-smi.
NODE_ERRORS = {
    "driver_library_mismatch": "Failed to initialize NVML: Driver/library version mismatch",
    "no_devices": "No devices were found",
    "driver_not_loaded": "couldn't communicate with the NVIDIA driver",
    "library_missing": "NVML shared library not found",
    "nvml_error": "NVML failed to initialise",
}

# NVML clock-event reason bits (nvml.h nvmlClocksEventReason*), in the names nvidia-smi's XML uses.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks_setting",
}


def clock_reasons_from_mask(mask: int) -> list[str]:
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]


def normalize_pci(pci: str) -> str:
    """'00000000:3B:00.0', '0000:3b:00' and '3B:00.0' all become '0000:3b:00' (domain:bus:device)."""
    text = pci.strip().lower()
    if text.startswith("pci:"):
        text = text[4:]
    text = text.split(".")[0]
    parts = text.split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3:
        return text
    domain, bus, dev = parts
    try:
        return f"{int(domain, 16) & 0xFFFF:04x}:{int(bus, 16):02x}:{int(dev, 16):02x}"
    except ValueError:
        return text


