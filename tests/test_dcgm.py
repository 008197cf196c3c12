"""DCGM's diagnostic read as data (readers/dcgm.py, checks/dcgm.py): a node fails only on a failed test of
its own GPUs, by the severity DCGM gives it; DCGM's own faults (no host engine, a version mismatch, a hung
run, no dcgmi) are a dependency's, never a drain: the deep check says them and exits 75 (unverified)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from support import REPO

from slurm_gpufleet.judging.checks import Context
from slurm_gpufleet.judging.checks.dcgm import check
from slurm_gpufleet.readers.dcgm import read_diag
from slurm_gpufleet.readers.snapshot import Gpu, NodeSnapshot

sys.path.insert(0, str(REPO / "tests"))
from fake_slurm.node import setup  # noqa: E402

DATA = REPO / "tests" / "data" / "dcgm"


def _judge(name: str):
    snap = NodeSnapshot(gpus=[Gpu(index=i) for i in range(8)])
    snap.dcgm = read_diag((DATA / name).read_text())
    return snap.dcgm, check(Context(snap))


@pytest.mark.parametrize("name, expected", [
    ("diag-4x-pass.json", []),
    ("diag-4x-memory-fail-gpu3.json", [(3, "drain", "inspect_hardware", "memory failed (ISOLATE)")]),
    ("diag-4x-reset-gpu1.json", [(1, "reboot", "reset_gpu", "memory failed (RESET)")]),
    ("diag-4x-warning-gpu5.json", [(5, "warn", "watch", "pcie warn")]),
    # 3.x gives no severity: "Error using CUDA API %s" is DCGM_FR_CUDA_API in DCGM's own table, MONITOR
    # (and its run names 4 of the node's 8 GPUs: the rest unverified)
    ("diag-3x-memory-fail-gpu2.json", [(2, "warn", "watch", "GPU Memory failed (MONITOR)"),
                                       (None, "warn", "watch", "DCGM judged 4 of 8 GPUs")]),
])
def test_each_gpus_result_is_a_finding_by_its_severity(name, expected):
    diag, findings = _judge(name)
    assert diag.error is None
    assert [(f.gpu, f.severity, f.action, f.message) for f in findings] == expected


def test_a_configuration_severity_only_warns_and_says_dcgms_words():
    diag, findings = _judge("diag-4x-config-persistence.json")
    assert {(f.severity, f.action) for f in findings} == {("warn", "fix_config")} and len(findings) == 8
    assert "Persistence mode for GPU 0 is disabled." in findings[0].detail


def test_a_failed_test_of_another_entity_or_a_gpu_the_node_does_not_have_only_warns():
    text = (DATA / "diag-4x-memory-fail-gpu3.json").read_text().replace('"entity_id": 3,', '"entity_id": 12,')
    snap = NodeSnapshot(gpus=[Gpu(index=i) for i in range(8)])
    snap.dcgm = read_diag(text)
    findings = check(Context(snap))
    assert [(f.gpu, f.severity) for f in findings] == [(None, "warn"), (None, "warn")], findings
    assert "GPU 12" in findings[0].message and findings[1].message == "DCGM judged 7 of 8 GPUs"


@pytest.mark.parametrize("text, said", [
    ((DATA / "diag-4x-version-mismatch.json").read_text(), "does not match the host engine"),
    ((DATA / "dcgmi-no-hostengine.txt").read_text(), "unable to establish a connection"),
    ("{not json", "printed no diagnostic"),
    ('{"DCGM Diagnostic": {"test_categories": []}}', "holds no test result"),
    ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "not JSON"),
    ('{"DCGM Diagnostic": {"test_categories": [{"tests": [{"results": [5, null, {"status": 3}]}]}, 7]}}', ""),
])
def test_dcgms_own_faults_and_odd_outputs_are_an_error_never_a_finding(text, said):
    diag = read_diag(text)
    snap = NodeSnapshot(gpus=[Gpu(index=i) for i in range(8)])
    snap.dcgm = diag
    assert not [f for f in check(Context(snap)) if f.severity in ("drain", "reboot")]
    if said:
        assert diag.error and said in diag.error, diag.error


def _deep_node(tmp_path, output: str | None = None, sleep: float = 0.0):
    """One node for a deep check (`--level deep --nhc`, as a validation job runs it) with a dcgmi that
    prints `output` (or sleeps)."""
    bin_dir, gpus, env = setup(tmp_path)
    dcgmi = bin_dir / "dcgmi"
    body = f"sleep {sleep}\n" if sleep else ""
    if output is not None:
        (tmp_path / "out.json").write_text(output)
        body += f"cat {tmp_path}/out.json\n"
    dcgmi.write_text("#!/bin/sh\n" + f'echo "$@" > {tmp_path}/dcgmi.args\n' + body)
    dcgmi.chmod(0o755)
    with open(env["SLURM_GPUFLEET_CONFIG"], "a") as fh:
        fh.write(f'dcgm_diag_level = 1\ndcgmi = "{dcgmi}"\ndcgm_timeout_s = 3\n')
    return bin_dir, env


def _deep(env):
    import subprocess

    t = time.monotonic()
    r = subprocess.run([sys.executable, str(REPO / "healthcheck" / "slurm-gpufleet-healthcheck"), "--level", "deep",
                        "--nhc"], env=env, capture_output=True, text=True, timeout=60)
    return r, time.monotonic() - t


@pytest.mark.parametrize("name, code, said", [
    ("diag-4x-pass.json", 0, ""),
    ("diag-4x-memory-fail-gpu3.json", 1, "dcgm gpu3 memory failed (ISOLATE)"),
    ("diag-4x-version-mismatch.json", 75, "dcgm: Error: the DCGM version of the client"),
    ("dcgmi-no-hostengine.txt", 75, "dcgm: dcgmi printed no diagnostic: Error: unable to establish"),
    # a run that judged 1 of the node's GPUs verifies that one alone: unverified, never passed
    ("diag-4x-one-gpu-monitor-summary.json", 75, "dcgm: the run judged none of GPU(s) 1, 2, 3"),
])
def test_the_deep_check_fails_on_a_gpus_failed_test_and_is_unverified_on_dcgms_own(tmp_path, name, code, said):
    bin_dir, env = _deep_node(tmp_path, (DATA / name).read_text())
    r, _ = _deep(env)
    assert r.returncode == code, (r.stdout, r.stderr)
    assert (tmp_path / "dcgmi.args").read_text().split() == ["diag", "-r", "1", "-j"]
    assert r.stdout.strip().startswith(said) if said else r.stdout.strip() == "", r.stdout
    assert "internal error" not in r.stderr


@pytest.mark.slow   # 3 s: dcgmi's limit
def test_a_hung_dcgmi_ends_at_its_limit_as_a_dependency_not_a_drain(tmp_path):
    bin_dir, env = _deep_node(tmp_path, sleep=30)
    r, took = _deep(env)
    assert r.returncode == 75 and "still running after 3 s" in r.stdout, (r.stdout, r.stderr)
    assert took < 20


def test_no_dcgmi_is_a_dependency_too(tmp_path):
    bin_dir, env = _deep_node(tmp_path, "")
    Path(bin_dir / "dcgmi").unlink()
    r, _ = _deep(env)
    assert r.returncode == 75 and "not found" in r.stdout, (r.stdout, r.stderr)


# -- every shape dcgmi has printed since 2.x (issue 63) ------------------------------------------------------
def _judge_on(name: str, gpus: int):
    snap = NodeSnapshot(gpus=[Gpu(index=i) for i in range(gpus)])
    snap.dcgm = read_diag((DATA / name).read_text())
    return snap.dcgm, check(Context(snap))


def test_2x_a_failed_deployment_test_with_a_plain_string_is_classed_by_dcgms_table_and_keeps_its_words():
    """2.x to 3.1: `warnings` a plain string, no id, no severity.  Persistence mode is a configuration
    class in DCGM's own table (by the test, the 2.x wording matching no format of today's): 4 warnings,
    never 4 drains; DCGM's words in each."""
    diag, findings = _judge_on("diag-2x-persistence-string.json", 4)
    assert [(f.gpu, f.severity, f.action) for f in findings] == [(g, "warn", "fix_config") for g in range(4)]
    assert all("Persistence mode for GPU 0 is currently disabled" in f.detail for f in findings)
    assert findings[0].message == "Persistence Mode failed (CONFIG)" and diag.covered == [0, 1, 2, 3]


