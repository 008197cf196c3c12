#!/usr/bin/env python3
"""Simulated GPUs for the mini-cluster: one recorded NVML session per node, built from the real H200
capture (`nvml_probe.json`, every pynvml call made on a real H200 with its value), with faults written
into it the way a failing GPU reports them through NVML.

The node's own code reads it through `tests/fake_pynvml/recorded/pynvml.py`, a pynvml-compatible module
the mini-cluster puts on the node interpreter's PYTHONPATH: the health check, prolog and epilog run the
live NVML reader, exactly as on a real node.

    gpustate.py seed DIR NODE [NODE ...] --gpus 8 [--driver V] [--vbios V]   DIR/NODE.json: 8 healthy H200s
    gpustate.py fault DIR/NODE.json GPU FAULT                     e.g. 5 row_remap_failure
    gpustate.py module PATH --version V [--unsigned]              an nvidia.ko as `modinfo` reads it
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import struct
import sys
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path
from typing import Any

PROBE = Path(__file__).resolve().parents[2] / "slurm_gpufleet" / "data" / "captures" / "h200-real" / "nvml_probe.json"
# PCI bus numbers of an 8-GPU HGX board, in NVML index order
BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db", "1b", "2d", "3d", "60", "9d", "ae", "bd", "de"]

# what a failing GPU answers, as (call recorded in the probe, value)
FAULTS: dict[str, tuple[str, Any]] = {
    # nvmlDeviceGetRemappedRows -> (corrected, uncorrected, pending, failure)
    "row_remap_pending": ("remapped_rows", [0, 1, 1, 0]),
    "row_remap_failure": ("remapped_rows", [0, 9, 0, 1]),
    "retired_pages_pending": ("retired_pages_pending", 1),
    "ecc_uncorrected_volatile": ("ecc_uncorrected_volatile_dram", 2),
    # nvmlDeviceGetCurrentClocksEventReasons: HW thermal slowdown (0x40) beside the idle bit
    "hw_thermal_slowdown": ("clocks_event_reasons", 0x41),
}


def _v(value: Any) -> dict[str, Any]:
    return {"value": value}


def _memory_v2(probe: dict[str, Any]) -> dict[str, Any]:
    """nvmlDeviceGetMemoryInfo_v2 as this H200 answers it.  The probe recorded only v1, whose "used"
    includes the driver's reserve; the same capture's `nvidia-smi -q -x` (which reads v2) shows that
    reserve apart: 616 MiB reserved, 0 MiB used."""
    fb = ET.parse(PROBE.with_name("nvidia-smi-q.xml")).getroot().find("gpu/fb_memory_usage")
    mib = {tag: int(fb.find(tag).text.split()[0]) << 20 for tag in ("reserved", "used")}
    v1 = probe["devices"][0]["memory"]["value"]
    return _v({"version": 0x02000028, "total": v1["total"], "reserved": mib["reserved"],
               "free": v1["total"] - mib["reserved"] - mib["used"], "used": mib["used"]})


def _pcie_throughput() -> dict[str, Any]:
    """nvmlDeviceGetPcieThroughput as this H200 answered it: the probe did not call it, the same capture's
    `nvidia-smi -q -x` (which does) shows it, KB/s, as `pci/tx_util` and `pci/rx_util`."""
    pci = ET.parse(PROBE.with_name("nvidia-smi-q.xml")).getroot().find("gpu/pci")
    return {f"pcie_{d}_kbps": _v(int(pci.find(f"{d}_util").text.split()[0])) for d in ("tx", "rx")}


def healthy_state(gpus: int, node: str, driver: str | None = None, vbios: str | None = None) -> dict[str, Any]:
    probe = json.loads(PROBE.read_text())
    if vbios:  # flashed firmware (a rollout bundle's)
        probe["devices"][0]["vbios"] = _v(vbios)
    probe["devices"][0]["memory_v2"] = _memory_v2(probe)
    probe["devices"][0].update(_pcie_throughput())
    if driver:  # a node on another driver: the library, and the GSP firmware that ships with it
        probe["system"]["driver_version"] = _v(driver)
        probe["system"]["nvml_version"] = _v(f"13.{driver}")
        probe["devices"][0]["gsp_firmware_version"] = _v(driver)
    template = probe["devices"][0]
    devices = []
    for i in range(gpus):
        dev = copy.deepcopy(template)
        bus = BUSES[i % len(BUSES)]
        dev["uuid"] = _v(f"GPU-{zlib.crc32(f'{node}-{i}'.encode()):08x}-0202-2257-9594-5337ca94eab8")
        dev["serial"] = _v(f"16537240{zlib.crc32(f'{node}-{i}-s'.encode()) % 10**5:05d}")
        dev["minor_number"] = _v(i)
        pci = dict(template["pci"]["value"], bus=int(bus, 16), device=0,
                   busId=f"00000000:{bus.upper()}:00.0", busIdLegacy=f"0000:{bus.upper()}:00.0")
        dev["pci"] = _v(pci)
        devices.append(dev)
    probe["devices"] = devices
    probe["system"]["device_count"] = _v(gpus)
    return probe


GB_SESSIONS = Path(__file__).resolve().parents[2] / "slurm_gpufleet" / "data" / "captures" / "gb-sessions"


def gb_state(node: str, kind: str = "gb300-board") -> dict[str, Any]:
    """A node on the vendored GB300 board session (8 GPUs): every node of one NVL domain shares its cluster
    UUID and clique, so the nodes publish one NVLink domain; each GPU gets the node's own UUID."""
    probe = json.loads((GB_SESSIONS / f"{kind}.json").read_text())
    for i, dev in enumerate(probe["devices"]):
        dev["uuid"] = _v(f"GPU-{zlib.crc32(f'{node}-{i}'.encode()):08x}-6a1c-4e0f-9b2d-5c3e7f9a1b2c")
    return probe


