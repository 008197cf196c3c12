"""Reader for `nvidia-smi -q -x` (DTD v10 to v13, R410 to R590)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from . import values as v
from .errors import ReportError
from .snapshot import UNSUPPORTED, Gpu, NodeSnapshot, NvLink, Process


def _t(el: ET.Element | None, path: str) -> str | None:
    if el is None:
        return None
    found = el.find(path)
    if found is None:
        return None
    text = (found.text or "").strip()
    return text if text else ("" if len(found) else None)


def _first(el: ET.Element, *paths: str) -> str | None:
    for p in paths:
        value = _t(el, p)
        if value is not None:
            return value
    return None


def read_xml(text: str, source: str = "nvidia-smi -q -x") -> NodeSnapshot:
    try:
        root = ET.fromstring(text.encode("utf-8", "replace") if isinstance(text, str) else text)
    except ET.ParseError as exc:
        raise ReportError(f"nvidia-smi XML is not well-formed: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ReportError(f"not an nvidia-smi XML report (root element <{root.tag}>)")
    snap = NodeSnapshot(source=source)
    snap.timestamp = _t(root, "timestamp")
    snap.driver_version = v.to_str(_t(root, "driver_version"))
    snap.cuda_driver_version = v.to_str(_t(root, "cuda_version"))
    attached = v.to_int(_t(root, "attached_gpus"))
    snap.attached_gpus = attached if isinstance(attached, int) else None
    for index, el in enumerate(root.findall("gpu")):
        gpu = _gpu(index, el)
        v.scan_fields(gpu, _leaves(el))
        snap.gpus.append(gpu)
    if snap.attached_gpus is not None and snap.attached_gpus > len(snap.gpus):
        snap.partial = True
    return snap


def _leaves(el: ET.Element, path: str = ""):
    """Every leaf of the GPU's block as (path of element names, text)."""
    for child in el:
        here = f"{path}/{child.tag}" if path else child.tag
        if len(child):
            yield from _leaves(child, here)
        else:
            yield here, child.text


def _gpu(index: int, el: ET.Element) -> Gpu:
    g = Gpu(index=index, pci_bus_id=el.get("id"))
    _identity(g, el)
    _thermal_power(g, el)
    _clocks(g, el)
    _ecc(g, el)
    _pages_and_rows(g, el)
    _links_and_processes(g, el)
    return g


def _identity(g: Gpu, el: ET.Element) -> None:
    """Name, UUID, serial, firmware, modes, utilisation, the recovery action and memory."""
    g.minor_number = v.to_int(_t(el, "minor_number"))
    g.name = v.to_str(_t(el, "product_name"))
    g.architecture = v.to_str(_t(el, "product_architecture"))
    g.uuid = v.to_str(_t(el, "uuid"))
    g.serial = v.to_str(_t(el, "serial"))
    g.vbios = v.to_str(_t(el, "vbios_version"))
    g.gsp_firmware = v.to_str(_t(el, "gsp_firmware_version"))
    g.inforom.image = v.to_str(_t(el, "inforom_version/img_version"))
    g.inforom.oem = v.to_str(_t(el, "inforom_version/oem_object"))
    g.inforom.ecc = v.to_str(_t(el, "inforom_version/ecc_object"))
    g.inforom.power = v.to_str(_t(el, "inforom_version/pwr_object"))
    g.persistence_mode = v.to_bool(_t(el, "persistence_mode"))
    g.compute_mode = v.to_str(_t(el, "compute_mode"))
    g.mig_mode_current = v.to_bool(_t(el, "mig_mode/current_mig"))
    g.mig_mode_pending = v.to_bool(_t(el, "mig_mode/pending_mig"))
    g.performance_state = v.to_str(_t(el, "performance_state"))
    g.utilization_gpu_pct = v.to_int(_t(el, "utilization/gpu_util"))
    g.recovery_action = v.to_recovery_action(_t(el, "gpu_recovery_action"))
    if g.recovery_action is None:
        reset = v.to_bool(_t(el, "gpu_reset_status/reset_required"))
        drain = v.to_bool(_t(el, "gpu_reset_status/drain_and_reset_recommended"))
        g.recovery_action = "drain_and_reset" if drain is True else (
            "gpu_reset" if reset is True else ("none" if reset is False else None))
    g.memory_total_mib = v.to_int(_t(el, "fb_memory_usage/total"))
    g.memory_used_mib = v.to_int(_t(el, "fb_memory_usage/used"))


