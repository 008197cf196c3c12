"""Fixtures: the vendored real captures and fault injection into them."""

from __future__ import annotations

import copy
import json

import pytest
from support import H200


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


