"""A config read: the file found (--config, $SLURM_GPUFLEET_CONFIG, the default path), parsed and checked
key by key with the file and line of any bad value; slurm.conf's own node list and features."""

from __future__ import annotations

import re
import time
import tomllib
from collections.abc import Callable
from typing import Any

from ..catalogs import model_from
from .settings import (
    _MODEL_KEYS,
    MAINTAIN_VALIDATORS,
    SLURM_VALIDATORS,
    VALIDATORS,
    BundleSpec,
    DomainSpec,
    MaintainSettings,
    Policy,
    Requirement,
    SlurmSettings,
    _Group,
    default_policy,
)
from .values import PolicyError, _str, _version

# An empty config is read once more after this pause: a file rewritten in place (`>`, most editors'
# save) is empty between its truncate and its write, and empty is valid TOML, the packaged defaults.  A
# health check that read it then ran without the site's groups (CI saw an observe-only node drained).
EMPTY_CONFIG_REREAD_S = 0.2


def load_policy(path: str | None) -> Policy:
    if path is None:
        return default_policy()
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        if not raw.strip():
            time.sleep(EMPTY_CONFIG_REREAD_S)
            with open(path, "rb") as fh:
                raw = fh.read()
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    return parse_policy(raw.decode("utf-8", "replace"), path)


def parse_policy(text: str, path: str = "<config>") -> Policy:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"line (\d+)", str(exc))
        # every error names a line (FILE:LINE): "at end of document" is the last one
        where = f"{path}:{line.group(1) if line else max(1, text.count(chr(10)) + (not text.endswith(chr(10))))}"
        raise PolicyError(f"{where}: invalid TOML: {str(exc).split(' (at')[0]}") from None
    except RecursionError:  # arrays or tables nested past Python's stack (tomllib recurses)
        raise PolicyError(f"{path}:1: invalid TOML: nested too deeply") from None
    lines = _KeyLines(text)
    policy = Policy(path=path)
    for key in data:
        if key not in ("defaults", "group", "models", "slurm", "maintain", "requires", "domain", "bundle"):
            raise PolicyError(f"{path}:{lines.find(None, key)}: unknown section or key '{key}' "
                              "(expected [defaults], [[group]], [models.\"NAME\"], [slurm], [maintain], "
                              "[bundle], [[requires]] or [[domain]])")
    if "bundle" in data:
        policy.bundle = _bundle(data["bundle"], path, lines)
    policy.slurm = SlurmSettings(**_site_section(data, "slurm", SLURM_VALIDATORS, path, lines))
    policy.maintain = _maintain(data, path, lines)
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise PolicyError(f"{path}:{lines.find(None, 'defaults')}: 'defaults' must be a table")
    policy.defaults = _settings(defaults, path, lines, ("defaults", 0))
    groups = _rows(data.get("group", []), "group", path, lines)
    for i, group in enumerate(groups):
        section = ("group", i)
        nodes = group.get("nodes")
        if not isinstance(nodes, str) or not nodes.strip():
            raise PolicyError(f"{path}:{lines.header(section)}: [[group]] #{i + 1} needs 'nodes', a Slurm host list")
        nodeset = _nodeset(nodes, f"{path}:{lines.find(section, 'nodes')}")
        name = group.get("name", nodes)
        if not isinstance(name, str):
            raise PolicyError(f"{path}:{lines.find(section, 'name')}: 'name' must be a string")
        body = {k: v for k, v in group.items() if k not in ("nodes", "name")}
        policy.groups.append(_Group(name, nodes, nodeset, _settings(body, path, lines, section)))
    policy.models = _models(data.get("models", {}), path, lines)
    policy.requires = tuple(_requirements(data.get("requires", []), path, lines))
    policy.domains = tuple(_domains(data.get("domain", []), path, lines))
    return policy


def _maintain(data: dict[str, Any], path: str, lines: _KeyLines) -> MaintainSettings:
    """[maintain], its soak's bound given in hours or seconds, and the gate's settings checked together."""
    maintain = data.get("maintain")
    soak_key = "gate_max_soak_s"
    if isinstance(maintain, dict) and "gate_max_soak_h" in maintain:
        soak_key = "gate_max_soak_h"
        maintain = dict(maintain)  # the bound in hours, kept as gate_max_soak_s (one value, two spellings)
        where = f"{path}:{lines.find(('maintain', None), 'gate_max_soak_h')}"
        if "gate_max_soak_s" in maintain:
            raise PolicyError(f"{where}: gate_max_soak_h and gate_max_soak_s are the same bound: give one")
        hours = maintain.pop("gate_max_soak_h")
        if isinstance(hours, bool) or not isinstance(hours, int | float) or not 0 < hours < 1e6:
            raise PolicyError(f"{where}: gate_max_soak_h must be a number of hours above 0")
        maintain["gate_max_soak_s"] = max(1, round(hours * 3600))
        data = {**data, "maintain": maintain}
    settings = MaintainSettings(**_site_section(data, "maintain", MAINTAIN_VALIDATORS, path, lines))
    if settings.gate_max_soak_s < settings.gate_min_soak_s:
        raise PolicyError(f"{path}:{lines.find(('maintain', None), soak_key)}: {soak_key} "
                          f"({settings.gate_max_soak_s} s) is shorter than gate_min_soak_s "
                          f"{settings.gate_min_soak_s}")
    if settings.gate_worse_ratio <= 1 + settings.gate_margin:
        raise PolicyError(f"{path}:{lines.find(('maintain', None), 'gate_margin')}: gate_margin "
                          f"{settings.gate_margin:g} leaves nothing between \"not worse\" (1 + margin) and "
                          f"\"worse\" (gate_worse_ratio {settings.gate_worse_ratio:g})")
    return settings


