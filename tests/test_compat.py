import datetime as dt

import pytest

from slurm_gpufleet.compat import evaluate, max_cuda_for_driver

TODAY = dt.date(2026, 11, 29)


@pytest.mark.parametrize("driver,kw,ok,fragment", [
    ("580.159.04", {"arch": "Hopper", "cuda": "13.0"}, True, None),
    ("590.48.01", {"arch": "Volta"}, False, "Volta is not supported after the R580 branch"),
    ("580.95.05", {"cc": "7.0"}, True, None),
    ("580.95.05", {"arch": "Volta", "cuda": "13.0"}, False, "not supported by CUDA 13.0"),
    ("535.183.01", {"arch": "Kepler"}, False, "after the R470 branch"),
    ("470.256.02", {"arch": "Kepler", "cuda": "11.4"}, True, None),
    ("575.51.03", {"cuda": "13.0"}, False, "CUDA 13.0 needs driver >= 580.65.06"),
    ("535.183.01", {"arch": "Blackwell"}, False, "needs CUDA 12.8"),
    ("580.159.04", {"arch": "Mystery"}, False, "unknown architecture"),
])
def test_matrix(driver, kw, ok, fragment):
    result = evaluate(driver, today=TODAY, **kw)
    assert result.compatible is ok, result.problems
    if fragment:
        assert any(fragment in p for p in result.problems), result.problems


def test_minor_version_compatibility_is_a_note():
    result = evaluate("525.60.13", cuda="12.4", today=TODAY)
    assert result.compatible and any("minor-version" in n for n in result.notes)


def test_branch_end_of_life():
    assert evaluate("535.183.01", today=TODAY).branch_ended is True
    assert evaluate("535.183.01", today=dt.date(2026, 6, 1)).branch_ended is False
    assert evaluate("580.159.04", today=TODAY).branch_ended is False
    assert evaluate("999.1", today=TODAY).branch_type is None


def test_max_cuda():
    assert max_cuda_for_driver("580.159.04") == "13.0"
    assert max_cuda_for_driver("550.54.14") == "12.4"
    assert max_cuda_for_driver("400.1") is None
