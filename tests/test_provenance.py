"""The provenance table (tests/data/provenance.toml, docs/reference/provenance.md) is whole: every path it
names exists, every vendored capture and test input is named in it, every reader module has a row, each
input is of a declared kind, and every reader has at least one input no one here wrote or says so."""

from __future__ import annotations

import tomllib

from support import REPO

from slurm_gpufleet.cli.docgen import PROVENANCE_KINDS

ENTRIES = tomllib.loads((REPO / "tests" / "data" / "provenance.toml").read_text())["entry"]


def _matches(pattern: str) -> list:
    if pattern.endswith("/"):
        return [p for p in (REPO / pattern).rglob("*") if p.is_file()]
    return list(REPO.glob(pattern))


def test_every_path_exists_and_every_kind_is_declared():
    for e in ENTRIES:
        assert e["role"] in ("reader", "judge") and (REPO / e["module"]).is_file(), e["name"]
        for i in e["inputs"]:
            assert i["kind"] in PROVENANCE_KINDS, i
            assert _matches(i["path"]), f"{e['name']}: {i['path']} names nothing"
            assert i["source"].strip()


def test_every_vendored_capture_and_test_input_is_in_the_table():
    named = {p for e in ENTRIES for i in e["inputs"] for p in _matches(i["path"])}
    files = [p for root in ("slurm_gpufleet/data/captures", "slurm_gpufleet/data/traces", "tests/data")
             for p in (REPO / root).rglob("*") if p.is_file() and p.name != "README.md"
             and p.name != "provenance.toml" and "__pycache__" not in p.parts]
    missing = sorted(str(p.relative_to(REPO)) for p in files if p not in named)
    assert not missing, missing


def test_every_reader_module_has_a_row_and_the_nvidia_smi_readers_a_recording():
    modules = {e["module"] for e in ENTRIES}
    readers = {f"slurm_gpufleet/readers/{p.name}" for p in (REPO / "slurm_gpufleet" / "readers").glob("*.py")
               if p.name != "__init__.py"}
    assert readers <= modules, sorted(readers - modules)
    for module in ("slurm_gpufleet/readers/smi_xml.py", "slurm_gpufleet/readers/smi_text.py",
                   "slurm_gpufleet/readers/kernel_log.py", "slurm_gpufleet/readers/ib.py"):
        (e,) = [e for e in ENTRIES if e["module"] == module]
        assert any(i["kind"] == "recording" for i in e["inputs"]), module