def test_3_3_1_a_severity_on_the_deployment_result_and_its_further_errors_without_a_status():
    diag, findings = _judge_on("diag-3.3.1-deployment-severity.json", 2)
    pm = [r for r in diag.results if r.test == "Persistence Mode"]
    assert [(r.status, r.severity, r.errors) for r in pm] == [
        ("fail", 5, ["Persistence mode for GPU 0 is disabled."]), ("fail", 5, ["Persistence mode for GPU 1 is disabled."])]
    assert {(f.severity, f.action) for f in findings} == {("warn", "watch")}   # a node's result: no GPU named


def test_3_3_5_entries_keyed_warnings_keep_dcgms_words_and_severity():
    diag, findings = _judge_on("diag-3.3.5-deployment-keyed-warnings.json", 2)
    assert [(f.gpu, f.severity, f.action, f.detail) for f in findings] == [
        (1, "reboot", "reset_gpu", "GPU 1 has graphics processes running on it")]


def test_4x_a_warn_printed_as_fail_with_monitor_warns_the_summarys_own_error_is_said_and_a_partial_run_is_unverified():
    diag, findings = _judge_on("diag-4x-one-gpu-monitor-summary.json", 8)
    assert diag.covered == [0]
    lines = [(f.gpu, f.severity, f.message) for f in findings]
    assert (0, "warn", "pcie failed (MONITOR)") in lines
    (node,) = [f for f in findings if f.gpu is None and "pcie" in f.message]
    assert "NUMA node unknown" in node.detail and "replays" not in node.detail   # said once, where it belongs
    (partial,) = [f for f in findings if f.message.startswith("DCGM judged")]
    assert partial.message == "DCGM judged 1 of 8 GPUs" and "1, 2, 3, 4, 5, 6, 7" in partial.detail
    assert max(f.severity for f in findings) != "drain"


@pytest.mark.parametrize("name", sorted(p.name for p in (DATA / "nvidia").glob("*.json")))
def test_nvidias_own_diag_test_outputs_read_whole(name):
    """DCGM's own unit tests' outputs (2.4.7 and 4.6.0): every result of the 4 GPUs read, a failed stress
    test judged by its own severity or DCGM's table, DCGM's words kept."""
    diag, findings = _judge_on(f"nvidia/{name}", 4)
    assert diag.error is None and diag.covered == [0, 1, 2, 3] and len(diag.results) > 50
    stress = [f for f in findings if f.message.startswith("sm_stress")]
    assert stress and all("did not exceed desired stress level" in f.detail for f in stress)
    expected = "warn" if "4.6.0" in name else "drain"   # 4.6.0's output says MONITOR; 2.4.7's id 50 is TRIAGE
    assert {f.severity for f in stress} == {expected}