def _thermal_power(g: Gpu, el: ET.Element) -> None:
    """Temperatures and their thresholds (absolute, or relative to T.Limit from v13), the fan, power."""
    temp = g.temperature
    temp.gpu_c = v.to_int(_t(el, "temperature/gpu_temp"))
    temp.memory_c = v.to_int(_t(el, "temperature/memory_temp"))
    tlimit = v.to_int(_t(el, "temperature/gpu_temp_tlimit"))
    if isinstance(tlimit, int) and isinstance(temp.gpu_c, int):
        limit = temp.gpu_c + tlimit  # v13 prints thresholds relative to T.Limit
        temp.shutdown_c = v.below_limit(limit, v.to_int(_t(el, "temperature/gpu_temp_max_tlimit_threshold")))
        temp.slowdown_c = v.below_limit(limit, v.to_int(_t(el, "temperature/gpu_temp_slow_tlimit_threshold")))
        temp.gpu_max_operating_c = v.below_limit(limit, v.to_int(_t(el, "temperature/gpu_temp_max_gpu_tlimit_threshold")))
    else:
        temp.shutdown_c = v.to_int(_t(el, "temperature/gpu_temp_max_threshold"))
        temp.slowdown_c = v.to_int(_t(el, "temperature/gpu_temp_slow_threshold"))
        temp.gpu_max_operating_c = v.to_int(_t(el, "temperature/gpu_temp_max_gpu_threshold"))
        temp.memory_max_operating_c = v.to_int(_t(el, "temperature/gpu_temp_max_mem_threshold"))
    fan = _t(el, "fan_speed")
    temp.fan_error = True if fan and "err" in fan.lower() else (UNSUPPORTED if v.is_na(fan) else (False if fan else None))

    pr = el.find("gpu_power_readings")
    if pr is None:
        pr = el.find("power_readings")
    if pr is not None:
        p = g.power
        p.draw_w = v.to_float(_first(pr, "power_draw", "average_power_draw", "instant_power_draw"))
        p.limit_w = v.to_float(_first(pr, "requested_power_limit", "power_limit"))
        p.default_limit_w = v.to_float(_t(pr, "default_power_limit"))
        p.enforced_limit_w = v.to_float(_first(pr, "enforced_power_limit", "current_power_limit"))
        p.min_limit_w = v.to_float(_t(pr, "min_power_limit"))
        p.max_limit_w = v.to_float(_t(pr, "max_power_limit"))


def _clocks(g: Gpu, el: ET.Element) -> None:
    """Clocks now, their maxima and application clocks, and why they are held back."""
    c = g.clocks
    c.graphics_mhz = v.to_int(_t(el, "clocks/graphics_clock"))
    c.sm_mhz = v.to_int(_t(el, "clocks/sm_clock"))
    c.memory_mhz = v.to_int(_t(el, "clocks/mem_clock"))
    c.max_graphics_mhz = v.to_int(_t(el, "max_clocks/graphics_clock"))
    c.max_sm_mhz = v.to_int(_t(el, "max_clocks/sm_clock"))
    c.max_memory_mhz = v.to_int(_t(el, "max_clocks/mem_clock"))
    c.app_graphics_mhz = v.to_int(_t(el, "applications_clocks/graphics_clock"))
    c.app_memory_mhz = v.to_int(_t(el, "applications_clocks/mem_clock"))
    c.default_app_graphics_mhz = v.to_int(_t(el, "default_applications_clocks/graphics_clock"))
    c.default_app_memory_mhz = v.to_int(_t(el, "default_applications_clocks/mem_clock"))

    reasons = el.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if reasons is None:
        reasons, prefix = el.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
    if reasons is not None:
        g.clock_event_reasons = [
            child.tag[len(prefix):] for child in reasons
            if child.tag.startswith(prefix) and v.to_bool(child.text) is True
        ]


def _pages_and_rows(g: Gpu, el: ET.Element) -> None:
    """Retired pages and remapped rows (an element there but empty: not supported)."""
    rp = el.find("retired_pages")
    if rp is not None:
        g.retired_pages.single_bit = v.to_int(_first(rp, "multiple_single_bit_retirement/retired_count"))
        g.retired_pages.double_bit = v.to_int(_first(rp, "double_bit_retirement/retired_count"))
        g.retired_pages.pending = v.to_bool(_first(rp, "pending_blacklist", "pending_retirement"))
        if g.retired_pages.single_bit is None and rp.find("multiple_single_bit_retirement") is not None:
            g.retired_pages.single_bit = UNSUPPORTED  # the element is there but empty: not supported
        if g.retired_pages.double_bit is None and rp.find("double_bit_retirement") is not None:
            g.retired_pages.double_bit = UNSUPPORTED

    rr = el.find("remapped_rows")
    if rr is not None:
        if len(rr) == 0:
            g.remapped_rows.correctable = g.remapped_rows.uncorrectable = UNSUPPORTED
            g.remapped_rows.pending = g.remapped_rows.failure = UNSUPPORTED
            g.remapped_rows.histogram = UNSUPPORTED
        else:
            g.remapped_rows.correctable = v.to_int(_t(rr, "remapped_row_corr"))
            g.remapped_rows.uncorrectable = v.to_int(_t(rr, "remapped_row_unc"))
            g.remapped_rows.pending = v.to_bool(_t(rr, "remapped_row_pending"))
            g.remapped_rows.failure = v.to_bool(_t(rr, "remapped_row_failure"))
            hist = rr.find("row_remapper_histogram")
            if hist is not None:
                counts = {child.tag.replace("row_remapper_histogram_", ""): v.to_int(child.text) for child in hist}
                g.remapped_rows.histogram = {k: n for k, n in counts.items() if isinstance(n, int)}


