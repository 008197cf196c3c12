#!/usr/bin/env python3
"""Simulated GPUs for the mini-cluster: one `nvidia-smi -q -x` file per node, built from the real H200
capture, and faults written into it the way a failing GPU would report them.

    gpustate.py seed DIR NODE [NODE ...] --gpus 8      write DIR/NODE.xml with 8 healthy H200s
    gpustate.py set DIR/NODE.xml GPU PATH VALUE         e.g. 3 remapped_rows/remapped_row_pending Yes
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

H200_XML = Path(__file__).resolve().parents[2] / "slurm_gpufleet" / "data" / "captures" / "h200-real" / "nvidia-smi-q.xml"
# PCI bus numbers of an 8-GPU HGX board, in nvidia-smi index order
BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db", "1b", "2d", "3d", "60", "9d", "ae", "bd", "de"]


def healthy_report(gpus: int, node: str, driver: str | None = None) -> ET.ElementTree:
    tree = ET.parse(H200_XML)
    root = tree.getroot()
    if driver:  # a node on another driver: the library, and the GSP firmware that ships with it
        root.find("driver_version").text = driver
        root.find("gpu/gsp_firmware_version").text = driver
    template = root.find("gpu")
    root.remove(template)
    for i in range(gpus):
        gpu = copy.deepcopy(template)
        bus = f"00000000:{BUSES[i % len(BUSES)].upper()}:00.0"
        gpu.set("id", bus)
        gpu.find("minor_number").text = str(i)
        gpu.find("uuid").text = f"GPU-{zlib.crc32(f'{node}-{i}'.encode()):08x}-0202-2257-9594-5337ca94eab8"
        gpu.find("serial").text = f"16537240{zlib.crc32(f'{node}-{i}-s'.encode()) % 10**5:05d}"
        gpu.find("pci/pci_bus_id").text = bus
        gpu.find("pci/pci_bus").text = BUSES[i % len(BUSES)].upper()
        root.append(gpu)
    root.find("attached_gpus").text = str(gpus)
    return tree


def write_atomic(tree: ET.ElementTree, path: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    tree.write(tmp, encoding="unicode", xml_declaration=True)
    os.replace(tmp, path)


def set_value(path: str, gpu: int, element: str, value: str) -> None:
    tree = ET.parse(path)
    gpus = tree.getroot().findall("gpu")
    el = gpus[gpu].find(element)
    if el is None:
        raise SystemExit(f"{path}: GPU {gpu} has no element {element}")
    el.text = value
    write_atomic(tree, path)


def add_process(path: str, gpu: int, pid: int, name: str = "python3", used_mib: int = 4096) -> None:
    tree = ET.parse(path)
    procs = tree.getroot().findall("gpu")[gpu].find("processes")
    info = ET.SubElement(procs, "process_info")
    for tag, text in (("pid", str(pid)), ("type", "C"), ("process_name", name), ("used_memory", f"{used_mib} MiB")):
        ET.SubElement(info, tag).text = text
    write_atomic(tree, path)


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    seed = sub.add_parser("seed")
    seed.add_argument("dir")
    seed.add_argument("nodes", nargs="+")
    seed.add_argument("--gpus", type=int, default=8)
    seed.add_argument("--driver", help="driver version the node reports (default: the capture's)")
    st = sub.add_parser("set")
    st.add_argument("file")
    st.add_argument("gpu", type=int)
    st.add_argument("element")
    st.add_argument("value")
    args = ap.parse_args()
    if args.cmd == "seed":
        os.makedirs(args.dir, exist_ok=True)
        for node in args.nodes:
            write_atomic(healthy_report(args.gpus, node, args.driver), os.path.join(args.dir, f"{node}.xml"))
    else:
        set_value(args.file, args.gpu, args.element, args.value)


if __name__ == "__main__":
    sys.exit(main())
