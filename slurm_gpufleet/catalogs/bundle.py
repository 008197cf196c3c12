"""What one rollout changes on a node, all in one drain: a driver, the kernel it is built for, GPU
firmware components.  A node's bundle is read from the summary its health check publishes; the plan
records each node's bundle before the rollout, and rollback returns it.

Pure data and comparisons; no Slurm, no clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# firmware component -> the summary key the health check publishes it under (summary.encode)
PUBLISHED = {"vbios": "fw", "inforom": "ifr"}
# the other parts of a bundle -> their summary key
DRIVER_KEY, KERNEL_KEY = "drv", "kern"
COMPONENT_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class Bundle:
    """Versions of what a rollout moves; None (or a missing firmware key): not part of it / not known."""

    driver: str | None = None
    kernel: str | None = None
    firmware: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.driver is None and self.kernel is None and not self.firmware

    def to_dict(self) -> dict[str, Any]:
        return {"driver": self.driver, "kernel": self.kernel, "firmware": dict(self.firmware)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Bundle:
        data = data or {}
        return cls(data.get("driver"), data.get("kernel"), dict(data.get("firmware") or {}))

    def parts(self) -> dict[str, str]:
        """Component -> version, every part named as a user names it: driver, kernel, vbios, ..."""
        out = {"driver": self.driver, "kernel": self.kernel, **self.firmware}
        return {k: v for k, v in out.items() if v is not None}

    def named(self) -> str:
        """`driver 580.159.04 + kernel 6.1.0-31-amd64 + vbios 96.00.AF.00.01`"""
        return " + ".join(f"{k} {v}" for k, v in self.parts().items()) or "nothing"

    def label(self) -> str:
        """580.159.04 (a driver alone, as before bundles: Slurm reasons keep their text), else `named()`."""
        parts = self.parts()
        return parts["driver"] if list(parts) == ["driver"] else self.named()


# the grammars a target must have before it reaches a template or a shell: ASCII only (a fullwidth digit is
# a \d to Python, and no driver's); a driver as NVIDIA numbers it; a kernel release as Debian, Ubuntu and
# RHEL spell one (6.1.0-28-amd64, 6.12.9+bpo-amd64, 6.8.0-45-generic, 5.14.0-427.13.1.el9_4.x86_64); a
# firmware version
DRIVER_GRAMMAR = re.compile(r"[0-9]{2,4}\.[0-9]{1,3}\.[0-9]{1,3}", re.ASCII)
KERNEL_GRAMMAR = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}(?:\.[0-9]{1,4})?(?:[+~][A-Za-z0-9.]+)?"
                            r"(?:-[A-Za-z0-9._+~]+(?:-[A-Za-z0-9._+~]+)*)?",
                            re.ASCII)
FIRMWARE_GRAMMAR = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}", re.ASCII)


def target_problem(part: str, version: str) -> str | None:
    """Why a bundle's target is not one (`--target-driver`, `--target-kernel`, `--target-firmware`, a
    [bundle]), or None."""
    grammar, example = {"driver": (DRIVER_GRAMMAR, "580.172.01"),
                        "kernel": (KERNEL_GRAMMAR, "6.1.0-28-amd64")}.get(part, (FIRMWARE_GRAMMAR, "96.00.AF.00.01"))
    if len(version) <= 64 and grammar.fullmatch(version):
        return None
    if part == "driver":
        return (f"driver {version[:64]!r}: a driver version is branch.minor.patch as NVIDIA numbers it, in ASCII "
                f"digits ({example}), never a part of one")
    return f"{part} {version[:64]!r} is not a {part} version (ASCII, e.g. {example})"


def parse_firmware(specs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """`vbios=96.00.AF.00.01` options -> {"vbios": "96.00.AF.00.01"}; ValueError says which one is wrong."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, version = spec.partition("=")
        name, version = name.strip().lower(), version.strip()
        if not sep or not COMPONENT_NAME.match(name) or not version or any(c.isspace() for c in version):
            raise ValueError(f"--target-firmware {spec!r} is not COMPONENT=VERSION (e.g. vbios=96.00.AF.00.01)")
        if target_problem(name, version):
            raise ValueError(f"--target-firmware {spec!r}: {target_problem(name, version)}")
        if name in out and out[name] != version:
            raise ValueError(f"--target-firmware names {name} twice ({out[name]}, {version})")
        out[name] = version
    return out