def fabric_fault(path: str, gpu: int, name: str) -> None:
    """One of captures/gb-sessions/fabric_faults.toml on one GPU of the node's session."""
    import tomllib

    edit = tomllib.loads((GB_SESSIONS / "fabric_faults.toml").read_text())[name]["fabric"]
    _edit(path, gpu, lambda dev: dev["fabric"]["value"].update(edit))


def driver_mismatch(driver: str) -> dict[str, Any]:
    """What a node whose new library meets the old kernel module answers: nvmlInit fails."""
    return {"init": {"error": "NVMLError_LibRmVersionMismatch"}, "system": {"driver_version": _v(driver)},
            "devices": []}


def driver_of(path: str) -> str | None:
    state = json.loads(Path(path).read_text())
    return (state.get("system", {}).get("driver_version") or {}).get("value")


def write_atomic(state: dict[str, Any], path: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(state, fh)
    os.replace(tmp, path)


def _edit(path: str, gpu: int, change) -> None:
    state = json.loads(Path(path).read_text())
    change(state["devices"][gpu])
    write_atomic(state, path)


def fault(path: str, gpu: int, name: str) -> None:
    key, value = FAULTS[name]
    _edit(path, gpu, lambda dev: dev.__setitem__(key, _v(value)))


def set_value(path: str, gpu: int, key: str, value: Any) -> None:
    _edit(path, gpu, lambda dev: dev.__setitem__(key, _v(value)))


def add_process(path: str, gpu: int, pid: int, used_mib: int = 4096) -> None:
    def change(dev: dict[str, Any]) -> None:
        procs = list((dev.get("compute_processes") or {}).get("value") or [])
        procs.append({"pid": pid, "usedGpuMemory": used_mib << 20})
        dev["compute_processes"] = _v(procs)
        mem = dev["memory_v2"]["value"]
        mem["used"] += used_mib << 20
        mem["free"] -= used_mib << 20
    _edit(path, gpu, change)


SIGNATURE_MAGIC = b"~Module signature appended~\n"


def elf_module(modinfo: bytes, *, wide=True, little=True, code=b"\x90" * 100) -> bytes:
    """The parts of a kernel module `modinfo` reads: an ELF header, code, a .modinfo section, the section
    names and the section headers (null, .text, .modinfo, .shstrtab), as the kernel's build lays them out."""
    order, word = ("<" if little else ">"), ("Q" if wide else "I")
    ehsize, shentsize = (64, 64) if wide else (52, 40)
    names = b"\x00.text\x00.modinfo\x00.shstrtab\x00"
    body = code + modinfo + names
    shoff = ehsize + len(body)
    ident = b"\x7fELF" + bytes([2 if wide else 1, 1 if little else 2, 1]) + bytes(9)
    header = ident + struct.pack(order + "HHI" + word * 3 + "IHHHHHH", 1, 62, 1, 0, 0, shoff, 0, ehsize, 0, 0,
                                 shentsize, 4, 3)

    def section(name, kind, offset, size):
        return struct.pack(order + "II" + word * 4 + "II" + word * 2, name, kind, 0, 0, offset, size, 0, 0, 1, 0)

    headers = (section(0, 0, 0, 0) + section(1, 1, ehsize, len(code))
               + section(7, 1, ehsize + len(code), len(modinfo))
               + section(16, 3, ehsize + len(code) + len(modinfo), len(names)))
    return header + body + headers


def nvidia_module(version: str, license_: str = "Dual MIT/GPL", signed: bool = True, vermagic: str | None = None,
                  **layout) -> bytes:
    """NVIDIA's module of that version (the open flavour's licence by default), signed or not (the magic
    only: no signer)."""
    magic = f"vermagic={vermagic} SMP preempt mod_unload modversions\x00" if vermagic else ""
    info = f"version={version}\x00license={license_}\x00srcversion=0A1B2C\x00{magic}".encode()
    return elf_module(info, **layout) + (b"\x00sig" + SIGNATURE_MAGIC if signed else b"")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    seed = sub.add_parser("seed")
    seed.add_argument("dir")
    seed.add_argument("nodes", nargs="+")
    seed.add_argument("--gpus", type=int, default=8)
    seed.add_argument("--driver", help="driver version the node reports (default: the capture's)")
    seed.add_argument("--vbios", help="VBIOS version the node reports (default: the capture's)")
    mm = sub.add_parser("mismatch", help="the node's NVML fails to start: library/kernel module mismatch")
    mm.add_argument("file")
    mm.add_argument("driver")
    vb = sub.add_parser("vbios", help="print the VBIOS version the node's state reports")
    vb.add_argument("file")
    ft = sub.add_parser("fault")
    ft.add_argument("file")
    ft.add_argument("gpu", type=int)
    ft.add_argument("fault", choices=sorted(FAULTS))
    md = sub.add_parser("module", help="write an nvidia.ko as the kernel's build leaves it")
    md.add_argument("path")
    md.add_argument("--version", required=True)
    md.add_argument("--unsigned", action="store_true")
    args = ap.parse_args()
    if args.cmd == "module":
        Path(args.path).write_bytes(nvidia_module(args.version, signed=not args.unsigned))
    elif args.cmd == "seed":
        os.makedirs(args.dir, exist_ok=True)
        for node in args.nodes:
            write_atomic(healthy_state(args.gpus, node, args.driver, args.vbios), os.path.join(args.dir, f"{node}.json"))
    elif args.cmd == "vbios":
        print(json.loads(open(args.file).read())["devices"][0]["vbios"]["value"])
    elif args.cmd == "mismatch":
        write_atomic(driver_mismatch(args.driver), args.file)
    else:
        fault(args.file, args.gpu, args.fault)


if __name__ == "__main__":
    sys.exit(main())
