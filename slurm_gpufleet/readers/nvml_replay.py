"""A recorded NVML session played back as a pynvml-shaped module.

`slurm_gpufleet/data/captures/h200-real/nvml_probe.json` records every pynvml call made on a real H200 with its
value or its NVML error name.  Feeding that record to `NvmlReader(nvml=NvmlReplay(...))` runs the
live reader's exact code path on a machine without a GPU; faults are injected by editing the record.
"""

from __future__ import annotations

import ctypes
import json
from types import SimpleNamespace
from typing import Any

_ERROR_CODES = {"NVMLError_NotSupported": 3, "NVMLError_NoPermission": 4, "NVMLError_DriverNotLoaded": 9,
                "NVMLError_Timeout": 10, "NVMLError_LibraryNotFound": 12, "NVMLError_FunctionNotFound": 13,
                "NVMLError_GpuIsLost": 15, "NVMLError_ResetRequired": 16, "NVMLError_LibRmVersionMismatch": 18, "NVMLError_Unknown": 999}


class ReplayError(Exception):
    """Carries an NVML return code in `.value`, like pynvml.NVMLError."""

    def __init__(self, value: int, name: str = ""):
        super().__init__(name or f"NVML error {value}")
        self.value = value


_THRESHOLDS = {0: "temp_threshold_shutdown", 1: "temp_threshold_slowdown", 2: "temp_threshold_mem_max",
               3: "temp_threshold_gpu_max"}
_CLOCKS = {0: "graphics", 1: "sm", 2: "mem"}
_INFOROM = {0: "inforom_oem", 1: "inforom_ecc", 2: "inforom_power"}


class FabricInfoV3(ctypes.Structure):
    """nvml.h's nvmlGpuFabricInfo_v3_t, laid out as nvidia-ml-py's c_nvmlGpuFabricInfo_v3_t."""

    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_int),
                ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_int), ("healthMask", ctypes.c_uint32),
                ("healthSummary", ctypes.c_uint8)]


# field ids of nvmlDeviceGetFieldValues the recording answers, and the key each is recorded under
_FIELDS = {230: "recovery_action", 90: "nvlink_speed_mbps_common"}


