"""The node image's build cache (tests/slurm/dkms_build_cache.sh, the `make` of each image copy): DKMS's
module build keyed by its inputs.  Here against a tree of its own (the shim's roots moved by its
GPUFLEET_* variables): a DKMS build directory, a kernel build tree, and a stand-in for make that counts
its runs and writes a module from the source.  The real image tier (tests/slurm/test_real_image_node.py)
runs it under DKMS itself."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SHIM = Path(__file__).parent / "slurm" / "dkms_build_cache.sh"
KERNEL = "6.1.0-50-amd64"


class Tree:
    def __init__(self, root: Path):
        self.root = root
        self.build = root / "dkms" / "nvidia-current" / "535.309.01" / "build"
        self.kernel = root / "modules" / KERNEL / "build"
        self.cache = root / "cache"
        self.runs = root / "runs"
        self.build.mkdir(parents=True)
        self.kernel.mkdir(parents=True)
        (self.build / "nv.c").write_text("int nv;\n")
        (self.build / "make.log").write_text("DKMS make.log for nvidia-current\n")  # DKMS writes it first
        (self.kernel / "Makefile").write_text("VERSION = 6\n")
        self.make = root / "real-make"
        self.make.write_text(f'#!/bin/sh\necho "$*" >> {self.runs}\n[ -z "$FAIL" ] || exit 2\n'
                             'cat nv.c > nvidia.ko\necho "compiled nvidia.ko"\n')
        self.make.chmod(0o755)
        # a stand-in compiler: hashing the real one's cc1 (30 MB) in every run is the image tier's to test
        self.cc = root / "cc"
        self.cc.write_text('#!/bin/sh\ncase "$1" in -v) echo "gcc version 12.2.0 (stand-in)" ;; '
                           '-print-prog-name=*) echo /bin/true ;; esac\n')
        self.cc.chmod(0o755)

    def run(self, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        cwd = cwd or self.build
        return subprocess.run(["sh", str(SHIM), *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                              env={"PATH": os.environ["PATH"], "PWD": str(cwd), "GPUFLEET_REAL_MAKE": str(self.make),
                                   "GPUFLEET_BUILD_CACHE": str(self.cache),
                                   "GPUFLEET_DKMS_TREE": str(self.root / "dkms"),
                                   "GPUFLEET_MODULES_DIR": str(self.root / "modules"), "CC": str(self.cc), **env})

    def modules(self, *extra: str) -> subprocess.CompletedProcess[str]:
        (self.build / "nvidia.ko").unlink(missing_ok=True)  # DKMS builds in a fresh copy of the source
        return self.run("-j2", "modules", f"KERNEL_UNAME={KERNEL}", *extra)

    def real_runs(self) -> int:
        return len(self.runs.read_text().splitlines()) if self.runs.exists() else 0

    def entries(self) -> list[str]:
        return sorted(p.name for p in self.cache.iterdir()) if self.cache.exists() else []


@pytest.fixture
def tree(tmp_path):
    return Tree(tmp_path)


def test_a_build_made_before_is_restored_not_compiled(tree):
    first = tree.modules()
    assert first.returncode == 0, first.stderr
    assert "compiled nvidia.ko" in first.stdout and tree.real_runs() == 1 and len(tree.entries()) == 1
    again = tree.modules()
    assert again.returncode == 0, again.stderr
    assert tree.real_runs() == 1, "the real make ran again for the same inputs"
    assert "restored, not compiled" in again.stdout and tree.entries()[0] in again.stdout
    assert (tree.build / "nvidia.ko").read_text() == "int nv;\n"  # the module as make left it


def test_the_make_log_and_the_job_count_are_not_inputs(tree):
    tree.modules()
    (tree.build / "make.log").write_text("DKMS make.log, another day\n")
    (tree.build / "nvidia.ko").unlink()
    assert "restored" in tree.run("-j8", "modules", f"KERNEL_UNAME={KERNEL}").stdout
    assert tree.real_runs() == 1


@pytest.mark.parametrize("change", ["source", "kernel", "argument", "variable", "compiler"])
def test_any_input_changed_builds_again(tree, change):
    tree.modules()
    extra: tuple[str, ...] = ()
    env: dict[str, str] = {}
    if change == "source":
        (tree.build / "nv.c").write_text("int nv = 1;\n")
    elif change == "kernel":
        (tree.kernel / "Makefile").write_text("VERSION = 6\nPATCHLEVEL = 12\n")
    elif change == "compiler":
        tree.cc.write_text(tree.cc.read_text().replace("12.2.0", "12.3.0"))
    elif change == "argument":
        extra = ("NV_SPECTRE_V2=1",)
    else:
        env = {"NV_VERBOSE": "1"}
    (tree.build / "nvidia.ko").unlink()
    r = tree.run("-j2", "modules", f"KERNEL_UNAME={KERNEL}", *extra, **env)
    assert r.returncode == 0 and "compiled nvidia.ko" in r.stdout, r.stdout + r.stderr
    assert tree.real_runs() == 2 and len(tree.entries()) == 2


def test_a_failed_build_is_not_kept_and_fails_as_make_did(tree):
    r = tree.run("-j2", "modules", f"KERNEL_UNAME={KERNEL}", FAIL="1")
    assert r.returncode == 2 and tree.entries() == []
    assert tree.modules().returncode == 0 and tree.real_runs() == 2  # built for real the next time


def test_everything_else_is_the_real_make(tree):
    # outside a DKMS build tree, kbuild's own recursive makes, a target other than modules, a kernel
    # without its build tree: passed through, nothing cached
    (tree.root / "nv.c").write_text("int other;\n")
    assert tree.run("modules", f"KERNEL_UNAME={KERNEL}", cwd=tree.root).returncode == 0
    assert tree.run("modules", f"KERNEL_UNAME={KERNEL}", GPUFLEET_BUILD_CACHE_INSIDE="1").returncode == 0
    assert tree.run("clean").returncode == 0
    assert tree.run("modules", "KERNEL_UNAME=6.12.95+deb12-amd64").returncode == 0
    assert tree.real_runs() == 4 and tree.entries() == []
    assert tree.runs.read_text().splitlines()[0] == f"modules KERNEL_UNAME={KERNEL}"  # its arguments as given
