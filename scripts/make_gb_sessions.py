#!/usr/bin/env python3
"""Write the GB200/GB300 sessions in slurm_gpufleet/data/captures/gb-sessions/ (run from the repository root).

No GB200 or GB300 was at hand, so these are not captures: each is the real H200 capture
(captures/h200-real) with what differs on a Blackwell NVL72 tray or HGX board written in from the field
values of NVIDIA's documentation, as its README says.  Re-running gives the same bytes.
"""

from __future__ import annotations

import copy
import json
import re
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "slurm_gpufleet" / "data" / "captures" / "h200-real"
OUT = ROOT / "slurm_gpufleet" / "data" / "captures" / "gb-sessions"

HEALTHY_MASK = 0x1AA  # every 2-bit health field FALSE, configuration NONE
CLUSTER = {"gb200": "4f6a7c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b", "gb300": "9a8b7c6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d"}
# (model, product name, GPUs, PCI domains: GB200 trays number each GPU's domain, as 0008:01:00 in GPUd's logs)
BOARDS = {
    "gb200-tray": ("gb200", "NVIDIA GB200", 4, 189471),
    "gb300-board": ("gb300", "NVIDIA GB300", 8, 284208),
}


# the real H200's own UUID, which each written GPU replaces with one of its own (one UUID per GPU)
H200_UUID = "GPU-8b8d67a3-0202-2257-9594-5337ca94eab8"


def gpu_uuid(kind: str, i: int) -> str:
    return f"GPU-{zlib.crc32(f'{kind}-{i}'.encode()):08x}-6a1c-4e0f-9b2d-5c3e7f9a1b2c"


def _v(value):
    return {"value": value}


def session(kind: str) -> dict:
    model, name, gpus, mem_mib = BOARDS[kind]
    probe = json.loads((H200 / "nvml_probe.json").read_text())
    template = probe["devices"][0]
    template["name"] = _v(name)
    template["architecture"] = _v(10)  # NVML_DEVICE_ARCH_BLACKWELL
    template["cuda_compute_capability"] = _v([10, 0])
    template["memory"] = _v({"total": mem_mib << 20, "free": (mem_mib - 600) << 20, "used": 600 << 20})
    template["fabric"] = _v({"state": 3, "status": 0, "cliqueId": 32766, "clusterUuid": CLUSTER[model],
                             "healthMask": HEALTHY_MASK, "healthSummary": 1})
    template["nvlink"] = {str(i): {"state": _v(1), "replay": _v(0), "recovery": _v(0), "crc_flit": _v(0),
                                   "crc_data": _v(0)} for i in range(18)}
    template["nvlink_speed_mbps_common"] = _v(53125)
    template.pop("fabric_info", None)
    devices = []
    for i in range(gpus):
        dev = copy.deepcopy(template)
        domain = 8 + i
        dev["uuid"] = _v(gpu_uuid(kind, i))
        dev["minor_number"] = _v(i)
        dev["pci"] = _v(dict(template["pci"]["value"], domain=domain, bus=1, device=0,
                             busId=f"{domain:08X}:01:00.0", busIdLegacy=f"{domain:04X}:01:00.0"))
        devices.append(dev)
    probe["devices"] = devices
    probe["system"]["device_count"] = _v(gpus)
    probe["source"] = (f"written by scripts/make_gb_sessions.py: the real H200 capture with a {name} "
                       f"{'tray' if gpus == 4 else 'board'}'s name, architecture, memory, 18 NVLink5 links at "
                       "53.125 GB/s and a healthy fabric registration; not a capture")
    return probe


FABRIC_TEXT = """    Fabric
        State                                          : {state}
        Status                                         : {status}
        CliqueId                                       : {clique}
        ClusterUUID                                    : {uuid}
        Health
            Summary                                    : {summary}
            Bandwidth                                  : {bandwidth}
            Route Recovery in progress                 : False
            Route Unhealthy                            : {route}
            Access Timeout Recovery                    : False
            Incorrect Configuration                    : None
            Partition Assigned                         : True
"""
HEALTHY = {"state": "Completed", "status": "Success", "clique": "32766", "uuid": CLUSTER["gb200"],
           "summary": "Healthy", "bandwidth": "Full", "route": "False"}
