"""Driver: the node group's pinned version, kernel module vs user-space library, CUDA minimums."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...catalogs import compat
from ...readers.snapshot import known
from ..findings import Finding
from ..summary import OFF_STANDARD

if TYPE_CHECKING:
    from . import Context

NAME = "driver"
ORDER = 20

_NODE_ERRORS = {
    "driver_library_mismatch": ("reboot", "reload_driver", "driver/library version mismatch",
                                "the loaded kernel module and the NVML library differ (driver upgraded without reboot)"),
    "driver_not_loaded": ("reboot", "reload_driver", "NVIDIA driver not loaded",
                          "nvidia-smi/NVML cannot communicate with the NVIDIA kernel driver"),
    "library_missing": ("drain", "drain", "NVML library missing",
                        "libnvidia-ml.so (or pynvml) is not installed: no GPU can be checked"),
    "nvml_error": ("drain", "drain", "NVML failed to initialise", "nvmlInit failed"),
}


def check(ctx: Context) -> list[Finding]:
    snap, pol = ctx.snapshot, ctx.policy
    out: list[Finding] = []
    for code in snap.errors:
        if code in _NODE_ERRORS:
            severity, action, message, detail = _NODE_ERRORS[code]
            out.append(Finding(NAME, severity, action, None, message, snap.error_text or detail))
    driver = known(snap.driver_version)
    module = known(snap.kernel_module_version)
    if driver and module and driver != module and "driver_library_mismatch" not in snap.errors:
        out.append(Finding(NAME, "reboot", "reload_driver", None, f"kernel module {module} != library {driver}",
                           "the loaded kernel module is not the installed driver: reboot to load it"))
    if pol.driver_version and driver and driver != pol.driver_version:
        out.append(Finding(NAME, pol.driver_mismatch_severity, "fix_config", None,
                           f"driver {driver} not target {pol.driver_version}",
                           f"node group {'/'.join(pol.groups) or 'defaults'} pins driver {pol.driver_version}",
                           extra={OFF_STANDARD: "driver"}))
    cuda = known(snap.cuda_driver_version)
    if pol.min_cuda and cuda:
        try:
            below = compat.parse_version(cuda) < compat.parse_version(pol.min_cuda)
        except ValueError:
            below = False
        if below:
            out.append(Finding(NAME, "drain", "fix_config", None, f"CUDA {cuda} < required {pol.min_cuda}",
                               f"the driver supports CUDA up to {cuda}; the node group needs {pol.min_cuda}"))
    if driver and pol.require_cuda:
        try:
            compat.parse_version(driver)
        except ValueError:
            return out
        for need in pol.require_cuda:
            result = compat.evaluate(driver, cuda=need, today=ctx.today)
            if not result.compatible:
                out.append(Finding(NAME, "drain", "fix_config", None, f"driver {driver} cannot run CUDA {need}",
                                   "; ".join(result.problems)))
    return out
