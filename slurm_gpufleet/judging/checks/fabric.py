"""NVLink fabric: each GPU's registration with the NVLink fabric and the health the driver reports for
it (GB200/GB300 NVL72 racks, HGX boards with NVSwitch), and nvidia-fabricmanager where the board needs it.

| what NVML / nvidia-smi reports                                  | finding                         |
| not supported / N/A (one GPU, no NVSwitch)                      | none                            |
| NOT_STARTED                                                     | drain                           |
| IN_PROGRESS                                                     | warn for fabric_grace_s, drain  |
| COMPLETED, status not success                                   | drain                           |
| COMPLETED into clique 0 with a zero cluster UUID (multi-node)   | drain                           |
| route unhealthy, access-timeout recovery, incorrect config      | drain (naming the cause)        |
| route recovery in progress                                      | warn                            |
| degraded bandwidth / limited capacity                           | fabric_degraded (warn)          |
| partition not assigned (multi-node NVLink system)               | drain (warn on other boards)    |
| global fabric manager disconnected                              | warn                            |
| any value no NVML or nvidia-smi release defines (garbage Status,| warn "unknown fabric value",    |
|   a Health row neither Yes nor No, a 2-bit field of 3, ...)     |   one per field, never success  |

Every finding names its GPU and the field.  Its message starts with the fault's words, so that the same
fault on several trays of one rack reads the same (remedy/escalation.py looks for that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...catalogs import find_model
from ...readers.snapshot import UNSUPPORTED, known
from ..findings import Finding
from ._util import readable_gpus

if TYPE_CHECKING:
    from . import Context

NAME = "fabric"
ORDER = 105

ZERO_UUID = "00000000-0000-0000-0000-000000000000"
# the causes of "incorrect configuration" an admin reads; incompatible firmware is a firmware matter too
CONFIG_WORDS = {"insufficient_nvlinks": "insufficient NVLinks", "incompatible_gpu_fw": "incompatible GPU firmware",
                "no_partition": "no partition", "invalid_location": "invalid location",
                "incorrect_system_guid": "incorrect system GUID", "incorrect_chassis_serial": "incorrect chassis serial",
                "gpu_state_invalid": "GPU state invalid"}


def check(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    for g in readable_gpus(ctx.snapshot):
        out += _gpu(ctx, g)
    out += _fabric_manager(ctx)
    return out


def _gpu(ctx: Context, g) -> list[Finding]:
    pol, fab = ctx.policy, g.fabric
    state = fab.state
    if state is None or state is UNSUPPORTED:
        return []

    def f(severity: str, message: str, detail: str, action: str = "drain") -> Finding:
        return Finding(NAME, severity, action, g.index, message, detail)

    def unknown(field: str, value: object, why: str = "a value no NVML or nvidia-smi release defines") -> Finding:
        return f("warn", "unknown fabric value", f"fabric {field} {str(value).removeprefix('unknown:')!r}: {why}",
                 "watch")

    if not isinstance(state, str) or state.startswith("unknown:"):
        return [unknown("state", state, "not one NVML defines (not started, in progress, completed): not judged")]
    if state == "not_started":
        return [f("drain", "fabric registration not started",
                  "fabric.state NOT_STARTED: the NVLink fabric manager / subnet manager never registered this GPU")]
    if state == "in_progress":
        up = known(ctx.snapshot.uptime_s)
        if isinstance(up, int | float) and up > pol.fabric_grace_s:
            return [f("drain", "fabric registration stuck in progress",
                      f"fabric.state IN_PROGRESS {up:.0f} s after boot (grace {pol.fabric_grace_s} s)")]
        return [f("warn", "fabric registration in progress",
                  f"fabric.state IN_PROGRESS, within {pol.fabric_grace_s} s of boot" if up is not None
                  else "fabric.state IN_PROGRESS; time since boot unknown, so not yet judged stuck", "watch")]
    out: list[Finding] = [unknown(*item.split(": ", 1)) for item in fab.unknown]
    if fab.read_as and fab.read_as.startswith("v1 ("):
        out.append(f("warn", "fabric health not read", f"fabric read as {fab.read_as}: its health fields are not "
                     "judged on this driver", "watch"))
    status = known(fab.status)
    if isinstance(status, str) and status.startswith("unknown:"):
        out.append(unknown("status", status, "never taken as success"))
        status = None
    elif status and status != "success":
        return [f("drain", f"fabric registration failed: {status.replace('_', ' ')}",
                  f"fabric.state COMPLETED with fabric.status {status}: the GPU is not in the NVLink fabric")]
    if _multinode(ctx, g) and fab.clique_id == 0 and known(fab.cluster_uuid) in (ZERO_UUID, None):
        return [f("drain", "fabric clique 0 with a zero cluster UUID",
                  "fabric.cliqueId 0, fabric.clusterUuid all zero on a multi-node NVLink system: "
                  "registration completed without joining a domain")]
    if fab.route_unhealthy:
        out.append(f("drain", "fabric route unhealthy", "fabric.health route_unhealthy TRUE"))
    if fab.access_timeout_recovery:
        out.append(f("drain", "fabric access timeout recovery", "fabric.health access_timeout_recovery TRUE"))
    config = known(fab.incorrect_configuration)
    if config and config != "none":
        words = CONFIG_WORDS.get(config, config.removeprefix("unknown:").replace("_", " "))
        if config.startswith("unknown:"):
            out.append(unknown("health incorrect_configuration", words, "a cause NVML does not define"))
        else:
            out.append(f("drain", f"fabric incorrect configuration: {words}",
                         f"fabric.health incorrect_configuration {config}", "inspect_hardware"))
            if config == "incompatible_gpu_fw":
                out.append(Finding("firmware", "drain", "fix_config", g.index, "GPU firmware incompatible with the fabric",
                                   "fabric.health incorrect_configuration incompatible_gpu_fw: update the GPU's "
                                   "firmware to the fabric's release"))
    if fab.route_recovery:
        out.append(f("warn", "fabric route recovery in progress", "fabric.health route_recovery TRUE", "watch"))
    summary = known(fab.summary)
    if fab.degraded_bandwidth or summary == "limited_capacity":
        out.append(f(pol.fabric_degraded, "fabric bandwidth degraded",
                     "fabric.health degraded_bandwidth TRUE" if fab.degraded_bandwidth
                     else "fabric.health summary LIMITED_CAPACITY",
                     "drain" if pol.fabric_degraded == "drain" else "watch"))
    if fab.partition_assigned is False:
        multinode = _multinode(ctx, g)
        out.append(f("drain" if multinode else "warn", "fabric partition not assigned",
                     "fabric.health partition_assigned FALSE: the fabric placed the GPU in no partition, so no NVLink "
                     "peer can reach it" + ("" if multinode else " (judged on multi-node NVLink systems)"),
                     "drain" if multinode else "watch"))
    if fab.gfm_connected is False:
        out.append(f("warn", "global fabric manager disconnected", "fabric.health gfm_state DISCONNECTED: the GPU "
                     "keeps its routes, but the fabric cannot change them", "watch"))
    if summary and summary.startswith("unknown:"):
        out.append(unknown("health summary", summary))
    elif summary == "unhealthy" and not any(x.severity == "drain" for x in out):
        out.append(f("drain", "fabric health unhealthy", "fabric.health summary UNHEALTHY with no field naming why"))
    return out


def _multinode(ctx: Context, g) -> bool:
    if ctx.policy.fabric_multinode is not None:
        return ctx.policy.fabric_multinode
    model = find_model(known(g.name), ctx.models)
    return bool(model and model.multinode_nvlink)


def _fabric_manager(ctx: Context) -> list[Finding]:
    """HGX boards (8 GPUs of a model with NVSwitch on the board) need nvidia-fabricmanager; GB200/GB300
    compute trays have no fabric manager of their own and are never judged here."""
    snap, pol = ctx.snapshot, ctx.policy
    fm = snap.host_facts.fabric_manager if snap.host_facts is not None else None
    if fm is None or not needs_fabric_manager(snap, ctx.models):
        return []
    up = known(snap.uptime_s)
    in_grace = isinstance(up, int | float) and up <= pol.fabric_manager_grace_s
    # a drain only once confirmed: `fabric_manager_probes` failed probes in a row, `fabric_manager_probe_s`
    # apart (one systemctl answer can catch a restart in its stride); a caller with no memory of earlier
    # probes (a one-off `check`) has this one
    probes = fm.failed_probes if fm.failed_probes is not None else 1
    confirmed = probes >= pol.fabric_manager_probes
    seen = "" if confirmed else f" (failed probe {probes} of {pol.fabric_manager_probes}, " \
                                f"{pol.fabric_manager_probe_s} s apart, before a drain)"
    if not fm.installed:
        return [Finding(NAME, "drain" if confirmed and not in_grace else "warn", "fabric_manager", None,
                        "nvidia-fabricmanager not installed",
                        "an HGX board with NVSwitch needs it: NVLink peer traffic fails without it" + seen)]
    if fm.active != "active":
        return [Finding(NAME, "drain" if confirmed and not in_grace else "warn", "fabric_manager", None,
                        f"nvidia-fabricmanager {fm.active or 'not running'}",
                        f"systemd ActiveState {fm.active}" + (f", within {pol.fabric_manager_grace_s} s of boot"
                                                               if in_grace else "") + seen)]
    if fm.restarts_in_window is not None:
        if fm.restarts_in_window >= pol.fabric_manager_flap_restarts:
            return [Finding(NAME, "drain", "fabric_manager", None, "nvidia-fabricmanager flapping",
                            f"{fm.restarts_in_window} restarts within {pol.fabric_manager_flap_window_s} s (limit "
                            f"{pol.fabric_manager_flap_restarts})")]
    elif (fm.restarts or 0) >= pol.fabric_manager_flap_restarts and fm.active_since_s is not None \
            and fm.active_since_s <= pol.fabric_manager_flap_window_s:
        # no earlier probes to count restarts within the window: the restarts since boot with the latest
        # in it are the one evidence there is, and only a warning
        return [Finding(NAME, "warn", "fabric_manager", None, "nvidia-fabricmanager restarted recently",
                        f"{fm.restarts} restarts since boot, the latest {fm.active_since_s:.0f} s ago: flapping is "
                        f"judged on {pol.fabric_manager_flap_restarts} within {pol.fabric_manager_flap_window_s} s "
                        "across the health check's runs")]
    return []


def needs_fabric_manager(snap, models: tuple = ()) -> bool:
    """An HGX board: 8 GPUs or more, all of a model with NVSwitch on the board (data/gpu_models.toml).
    Only such a node asks systemd about nvidia-fabricmanager (one process more, so not on every node)."""
    gpus = [g for g in snap.gpus if not g.lost]
    if len(gpus) < 8:
        return False
    found = {find_model(known(g.name), models) for g in gpus}
    return all(m is not None and m.nvswitch_board for m in found)