# the reference's real cases, on GPU 1 of a GB200 tray
TEXT_CASES = {
    "healthy": {},
    # Azure HPC images PR 506: passed a check that looked only for N/A
    "insufficient-resources": {"state": "Completed", "status": "Insufficient Resources", "clique": "0",
                               "uuid": "00000000-0000-0000-0000-000000000000"},
    # GPU Operator issue 2511: In Progress, everything else N/A
    "in-progress": {"state": "In Progress", "status": "N/A", "clique": "N/A", "uuid": "N/A", "summary": "N/A",
                    "bandwidth": "N/A", "route": "N/A"},
    "route-unhealthy": {"summary": "Unhealthy", "route": "True"},
    # what a broken collector or a new driver might print: judged "unknown fabric state", never a crash
    "garbage": {"state": "\x07Compl~ted??", "status": "%%%", "clique": "abc", "uuid": "zz", "summary": "maybe"},
}


def smi_text(case: dict[str, str]) -> str:
    text = (H200 / "nvidia-smi-q.txt").read_text()
    head, _, rest = text.partition("GPU 00000000:00:06.0\n")
    body = rest
    fabric = re.compile(r"    Fabric\n(?:        .*\n)+")
    out = head.replace("Attached GPUs                                          : 1",
                       "Attached GPUs                                          : 4")
    for i in range(4):
        values = {**HEALTHY, **(case if i == 1 else {})}
        gpu = fabric.sub(lambda _m, v=values: FABRIC_TEXT.format(**v), body, count=1)
        gpu = gpu.replace("NVIDIA H200", "NVIDIA GB200").replace("Hopper", "Blackwell")
        gpu = gpu.replace(H200_UUID, gpu_uuid("gb200", i)).replace(
            "    Minor Number                                       : 0\n",
            f"    Minor Number                                       : {i}\n")
        out += f"GPU {8 + i:08X}:01:00.0\n" + gpu.rstrip("\n") + "\n\n"
    return out


def smi_xml(case: dict[str, str]) -> str:
    text = (H200 / "nvidia-smi-q.xml").read_text()
    start, end = text.index("\t<gpu id="), text.index("\t</gpu>") + len("\t</gpu>\n")
    gpu_xml = text[start:end]
    gpus = []
    for i in range(4):
        v = {**HEALTHY, **(case if i == 1 else {})}
        block = (f"<fabric>\n\t\t\t<state>{v['state']}</state>\n\t\t\t<status>{v['status']}</status>\n"
                 f"\t\t\t<cliqueId>{v['clique']}</cliqueId>\n\t\t\t<clusterUuid>{v['uuid']}</clusterUuid>\n"
                 f"\t\t\t<health>\n\t\t\t\t<summary>{v['summary']}</summary>\n\t\t\t\t<bandwidth>{v['bandwidth']}"
                 "</bandwidth>\n\t\t\t\t<route_recovery_in_progress>False</route_recovery_in_progress>\n"
                 f"\t\t\t\t<route_unhealthy>{v['route']}</route_unhealthy>\n"
                 "\t\t\t\t<access_timeout_recovery>False</access_timeout_recovery>\n"
                 "\t\t\t\t<incorrect_configuration>None</incorrect_configuration>\n"
                 "\t\t\t\t<partition_assigned>True</partition_assigned>\n\t\t\t</health>\n\t\t</fabric>")
        g = re.sub(r"<fabric>.*?</fabric>", lambda _m, b=block: b, gpu_xml, count=1, flags=re.S)
        g = g.replace('id="00000000:00:06.0"', f'id="{8 + i:08X}:01:00.0"')
        g = g.replace(H200_UUID, gpu_uuid("gb200", i)).replace("<minor_number>0</minor_number>",
                                                                f"<minor_number>{i}</minor_number>")
        g = g.replace("NVIDIA H200", "NVIDIA GB200").replace(">Hopper<", ">Blackwell<")
        gpus.append(g)
    text = text[:start] + "".join(gpus) + text[end:]
    return text.replace("<attached_gpus>1</attached_gpus>", "<attached_gpus>4</attached_gpus>")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for kind in BOARDS:
        (OUT / f"{kind}.json").write_text(json.dumps(session(kind), indent=1) + "\n")
    for name, case in TEXT_CASES.items():
        (OUT / f"gb200-tray-{name}.txt").write_text(smi_text(case))
    for name in ("healthy", "insufficient-resources", "in-progress"):
        (OUT / f"gb200-tray-{name}.xml").write_text(smi_xml(TEXT_CASES[name]))


if __name__ == "__main__":
    main()
