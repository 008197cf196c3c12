"""Fixtures: the vendored real captures and fault injection into them."""

from __future__ import annotations

import copy
import json
import os
import tempfile

import pytest
from support import H200


def _trusted_tmp() -> str:
    """Where tests keep their files: the health check, hooks and `maintain` refuse configs, templates and
    state in a directory others can write (slurm_gpufleet/trust.py), and /tmp is one.  Root's tests use
    /var/lib/gpufleet-tests, a user's ~/.cache/gpufleet-tests; GPUFLEET_TEST_TMP names another."""
    base = os.environ.get("GPUFLEET_TEST_TMP") or (
        "/var/lib/gpufleet-tests" if os.geteuid() == 0 else os.path.expanduser("~/.cache/gpufleet-tests"))
    os.makedirs(base, mode=0o755, exist_ok=True)
    os.chmod(base, 0o755)
    return base


# before pytest makes its first tmp_path (and for every program a test starts)
os.environ["TMPDIR"] = tempfile.tempdir = _trusted_tmp()


@pytest.fixture(scope="session")
def h200_xml_snapshot():
    from slurm_gpufleet.readers import read_report_file

    return read_report_file(str(H200 / "nvidia-smi-q.xml"))


@pytest.fixture
def h200(h200_xml_snapshot):
    """A fresh copy of the healthy H200 snapshot, for one test to inject one fault into."""
    return copy.deepcopy(h200_xml_snapshot)


@pytest.fixture
def probe():
    with open(H200 / "nvml_probe.json") as fh:
        return json.load(fh)


