"""InfiniBand and RoCE links (readers/ib.py): the ports a node group expects ACTIVE and LinkUp at their rate,
and error counters that grew since the previous run (data/ib_counters.toml).

Only ports of the group's link layer (`ib_link_layer`: InfiniBand, or Ethernet on a RoCE fabric) count
towards `ib_ports` and the rate: an Ethernet port is never taken for an InfiniBand one, and `ib_exclude`
leaves devices out by name (globs: a management NIC, a front-end bond).  A missing HCA
or a port down drains; a port below `ib_rate_gbps` is `ib_degraded_action` (warn).  With `ib_ports` unset
the ports' state is not judged (a node without InfiniBand, a site that has not said), their counters are.
"""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING

from ...catalogs import ib_counters, mlx5_event
from ..findings import Finding
from ._util import current_boot

if TYPE_CHECKING:
    from . import Context

NAME = "infiniband"
ORDER = 115


def _kernel_lines(snap) -> list[Finding]:
    """The mlx5 driver's lines of failed cards and links in the current boot: one finding per kind and card."""
    events = snap.nic_events
    if not events:
        return []
    boot = current_boot(snap, events)
    seen: dict[tuple[str, str | None], list] = {}
    for e in events:
        if e.boot == boot:
            seen.setdefault((e.name, e.pci), []).append(e)
    out = []
    for (name, pci), evs in seen.items():
        row = mlx5_event(name)
        if row is None:
            continue
        what = f" ({evs[0].what})" if evs[0].what else ""
        out.append(Finding(NAME, row["severity"], row["action"], None, f"{row['message']}{what}",
                           f"{'PCI ' + pci if pci else 'a card'}, {len(evs)}x in the kernel log, first at line "
                           f"{evs[0].line}: {evs[0].raw.strip()[:200]} (source: {row['source']})"))
    return out


def _key(port) -> str:
    return f"{port.device}/{port.port}"


def network(findings: list[Finding]) -> dict:
    """What the node publishes of its network (summary `ib`, read by `fleet`): InfiniBand ports down (`d`),
    below their rate (`s`), whose error counters grew this run (`c`), and ports missing (`m`)."""
    out: dict = {}
    for f in findings:
        kind = f.extra.get("ib") if f.check == NAME and f.extra else None
        if kind == "m":
            out["m"] = f.extra["missing"]
        elif kind in ("d", "s", "c"):
            ports = out.setdefault(kind, [])
            if f.extra["port"] not in ports:
                ports.append(f.extra["port"])
    return out


def _where(port) -> str:
    return f"{port.device} port {port.port}"


def check(ctx: Context) -> list[Finding]:
    out = _kernel_lines(ctx.snapshot)
    ib = ctx.snapshot.ib
    pol = ctx.policy
    if ib is None:
        return out
    out += [Finding(NAME, "warn", "watch", None, "InfiniBand not readable", what) for what in ib.unread]
    ports = [p for p in ib.ports if not any(fnmatch.fnmatchcase(p.device, g) for g in pol.ib_exclude)]
    infiniband = [p for p in ports if p.link_layer.lower() == pol.ib_link_layer.lower()]
    # a port whose files did not read (said above, in ib.unread) is unknown: neither down nor missing
    layer_unknown = [p for p in ports if not p.link_layer]
    fabric = "InfiniBand" if pol.ib_link_layer == "InfiniBand" else "RoCE"
    if pol.ib_ports is not None:
        up = [p for p in infiniband if p.state.upper() == "ACTIVE" and p.phys_state.lower() == "linkup"]
        for p in infiniband:
            if p not in up and p.state and p.phys_state:
                out.append(Finding(NAME, "drain", "inspect_hardware", None, f"{fabric} {_where(p)} "
                                   f"{p.state or '?'}/{p.phys_state or '?'}",
                                   f"expected ACTIVE and LinkUp ({len(up)} of {pol.ib_ports} port(s) up under "
                                   f"{ib.root}): the cable, the transceiver, the HCA or the switch port",
                                   extra={"ib": "d", "port": _key(p)}))
        if len(infiniband) + len(layer_unknown) < pol.ib_ports:
            seen = ", ".join(sorted({p.device for p in infiniband})) or "none"
            out.append(Finding(NAME, "drain", "inspect_hardware", None,
                               f"{len(infiniband)} {fabric} port(s)"
                               + (f" and {len(layer_unknown)} of no known link layer" if layer_unknown else "")
                               + f", {pol.ib_ports} expected",
                               f"an HCA missing or its driver not loaded (devices: {seen}; under {ib.root})",
                               extra={"ib": "m", "missing": pol.ib_ports - len(infiniband) - len(layer_unknown)}))
        if pol.ib_rate_gbps is not None:
            for p in up:
                if p.rate_gbps is not None and p.rate_gbps < pol.ib_rate_gbps:
                    out.append(Finding(NAME, pol.ib_degraded_action, "watch" if pol.ib_degraded_action in
                                       ("ok", "warn") else "inspect_hardware", None,
                                       f"{fabric} {_where(p)} at {p.rate_gbps:g} Gb/s of {pol.ib_rate_gbps:g}",
                                       f"the link trained below its rate ({p.rate}): a cable, a transceiver "
                                       f"or a lane gone", extra={"ib": "s", "port": _key(p)}))
    before = {(p.device, p.port): p for p in (ctx.previous.ib.ports if ctx.previous and ctx.previous.ib else [])}
    for row in ib_counters():
        for p in ports:
            grew = p.grew.get(row["name"], 0)
            was = before.get((p.device, p.port))
            if p.since_s is None and was is not None:  # `check --previous SNAPSHOT`: against that one
                now, then = p.counters.get(row["name"]), was.counters.get(row["name"])
                grew = now - then if isinstance(now, int) and isinstance(then, int) and now > then else 0
            if grew >= row["grew_min"]:
                since = f" in {p.since_s:g} s" if p.since_s is not None else ""
                out.append(Finding(NAME, row["severity"], "watch", None,
                                   f"InfiniBand {_where(p)} {row['name']} +{grew}",
                                   f"{row['what']}: {grew} more since the previous run{since} "
                                   f"(now {p.counters.get(row['name'])}; source: {row['source']})",
                                   extra={"ib": "c", "port": _key(p)}))
    return out
