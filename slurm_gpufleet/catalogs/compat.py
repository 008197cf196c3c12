"""Driver / CUDA / architecture compatibility, from data/compat.toml.  Pure functions."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from . import compat_data, security_data


def parse_version(text: str) -> tuple[int, ...]:
    """'580.159.04' -> (580, 159, 4); raises ValueError on anything that is not dotted numbers."""
    parts = text.strip().split(".")
    if not parts or not all(p.isascii() and p.isdecimal() for p in parts):
        raise ValueError(f"not a version number: {text!r}")
    return tuple(int(p) for p in parts)


def branch_of(driver: str) -> int:
    return parse_version(driver)[0]


@dataclass
class BranchInfo:
    """A driver branch: production or new-feature, and its end of life."""

    branch: int
    type: str | None
    eol: str | None  # "YYYY-MM", "ended", or None when unknown
    source: str | None

    def ended(self, today: dt.date) -> bool | None:
        if self.eol is None:
            return None
        if self.eol == "ended":
            return True
        year, month = (int(x) for x in self.eol.split("-"))
        return (today.year, today.month) > (year, month)


def branch_info(branch: int) -> BranchInfo:
    for b in compat_data()["branch"]:
        if b["branch"] == branch:
            return BranchInfo(branch, b.get("type"), b.get("eol"), b.get("source"))
    return BranchInfo(branch, None, None, None)


def architecture(name: str | None = None, cc: str | None = None) -> dict | None:
    for arch in compat_data()["architecture"]:
        if name and arch["name"].lower() == name.strip().lower():
            return arch
        if name and arch["name"].split()[0].lower() == name.strip().lower():
            return arch
        if cc and cc in arch["compute_capabilities"]:
            return arch
    return None


def max_cuda_for_driver(driver: str) -> str | None:
    """The newest CUDA release in the table whose minimum driver this driver meets."""
    ver = parse_version(driver)
    best: tuple[int, ...] | None = None
    for entry in compat_data()["cuda"]:
        if ver >= parse_version(entry["min_driver"]):
            cv = parse_version(entry["version"])
            best = cv if best is None or cv > best else best
    return ".".join(map(str, best)) if best else None


def cuda_min_driver(cuda: str) -> tuple[str | None, str | None]:
    """(per-release minimum driver, CUDA-major family minimum for minor-version compatibility)."""
    cv = parse_version(cuda)
    release = next((e["min_driver"] for e in compat_data()["cuda"] if parse_version(e["version"]) == cv[:2]), None)
    family = next((f["family_min_driver"] for f in compat_data()["cuda_family"] if f["major"] == cv[0]), None)
    return release, family


def cves_for(driver: str) -> list[dict]:
    """The CVEs of NVIDIA's bulletins (data/security.toml) this Linux data-center driver is exposed to:
    its branch has a fix and it is older, or its branch was affected and got none ("fixed_in": None).
    A branch newer than every branch a bulletin names came after the fix and is not exposed."""
    version = parse_version(driver)
    branch = str(version[0])
    out = []
    for row in security_data().get("cve", []):
        fixed = row.get("fixed_in", {})
        if branch in fixed:
            if version < parse_version(fixed[branch]):
                out.append(_cve(row, fixed[branch]))
        elif branch in row.get("unfixed", []) or (fixed and int(branch) < max(int(b) for b in fixed)):
            out.append(_cve(row, None))
    return out


def _cve(row: dict, fixed_in: str | None) -> dict:
    return {"id": row["id"], "bulletin": row["bulletin"], "severity": row["severity"], "cvss": row["cvss"],
            "fixed_in": fixed_in, "source": row["source"]}


def safe_version(driver: str) -> str | None:
    """The lowest version on this driver's branch that no listed CVE reaches, or None if the branch has
    an unfixed one."""
    exposed = cves_for(driver)
    if any(c["fixed_in"] is None for c in exposed):
        return None
    return max((c["fixed_in"] for c in exposed), key=parse_version, default=driver)


@dataclass
class CompatResult:
    """What the compatibility data says of one driver: its branch, CUDA and architectures."""

    driver: str
    branch: int
    branch_type: str | None
    branch_eol: str | None
    branch_ended: bool | None
    max_cuda: str | None
    compatible: bool = True
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    architecture: str | None = None
    cuda: str | None = None
    cves: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def evaluate(driver: str, *, arch: str | None = None, cc: str | None = None, cuda: str | None = None,
             today: dt.date | None = None) -> CompatResult:
    """Can `driver` run GPUs of `arch`/`cc` and applications built with CUDA `cuda`?"""
    today = today or dt.date.today()
    branch = branch_of(driver)
    info = branch_info(branch)
    result = CompatResult(driver=driver, branch=branch, branch_type=info.type, branch_eol=info.eol,
                          branch_ended=info.ended(today), max_cuda=max_cuda_for_driver(driver), cuda=cuda,
                          cves=cves_for(driver))
    if info.type is None:
        result.notes.append(f"branch R{branch} is not in the branch table (type and end of life unknown)")
    elif result.branch_ended:
        result.notes.append(f"branch R{branch} ({info.type}) is past end of life ({info.eol})")
    if arch or cc:
        a = architecture(arch, cc)
        if a is None:
            result.compatible = False
            result.problems.append(f"unknown architecture {arch or 'cc ' + str(cc)}")
        else:
            result.architecture = a["name"]
            last = a.get("last_driver_branch")
            if last is not None and branch > last:
                result.compatible = False
                result.problems.append(f"{a['name']} is not supported after the R{last} branch (driver is R{branch})")
            first = a.get("first_cuda")
            if first:
                release_min, _ = cuda_min_driver(first)
                if release_min and parse_version(driver) < parse_version(release_min):
                    result.compatible = False
                    result.problems.append(
                        f"{a['name']} needs CUDA {first}, i.e. driver >= {release_min} (driver is {driver})")
            last_major = a.get("last_cuda_major")
            if cuda and last_major is not None and parse_version(cuda)[0] > last_major:
                result.compatible = False
                result.problems.append(f"{a['name']} is not supported by CUDA {cuda} (last CUDA major {last_major})")
    if cuda:
        release_min, family_min = cuda_min_driver(cuda)
        ver = parse_version(driver)
        if release_min is None and family_min is None:
            result.compatible = False
            result.problems.append(f"CUDA {cuda} is not in the compatibility table")
        elif release_min is not None and ver >= parse_version(release_min):
            pass
        elif family_min is not None and ver >= parse_version(family_min):
            below = (f"driver {driver} < {release_min}, its release minimum" if release_min else
                     f"the release's own minimum driver is not in the table, data/compat.toml; CUDA "
                     f"{parse_version(cuda)[0]}.x runs on >= {family_min}")
            result.notes.append(f"CUDA {cuda} runs through minor-version compatibility ({below}; PTX JIT and "
                                "the newest features need the release minimum)")
        else:
            result.compatible = False
            need = release_min or family_min
            result.problems.append(f"CUDA {cuda} needs driver >= {need} (driver is {driver})")
    return result