def _models(models: Any, path: str, lines: _KeyLines) -> tuple:
    """[models."NAME"]: the site's GPU models over data/gpu_models.toml."""
    if not isinstance(models, dict):
        raise PolicyError(f"{path}:{lines.find(None, 'models')}: 'models' must be a table of [models.\"NAME\"]")
    extra = []
    for name, spec in models.items():
        section = ("models", name)
        if not isinstance(spec, dict):
            raise PolicyError(f"{path}:{lines.header(section)}: [models.\"{name}\"] must be a table")
        for key, value in spec.items():
            if key not in _MODEL_KEYS:
                raise PolicyError(f"{path}:{lines.find(section, key)}: unknown key '{key}' in [models.\"{name}\"] "
                                  f"(known: {', '.join(_MODEL_KEYS)})")
            try:
                _MODEL_KEYS[key](value)
            except ValueError as exc:
                raise PolicyError(f"{path}:{lines.find(section, key)}: {key} {exc}") from None
        try:
            pattern = re.compile(spec.get("match", re.escape(name)), re.I)
        except re.error as exc:
            raise PolicyError(f"{path}:{lines.find(section, 'match')}: match is not a valid regular expression: {exc}") from None
        extra.append(model_from(name, pattern, {k: _MODEL_KEYS[k](v) for k, v in spec.items()}, f"policy {path}"))
    return tuple(extra)


def _bundle(table: Any, path: str, lines: _KeyLines) -> BundleSpec:
    from ..catalogs.bundle import parse_firmware_targets

    where = f"{path}:{lines.find(None, 'bundle')}"
    if not isinstance(table, dict):
        raise PolicyError(f"{where}: [bundle] must be a table")
    unknown = set(table) - {"driver", "kernel", "firmware"}
    if unknown:
        raise PolicyError(f"{where}: unknown key '{sorted(unknown)[0]}' in [bundle] (known: driver, kernel, firmware)")
    try:
        driver = _version(table["driver"]) if "driver" in table else None
        kernel = _str(table["kernel"]) if "kernel" in table else None
    except ValueError as exc:
        raise PolicyError(f"{where}: [bundle] {exc}") from None
    firmware = table.get("firmware", {})
    if not isinstance(firmware, dict):
        raise PolicyError(f"{where}: [bundle] firmware must be a table: COMPONENT = VERSION, or a table per GPU model")
    specs = []
    for key, value in firmware.items():
        if isinstance(value, dict):  # [bundle.firmware."NVIDIA H200"]
            specs += [f"{key}:{comp}={ver}" for comp, ver in value.items()]
        else:
            specs.append(f"{key}={value}")
    try:
        common, by_model = parse_firmware_targets(specs)
    except ValueError as exc:
        raise PolicyError(f"{where}: [bundle] {str(exc).replace('--target-firmware ', 'firmware ')}") from None
    if not (driver or kernel or common or by_model):
        raise PolicyError(f"{where}: [bundle] names nothing to roll out (driver, kernel or firmware)")
    return BundleSpec(driver, kernel, common, by_model)


def _rows(data: Any, name: str, path: str, lines: _KeyLines) -> list[dict[str, Any]]:
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise PolicyError(f"{path}:{lines.find(None, name)}: '{name}' must be an array of tables ([[{name}]])")
    return data


def _requirements(data: Any, path: str, lines: _KeyLines) -> list[Requirement]:
    out = []
    for i, row in enumerate(_rows(data, "requires", path, lines)):
        section = ("requires", i)
        driver = row.get("driver")
        if not isinstance(driver, str) or not re.fullmatch(r"\d+(\.\d+)*", driver.strip()):
            raise PolicyError(f"{path}:{lines.find(section, 'driver')}: [[requires]] #{i + 1} needs 'driver', "
                              "a branch or version prefix such as \"580\"")
        minimum = {}
        for key, value in row.items():
            if key == "driver":
                continue
            if not isinstance(value, str) or not value.strip() or not re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", key):
                raise PolicyError(f"{path}:{lines.find(section, key)}: [[requires]] {key} must be a firmware "
                                  f"component with its minimum version as a string (got {value!r})")
            minimum[key] = value.strip()
        if not minimum:
            raise PolicyError(f"{path}:{lines.header(section)}: [[requires]] #{i + 1} names no firmware "
                              "(e.g. vbios = \"96.00.74.00.01\")")
        out.append(Requirement(driver.strip(), minimum, f"{path}:{lines.header(section)}"))
    return out