class NvmlReplay:
    NVML_NVLINK_MAX_LINKS = 18
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
    c_nvmlGpuFabricInfo_v3_t = FabricInfoV3

    def __init__(self, probe: dict[str, Any]):
        self.probe = probe
        self.calls = 0

    @classmethod
    def from_file(cls, path: str) -> NvmlReplay:
        with open(path, encoding="utf-8") as fh:
            return cls(json.load(fh))

    # -- plumbing --------------------------------------------------------------------------------
    def _value(self, entry: Any) -> Any:
        self.calls += 1
        if not isinstance(entry, dict):
            raise ReplayError(6, "not recorded")  # NVML_ERROR_NOT_FOUND: not NVML_ERROR_UNKNOWN, a GPU fault
        if "error" in entry:
            raise ReplayError(_ERROR_CODES.get(entry["error"], 999), entry["error"])
        return entry.get("value")

    def _dev(self, handle: int, key: str) -> Any:
        return self._value(self.probe["devices"][handle].get(key))

    def _sys(self, key: str) -> Any:
        return self._value(self.probe.get("system", {}).get(key))

    # -- system ----------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        init = self.probe.get("init", {})
        if isinstance(init, dict) and "error" in init:
            self._value(init)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._sys("driver_version")

    def nvmlSystemGetNVMLVersion(self) -> str:
        return self._sys("nvml_version")

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self._sys("cuda_driver_version")

    nvmlSystemGetCudaDriverVersion = nvmlSystemGetCudaDriverVersion_v2

    def nvmlDeviceGetCount(self) -> int:
        return self._sys("device_count")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index >= len(self.probe["devices"]):
            raise ReplayError(999, "no such device in the recording")
        device = self.probe["devices"][index]
        if isinstance(device.get("handle"), dict):
            self._value(device["handle"])
        return index

    # -- device ----------------------------------------------------------------------------------
    def nvmlDeviceGetName(self, h: int) -> str:
        return self._dev(h, "name")

    def nvmlDeviceGetMinorNumber(self, h: int) -> int:
        return self._dev(h, "minor_number")

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self._dev(h, "uuid")

    def nvmlDeviceGetSerial(self, h: int) -> str:
        return self._dev(h, "serial")

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(**self._dev(h, "pci"))

    def nvmlDeviceGetArchitecture(self, h: int) -> int:
        return self._dev(h, "architecture")

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return tuple(self._dev(h, "cuda_compute_capability"))

    def nvmlDeviceGetVbiosVersion(self, h: int) -> str:
        return self._dev(h, "vbios")

    def nvmlDeviceGetInforomImageVersion(self, h: int) -> str:
        return self._dev(h, "inforom_image")

    def nvmlDeviceGetInforomVersion(self, h: int, obj: int) -> str:
        return self._dev(h, _INFOROM[obj])

    def nvmlDeviceGetInforomConfigurationChecksum(self, h: int) -> int:
        return self._dev(h, "inforom_checksum")

    def nvmlDeviceValidateInforom(self, h: int) -> None:
        self._dev(h, "inforom_validate")

    def nvmlDeviceGetGspFirmwareVersion(self, h: int) -> str:
        return self._dev(h, "gsp_firmware_version")

    nvmlMemory_v2 = 0x02000028  # nvml.h's version tag of nvmlMemory_v2_t

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> Any:
        if version:  # v2 (driver-reserved memory apart) answers only where the session recorded it
            if "memory_v2" not in self.probe["devices"][h]:
                self.calls += 1
                raise ReplayError(13, "NVMLError_FunctionNotFound")
            return SimpleNamespace(**self._dev(h, "memory_v2"))
        return SimpleNamespace(**self._dev(h, "memory"))

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return self._dev(h, "temp_gpu")

    def nvmlDeviceGetTemperatureThreshold(self, h: int, kind: int) -> int:
        return self._dev(h, _THRESHOLDS[kind])

    def nvmlDeviceGetFanSpeed(self, h: int) -> int:
        return self._dev(h, "fan_speed")

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._dev(h, "power_usage_mw")

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        """mJ since the driver loaded (Volta on); the H200 capture did not record it: "not recorded"."""
        return self._dev(h, "total_energy_mj")

    def nvmlDeviceGetPowerManagementLimit(self, h: int) -> int:
        return self._dev(h, "power_limit_mw")

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: int) -> int:
        return self._dev(h, "power_default_limit_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return self._dev(h, "power_enforced_limit_mw")

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h: int) -> tuple[int, int]:
        return tuple(self._dev(h, "power_limit_constraints_mw"))

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return self._dev(h, f"clock_{_CLOCKS[clock]}")

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock: int) -> int:
        return self._dev(h, f"clock_max_{_CLOCKS[clock]}")

    def nvmlDeviceGetApplicationsClock(self, h: int, clock: int) -> int:
        return self._dev(h, f"clock_app_{_CLOCKS[clock]}")

    def nvmlDeviceGetDefaultApplicationsClock(self, h: int, clock: int) -> int:
        return self._dev(h, f"clock_default_app_{_CLOCKS[clock]}")

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self._dev(h, "clocks_event_reasons")

    def nvmlDeviceGetPerformanceState(self, h: int) -> int:
        return self._dev(h, "pstate")

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(**self._dev(h, "utilization"))

    def nvmlDeviceGetEccMode(self, h: int) -> tuple[int, int]:
        return tuple(self._dev(h, "ecc_mode"))

    def nvmlDeviceGetMemoryErrorCounter(self, h: int, error_type: int, counter_type: int, location: int) -> int:
        kind = ("corrected", "uncorrected")[error_type]
        scope = ("volatile", "aggregate")[counter_type]
        where = {2: "dram", 7: "sram"}.get(location, f"loc{location}")
        return self._dev(h, f"ecc_{kind}_{scope}_{where}")

    def nvmlDeviceGetRetiredPages(self, h: int, cause: int) -> list[int]:
        return self._dev(h, ("retired_pages_sbe", "retired_pages_dbe")[cause])

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        return self._dev(h, "retired_pages_pending")

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        return tuple(self._dev(h, "remapped_rows"))

    def nvmlDeviceGetRowRemapperHistogram(self, h: int) -> Any:
        return SimpleNamespace(**self._dev(h, "row_remapper_histogram"))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return self._dev(h, "pcie_link_gen")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return self._dev(h, "pcie_link_gen_max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return self._dev(h, "pcie_link_width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return self._dev(h, "pcie_link_width_max")

    def nvmlDeviceGetPcieReplayCounter(self, h: int) -> int:
        return self._dev(h, "pcie_replay_counter")

    def _link(self, h: int, link: int) -> dict[str, Any]:
        # recorded as {"0": {"state": {...}, "replay": {...}, ...}}: one entry per link probed
        links = self.probe["devices"][h].get("nvlink") or {}
        entry = links.get(str(link))
        if entry is None:
            self.calls += 1
            raise ReplayError(2, "NVMLError_InvalidArgument")
        return entry

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        return int(self._value(self._link(h, link).get("state")))

    def nvmlDeviceGetNvLinkErrorCounter(self, h: int, link: int, counter: int) -> int:
        names = ("replay", "recovery", "crc_flit", "crc_data")
        return int(self._value(self._link(h, link).get(names[counter])))

    def nvmlDeviceGetPersistenceMode(self, h: int) -> int:
        return self._dev(h, "persistence_mode")

    def nvmlDeviceGetComputeMode(self, h: int) -> int:
        return self._dev(h, "compute_mode")

    def nvmlDeviceGetMigMode(self, h: int) -> tuple[int, int]:
        return tuple(self._dev(h, "mig_mode"))

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(**p) for p in self._dev(h, "compute_processes")]

    def nvmlDeviceGetPcieThroughput(self, h: int, counter: int) -> int:
        """KB/s, TX (0) or RX (1): nvidia-smi -q's `tx_util`/`rx_util`, as the session recorded them."""
        return self._dev(h, ("pcie_tx_kbps", "pcie_rx_kbps")[counter])

    def nvmlDeviceGetFieldValues(self, h: int, field_ids: list[Any]) -> list[Any]:
        out = []
        for field_id in field_ids:
            if isinstance(field_id, tuple):  # (field, scope): per-link NVLink counters, KiB per link
                fid, link = field_id
                entry = self.probe["devices"][h].get("nvlink_throughput_kib")
                direction = {138: "tx", 139: "rx"}.get(fid)
                counters = (entry or {}).get("value", {}).get(direction) if isinstance(entry, dict) else None
                self.calls += 1
                if not counters or link >= len(counters) or counters[link] is None:
                    out.append(SimpleNamespace(nvmlReturn=3, value=SimpleNamespace(ullVal=0, uiVal=0)))
                else:
                    out.append(SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(ullVal=int(counters[link]),
                                                                                    uiVal=0)))
                continue
            entry = self.probe["devices"][h].get(_FIELDS.get(field_id, ""))
            if entry is None and field_id != 230:  # NVML answers per field: not recorded is not supported
                self.calls += 1
                out.append(SimpleNamespace(nvmlReturn=3, value=SimpleNamespace(uiVal=0)))
                continue
            out.append(SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(uiVal=int(self._value(entry)))))
        return out

    def nvmlDeviceGetGpuFabricInfoV(self, h: int, ref: Any) -> int:
        """Fills the struct behind the pointer from the recorded `fabric` entry: {"state": 3,
        "status": 0, "cliqueId": 1, "clusterUuid": "UUID text", "healthMask": 426, "healthSummary": 1}."""
        value = self._dev(h, "fabric")
        info = getattr(ref, "_obj", ref)
        for key, raw in value.items():
            if key == "clusterUuid":
                data = bytes.fromhex(str(raw).replace("-", ""))[:16].ljust(16, b"\0")
                info.clusterUuid = (ctypes.c_uint8 * 16)(*data)
            elif key in ("state", "status", "cliqueId", "healthMask", "healthSummary"):
                setattr(info, key, int(raw))
        return 0
