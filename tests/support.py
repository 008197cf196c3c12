"""Helpers for the tests: where the vendored real captures are, how to run the CLI."""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

from slurm_gpufleet.common.datafiles import H200_REAL as H200
from slurm_gpufleet.common.datafiles import PUBLIC

REPO = Path(__file__).resolve().parent.parent

if not (H200 / "nvidia-smi-q.xml").is_file():  # fail loudly: these tests are the proof that real captures parse
    raise RuntimeError(f"real GPU captures not found at {H200}; the vendored data folder is incomplete")


def trusted(path: Path) -> Path:
    """A file of the repository as root's programs may read it (slurm_gpufleet/policy/trust.py): the file itself
    where the clone's path passes the rule, else a copy in the tests' own trusted directory (conftest.py).
    A clone under /tmp fails it: /tmp is writable by everyone."""
    import shutil
    import tempfile

    from slurm_gpufleet.policy.trust import problem

    if problem(str(path)) is None:
        return path
    dest = Path(tempfile.gettempdir()) / f"gpufleet-repo-{os.getuid()}" / path.relative_to(REPO)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(f".{dest.name}.{os.getpid()}")  # pytest-xdist workers copy side by side
    shutil.copyfile(path, part)
    os.replace(part, dest)
    return dest


_TREES: dict[int, Path] = {}


def trusted_tree() -> Path:
    """A directory holding the package as root's programs may run it: the clone itself where its path
    passes the trust rule, else a copy of `slurm_gpufleet/` in the tests' own trusted directory, made
    once per process (`install` refuses to point slurmd at code under /tmp, and a clone there is)."""
    import shutil
    import tempfile

    from slurm_gpufleet.policy.trust import problem

    if problem(str(REPO / "slurm_gpufleet" / "__init__.py")) is None:
        return REPO
    if os.getpid() not in _TREES:
        dest = Path(tempfile.gettempdir()) / f"gpufleet-tree-{os.getuid()}-{os.getpid()}"
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(REPO / "slurm_gpufleet", dest / "slurm_gpufleet",
                        ignore=shutil.ignore_patterns("__pycache__"))
        _TREES[os.getpid()] = dest
    return _TREES[os.getpid()]


_PYTHONS: dict[int, Path] = {}


def trusted_python() -> str:
    """An interpreter root's programs may run, with this package and this environment's libraries: this
    one where its path passes the trust rule, else (a clone under /tmp has its .venv there) a venv of the
    base interpreter, without pip, in the tests' own trusted directory, made once per process, whose .pth
    names the package copy (trusted_tree) and this interpreter's site-packages."""
    import shutil
    import site
    import subprocess
    import tempfile

    from slurm_gpufleet.policy.trust import problem

    if problem(sys.executable) is None:
        return sys.executable
    if os.getpid() not in _PYTHONS:
        dest = Path(tempfile.gettempdir()) / f"gpufleet-python-{os.getuid()}-{os.getpid()}"
        shutil.rmtree(dest, ignore_errors=True)
        base = getattr(sys, "_base_executable", None) or sys.executable
        subprocess.run([base, "-m", "venv", "--without-pip", str(dest)], check=True, capture_output=True)
        python = dest / "bin" / "python"
        purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        Path(purelib, "gpufleet-tests.pth").write_text("\n".join([str(trusted_tree()), *site.getsitepackages()]) + "\n")
        _PYTHONS[os.getpid()] = python
    return str(_PYTHONS[os.getpid()])


def public_index() -> list[dict[str, str]]:
    """Every vendored nvidia-smi recording with the verdict its INDEX.tsv expects; `file` relative to PUBLIC."""
    rows = []
    for index in sorted(PUBLIC.glob("*/INDEX.tsv")):
        with open(index, newline="") as fh:
            rows += [{**row, "file": f"{index.parent.name}/{row['file']}"}
                     for row in csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)]
    return rows


def kernel_log_lines() -> list[dict[str, str]]:
    with open(PUBLIC / "kernel_log_lines.tsv", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60, stdin: bytes | None = None,
            cwd: str | Path = REPO):
    import subprocess

    full_env = {**os.environ, **(env or {})}
    full_env.pop("SLURM_GPUFLEET_CONFIG", None) if env is None or "SLURM_GPUFLEET_CONFIG" not in env else None
    return subprocess.run([sys.executable, "-m", "slurm_gpufleet.cli", *args], capture_output=True,
                          timeout=timeout, env=full_env, input=stdin, cwd=cwd)


class BusyNvml:
    """A pynvml stand-in with the calls the in-job sampler makes: `count` GPUs, every one busy at full clock
    and power, no throttle; `name` where a caller reads the model."""

    def __init__(self, count: int = 1, name: str = "NVIDIA H200") -> None:
        self.count, self.name = count, name

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self.name

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1980

    def nvmlDeviceGetPowerUsage(self, h):
        return 600_000

    def nvmlDeviceGetUtilizationRates(self, h):
        from types import SimpleNamespace

        return SimpleNamespace(gpu=99)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0