def _domains(data: Any, path: str, lines: _KeyLines) -> list[DomainSpec]:
    out: list[DomainSpec] = []
    seen: dict[str, str] = {}
    for i, row in enumerate(_rows(data, "domain", path, lines)):
        section = ("domain", i)
        unknown = sorted(set(row) - {"name", "nodes"})
        if unknown:
            raise PolicyError(f"{path}:{lines.find(section, unknown[0])}: unknown key '{unknown[0]}' in "
                              "[[domain]] (known: name, nodes)")
        nodes = row.get("nodes")
        if not isinstance(nodes, str) or not nodes.strip():
            raise PolicyError(f"{path}:{lines.header(section)}: [[domain]] #{i + 1} needs 'nodes', a Slurm host list")
        members = tuple(_nodeset(nodes, f"{path}:{lines.find(section, 'nodes')}"))
        name = row.get("name", f"domain{i + 1}")
        if not isinstance(name, str) or not name.strip():
            raise PolicyError(f"{path}:{lines.find(section, 'name')}: [[domain]] name must be a string")
        for n in members:
            if n in seen:
                raise PolicyError(f"{path}:{lines.find(section, 'nodes')}: {n} is in [[domain]] {seen[n]} "
                                  f"and {name}: a node is in one domain")
            seen[n] = name
        out.append(DomainSpec(name, members))
    return out


def _site_section(data: dict[str, Any], name: str, validators: dict[str, Callable[[Any], Any]], path: str,
                  lines: _KeyLines) -> dict[str, Any]:
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise PolicyError(f"{path}:{lines.find(None, name)}: '{name}' must be a table")
    values = {}
    for key, value in table.items():
        validator = validators.get(key)
        if validator is None:
            raise PolicyError(f"{path}:{lines.find((name, None), key)}: unknown key '{key}' in [{name}] "
                              f"(known: {', '.join(validators)})")
        try:
            values[key] = validator(value)
        except ValueError as exc:
            raise PolicyError(f"{path}:{lines.find((name, None), key)}: {key} {exc} (got {value!r})") from None
    return values


def _settings(table: dict[str, Any], path: str, lines: _KeyLines, section: tuple[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        validator = VALIDATORS.get(key)
        if validator is None:
            close = [k for k in VALIDATORS if k.startswith(key[:4])]
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise PolicyError(f"{path}:{lines.find(section, key)}: unknown key '{key}'{hint}")
        try:
            out[key] = validator(value)
        except ValueError as exc:
            raise PolicyError(f"{path}:{lines.find(section, key)}: {key} {exc} (got {value!r})") from None
    return out


def _nodeset(expr: str, where: str) -> Any:
    from ClusterShell.NodeSet import NodeSet, NodeSetException  # only when a config has groups

    from ..common.hostlist import MAX_HOSTS, size

    if size(expr) > MAX_HOSTS:
        raise PolicyError(f"{where}: nodes {expr[:80]!r} names {size(expr):,} hosts; at most {MAX_HOSTS:,}")
    try:
        return NodeSet(expr)
    except (NodeSetException, ValueError, AssertionError, MemoryError, OverflowError) as exc:
        # ClusterShell asserts on a range past its bound ("range too large")
        raise PolicyError(f"{where}: nodes is not a valid host list {expr[:80]!r}: {exc or type(exc).__name__}") \
            from None


class _KeyLines:
    """Maps (section, key) to its line number, since tomllib does not report positions."""

    _HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?")
    _KEY = re.compile(r"^\s*(\"[^\"]+\"|[A-Za-z0-9_\-]+)\s*=")

    def __init__(self, text: str):
        self.keys: dict[tuple[Any, str], int] = {}
        self.headers: dict[Any, int] = {}
        section: Any = None
        groups = -1
        rows: dict[str, int] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            h = self._HEADER.match(line)
            if h:
                name = h.group(2)
                if h.group(1) == "[[" and name == "group":
                    groups += 1
                    section = ("group", groups)
                elif h.group(1) == "[[" and name in ("requires", "domain"):
                    rows[name] = rows.get(name, -1) + 1
                    section = (name, rows[name])
                elif name.startswith("models."):
                    section = ("models", name[len("models."):].strip().strip('"'))
                else:
                    section = (name, 0) if name == "defaults" else (name, None)
                self.headers.setdefault(section, number)
                self.keys.setdefault((None, name.split(".")[0]), number)
                continue
            k = self._KEY.match(line)
            if k:
                self.keys.setdefault((section, k.group(1).strip('"')), number)

    def find(self, section: Any, key: str) -> int:
        return self.keys.get((section, key)) or self.headers.get(section) or 1

    def header(self, section: Any) -> int:
        return self.headers.get(section, 1)
