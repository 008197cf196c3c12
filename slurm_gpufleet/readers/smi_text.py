"""Reader for nvidia-smi's text outputs as admins collect them.

Handles `nvidia-smi -q` (any driver from R450 on, whole or cut into fragments), the default table,
`nvidia-smi nvlink -s`, and the failure texts nvidia-smi prints instead of a report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import values as v
from .errors import ReportError
from .failures import apply_failure_texts
from .snapshot import UNSUPPORTED, Gpu, NodeSnapshot, NvLink, Process


@dataclass
class _Node:
    key: str
    value: str | None
    indent: int
    children: list[_Node] = field(default_factory=list)

    def child(self, *names: str) -> _Node | None:
        wanted = {n.lower() for n in names}
        for c in self.children:
            if c.key.lower() in wanted:
                return c
        return None

    def get(self, *path: str | tuple[str, ...]) -> str | None:
        node: _Node | None = self
        for step in path:
            alts = step if isinstance(step, tuple) else (step,)
            node = node.child(*alts) if node else None
            if node is None:
                return None
        return node.value if node else None


_GPU_HEADER = re.compile(r"^GPU\s+(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")


def _entry(line: str) -> tuple[int, str, str | None]:
    """(indent, key, value) of a `key : value` or `section` line, in one pass (no backtracking pattern)."""
    body = line.lstrip()
    indent = len(line[: len(line) - len(body)].expandtabs(4))
    key, colon, value = body.partition(":")
    return indent, key.strip(), value.strip() if colon else None


def _tree(lines: list[str], notes: list[str] | None = None, where: str = "", floor: int = 0) -> _Node:
    """The report's sections by indentation.  One line out of place hides nothing after it (each is said in
    `notes`, "where: line N ..."): a line indented with a tab (nvidia-smi writes none: a paste) is taken at
    the depth its neighbour gives it; a line less indented than `floor` (a GPU block's lines all are), or
    one that steps out of its section while the line after it goes deeper than a section's first level,
    is not read."""
    entries = [(n, *_entry(line), "\t" in line[: len(line) - len(line.lstrip())]) for n, line in
               enumerate(lines, start=1) if line.strip() and line.strip() != "[...]"]
    # per line, the indent of the next line that can be read at all (a tab's depth comes from its
    # neighbours, not its own), from one pass backwards
    following: list[int | None] = [None] * len(entries)
    upcoming: int | None = None
    for k in range(len(entries) - 1, -1, -1):
        following[k] = upcoming
        if entries[k][1] >= floor and not entries[k][4]:
            upcoming = entries[k][1]
    root = _Node("", None, -1)
    stack = [root]
    prev: tuple[int, str | None] | None = None   # the last line read: its indent and value
    for k, (number, indent, key, value, tab) in enumerate(entries):
        if tab and prev is not None:
            indent = prev[0] if prev[1] is not None else prev[0] + 4
        after = following[k]
        stray = indent < floor or (prev is not None and indent < prev[0] and after is not None
                                   and after > indent + 4)
        if stray:
            if notes is not None:
                notes.append(f"{where}line {number}: out of place in its section, not read: {key[:60]}")
            continue
        if tab and notes is not None:
            notes.append(f"{where}line {number}: indented with a tab, read at depth {indent // 4}: {key[:60]}")
        node = _Node(key, value, indent)
        while stack[-1].indent >= indent:
            stack.pop()
        stack[-1].children.append(node)
        stack.append(node)
        prev = (indent, value)
    return root


def looks_like_query_text(text: str) -> bool:
    return bool(re.search(r"^\s*(Driver Version|Product Name|ECC Errors|Remapped Rows|Retired Pages|Clocks (Event|Throttle) Reasons)\s*(:|$)", text, re.M))


def read_text(text: str, source: str = "nvidia-smi -q") -> NodeSnapshot:
    """Parse any nvidia-smi text we know; raises ReportError when nothing in it is GPU state."""
    snap = NodeSnapshot(source=source)
    if "NVIDIA-SMI" in text and re.search(r"^\|[= ]+\|", text, re.M) or re.search(r"^\+[-=+]+\+\s*$", text, re.M):
        _read_table(text, snap)
    elif re.search(r"^GPU \d+: .*\(UUID: ", text, re.M) and re.search(r"^\s+Link \d+: ", text, re.M):
        _read_nvlink_status(text, snap)
    elif looks_like_query_text(text):
        _read_query(text, snap)
    apply_failure_texts(text, snap)
    if not snap.has_gpu_state():
        raise ReportError("no nvidia-smi report found (no GPU section, table or known error text)")
    return snap


# ---------------------------------------------------------------- nvidia-smi -q
def _read_query(text: str, snap: NodeSnapshot) -> None:
    lines = text.splitlines()
    header: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    for line in lines:
        m = _GPU_HEADER.match(line.strip()) if not line.startswith((" ", "\t")) else None
        if m:
            blocks.append((m.group("pci"), []))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            header.append(line)
    if "[...]" in text:
        snap.partial = True
    top = _tree(header)
    snap.timestamp = top.get("Timestamp")
    snap.driver_version = v.to_str(top.get("Driver Version"))
    cuda = v.to_str(top.get("CUDA Version"))
    snap.cuda_driver_version = cuda
    attached = v.to_int(top.get("Attached GPUs"))
    snap.attached_gpus = attached if isinstance(attached, int) else None
    if not blocks:
        # a fragment cut out of a report (ECC section pasted in a ticket): one GPU we know nothing else of
        if any(top.child(k) for k in ("ECC Errors", "Remapped Rows", "Retired Pages", "Product Name")):
            snap.partial = True
            gpu = _gpu_from_tree(0, None, top)
            v.scan_fields(gpu, _leaves(top))
            snap.gpus.append(gpu)
        return
    for index, (pci, body) in enumerate(blocks):
        tree = _tree(body, snap.input_notes, f"GPU {pci} ", floor=4)
        gpu = _gpu_from_tree(index, pci, tree)
        v.scan_fields(gpu, _leaves(tree))
        snap.gpus.append(gpu)


def _leaves(node: _Node, path: str = ""):
    """Every field of the GPU as (path of section names, value)."""
    for c in node.children:
        here = f"{path}/{c.key}" if path else c.key
        yield here, c.value
        yield from _leaves(c, here)


# the Health rows of nvidia-smi -q's Fabric block, by the names its XML gives them
_FABRIC_HEALTH_ROWS = {"summary": "Summary", "bandwidth": "Bandwidth",
                       "route_recovery_in_progress": "Route Recovery in progress",
                       "route_unhealthy": "Route Unhealthy", "access_timeout_recovery": "Access Timeout Recovery",
                       "incorrect_configuration": "Incorrect Configuration"}


def _gpu_from_tree(index: int, pci: str | None, t: _Node) -> Gpu:
    g = Gpu(index=index, pci_bus_id=pci)
    _identity(g, t)
    _thermal_power(g, t)
    _clocks(g, t)
    _ecc_from_tree(g, t)
    _pages_and_rows(g, t)
    _links_and_processes(g, t)
    return g


def _identity(g: Gpu, t: _Node) -> None:
    """Name, UUID, serial, firmware, modes, utilisation, the recovery action, the fabric and memory."""
    g.minor_number = v.to_int(t.get("Minor Number"))
    g.name = v.to_str(t.get("Product Name"))
    g.architecture = v.to_str(t.get("Product Architecture"))
    g.uuid = v.to_str(t.get("GPU UUID"))
    g.serial = v.to_str(t.get("Serial Number"))
    g.vbios = v.to_str(t.get("VBIOS Version"))
    g.gsp_firmware = v.to_str(t.get("GSP Firmware Version"))
    g.inforom.image = v.to_str(t.get("Inforom Version", "Image Version"))
    g.inforom.oem = v.to_str(t.get("Inforom Version", "OEM Object"))
    g.inforom.ecc = v.to_str(t.get("Inforom Version", "ECC Object"))
    g.inforom.power = v.to_str(t.get("Inforom Version", "Power Management Object"))
    g.persistence_mode = v.to_bool(t.get("Persistence Mode"))
    g.compute_mode = v.to_str(t.get("Compute Mode"))
    g.mig_mode_current = v.to_bool(t.get("MIG Mode", "Current"))
    g.mig_mode_pending = v.to_bool(t.get("MIG Mode", "Pending"))
    g.performance_state = v.to_str(t.get("Performance State"))
    g.utilization_gpu_pct = v.to_int(t.get("Utilization", "Gpu"))
    g.recovery_action = v.to_recovery_action(t.get("GPU Recovery Action"))
    if g.recovery_action is None:
        g.recovery_action = _reset_status(t.get("GPU Reset Status", "Reset Required"),
                                          t.get("GPU Reset Status", "Drain and Reset Recommended"))

    g.fabric = v.to_fabric(t.get("Fabric", "State"), t.get("Fabric", "Status"), t.get("Fabric", "CliqueId"),
                           t.get("Fabric", "ClusterUUID"),
                           {key: t.get("Fabric", "Health", row) for key, row in _FABRIC_HEALTH_ROWS.items()})

    g.memory_total_mib = v.to_int(t.get("FB Memory Usage", "Total"))
    g.memory_used_mib = v.to_int(t.get("FB Memory Usage", "Used"))


def _thermal_power(g: Gpu, t: _Node) -> None:
    """Temperatures and their thresholds (absolute, or relative to T.Limit from R550), the fan, power."""
    temp = g.temperature
    temp.gpu_c = v.to_int(t.get("Temperature", "GPU Current Temp"))
    temp.memory_c = v.to_int(t.get("Temperature", "Memory Current Temp"))
    tlimit = v.to_int(t.get("Temperature", "GPU T.Limit Temp"))
    if isinstance(tlimit, int) and isinstance(temp.gpu_c, int):
        # R550+ prints thresholds relative to T.Limit (the distance from the current temperature)
        limit = temp.gpu_c + tlimit
        temp.shutdown_c = v.below_limit(limit, v.to_int(t.get("Temperature", "GPU Shutdown T.Limit Temp")))
        temp.slowdown_c = v.below_limit(limit, v.to_int(t.get("Temperature", "GPU Slowdown T.Limit Temp")))
        temp.gpu_max_operating_c = v.below_limit(limit, v.to_int(t.get("Temperature", "GPU Max Operating T.Limit Temp")))
    else:
        temp.shutdown_c = v.to_int(t.get("Temperature", "GPU Shutdown Temp"))
        temp.slowdown_c = v.to_int(t.get("Temperature", "GPU Slowdown Temp"))
        temp.gpu_max_operating_c = v.to_int(t.get("Temperature", "GPU Max Operating Temp"))
    # the T.Limit-relative memory threshold has no documented base, so only the absolute one is read
    temp.memory_max_operating_c = v.to_int(t.get("Temperature", "Memory Max Operating Temp"))
    fan = t.get("Fan Speed")
    temp.fan_error = True if fan and "err" in fan.lower() else (UNSUPPORTED if v.is_na(fan) else (False if fan else None))

    power_section = ("GPU Power Readings", "Power Readings")
    p = g.power
    p.draw_w = v.to_float(t.get(power_section, ("Power Draw", "Average Power Draw", "Instantaneous Power Draw")))
    # "Requested" is what an admin set (nvmlDeviceGetPowerManagementLimit); "Current" is what is enforced
    p.limit_w = v.to_float(t.get(power_section, ("Requested Power Limit", "Power Limit")))
    p.default_limit_w = v.to_float(t.get(power_section, "Default Power Limit"))
    p.enforced_limit_w = v.to_float(t.get(power_section, ("Enforced Power Limit", "Current Power Limit")))
    p.min_limit_w = v.to_float(t.get(power_section, "Min Power Limit"))
    p.max_limit_w = v.to_float(t.get(power_section, "Max Power Limit"))


def _clocks(g: Gpu, t: _Node) -> None:
    """Clocks now, their maxima and application clocks, and why they are held back."""
    c = g.clocks
    c.graphics_mhz = v.to_int(t.get("Clocks", "Graphics"))
    c.sm_mhz = v.to_int(t.get("Clocks", "SM"))
    c.memory_mhz = v.to_int(t.get("Clocks", "Memory"))
    c.max_graphics_mhz = v.to_int(t.get("Max Clocks", "Graphics"))
    c.max_sm_mhz = v.to_int(t.get("Max Clocks", "SM"))
    c.max_memory_mhz = v.to_int(t.get("Max Clocks", "Memory"))
    c.app_graphics_mhz = v.to_int(t.get("Applications Clocks", "Graphics"))
    c.app_memory_mhz = v.to_int(t.get("Applications Clocks", "Memory"))
    c.default_app_graphics_mhz = v.to_int(t.get("Default Applications Clocks", "Graphics"))
    c.default_app_memory_mhz = v.to_int(t.get("Default Applications Clocks", "Memory"))

    reasons = t.child("Clocks Event Reasons", "Clocks Throttle Reasons")
    if reasons is not None:
        g.clock_event_reasons = _text_reasons(reasons)


def _pages_and_rows(g: Gpu, t: _Node) -> None:
    """Retired pages and remapped rows (N/A: not supported)."""
    g.retired_pages.single_bit = count(t, "Retired Pages", ("Single Bit ECC", "Single Bit ECC Retirement"))
    g.retired_pages.double_bit = count(t, "Retired Pages", ("Double Bit ECC", "Double Bit ECC Retirement"))
    g.retired_pages.pending = v.to_bool(t.get("Retired Pages", ("Pending Page Blacklist", "Pending Page Retirement", "Pending")))

    rr = t.child("Remapped Rows")
    if rr is not None:
        if rr.value is not None and v.is_na(rr.value):
            g.remapped_rows.correctable = g.remapped_rows.uncorrectable = UNSUPPORTED
            g.remapped_rows.pending = g.remapped_rows.failure = UNSUPPORTED
            g.remapped_rows.histogram = UNSUPPORTED
        else:
            g.remapped_rows.correctable = count(rr, "Correctable Error")
            g.remapped_rows.uncorrectable = count(rr, "Uncorrectable Error")
            g.remapped_rows.pending = v.to_bool(rr.get("Pending"))
            g.remapped_rows.failure = v.to_bool(rr.get("Remapping Failure Occurred"))
            hist = rr.child("Bank Remap Availability Histogram")
            if hist is not None:
                counts = {c.key.lower(): v.to_int(c.value) for c in hist.children}
                g.remapped_rows.histogram = {k: n for k, n in counts.items() if isinstance(n, int)}


def _links_and_processes(g: Gpu, t: _Node) -> None:
    """PCIe and the processes."""
    link = ("PCI", "GPU Link Info")
    g.pcie.gen_current = v.to_int(t.get(*link, "PCIe Generation", "Current"))
    g.pcie.gen_max = v.to_int(t.get(*link, "PCIe Generation", "Max"))
    g.pcie.width_current = v.to_int(t.get(*link, "Link Width", "Current"))
    g.pcie.width_max = v.to_int(t.get(*link, "Link Width", "Max"))
    g.pcie.replay_counter = v.to_int(t.get("PCI", "Replays Since Reset"))
    if g.pci_bus_id is None:
        g.pci_bus_id = v.to_str(t.get("PCI", "Bus Id"))

    procs = t.child("Processes")
    if procs is not None:
        g.processes = []
        for node in procs.children:
            if node.key.lower() == "process id":
                pid = v.to_int(node.value)
                if isinstance(pid, int):
                    g.processes.append(Process(pid=pid, name=node.get("Name"),
                                               used_memory_mib=v.to_int(node.get("Used GPU Memory"))))


def count(node: _Node | None, *path: str | tuple[str, ...]):
    """An error counter: a value that is there but is no count ("NaN", "lots", "0.5") is not known, never
    absent or zero (scan_fields names it)."""
    text = node.get(*path) if node is not None else None
    out = v.to_int(text)
    if text is None or out is v.UNSUPPORTED or (out is not None and v.COUNT.match(text.strip())):
        return out
    return None


def _ecc_from_tree(g: Gpu, t: _Node) -> None:
    e = g.ecc
    e.mode_current = v.to_bool(t.get("ECC Mode", "Current"))
    e.mode_pending = v.to_bool(t.get("ECC Mode", "Pending"))
    errs = t.child("ECC Errors")
    if errs is None:
        return
    for scope in ("volatile", "aggregate"):
        s = errs.child(scope.capitalize())
        if s is None:
            continue
        if s.child("Single Bit", "Double Bit") is not None:
            # pre-R510 layout: Single Bit / Double Bit, each with per-unit counters and a Total
            sbe = s.child("Single Bit")
            dbe = s.child("Double Bit")
            dram_c = count(sbe, "Device Memory") if sbe else None
            dram_u = count(dbe, "Device Memory") if dbe else None
            tot_c = count(sbe, "Total") if sbe else None
            tot_u = count(dbe, "Total") if dbe else None
            sram_c = _difference(tot_c, dram_c)
            sram_u = _difference(tot_u, dram_u)
        else:
            dram_c = count(s, "DRAM Correctable")
            dram_u = count(s, "DRAM Uncorrectable")
            sram_c = count(s, "SRAM Correctable")
            sram_u = count(s, "SRAM Uncorrectable")
            if sram_u is None:
                sram_u = v.add_ints(count(s, "SRAM Uncorrectable Parity"),
                                    count(s, "SRAM Uncorrectable SEC-DED"))
        setattr(e, f"{scope}_dram_corrected", dram_c)
        setattr(e, f"{scope}_dram_uncorrected", dram_u)
        setattr(e, f"{scope}_sram_corrected", sram_c)
        setattr(e, f"{scope}_sram_uncorrected", sram_u)
    e.sram_threshold_exceeded = v.to_bool(errs.get("Aggregate", "SRAM Threshold Exceeded"))


_TEXT_REASON_NAMES = {
    "idle": "gpu_idle",
    "applications clocks setting": "applications_clocks_setting",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown",
    "display clock setting": "display_clocks_setting",
}


def _text_reasons(section: _Node) -> list[str]:
    active: list[str] = []

    def walk(node: _Node) -> None:
        for c in node.children:
            name = _TEXT_REASON_NAMES.get(c.key.lower())
            if name and v.to_bool(c.value) is True:
                active.append(name)
            walk(c)

    walk(section)
    return active


def _reset_status(reset_required: str | None, drain_and_reset: str | None) -> str | None:
    """Pre-R570 drivers print 'GPU Reset Status'; map it onto the recovery-action codes."""
    if v.to_bool(drain_and_reset) is True:
        return "drain_and_reset"
    required = v.to_bool(reset_required)
    if required is True:
        return "gpu_reset"
    if required is False:
        return "none"
    return None


def _difference(total: object, part: object) -> object:
    if isinstance(total, int) and isinstance(part, int):
        return max(total - part, 0)
    return total if not isinstance(total, int) else None


# ---------------------------------------------------------------- default table
_TABLE_TOP = re.compile(r"Driver Version:\s*(?P<driver>[\d.]+)\s+CUDA Version:\s*(?P<cuda>[\d.]+|N/A)")
_TABLE_GPU = re.compile(
    r"^\|\s+(?P<idx>\d+)\s+(?P<name>.+?)\s+(?P<persist>On|Off)\s+\|\s+(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s+\S+\s+\|\s+(?P<ecc>\S+)\s+\|"
)
_TABLE_ROW2 = re.compile(
    r"^\|\s*(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>P\d+|\S+)\s+(?P<pwr>\S+)\s*/\s*(?P<cap>\S+)\s+\|\s+(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB\s+\|\s+(?P<util>\S+)\s+(?P<mode>.+?)\s+\|"
)
_TABLE_PROC = re.compile(r"^\|\s+(?P<gpu>\d+)\s+(?:\S+\s+\S+\s+)?(?P<pid>\d+)\s+(?P<type>[CG+]+)\s+(?P<name>.+?)\s+(?P<mem>\d+)MiB\s*\|")


def _read_table(text: str, snap: NodeSnapshot) -> None:
    """The default `nvidia-smi` table: enough for inventory, fan errors, temperatures and processes."""
    snap.partial = True
    m = _TABLE_TOP.search(text)
    if m:
        snap.driver_version = m.group("driver")
        snap.cuda_driver_version = v.to_str(m.group("cuda"))
    lines = text.splitlines()
    in_procs = False
    current: Gpu | None = None
    for line in lines:
        if "Processes:" in line:
            in_procs = True
            continue
        if in_procs:
            pm = _TABLE_PROC.match(line)
            if pm:
                gpu = next((g for g in snap.gpus if g.index == int(pm.group("gpu"))), None)
                if gpu is not None:
                    gpu.processes = (gpu.processes or []) + [
                        Process(pid=int(pm.group("pid")), name=pm.group("name").strip(),
                                used_memory_mib=int(pm.group("mem")))]
            continue
        gm = _TABLE_GPU.match(line)
        if gm:
            name = gm.group("name").strip()
            current = Gpu(index=int(gm.group("idx")), pci_bus_id=gm.group("pci"),
                          name=name if not name.endswith("...") else name,
                          persistence_mode=gm.group("persist") == "On")
            ecc = v.to_int(gm.group("ecc"))
            current.ecc.volatile_dram_uncorrected = ecc
            current.processes = []
            snap.gpus.append(current)
            continue
        rm = _TABLE_ROW2.match(line)
        if rm and current is not None:
            fan = rm.group("fan")
            current.temperature.fan_error = "ERR" in fan.upper() or None
            current.temperature.gpu_c = v.to_int(rm.group("temp"))
            current.performance_state = v.to_str(rm.group("perf"))
            current.power.draw_w = v.to_float(rm.group("pwr"))
            current.power.limit_w = v.to_float(rm.group("cap"))
            current.memory_used_mib = int(rm.group("used"))
            current.memory_total_mib = int(rm.group("total"))
            current.utilization_gpu_pct = v.to_int(rm.group("util"))
            current.compute_mode = _table_mode(rm.group("mode"))
            current = None
    if "No running processes found" in text:
        for gpu in snap.gpus:
            gpu.processes = []


def _table_mode(text: str) -> str:
    return {"E. Process": "Exclusive_Process", "E. Thread": "Exclusive_Thread", "Prohibited": "Prohibited"}.get(
        text.strip(), text.strip())


# ---------------------------------------------------------------- nvidia-smi nvlink -s
_NVLINK_GPU = re.compile(r"^GPU (?P<idx>\d+): (?P<name>.+?) \(UUID: (?P<uuid>[^)]+)\)")
_NVLINK_LINK = re.compile(r"^\s+Link (?P<link>\d+): (?P<state>.+?)\s*$")


def _read_nvlink_status(text: str, snap: NodeSnapshot) -> None:
    snap.partial = True
    current: Gpu | None = None
    for line in text.splitlines():
        gm = _NVLINK_GPU.match(line)
        if gm:
            current = Gpu(index=int(gm.group("idx")), name=gm.group("name"), uuid=gm.group("uuid"), nvlinks=[])
            snap.gpus.append(current)
            continue
        lm = _NVLINK_LINK.match(line)
        if lm and current is not None and isinstance(current.nvlinks, list):
            state = lm.group("state")
            inactive = "inactive" in state.lower()
            speed = None if inactive else v.to_float(state)
            current.nvlinks.append(NvLink(link=int(lm.group("link")), active=not inactive,
                                          speed_gbps=speed if isinstance(speed, float) else None))
