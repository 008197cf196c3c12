"""InfiniBand and RoCE ports from sysfs (`/sys/class/infiniband/<device>/ports/<n>/`): state, physical
state, rate, link layer and the error counters, as the kernel's ib_core shows them (what `ibstat` prints).

The error counters count since the driver loaded, so a count says nothing by itself: what moved since the
previous run does.  `remember` keeps each port's counters in a small file of the node's own (the health
check's state directory) and gives each port what grew since then; the check judges only that.
"""

from __future__ import annotations

import json
import os
import re
import time

from .snapshot import IbPort, IbState

# the counters whose growth the check judges (data/ib_counters.toml says how much of each is too much)
COUNTERS = ("link_downed", "symbol_error", "port_rcv_errors", "link_error_recovery", "local_link_integrity_errors",
            "excessive_buffer_overrun_errors")
_RATE = re.compile(r"^\s*(?P<gbps>\d{1,6}(?:\.\d{1,6})?)\s*Gb/sec", re.ASCII)
# "4: ACTIVE", "5: LinkUp", "7: Phy Test"; a name alone is read too
_CODED = re.compile(r"^\s*(?:(?P<code>\d{1,3})\s*:\s*)?(?P<name>[A-Za-z][A-Za-z _]{0,40}?)\s*$", re.ASCII)
_COUNT = re.compile(r"^[0-9]{1,20}$")   # a 64-bit counter as the kernel prints it
_PORT = re.compile(r"^[0-9]{1,5}$")
LINK_LAYERS = ("InfiniBand", "Ethernet")


def _text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read(256).strip()
    except OSError:
        return None


def _coded(text: str | None) -> tuple[int | None, str] | None:
    """"4: ACTIVE" -> (4, "ACTIVE"), "DOWN" -> (None, "DOWN"); None where the text does not read so (no
    such file, bytes no kernel prints)."""
    m = _CODED.match(text) if text is not None else None
    if m is None:
        return None
    return (int(m.group("code")) if m.group("code") else None), m.group("name")


def _odd(where: str, name: str, text: str | None) -> str:
    return f"{where} {name}: " + ("not there" if text is None else f"value not read as given ({text[:40]!r})")


def read_ib(root: str = "/sys/class/infiniband") -> IbState:
    """Every port of every device under `root`; a root that does not exist is an empty state (a node
    without an HCA: the check then says whether it expected ports)."""
    state = IbState(root=root)
    try:
        devices = sorted(os.listdir(root))
    except FileNotFoundError:
        state.present = False
        return state
    except OSError as exc:
        state.unread.append(f"{root}: {exc.strerror or exc}")
        return state
    state.devices = devices
    for device in devices:
        ports_dir = os.path.join(root, device, "ports")
        try:
            ports = sorted(os.listdir(ports_dir), key=lambda p: (not _PORT.match(p), int(p) if _PORT.match(p) else 0, p))
        except OSError as exc:
            state.unread.append(f"{device}: no ports ({exc.strerror or exc})")
            continue
        for name in ports:
            if not _PORT.match(name):
                continue
            state.ports.append(_port(state, device, int(name), os.path.join(ports_dir, name)))
    return state


def _port(state: IbState, device: str, number: int, base: str) -> IbPort:
    """One port's files; a value that does not read as the kernel prints it is said in `state.unread` and
    left unknown (a state never read is neither up nor down, a counter never read is never zero)."""
    where = f"{device} port {number}"
    port = IbPort(device=device, port=number)
    for name in ("state", "phys_state"):
        text = _text(os.path.join(base, name))
        coded = _coded(text)
        if coded is None:
            state.unread.append(_odd(where, name, text))
            continue
        code, word = coded
        if name == "state":
            port.state_code, port.state = code, word
        else:
            port.phys_code, port.phys_state = code, word
    rate = _text(os.path.join(base, "rate"))
    port.rate = rate or ""
    m = _RATE.match(port.rate)
    port.rate_gbps = float(m.group("gbps")) if m else None
    if m is None:
        state.unread.append(_odd(where, "rate", rate))
    layer = _text(os.path.join(base, "link_layer"))
    if layer in LINK_LAYERS:
        port.link_layer = layer
    else:
        state.unread.append(_odd(where, "link_layer", layer))
    for counter in COUNTERS:
        value = _text(os.path.join(base, "counters", counter))
        if value is not None and _COUNT.match(value):
            port.counters[counter] = int(value)
        elif value is not None:
            state.unread.append(_odd(where, f"counters/{counter}", value))
    return port


def remember(state: IbState, path: str, now: float | None = None) -> None:
    """Each port's counters against those the previous run kept in `path`: what grew goes into the port
    (`grew`, over `since_s`); this run's counters are kept for the next.  A counter that went down (the
    driver reloaded, the HCA reset) starts again from its new value: nothing grew."""
    now = time.time() if now is None else now
    try:
        with open(path, encoding="utf-8") as fh:
            kept = json.load(fh)
        ports, then = kept.get("ports", {}), float(kept["at"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        ports, then = {}, None
    for port in state.ports:
        before = ports.get(f"{port.device}/{port.port}") if isinstance(ports, dict) else None
        if not isinstance(before, dict) or then is None:
            continue
        port.since_s = round(now - then, 1)
        for counter, value in port.counters.items():
            old = before.get(counter)
            if isinstance(old, int) and value > old:
                port.grew[counter] = value - old
    try:
        from ..common.safefile import write_file

        write_file(path, json.dumps({"at": now, "ports": {f"{p.device}/{p.port}": p.counters for p in state.ports}}),
                   mode=0o600)
    except OSError:
        pass  # not kept: the next run judges no growth, never a false one


_CA = re.compile(r"^CA '(?P<name>[^']+)'")
_FIELD = re.compile(r"^\s+(?P<key>[A-Za-z][A-Za-z0-9 ]*):\s*(?P<value>.*)$")


def read_ibstat(text: str, source: str = "ibstat") -> IbState:
    """`ibstat`'s output (infiniband-diags) as the same ports: state, physical state, rate and link layer;
    no error counters (ibstat prints none)."""
    state = IbState(root=source)
    device, port = None, None
    for line in text.splitlines():
        m = _CA.match(line)
        if m:
            device, port = m.group("name"), None
            state.devices.append(device)
            continue
        f = _FIELD.match(line)
        if not f or device is None:
            continue
        key, value = f.group("key").strip(), f.group("value").strip()
        if key.startswith("Port ") and key[5:].isdigit():
            port = IbPort(device=device, port=int(key[5:]))
            state.ports.append(port)
        elif port is not None:
            if key == "State":
                port.state = value.upper()
            elif key == "Physical state":
                port.phys_state = value
            elif key == "Rate":
                port.rate = f"{value} Gb/sec"
                port.rate_gbps = float(value) if re.fullmatch(r"\d+(\.\d+)?", value) else None
            elif key == "Link layer":
                port.link_layer = value
    if not state.devices:
        state.unread.append(f"{source}: no CA in it (not ibstat's output?)")
    return state
