"""The default backend: Slurm's own commands, argv lists (never a shell), text or --json output.

`scontrol --json` arrived in 23.02; on 22.05 the text of `scontrol show node` is parsed.
"""

from __future__ import annotations

import json
import re
import subprocess

from .base import NodeInfo, SlurmError

# In the multi-line `scontrol show node` text these keys take the rest of their line (values with spaces).
_WHOLE_LINE = ("OS=", "Reason=", "Comment=", "Extra=")
_REASON_SUFFIX = re.compile(r"\s*\[(?P<user>[^@\]]+)@[^\]]*\]\s*$")


class CommandBackend:
    name = "commands"

    def __init__(self, scontrol: str = "/usr/bin/scontrol", timeout: float = 10.0):
        self.scontrol = scontrol
        self.timeout = timeout
        self._json: bool | None = None

    def _run(self, *args: str) -> str:
        argv = [self.scontrol, *args]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout,
                                  stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise SlurmError(f"{self.scontrol} not found") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"scontrol {' '.join(args[:2])} timed out after {self.timeout:g} s") from None
        if proc.returncode != 0:
            msg = (proc.stderr or proc.stdout).strip().splitlines()
            raise SlurmError(f"scontrol {' '.join(args[:3])}: {msg[-1] if msg else 'exit ' + str(proc.returncode)}")
        return proc.stdout

    def has_json(self) -> bool:
        if self._json is None:
            version = self._run("--version").split()[-1]
            major, minor = (int(x) for x in version.split(".")[:2])
            self._json = (major, minor) >= (23, 2)
        return self._json

    def node(self, name: str) -> NodeInfo:
        if self.has_json():
            return parse_node_json(self._run("--json", "show", "node", name), name)
        return parse_node_text(self._run("show", "node", name))

    def drain(self, name: str, reason: str) -> None:
        self._run("update", f"nodename={name}", "state=drain", f"reason={reason}")

    def resume(self, name: str) -> None:
        self._run("update", f"nodename={name}", "state=resume")

    def set_reason(self, name: str, reason: str) -> None:
        self._run("update", f"nodename={name}", f"reason={reason}")

    def reboot_asap(self, name: str, reason: str, next_state: str = "RESUME") -> None:
        self._run("reboot", "ASAP", f"nextstate={next_state}", f"reason={reason}", name)

    def set_field(self, name: str, field: str, value: str) -> None:
        if field not in ("comment", "extra"):
            raise ValueError(field)
        self._run("update", f"nodename={name}", f"{field}={value}")


def parse_node_text(text: str) -> NodeInfo:
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        whole = next((k for k in _WHOLE_LINE if line.startswith(k)), None)
        if whole:
            values[whole[:-1]] = line[len(whole):]
            continue
        for token in line.split():
            if "=" in token:
                key, _, value = token.partition("=")
                values.setdefault(key, value)
    if "NodeName" not in values:
        raise SlurmError("scontrol show node: no NodeName in the output")
    return _info(values["NodeName"], values.get("State", "UNKNOWN").split("+"), values.get("Reason", ""),
                 values.get("Comment", ""), values.get("Extra", ""), values.get("BootTime"), values.get("Gres", ""))


def parse_node_json(text: str, name: str) -> NodeInfo:
    try:
        nodes = json.loads(text).get("nodes", [])
    except (json.JSONDecodeError, AttributeError):
        raise SlurmError("scontrol --json show node: not JSON") from None
    node = next((n for n in nodes if n.get("name") == name), None)
    if node is None:
        raise SlurmError(f"scontrol --json show node: {name} not in the output")
    state = node.get("state", [])
    parts = [s.upper() for s in (state if isinstance(state, list) else [state])]
    parts += [f.upper() for f in node.get("state_flags", [])]
    boot = node.get("boot_time")
    if isinstance(boot, dict):  # 23.11+: {"set": true, "number": N}
        boot = boot.get("number")
    return _info(name, parts, node.get("reason", "") or "", node.get("comment", "") or "",
                 node.get("extra", "") or "", str(boot) if boot else None, node.get("gres", "") or "")


# base states as Slurm names them; everything else in a State=A+B+C string is a flag
_BASE_STATES = {"IDLE", "ALLOCATED", "ALLOC", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN", "COMPLETING"}


def _info(name: str, parts: list[str], reason: str, comment: str, extra: str, boot: str | None, gres: str) -> NodeInfo:
    parts = [p.strip().upper().rstrip("*~#!%$@^-") for p in parts if p.strip()]
    base = next((p for p in parts if p in _BASE_STATES), parts[0] if parts else "UNKNOWN")
    flags = {p for p in parts if p != base}
    if "DRAINED" in flags or "DRAINING" in flags:
        flags.add("DRAIN")
    user = None
    m = _REASON_SUFFIX.search(reason)
    if m:
        user = m.group("user")
        reason = reason[: m.start()]
    if boot in ("None", "(null)", "Unknown"):
        boot = None
    if reason in ("(null)", "None"):
        reason = ""
    if comment == "(null)":
        comment = ""
    if extra == "(null)":
        extra = ""
    return NodeInfo(name=name, state="ALLOCATED" if base == "ALLOC" else base, flags=flags, reason=reason.strip(),
                    reason_user=user, comment=comment, extra=extra, boot_time=boot, gres=gres)
