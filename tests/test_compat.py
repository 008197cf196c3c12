import datetime as dt

import pytest

from slurm_gpufleet.catalogs.compat import evaluate, max_cuda_for_driver

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


def test_branch_policy_refuses_new_feature_branches_in_check_and_gate(h200, tmp_path):
    import json as _json

    from support import REPO, run_cli

    from slurm_gpufleet import evaluate
    from slurm_gpufleet.policy import parse_policy

    prod = parse_policy('[defaults]\nallowed_branch_types = ["LTSB", "PB"]\n')
    assert [f for f in evaluate(h200, prod).findings if f.check == "compatibility"] == []  # R580 is LTSB
    h200.driver_version = "575.57.08"  # R575: a New Feature Branch
    found = [f for f in evaluate(h200, prod).findings if "NFB" in f.message]
    assert found and found[0].severity == "warn" and found[0].message.startswith("R575 is a NFB branch")
    config = tmp_path / "site.toml"
    config.write_text('[defaults]\nallowed_branch_types = ["LTSB", "PB"]\n')
    r = run_cli("maintain", "plan", "--target-driver", "575.57.08", "--nodes", "gpu[001-032],a100-[01-08]",
                "--fleet", str(REPO / "etc" / "sample-fleet.json"), "--config", str(config), "--json")
    assert r.returncode == 1
    gate = _json.loads(r.stdout)["gate"]
    assert all(any("NFB branch" in p for p in g["problems"]) for g in gate.values())
    assert run_cli("maintain", "plan", "--target-driver", "580.159.04", "--nodes", "gpu[001-032]",
                   "--fleet", str(REPO / "etc" / "sample-fleet.json"), "--config", str(config)).returncode == 0


def test_cve_exposure_from_the_bulletin_data():
    from slurm_gpufleet.catalogs import security_data
    from slurm_gpufleet.catalogs.compat import cves_for, safe_version

    rows = security_data()["cve"]
    assert len(rows) >= 40 and all(r["source"].startswith("github.com/NVIDIA/product-security@") for r in rows)
    # R580 got the May 2026 fixes in 580.159.03: the real H200's 580.159.04 is clean, 580.95.05 is not
    assert cves_for("580.159.04") == []
    exposed = cves_for("580.95.05")
    assert exposed and {c["fixed_in"] for c in exposed} <= {"580.126.09", "580.159.03"}
    assert safe_version("580.95.05") == "580.159.03"
    # R570 stopped getting fixes: the later CVEs come back with fixed_in None
    r570 = cves_for("570.172.08")
    assert any(c["fixed_in"] is None for c in r570) and safe_version("570.172.08") is None
    # a branch newer than every branch a bulletin names came after its fix
    assert cves_for("610.10") == []


def test_compat_json_lists_cves_and_check_notes_them(h200):
    import json as _json

    from support import run_cli

    from slurm_gpufleet import evaluate
    from slurm_gpufleet.policy import parse_policy

    out = _json.loads(run_cli("compat", "--driver", "570.172.08", "--json").stdout)
    assert out["cves"] and set(out["cves"][0]) >= {"id", "bulletin", "severity", "fixed_in"}
    h200.driver_version = "580.95.05"
    note = [f for f in evaluate(h200).findings if "CVE" in f.message]
    assert note and note[0].severity == "ok" and "fixed from 580.159.03" in note[0].detail
    site = parse_policy('[defaults]\ncve_severity = "warn"\n')
    assert [f.severity for f in evaluate(h200, site).findings if "CVE" in f.message] == ["warn"]


def test_plan_refuses_an_exposed_target_unless_forced(tmp_path):
    import json as _json

    from support import REPO, run_cli

    args = ("maintain", "plan", "--target-driver", "580.95.05", "--nodes", "gpu[001-032]", "--fleet",
            str(REPO / "etc" / "sample-fleet.json"))
    r = run_cli(*args, "--json")
    assert r.returncode == 1
    problems = [p for g in _json.loads(r.stdout)["gate"].values() for p in g["problems"]]
    assert any("580.95.05 is itself exposed to" in p and "fixed from 580.159.03" in p for p in problems)
    assert run_cli(*args, "--force").returncode == 0


def test_fleet_shows_exposed_nodes_per_group_with_the_safe_version():
    import json as _json

    from support import REPO, run_cli

    r = run_cli("fleet", "--fleet", str(REPO / "etc" / "sample-fleet.json"), "--config",
                str(REPO / "etc" / "gpufleet.toml"), "--json")
    exposed = _json.loads(r.stdout)["groups"]["h200"]["exposed"]
    assert [(e["driver"], len(e["nodes"]), e["safe_version"]) for e in exposed] == [("570.172.08", 31, None)]
    text = run_cli("fleet", "--fleet", str(REPO / "etc" / "sample-fleet.json"), "--config",
                   str(REPO / "etc" / "gpufleet.toml")).stdout.decode()
    assert "exposed   570.172.08 on 31 gpu[001-011,013-032]" in text and "change branch" in text