def parse_firmware_targets(specs: tuple[str, ...] | list[str]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """`--target-firmware` options, each `COMPONENT=VERSION` (every node) or `MODEL:COMPONENT=VERSION`
    (the nodes whose GPUs are that model, as the fleet names it: `NVIDIA H200:vbios=96.00.AF.00.01`) ->
    (for every node, per model).  ValueError says which option is wrong."""
    common: list[str] = []
    per: dict[str, list[str]] = {}
    for spec in specs:
        head, sep, _ = spec.partition("=")
        if sep and ":" in head:
            model, _, rest = spec.partition(":")
            if not model.strip():
                raise ValueError(f"--target-firmware {spec!r}: no GPU model before ':' (e.g. 'NVIDIA H200:vbios=...')")
            per.setdefault(model.strip(), []).append(rest)
        else:
            common.append(spec)
    return parse_firmware(common), {m: parse_firmware(s) for m, s in per.items()}


def firmware_for(model: str | None, by_model: dict[str, dict[str, str]]) -> dict[str, str] | None:
    """The firmware target of a GPU model (matched as the fleet names it, case aside), or None."""
    key = (model or "").strip().lower()
    return next((fw for m, fw in by_model.items() if m.strip().lower() == key), None)


def published(data: dict[str, Any] | None) -> Bundle:
    """The bundle a node's published summary shows."""
    data = data or {}
    firmware = {comp: str(data[key]) for comp, key in PUBLISHED.items() if data.get(key)}
    return Bundle(data.get(DRIVER_KEY), data.get(KERNEL_KEY), firmware)


def wanted(target: Bundle, current: Bundle) -> Bundle:
    """What a node must show after the rollout: the target's parts, the node's own for the rest."""
    return Bundle(target.driver or current.driver, target.kernel or current.kernel,
                  {**current.firmware, **target.firmware})


def restricted(bundle: Bundle, like: Bundle) -> Bundle:
    """`bundle`'s versions of the parts `like` has: what a rollback of `like`'s changes returns to."""
    return Bundle(bundle.driver if like.driver else None, bundle.kernel if like.kernel else None,
                  {k: v for k, v in bundle.firmware.items() if k in like.firmware})


def unread(value: Any) -> bool:
    """A published value that could not be read (absent, empty, `unknown`): not known yet, never a mismatch."""
    return value is None or str(value).strip().lower() in ("", "unknown", "?", "n/a")


def _parts(want: Bundle) -> list[tuple[str, str, str | None]]:
    checks = [("driver", DRIVER_KEY, want.driver), ("kernel", KERNEL_KEY, want.kernel)]
    return checks + [(comp, PUBLISHED[comp], version) for comp, version in want.firmware.items() if comp in PUBLISHED]


def first_difference(want: Bundle, data: dict[str, Any]) -> str | None:
    """The first part of `want` a published summary contradicts, named: `vbios 96.00.5E.00.01 != 96.00.AF.00.01`.
    A firmware component the health check does not publish cannot be compared (its command's exit status
    stands for it); a part the node could not read is not known yet (`unread_parts`), not a difference."""
    for name, key, version in _parts(want):
        seen = data.get(key)
        if version is None or unread(seen):
            continue
        if str(seen) != version:
            return f"{name} {seen} != {version}"
    return None


def unread_parts(want: Bundle, data: dict[str, Any]) -> list[str]:
    """The parts of `want` the summary has no readable value for: read again, or the node is `unverified`."""
    return [name for name, key, version in _parts(want) if version is not None and unread(data.get(key))]


def unpublished(bundle: Bundle) -> list[str]:
    """Firmware components of `bundle` that no health check publishes: validated by exit status only."""
    return sorted(c for c in bundle.firmware if c not in PUBLISHED)


def version_key(version: str) -> tuple:
    """Orders firmware versions: `96.00.5E.00.01` < `96.00.AF.00.01`, `G525.0200.00.04` < `G525.0210.00.01`.
    Each dot-separated field compares as a hexadecimal number where it is one, else as text."""
    out: list[tuple[int, Any]] = []
    for token in re.split(r"[.\-_]", version.strip()):
        try:
            out.append((0, int(token, 16)))
        except ValueError:
            out.append((1, token))
    return tuple(out)


def at_least(version: str, minimum: str) -> bool:
    return version_key(version) >= version_key(minimum)
