"""The texts nvidia-smi and NVML print when they cannot report, turned into snapshot facts."""

from __future__ import annotations

import re

from .snapshot import NODE_ERRORS, Gpu, NodeSnapshot, normalize_pci

_NODE_PATTERNS = [
    (re.compile(r"Driver/library version mismatch", re.I), "driver_library_mismatch"),
    (re.compile(r"^\s*No devices were found", re.I | re.M), "no_devices"),
    (re.compile(r"couldn't communicate with the NVIDIA driver", re.I), "driver_not_loaded"),
    (re.compile(r"NVML Shared Library Not Found|libnvidia-ml\.so\S*: cannot open", re.I), "library_missing"),
]
_LOST = re.compile(
    r"Unable to determine the device handle for (?:GPU|gpu)\s*(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)\s*:\s*(?P<why>[^\n]*)"
)
_INFOROM = re.compile(r"infoROM is corrupted at gpu\s+(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)", re.I)


def apply_failure_texts(text: str, snap: NodeSnapshot) -> None:
    for pattern, code in _NODE_PATTERNS:
        m = pattern.search(text)
        if m and code not in snap.errors:
            snap.errors.append(code)
            end = text.find("\n", m.end())
            line = text[text.rfind("\n", 0, m.start()) + 1: len(text) if end < 0 else end]
            snap.error_text = snap.error_text or (line.strip()[:300] or NODE_ERRORS[code])
    for m in _LOST.finditer(text):
        pci = m.group("pci")
        gpu = snap.gpu_by_pci(pci)
        if gpu is None:
            gpu = Gpu(index=len(snap.gpus), pci_bus_id=pci)
            snap.gpus.append(gpu)
        gpu.lost = True
        gpu.errors.append(f"device handle: {m.group('why').strip()[:200]}")
    for m in _INFOROM.finditer(text):
        gpu = snap.gpu_by_pci(m.group("pci"))
        if gpu is None:
            continue
        gpu.inforom.valid = False
        gpu.errors.append(f"infoROM is corrupted at gpu {normalize_pci(m.group('pci'))}")