def test_a_cuda_release_without_its_own_row_says_what_the_table_knows():
    """A CUDA release with no driver row of its own (13.2 here): the family's minimum (minor-version
    compatibility) decides, and the note says so instead of `< ?`.  CUDA 13.1 has its row (590.48.01,
    the 13.1 Update 1 runfile's driver, sourced as not NVIDIA's table): below it, 13.1 runs through
    minor-version compatibility, and a 590 driver reaches CUDA 13.1."""
    from support import run_cli

    r = run_cli("compat", "--cuda", "13.2", "--driver", "580.95.05")
    out = r.stdout.decode()
    assert r.returncode == 0 and "?" not in out, out
    assert "CUDA 13.x runs on >= 580.65.06" in out and "not in the table" in out, out
    r = run_cli("compat", "--cuda", "13.2", "--driver", "575.51.03")
    assert r.returncode == 1 and "CUDA 13.2 needs driver >= 580.65.06" in r.stdout.decode()
    r = run_cli("compat", "--cuda", "13.1", "--driver", "580.95.05")
    out = r.stdout.decode()
    assert r.returncode == 0 and "driver 580.95.05 < 590.48.01, its release minimum" in out, out
    r = run_cli("compat", "--cuda", "13.1", "--driver", "590.48.01")
    out = r.stdout.decode()
    assert r.returncode == 0 and "CUDA up to 13.1" in out, out
    assert "branch R590 (NFB, end of life unknown)" in out and "not in the branch table" not in out, out


def test_fleet_warns_of_a_group_that_matches_no_node_and_shows_each_group_s_mode(tmp_path):
    """A typo in a group's host list leaves its settings applied nowhere (an observe-only group's nodes
    then reset, reboot and drain in full mode): `fleet` says so, and shows each group's mode."""
    import json as _json

    from support import REPO, run_cli

    config = tmp_path / "gpufleet.toml"
    config.write_text((REPO / "etc" / "gpufleet.toml").read_text()
                      + '\n[[group]]\nname = "canary"\nnodes = "gpu[101-104]"\nmode = "observe"\n'
                      + '\n[[group]]\nname = "watched"\nnodes = "gpu[001-002]"\nmode = "observe"\n')
    sample = _json.loads((REPO / "etc" / "sample-fleet.json").read_text())
    # gpu002's health check, in observe mode, would have drained it: it says so in its summary
    next(n for n in sample["nodes"] if n["name"] == "gpu002")["observed"] = "drain: memory gpu1 row remap failure [gpufleet]"
    fleet = str(tmp_path / "fleet.json")
    (tmp_path / "fleet.json").write_text(_json.dumps(sample))
    out = _json.loads(run_cli("fleet", "--fleet", fleet, "--config", str(config), "--json").stdout)
    assert out["groups"]["watched"]["observed"] == [{"node": "gpu002",
                                                     "would": "drain: memory gpu1 row remap failure [gpufleet]"}]
    assert out["groups_matching_no_node"] == [{"group": "canary", "nodes": "gpu[101-104]"}]
    assert out["groups"]["watched"]["mode"] == "observe" and out["groups"]["h200"]["mode"] == "full"
    text = run_cli("fleet", "--fleet", fleet, "--config", str(config)).stdout.decode()
    assert 'warning: group canary (nodes = "gpu[101-104]") matches no node of the fleet' in text, text
    assert "watched: 2 node(s), mode observe;" in text, text
    assert "gpu002: would drain: memory gpu1 row remap failure [gpufleet]" in text, text


def test_slurm_conf_and_the_health_check_s_log_warn_of_a_group_that_matches_no_node(tmp_path):
    """The group's host list against slurm.conf's nodes ($SLURM_CONF): a file read, nothing asked of
    slurmctld; the health check says it once per change of the config or slurm.conf."""
    import logging

    from support import run_cli

    from slurm_gpufleet.hooks.common import Setup, log, warn_unmatched_groups
    from slurm_gpufleet.policy import load_policy

    conf = tmp_path / "slurm.conf"
    conf.write_text("NodeName=DEFAULT CPUs=16\nNodeName=gpu[001-004] Gres=gpu:h200:8\nNodeName=cpu01 CPUs=4\n")
    config = tmp_path / "gpufleet.toml"
    config.write_text(f'[slurm]\nstate_dir = "{tmp_path}/state"\n'
                      '[[group]]\nname = "canary"\nnodes = "gpu[101-104]"\nmode = "observe"\n'
                      '[[group]]\nname = "h200"\nnodes = "gpu[001-004]"\n')
    r = run_cli("slurm-conf", "--config", str(config), "--slurm-version", "22.05", env={"SLURM_CONF": str(conf)})
    err = r.stderr.decode()
    assert r.returncode == 0 and 'warning: group canary (nodes = "gpu[101-104]") matches no node of slurm.conf' in err
    assert "group h200" not in err

    policy = load_policy(str(config))
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    log.addHandler(handler)
    try:
        import os

        os.environ["SLURM_CONF"] = str(conf)
        setup = Setup("gpu001", policy, policy.slurm)
        warn_unmatched_groups(setup)
        warn_unmatched_groups(setup)   # nothing changed: said once
    finally:
        os.environ.pop("SLURM_CONF", None)
        log.removeHandler(handler)
    assert seen == [f'group canary (nodes = "gpu[101-104]") matches no node of {conf}: its settings apply nowhere '
                    "(a typo in its host list?)"]
