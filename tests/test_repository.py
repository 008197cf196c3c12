"""A clone is the whole product: nothing in the repository may read a folder beside it."""

import os
import re
from pathlib import Path

from support import REPO

# every way the code once reached a sibling folder: a relative "../" path to it, REPO.parent / "<folder>",
# parents[2].parent (the sample lines below are assembled, so this file never reads as one itself)
SIBLING = re.compile(r"\.\./(?:shared|fixtures|traces)\b|\.parent\s*/\s*[\"'](?:shared|fixtures|traces)\b"
                     r"|REPO\.parent\b|parents\[\d\]\.parent\b")


SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis", "out", "build", "dist"}


def tracked_files():
    """The repository's files as a clone has them (CI runs from a copy without .git: no git here)."""
    out = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        out += [Path(folder) / f for f in files if not f.endswith((".gz", ".pyc"))]
    return out


def test_pattern_catches_the_old_references():
    sibling = "shared"
    for line in (f"SHARED := ../{sibling}/fixtures", f'TRACE = REPO.parent / "{sibling}" / "traces"',
                 f'Path(__file__).resolve().parents[2].parent / "{sibling}"'):
        assert SIBLING.search(line), line


def test_no_file_refers_to_a_sibling_folder():
    offenders = []
    for path in tracked_files():
        if path == REPO / "tests" / "test_repository.py":
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if SIBLING.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()[:100]}")
    assert not offenders, "\n".join(offenders)


def test_vendored_data_has_a_source_for_every_file():
    data = REPO / "slurm_gpufleet" / "data"
    readme = (data / "README.md").read_text()
    index = (data / "captures" / "public" / "nvidia-smi" / "INDEX.tsv").read_text()
    for path in sorted(data.rglob("*")):
        if path.is_dir() or path.name == "README.md" or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(data).as_posix()
        # a vendored sysfs tree has one row for the whole tree (its folder, with a trailing slash)
        tree = any(f"`{'/'.join(rel.split('/')[:n])}/`" in readme for n in range(1, rel.count("/") + 1))
        named = rel in readme or path.name in readme or tree or \
            (path.parent.name == "nvidia-smi" and path.name in index)
        assert named, f"{rel} is vendored without a row in data/README.md (source, licence, what it shows)"