def _links_and_processes(g: Gpu, el: ET.Element) -> None:
    """PCIe, processes, the NVLink fabric and the links."""
    link = "pci/pci_gpu_link_info"
    g.pcie.gen_current = v.to_int(_t(el, f"{link}/pcie_gen/current_link_gen"))
    g.pcie.gen_max = v.to_int(_t(el, f"{link}/pcie_gen/max_link_gen"))
    g.pcie.width_current = v.to_int(_t(el, f"{link}/link_widths/current_link_width"))
    g.pcie.width_max = v.to_int(_t(el, f"{link}/link_widths/max_link_width"))
    g.pcie.replay_counter = v.to_int(_t(el, "pci/replay_counter"))
    if g.pci_bus_id is None:
        g.pci_bus_id = v.to_str(_t(el, "pci/pci_bus_id"))

    procs = el.find("processes")
    if procs is not None:
        g.processes = []
        for p_el in procs.findall("process_info"):
            pid = v.to_int(_t(p_el, "pid"))
            if isinstance(pid, int):
                g.processes.append(Process(pid=pid, name=_t(p_el, "process_name"),
                                           used_memory_mib=v.to_int(_t(p_el, "used_memory"))))
    fabric = el.find("fabric")
    if fabric is not None:
        g.fabric = v.to_fabric(_t(fabric, "state"), _t(fabric, "status"), _t(fabric, "cliqueId"),
                               _t(fabric, "clusterUuid"),
                               {key: _t(fabric, f"health/{key}") for key in (
                                   "summary", "bandwidth", "route_recovery_in_progress", "route_unhealthy",
                                   "access_timeout_recovery", "incorrect_configuration")})
    nvlink = el.find("nvlink")
    if nvlink is not None:
        links = []
        for i, l_el in enumerate(nvlink.findall("link")):
            state = _t(l_el, "state") or ""
            links.append(NvLink(link=i, active=v.to_bool(state) is True))
        g.nvlinks = links


def _ecc(g: Gpu, el: ET.Element) -> None:
    e = g.ecc
    e.mode_current = v.to_bool(_t(el, "ecc_mode/current_ecc"))
    e.mode_pending = v.to_bool(_t(el, "ecc_mode/pending_ecc"))
    errs = el.find("ecc_errors")
    if errs is None:
        return
    for scope in ("volatile", "aggregate"):
        s = errs.find(scope)
        if s is None:
            continue
        if s.find("single_bit") is not None or s.find("double_bit") is not None:
            dram_c = v.to_int(_t(s, "single_bit/device_memory"))
            dram_u = v.to_int(_t(s, "double_bit/device_memory"))
            tot_c = v.to_int(_t(s, "single_bit/total"))
            tot_u = v.to_int(_t(s, "double_bit/total"))
            sram_c = tot_c - dram_c if isinstance(tot_c, int) and isinstance(dram_c, int) else None
            sram_u = tot_u - dram_u if isinstance(tot_u, int) and isinstance(dram_u, int) else None
        else:
            dram_c = v.to_int(_t(s, "dram_correctable"))
            dram_u = v.to_int(_t(s, "dram_uncorrectable"))
            sram_c = v.to_int(_t(s, "sram_correctable"))
            sram_u = v.to_int(_t(s, "sram_uncorrectable"))
            if sram_u is None:
                sram_u = v.add_ints(v.to_int(_t(s, "sram_uncorrectable_parity")),
                                    v.to_int(_t(s, "sram_uncorrectable_secded")))
        setattr(e, f"{scope}_dram_corrected", dram_c)
        setattr(e, f"{scope}_dram_uncorrected", dram_u)
        setattr(e, f"{scope}_sram_corrected", sram_c)
        setattr(e, f"{scope}_sram_uncorrected", sram_u)
    e.sram_threshold_exceeded = v.to_bool(_t(errs, "aggregate/sram_threshold_exceeded"))
