"""The command line as other tools call it: options, JSON keys and exit codes are contracts."""

import json
import time

import pytest
from support import H200, PUBLIC, REPO, run_cli

XML = str(H200 / "nvidia-smi-q.xml")
SMI = PUBLIC / "nvidia-smi"


def test_check_healthy_json():
    r = run_cli("check", "--nvidia-smi-q", XML, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["verdict"] == "ok" and out["findings"] == [] and out["gpu_count"] == 1


def test_check_fault_exit_1_and_finding_fields():
    r = run_cli("check", "--nvidia-smi-q", str(SMI / "remap_pending_a10_1.txt"), "--json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert out["verdict"] == "reboot"
    f = [f for f in out["findings"] if f["check"] == "memory"][0]
    assert set(f) >= {"check", "severity", "action", "gpu", "message", "detail"}
    assert (f["severity"], f["action"], f["gpu"]) == ("reboot", "reset_gpu", 0)


def test_check_with_kmsg_carries_xid(tmp_path):
    log = tmp_path / "dmesg.txt"
    log.write_text("[ 10.0] NVRM: Xid (PCI:0000:00:06): 79, pid=1, name=python, GPU has fallen off the bus.\n")
    r = run_cli("check", "--nvidia-smi-q", XML, "--kmsg", str(log), "--json")
    assert r.returncode == 1
    (f,) = json.loads(r.stdout)["findings"]
    assert (f["check"], f["xid"], f["gpu"], f["severity"]) == ("xid", 79, 0, "reboot")


def test_snapshot_round_trip(tmp_path):
    out = tmp_path / "snap.json"
    r = run_cli("snapshot", "--nvidia-smi-q", XML, "-o", str(out))
    assert r.returncode == 0, r.stderr
    r = run_cli("check", "--snapshot", str(out), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["verdict"] == "ok"


def test_config_error_is_exit_2_one_line(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[defaults]\nexpected_gpu = 8\n")
    r = run_cli("check", "--nvidia-smi-q", XML, "--config", str(cfg))
    assert r.returncode == 2 and r.stdout == b""
    err = r.stderr.decode().strip()
    assert err.count("\n") == 0 and f"{cfg}:2: unknown key 'expected_gpu'" in err


def test_env_config_is_honoured(tmp_path):
    cfg = tmp_path / "p.toml"
    cfg.write_text("[defaults]\nexpected_gpus = 8\n")
    r = run_cli("check", "--nvidia-smi-q", XML, "--json", env={"SLURM_GPUFLEET_CONFIG": str(cfg)})
    assert r.returncode == 1 and json.loads(r.stdout)["findings"][0]["message"] == "1 of 8 GPUs"


@pytest.mark.parametrize("content", [b"", b"\x00\xffjunk" * 100, b"just some text\n", b"<?xml version='1.0'?><broken"])
def test_no_gpu_state_is_exit_3(tmp_path, content):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(content)
    r = run_cli("check", "--nvidia-smi-q", str(bad))
    assert r.returncode == 3
    assert r.stderr.decode().count("\n") == 1 and b"Traceback" not in r.stderr


def test_usage_errors_are_exit_2(tmp_path):
    assert run_cli("check", "--nvidia-smi-q", XML, "--snapshot", XML).returncode == 2
    assert run_cli("check", "--bogus").returncode == 2
    assert run_cli("check", "--nvidia-smi-q", str(tmp_path / "missing.xml")).returncode == 2


def test_xid_json_lines():
    lines = (PUBLIC / "kernel_log_lines.tsv").read_text().splitlines()[1:]
    text = "\n".join(line.split("\t")[0] for line in lines) + "\n"
    r = run_cli("xid", "-", "--json", stdin=text.encode())
    assert r.returncode == 0
    rows = [json.loads(x) for x in r.stdout.decode().splitlines()]
    events = [e for e in rows if "xid" in e]
    assert [e["xid"] for e in events] == [48, 63, 94, 94, 13, 43, 119, 119, 63, 63, 79, 149, 144, 145, 145]
    # NVLink5 lines by their unit and word: Nonfatal a warning (RLW_REMAP's: follow the recovery action)
    assert [(e["unit"], e["fatal"], e["action"]) for e in events[-4:]] == [
        ("NETIR_LINK_EVT", True, "reset_gpu"), ("SAW_MVB", False, "watch"), ("RLW_REMAP", False, "follow_recovery_action"),
        ("RLW_REMAP", True, "reset_gpu")]
    # the NVSwitch's lines, the JSON keys a dashboard reads: gpud's excerpt holds switch 1's header, then a
    # Severity line of switch 2 and a Data line of switch 0 whose headers it left out: each an SXid of its
    # switch, said as such, its class from the catalog
    sxids = [e for e in rows if "sxid" in e]
    assert [(e["sxid"], e["fatal"], e["switch"], e["link"], e["action"]) for e in sxids] == [
        (20034, True, 1, 48, "reboot_node"), (20034, True, 2, None, "reboot_node"), (20034, True, 0, None, "reboot_node")]
    assert [e["message"].startswith("header line lost") for e in sxids] == [False, True, True]
    assert not [e for e in rows if "unparsed" in e]
    first = events[0]
    assert (first["line"], first["pci"], first["action"]) == (1, "0000:19:00", "reset_gpu")


def test_compat_exit_codes_and_json():
    r = run_cli("compat", "--driver", "590.48.01", "--arch", "Volta", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["compatible"] is False
    r = run_cli("compat", "--driver", "580.159.04", "--cc", "9.0", "--cuda", "13.0")
    assert r.returncode == 0 and b"compatible" in r.stdout
    assert run_cli("compat", "--driver", "latest").returncode == 2


def test_hung_nvml_never_hangs_the_check():
    started = time.monotonic()
    r = run_cli("check", "--timeout", "1", env={"PYTHONPATH": str(REPO / "tests/fake_pynvml/hung") + ":" + str(REPO)},
                timeout=30)
    assert time.monotonic() - started < 15
    assert r.returncode == 3 and b"timed out after 1 s" in r.stderr


@pytest.mark.slow  # 7 s: the backstop's own margin
def test_a_call_that_holds_the_interpreter_is_still_ended_by_the_watchdog_s_backstop():
    """A C call that holds the interpreter (a backtracking pattern over a long line) holds the watchdog's
    timer thread too: the backstop process ends the run at twice --timeout and BACKSTOP_MARGIN_S more,
    where it ran for minutes before."""
    from slurm_gpufleet.common.watchdog import BACKSTOP_MARGIN_S

    started = time.monotonic()
    r = run_cli("check", "--timeout", "1", env={"PYTHONPATH": str(REPO / "tests/fake_pynvml/gil") + ":" + str(REPO)},
                timeout=60)
    took = time.monotonic() - started
    assert r.returncode == -9 and 2 + BACKSTOP_MARGIN_S - 1 < took < 2 + BACKSTOP_MARGIN_S + 10, (r.returncode, took)


def test_live_check_without_driver_is_a_clear_verdict():
    # this machine has no NVIDIA driver: nvmlInit fails, and the verdict says why instead of crashing
    r = run_cli("check", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 1 and out["verdict"] == "drain"
    assert out["findings"][0]["check"] == "driver"


def test_plan_nodes_empty_is_exit_2_and_missing_nodes_are_folded_with_their_count():
    from support import run_cli

    r = run_cli("maintain", "plan", "--nodes", "", "--target-driver", "580.159.04", "--fleet", "etc/sample-fleet.json")
    assert r.returncode == 2 and r.stderr.decode() == (
        "slurm-gpufleet: error: --nodes '' names no node: give a Slurm host list, e.g. gpu[001-128]\n")
    r = run_cli("maintain", "plan", "--nodes", "zz[1-8]", "--target-driver", "580.159.04", "--fleet",
                "etc/sample-fleet.json")
    assert r.returncode == 2 and r.stderr.decode() == "slurm-gpufleet: error: 8 node(s) not in the fleet: zz[1-8]\n"
    many = ",".join(f"zz{i}" for i in range(1, 400, 2))  # 200 nodes no fold can shorten: cut, with the count
    r = run_cli("maintain", "plan", "--nodes", many, "--target-driver", "580.159.04", "--fleet", "etc/sample-fleet.json")
    err = r.stderr.decode()
    assert r.returncode == 2 and err.startswith("slurm-gpufleet: error: 200 node(s) not in the fleet: zz[1,3,")
    assert err.rstrip().endswith("... (200 nodes)") and len(err) < 140


def test_deadline_has_one_grammar_and_plan_takes_max_unavailable():
    from support import run_cli

    from slurm_gpufleet.maintain.deadline import DeadlineError, parse_deadline, parse_simulated_deadline

    assert parse_simulated_deadline("72h") == parse_simulated_deadline("72") == parse_simulated_deadline("3d") == 72.0
    assert parse_deadline("72", 1000.0) == parse_deadline("72h", 1000.0) == 1000.0 + 72 * 3600
    for bad in ("2026-12-04", "soon", "0h"):
        with pytest.raises(DeadlineError):
            parse_simulated_deadline(bad)
    r = run_cli("maintain", "simulate", "--nodes", "4", "--deadline", "2026-12-04")
    assert r.returncode == 2 and r.stderr.count(b"\n") == 1 and b"a replay has no calendar date" in r.stderr
    base = ("maintain", "plan", "--nodes", "gpu[001-032]", "--target-driver", "580.159.04", "--fleet",
            "etc/sample-fleet.json")
    r = run_cli(*base, "--max-unavailable", "3", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["budget"]["max_unavailable"] == 3
    r = run_cli(*base, "--max-unavailable", "0")
    assert r.returncode == 2 and r.stderr.count(b"\n") == 1 and b"--max-unavailable must be" in r.stderr


def test_arch_given_as_a_model_name_is_exit_2_with_the_list():
    from support import run_cli

    r = run_cli("compat", "--driver", "580.159.04", "--arch", "H200")
    assert r.returncode == 2 and r.stderr.decode() == (
        "slurm-gpufleet: error: --arch 'H200' is not an architecture (H200 is a GPU model: --arch Hopper); "
        "known: Kepler, Maxwell, Pascal, Volta, Turing, Ampere, Ada Lovelace, Hopper, Blackwell\n")
    assert run_cli("compat", "--driver", "580.159.04", "--arch", "hopper").returncode == 0


@pytest.mark.parametrize("node", [{"name": "n1", "fabric_domain": ["a", "b"]}, {"name": "n1", "partitions": "gpu"},
                                  {"name": ["n1"]}, {"fabric_domain": "x"}, {"name": "n1", "cases": 3}, "n1"])
def test_a_fleet_file_with_a_value_of_the_wrong_kind_is_one_line_and_exit_2(tmp_path, node):
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": [node]}))
    r = run_cli("fleet", "--fleet", str(path))
    err = r.stderr.decode()
    assert r.returncode == 2 and err.startswith(f"slurm-gpufleet: error: {path}: not a fleet file: nodes[0]"), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("args", [
    ("fleet", "simulate-faults", "--days", "nan"), ("fleet", "simulate-faults", "--lemon-share", "inf"),
    ("maintain", "simulate", "--failure-rate", "nan"), ("maintain", "simulate", "--hours", "inf"),
    ("maintain", "simulate", "--rollout-at", "nan"),
    ("check", "--timeout", "0"), ("check", "--timeout", "-1"), ("check", "--timeout", "nan"),
    ("check", "--timeout", "1e400"),
])
def test_a_number_option_refuses_nan_infinities_and_what_switches_a_bound_off(args):
    """NaN passes every comparison and an infinity every bound: refused in one line, exit 2, as `--timeout 0`
    or `-1` are (they switched the watchdog off)."""
    r = run_cli(*args)
    assert r.returncode == 2, (args, r.returncode, r.stderr)
    assert b"Traceback" not in r.stderr and (b"not a finite number" in r.stderr or b"not in the range" in r.stderr)


@pytest.mark.parametrize("args,says", [
    (("--target-driver", "５８０.１５９.０４"), "a driver version is branch.minor.patch"),
    (("--target-driver", "580.159"), "a driver version is branch.minor.patch"),
    (("--target-kernel", "$(reboot)"), "is not a kernel version"),
    (("--target-kernel", "6.1.0-28-amd64;reboot"), "is not a kernel version"),
    (("--target-firmware", "vbios=96.00.AF.00.01;reboot"), "is not a vbios version"),
])
def test_a_bundle_target_has_its_grammar_before_it_reaches_a_template(tmp_path, args, says):
    """A target reaches the upgrade template and a shell: ASCII digits and dots for a driver, a kernel
    release as Debian, Ubuntu and RHEL spell one, a firmware version of letters, digits and dots."""
    r = run_cli("maintain", "plan", "--fleet", str(tmp_path / "none.json"), "--nodes", "n1", *args)
    assert r.returncode == 2 and says.encode() in r.stderr and r.stderr.count(b"\n") == 1, r.stderr


@pytest.mark.parametrize("release", ["6.1.0-28-amd64", "6.8.0-45-generic", "5.14.0-427.13.1.el9_4.x86_64",
                                     "6.12.9+bpo-amd64", "6.1"])
def test_real_kernel_releases_have_the_grammar(release):
    from slurm_gpufleet.catalogs.bundle import target_problem

    assert target_problem("kernel", release) is None
