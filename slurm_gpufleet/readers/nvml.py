"""Live GPU state through NVML (pynvml from nvidia-ml-py).

Every call is guarded: NotSupported becomes UNSUPPORTED, GPU-is-lost marks the GPU lost and stops
querying it, a driver/library mismatch or a missing library becomes a node error.  The module object
is injected (`nvml=`), so a recorded NVML session can be replayed through exactly this code.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .snapshot import UNSUPPORTED, Fabric, Gpu, NodeSnapshot, NvLink, Process, clock_reasons_from_mask

# nvmlDeviceGetArchitecture -> name (nvml.h nvmlDeviceArchitecture_t)
ARCHITECTURES = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere",
                 8: "Ada Lovelace", 9: "Hopper", 10: "Blackwell", 13: "Rubin"}
COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
RECOVERY_ACTIONS = {0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p", 4: "drain_and_reset",
                    5: "recover_imex_domain", 6: "bus_reset", 7: "system_reboot"}
# nvmlGpuFabricState_t, and the 2-bit fields of the fabric health mask (NVML_GPU_FABRIC_HEALTH_MASK_*:
# 0 not supported, 1 true, 2 false) with their shifts; the configuration field is 4 bits at shift 8
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
FABRIC_HEALTH_BITS = {"degraded_bandwidth": 0, "route_recovery": 2, "route_unhealthy": 4,
                      "access_timeout_recovery": 6, "partition_assigned": 12}
# the GFM state field (2 bits at 14): 1 connected, 2 disconnected
FABRIC_GFM_SHIFT = 14
FABRIC_CONFIGURATION = {1: "none", 2: "incorrect_system_guid", 3: "incorrect_chassis_serial",
                        4: "no_partition", 5: "insufficient_nvlinks", 6: "incompatible_gpu_fw",
                        7: "invalid_location", 8: "gpu_state_invalid"}
FABRIC_SUMMARY = {1: "healthy", 2: "unhealthy", 3: "limited_capacity"}
# NVML return codes a fabric registration's status may carry (nvml.h), for the finding's words
FABRIC_STATUS = {0: "success", 2: "invalid_argument", 3: "not_supported", 6: "not_found", 10: "timeout",
                 17: "operating_system", 20: "memory", 23: "insufficient_resources", 27: "not_ready",
                 29: "invalid_state", 999: "unknown_error"}
# NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON: the speed every active link of the GPU runs at
NVLINK_SPEED_COMMON_FIELD = 90
# error counters per NVLink (nvmlNvLinkErrorCounter_t)
NVLINK_ERRORS = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data"}

# Codes from nvml.h; kept here so that reading a snapshot never needs pynvml itself.
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_GPU_IS_LOST = 15
_RESET_REQUIRED = 16
_LIB_RM_VERSION_MISMATCH = 18
_FUNCTION_NOT_FOUND = 13
_VERSION_MISMATCH = 25     # NVML_ERROR_ARGUMENT_VERSION_MISMATCH: a struct version the driver does not know
_UNKNOWN = 999


class _Lost(Exception):
    pass


def _code(exc: BaseException) -> int | None:
    return getattr(exc, "value", None)


class NvmlReader:
    """Reads a NodeSnapshot from NVML. `level` "quick" skips the slow InfoROM calls (~70 ms each)."""

    def __init__(self, nvml: Any | None = None, level: str = "quick", module_version_path: str | None = None):
        self.unknown: list[str] = []  # calls of the GPU being read that failed with NVML_ERROR_UNKNOWN
        self.reset_required: list[str] = []  # calls that failed with NVML_ERROR_RESET_REQUIRED
        self._nvml = nvml
        self.level = level
        self.module_version_path = module_version_path

    def _lib(self) -> Any:
        if self._nvml is None:
            import pynvml  # deferred: the only import that touches libnvidia-ml

            self._nvml = pynvml
        return self._nvml

    def read(self) -> NodeSnapshot:
        snap = NodeSnapshot(source="nvml", level=self.level)
        uname = os.uname()
        snap.host = uname.nodename  # gethostname's answer, without importing socket
        snap.kernel_release = uname.release
        snap.kernel_module_version = read_kernel_module_version(self.module_version_path)
        snap.uptime_s = read_uptime()
        try:
            n = self._lib()
        except ImportError:
            snap.errors.append("library_missing")
            snap.error_text = "pynvml (nvidia-ml-py) is not installed"
            return snap
        try:
            n.nvmlInit()
        except Exception as exc:  # NVMLError, OSError from a missing libnvidia-ml.so
            code = _code(exc)
            snap.errors.append({
                _LIB_RM_VERSION_MISMATCH: "driver_library_mismatch",
                _DRIVER_NOT_LOADED: "driver_not_loaded",
                _LIBRARY_NOT_FOUND: "library_missing",
            }.get(code, "nvml_error"))
            snap.error_text = f"nvmlInit: {exc}"[:300]
            return snap
        try:
            snap.driver_version = self._call(n.nvmlSystemGetDriverVersion)
            snap.nvml_version = self._call(n.nvmlSystemGetNVMLVersion)
            cuda = self._call(getattr(n, "nvmlSystemGetCudaDriverVersion_v2", None) or n.nvmlSystemGetCudaDriverVersion)
            snap.cuda_driver_version = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else cuda
            count = self._call(n.nvmlDeviceGetCount)
            snap.attached_gpus = count if isinstance(count, int) else None
            if snap.attached_gpus == 0:
                snap.errors.append("no_devices")
                snap.error_text = "No devices were found"
            for index in range(snap.attached_gpus or 0):
                snap.gpus.append(self._gpu(n, index))
        finally:
            try:
                n.nvmlShutdown()
            except Exception:
                pass
        return snap

    # -- guarded calls -------------------------------------------------------------------------
    def _call(self, fn: Callable[..., Any] | None, *args: Any) -> Any:
        if fn is None:
            return None
        try:
            value = fn(*args)
        except Exception as exc:
            return self._failed(fn, exc)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        return value

    def _failed(self, fn: Callable[..., Any], exc: Exception) -> Any:
        """What a failed call says: the GPU is lost (raised), the field is not supported, or unknown."""
        code = _code(exc)
        if code == _GPU_IS_LOST:
            raise _Lost(str(exc)) from None
        if code in (_NOT_SUPPORTED, _FUNCTION_NOT_FOUND):
            return UNSUPPORTED
        if code == _UNKNOWN:
            self.unknown.append(getattr(fn, "__name__", "?"))
        if code == _RESET_REQUIRED:
            self.reset_required.append(getattr(fn, "__name__", "?"))
        return None

    def _gpu(self, n: Any, index: int) -> Gpu:
        g = Gpu(index=index)
        try:
            handle = n.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            g.lost = _code(exc) == _GPU_IS_LOST
            g.errors.append(f"nvmlDeviceGetHandleByIndex({index}): {exc}"[:200])
            return g
        self.unknown, self.reset_required = [], []
        try:
            self._fill(n, handle, g)
            g.unknown_errors = sorted(set(self.unknown))
            g.requires_reset = sorted(set(self.reset_required))
        except _Lost as exc:
            g.lost = True
            g.errors.append(f"GPU is lost: {exc}"[:200])
        return g

    def _fill(self, n: Any, h: Any, g: Gpu) -> None:
        self._identity(n, h, g)
        self._memory(n, h, g)
        self._thermal_power(n, h, g)
        self._clocks(n, h, g)
        self._ecc(n, h, g)
        self._pages_and_rows(n, h, g)
        self._links_and_modes(n, h, g)

    def _identity(self, n: Any, h: Any, g: Gpu) -> None:
        """Name, UUID, serial, PCI address, architecture, VBIOS, InfoROM and GSP firmware."""
        c = self._call
        g.name = c(n.nvmlDeviceGetName, h)
        g.minor_number = c(getattr(n, "nvmlDeviceGetMinorNumber", None), h)
        g.uuid = c(n.nvmlDeviceGetUUID, h)
        g.serial = c(n.nvmlDeviceGetSerial, h)
        pci = c(n.nvmlDeviceGetPciInfo, h)
        if pci is not None and pci is not UNSUPPORTED:
            bus = getattr(pci, "busId", None)
            g.pci_bus_id = bus.decode() if isinstance(bus, bytes) else bus
        arch = c(n.nvmlDeviceGetArchitecture, h)
        g.architecture = ARCHITECTURES.get(arch, f"arch-{arch}") if isinstance(arch, int) else arch
        cc = c(n.nvmlDeviceGetCudaComputeCapability, h)
        g.compute_capability = f"{cc[0]}.{cc[1]}" if isinstance(cc, tuple | list) else cc
        g.vbios = c(n.nvmlDeviceGetVbiosVersion, h)
        g.inforom.image = c(n.nvmlDeviceGetInforomImageVersion, h)
        g.inforom.oem = c(n.nvmlDeviceGetInforomVersion, h, 0)
        g.inforom.ecc = c(n.nvmlDeviceGetInforomVersion, h, 1)
        g.inforom.power = c(n.nvmlDeviceGetInforomVersion, h, 2)
        if self.level == "full":
            g.inforom.checksum = c(n.nvmlDeviceGetInforomConfigurationChecksum, h)
            try:
                n.nvmlDeviceValidateInforom(h)
                g.inforom.valid = True
            except Exception as exc:
                code = _code(exc)
                if code == _GPU_IS_LOST:
                    raise _Lost(str(exc)) from None
                g.inforom.valid = UNSUPPORTED if code == _NOT_SUPPORTED else (False if code is not None else None)
        gsp = c(getattr(n, "nvmlDeviceGetGspFirmwareVersion", None), h)
        g.gsp_firmware = gsp if gsp else (UNSUPPORTED if gsp == "" else gsp)

    def _memory(self, n: Any, h: Any, g: Gpu) -> None:
        """Total and used memory."""
        c = self._call
        # v2 reports driver-reserved memory apart, so "used" means what nvidia-smi calls used.  v1's
        # "used" includes that reserve (616 MiB on an idle H200, captures/h200-real): it cannot tell a
        # leak from the driver's own share, so it gives the total only.
        mem = None
        v2 = getattr(n, "nvmlMemory_v2", None)
        if v2 is not None:
            mem = c(n.nvmlDeviceGetMemoryInfo, h, v2)
            if mem is not None and mem is not UNSUPPORTED:
                g.memory_total_mib = int(mem.total) // (1 << 20)
                g.memory_used_mib = int(mem.used) // (1 << 20)
                mem = True
        if mem is None or mem is UNSUPPORTED:
            mem = c(n.nvmlDeviceGetMemoryInfo, h)
            if mem is not None and mem is not UNSUPPORTED:
                g.memory_total_mib = int(mem.total) // (1 << 20)

    def _thermal_power(self, n: Any, h: Any, g: Gpu) -> None:
        """Temperatures and their thresholds, the fan, power draw and limits."""
        c = self._call
        t = g.temperature
        t.gpu_c = c(n.nvmlDeviceGetTemperature, h, 0)
        t.shutdown_c = c(n.nvmlDeviceGetTemperatureThreshold, h, 0)
        t.slowdown_c = c(n.nvmlDeviceGetTemperatureThreshold, h, 1)
        t.memory_max_operating_c = c(n.nvmlDeviceGetTemperatureThreshold, h, 2)
        t.gpu_max_operating_c = c(n.nvmlDeviceGetTemperatureThreshold, h, 3)
        fan = c(n.nvmlDeviceGetFanSpeed, h)
        t.fan_error = UNSUPPORTED if fan is UNSUPPORTED else (False if isinstance(fan, int) else None)

        p = g.power
        p.draw_w = _mw(c(n.nvmlDeviceGetPowerUsage, h))
        p.limit_w = _mw(c(n.nvmlDeviceGetPowerManagementLimit, h))
        p.default_limit_w = _mw(c(n.nvmlDeviceGetPowerManagementDefaultLimit, h))
        p.enforced_limit_w = _mw(c(n.nvmlDeviceGetEnforcedPowerLimit, h))
        limits = c(n.nvmlDeviceGetPowerManagementLimitConstraints, h)
        if isinstance(limits, tuple | list):
            p.min_limit_w, p.max_limit_w = _mw(limits[0]), _mw(limits[1])

    def _clocks(self, n: Any, h: Any, g: Gpu) -> None:
        """Clocks now, their maxima and application clocks, why they are held back, P-state, utilisation."""
        c = self._call
        k = g.clocks  # NVML_CLOCK_GRAPHICS=0, SM=1, MEM=2
        k.graphics_mhz = c(n.nvmlDeviceGetClockInfo, h, 0)
        k.sm_mhz = c(n.nvmlDeviceGetClockInfo, h, 1)
        k.memory_mhz = c(n.nvmlDeviceGetClockInfo, h, 2)
        k.max_graphics_mhz = c(n.nvmlDeviceGetMaxClockInfo, h, 0)
        k.max_sm_mhz = c(n.nvmlDeviceGetMaxClockInfo, h, 1)
        k.max_memory_mhz = c(n.nvmlDeviceGetMaxClockInfo, h, 2)
        k.app_graphics_mhz = c(n.nvmlDeviceGetApplicationsClock, h, 0)
        k.app_memory_mhz = c(n.nvmlDeviceGetApplicationsClock, h, 2)
        k.default_app_graphics_mhz = c(n.nvmlDeviceGetDefaultApplicationsClock, h, 0)
        k.default_app_memory_mhz = c(n.nvmlDeviceGetDefaultApplicationsClock, h, 2)
        reasons_fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            n, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        mask = c(reasons_fn, h)
        g.clock_event_reasons = clock_reasons_from_mask(mask) if isinstance(mask, int) else mask
        ps = c(n.nvmlDeviceGetPerformanceState, h)
        g.performance_state = f"P{ps}" if isinstance(ps, int) else ps
        util = c(n.nvmlDeviceGetUtilizationRates, h)
        g.utilization_gpu_pct = getattr(util, "gpu", None) if util is not None and util is not UNSUPPORTED else util

    def _pages_and_rows(self, n: Any, h: Any, g: Gpu) -> None:
        """Retired pages and remapped rows (with the row remapper's histogram)."""
        c = self._call
        rp = g.retired_pages
        sbe = c(n.nvmlDeviceGetRetiredPages, h, 0)
        dbe = c(n.nvmlDeviceGetRetiredPages, h, 1)
        rp.single_bit = len(sbe) if isinstance(sbe, list | tuple) else sbe
        rp.double_bit = len(dbe) if isinstance(dbe, list | tuple) else dbe
        pending = c(n.nvmlDeviceGetRetiredPagesPendingStatus, h)
        rp.pending = bool(pending) if isinstance(pending, int) else pending

        rr = g.remapped_rows
        rows = c(n.nvmlDeviceGetRemappedRows, h)
        if isinstance(rows, tuple | list) and len(rows) == 4:
            rr.correctable, rr.uncorrectable = int(rows[0]), int(rows[1])
            rr.pending, rr.failure = bool(rows[2]), bool(rows[3])
        elif rows is UNSUPPORTED:
            rr.correctable = rr.uncorrectable = rr.pending = rr.failure = UNSUPPORTED
        hist = c(getattr(n, "nvmlDeviceGetRowRemapperHistogram", None), h)
        if hist is UNSUPPORTED:
            rr.histogram = UNSUPPORTED
        elif hist is not None:
            rr.histogram = {k2: int(_field(hist, k2)) for k2 in ("max", "high", "partial", "low", "none")}

    def _links_and_modes(self, n: Any, h: Any, g: Gpu) -> None:
        """PCIe and NVLink, persistence, compute and MIG modes, processes, recovery action, fabric."""
        c = self._call
        pc = g.pcie
        pc.gen_current = c(n.nvmlDeviceGetCurrPcieLinkGeneration, h)
        pc.gen_max = c(n.nvmlDeviceGetMaxPcieLinkGeneration, h)
        pc.width_current = c(n.nvmlDeviceGetCurrPcieLinkWidth, h)
        pc.width_max = c(n.nvmlDeviceGetMaxPcieLinkWidth, h)
        pc.replay_counter = c(n.nvmlDeviceGetPcieReplayCounter, h)

        g.nvlinks = self._nvlinks(n, h)

        pm = c(n.nvmlDeviceGetPersistenceMode, h)
        g.persistence_mode = bool(pm) if isinstance(pm, int) else pm
        cm = c(n.nvmlDeviceGetComputeMode, h)
        g.compute_mode = COMPUTE_MODES.get(cm, str(cm)) if isinstance(cm, int) else cm
        mig = c(n.nvmlDeviceGetMigMode, h)
        if isinstance(mig, tuple | list):
            g.mig_mode_current, g.mig_mode_pending = bool(mig[0]), bool(mig[1])
        else:
            g.mig_mode_current = g.mig_mode_pending = mig
        procs = c(n.nvmlDeviceGetComputeRunningProcesses, h)
        if isinstance(procs, list | tuple):
            g.processes = [
                Process(pid=int(_field(pr, "pid")),
                        used_memory_mib=_bytes_to_mib(_field(pr, "usedGpuMemory")))
                for pr in procs
            ]
        g.recovery_action = self._recovery_action(n, h)
        g.fabric = self._fabric(n, h)
        if isinstance(g.nvlinks, list) and g.nvlinks:
            speed = self._field_value(n, h, NVLINK_SPEED_COMMON_FIELD)
            if isinstance(speed, int) and speed > 0:
                for link in g.nvlinks:
                    if link.active:
                        link.speed_gbps = speed / 1000.0

    def _fabric(self, n: Any, h: Any) -> Fabric:
        """nvmlDeviceGetGpuFabricInfoV with the v3 struct (the pointer form NVML's C API takes), else
        the older nvmlDeviceGetGpuFabricInfo; NotSupported (no NVSwitch, a single GPU) is not a fault."""
        import ctypes

        fab = Fabric()
        v1 = getattr(n, "c_nvmlGpuFabricInfo_t", None), getattr(n, "nvmlDeviceGetGpuFabricInfo", None)
        struct = getattr(n, "c_nvmlGpuFabricInfo_v3_t", None)
        fn = getattr(n, "nvmlDeviceGetGpuFabricInfoV", None)
        read_as = "v3"
        if struct is None or fn is None:
            (struct, fn), read_as = v1, "v1"
        if struct is None or fn is None:
            return fab
        info = struct()
        try:
            answer = fn(h, ctypes.byref(info))
        except Exception as exc:
            if _code(exc) == _VERSION_MISMATCH and read_as == "v3" and None not in v1:
                # a driver older than the library: it refuses the v3 struct; v1 has state, status and clique
                (struct, fn), read_as = v1, "v1 (the driver refused v3: version mismatch)"
                info = struct()
                answer = self._call(fn, h, ctypes.byref(info))
            else:
                answer = self._failed(fn, exc)
        if answer is UNSUPPORTED:
            fab.state = UNSUPPORTED
            return fab
        if answer is None:  # the call failed: nothing is known, which is not a fault of the fabric
            return fab
        fab = decode_fabric(info)
        fab.read_as = read_as
        return fab

    def _field_value(self, n: Any, h: Any, field_id: int) -> Any:
        fn = getattr(n, "nvmlDeviceGetFieldValues", None)
        if fn is None:
            return None
        values = self._call(fn, h, [field_id])
        if not isinstance(values, list | tuple) or not values:
            return None
        fv = values[0]
        if getattr(fv, "nvmlReturn", 0) != 0:
            return None
        value = getattr(fv, "value", None)
        for name in ("uiVal", "ullVal", "ulVal", "sllVal", "siVal"):
            raw = getattr(value, name, None)
            if isinstance(raw, int):
                return raw
        return None

    def _ecc(self, n: Any, h: Any, g: Gpu) -> None:
        c = self._call
        e = g.ecc
        mode = c(n.nvmlDeviceGetEccMode, h)
        if isinstance(mode, tuple | list):
            e.mode_current, e.mode_pending = bool(mode[0]), bool(mode[1])
        else:
            e.mode_current = e.mode_pending = mode
        counter = getattr(n, "nvmlDeviceGetMemoryErrorCounter", None)
        # (error type: 0 corrected / 1 uncorrected) x (counter: 0 volatile / 1 aggregate) x (DRAM=2, SRAM=7)
        for scope, counter_type in (("volatile", 0), ("aggregate", 1)):
            for kind, error_type in (("corrected", 0), ("uncorrected", 1)):
                setattr(e, f"{scope}_dram_{kind}", c(counter, h, error_type, counter_type, 2))
                setattr(e, f"{scope}_sram_{kind}", c(counter, h, error_type, counter_type, 7))

    def _nvlinks(self, n: Any, h: Any) -> list[NvLink] | Any:
        links: list[NvLink] = []
        max_links = getattr(n, "NVML_NVLINK_MAX_LINKS", 18)
        for link in range(max_links):
            state = self._call(n.nvmlDeviceGetNvLinkState, h, link)
            if not isinstance(state, int):
                if link == 0:
                    return state if state is UNSUPPORTED else None
                break
            errors = {}
            for counter, name in NVLINK_ERRORS.items():
                value = self._call(n.nvmlDeviceGetNvLinkErrorCounter, h, link, counter)
                if isinstance(value, int):
                    errors[name] = value
            links.append(NvLink(link=link, active=bool(state), errors=errors))
        return links

    def _recovery_action(self, n: Any, h: Any) -> Any:
        field_id = getattr(n, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
        fn = getattr(n, "nvmlDeviceGetFieldValues", None)
        if field_id is None or fn is None:
            return None
        values = self._call(fn, h, [field_id])
        if not isinstance(values, list | tuple) or not values:
            return values if values is UNSUPPORTED else None
        fv = values[0]
        if getattr(fv, "nvmlReturn", 0) != 0:
            return UNSUPPORTED if getattr(fv, "nvmlReturn", 0) == _NOT_SUPPORTED else None
        raw = getattr(getattr(fv, "value", None), "uiVal", None)
        return RECOVERY_ACTIONS.get(raw, f"action-{raw}") if isinstance(raw, int) else None


def decode_fabric(info: Any) -> Fabric:
    """A filled fabric-info struct (v1, v2 or v3: the fields they have) as the snapshot's Fabric."""
    fab = Fabric()
    state = getattr(info, "state", None)
    if isinstance(state, int):
        fab.state = FABRIC_STATES.get(state, f"unknown:{state}")
    if fab.state == "not_supported":
        fab.state = UNSUPPORTED
        return fab
    status = getattr(info, "status", None)
    if isinstance(status, int):
        fab.status = FABRIC_STATUS.get(status, f"unknown:{status}")
    clique = getattr(info, "cliqueId", None)
    if isinstance(clique, int):
        fab.clique_id = clique
    uuid = getattr(info, "clusterUuid", None)
    if uuid is not None:
        raw = bytes(uuid) if not isinstance(uuid, str) else None
        if raw is not None and len(raw) == 16:
            h = raw.hex()
            fab.cluster_uuid = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        elif isinstance(uuid, str):
            fab.cluster_uuid = uuid
    mask = getattr(info, "healthMask", None)
    if isinstance(mask, int):
        fab.health_mask = mask
        for name, shift in (*FABRIC_HEALTH_BITS.items(), ("gfm_connected", FABRIC_GFM_SHIFT)):
            bits = (mask >> shift) & 0x3
            setattr(fab, name, {1: True, 2: False}.get(bits))
            if bits == 3:  # a value the 2-bit field does not define
                fab.unknown.append(f"{name}: 3 (health mask 0x{mask:x})")
        config = (mask >> 8) & 0xF
        if config:
            fab.incorrect_configuration = FABRIC_CONFIGURATION.get(config, f"unknown:{config}")
    summary = getattr(info, "healthSummary", None)
    if isinstance(summary, int) and summary:
        fab.summary = FABRIC_SUMMARY.get(summary, f"unknown:{summary}")
    return fab


def _field(obj: Any, name: str) -> Any:
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


def _mw(value: Any) -> Any:
    return round(value / 1000.0, 2) if isinstance(value, int) else value


def _bytes_to_mib(value: Any) -> Any:
    return int(value) // (1 << 20) if isinstance(value, int) else None


def read_uptime(path: str = "/proc/uptime") -> float | None:
    """Seconds since boot: the fabric's registration grace counts from there."""
    try:
        with open(path, encoding="ascii") as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_kernel_module_version(path: str | None = None) -> str | None:
    """The loaded kernel module's version: /sys/module/nvidia/version, else /proc/driver/nvidia/version."""
    candidates = [path] if path else ["/sys/module/nvidia/version", "/proc/driver/nvidia/version"]
    for candidate in candidates:
        try:
            with open(candidate, encoding="utf-8", errors="replace") as fh:
                text = fh.read(4096)
        except OSError:
            continue
        return parse_module_version(text)
    return None


def parse_module_version(text: str) -> str | None:
    """'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...' -> '580.159.04'."""
    import re

    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    if m:
        return m.group(1)
    m = re.fullmatch(r"\s*(\d+\.\d+(?:\.\d+)?)\s*", text)
    return m.group(1) if m else None
