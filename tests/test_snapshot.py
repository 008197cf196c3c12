import json

import pytest

from slurm_gpufleet.readers.snapshot import UNSUPPORTED, NodeSnapshot, known, normalize_pci


def test_json_round_trip_keeps_every_field(h200):
    again = NodeSnapshot.from_dict(json.loads(h200.to_json()))
    assert again == h200


def test_unsupported_is_never_zero(h200):
    # H200 answers N/A for retired pages: recorded as unsupported, written as "unsupported", never 0
    gpu = h200.gpus[0]
    assert gpu.retired_pages.single_bit is UNSUPPORTED
    data = json.loads(h200.to_json())
    assert data["gpus"][0]["retired_pages"]["single_bit"] == "unsupported"
    assert NodeSnapshot.from_dict(data).gpus[0].retired_pages.single_bit is UNSUPPORTED
    assert known(UNSUPPORTED) is None and known(0) == 0


def test_decode_rejects_unknown_fields_and_bad_types(h200):
    data = json.loads(h200.to_json())
    data["gpus"][0]["bogus"] = 1
    with pytest.raises(ValueError, match="bogus"):
        NodeSnapshot.from_dict(data)
    data = json.loads(h200.to_json())
    data["gpus"][0]["pcie"]["width_current"] = "sixteen"
    with pytest.raises(ValueError):
        NodeSnapshot.from_dict(data)


@pytest.mark.parametrize("raw", ["00000000:3B:00.0", "0000:3b:00", "3B:00.0", "PCI:0000:3b:00"])
def test_pci_forms_normalise(raw):
    assert normalize_pci(raw) == "0000:3b:00"
