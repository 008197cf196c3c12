import pytest

from slurm_gpufleet.policy import NodePolicy, PolicyError, load_policy, parse_policy

SAMPLE = """# site policy
[defaults]
require_persistence = true

[[group]]
name = "h200"
nodes = "gpu[001-064]"
expected_gpus = 8
driver_version = "580.159.04"

[[group]]
name = "canary"
nodes = "gpu[001-002]"
driver_version = "590.48.01"

[models."NVIDIA B200"]
match = "B200"
max_sm_mhz = 1965
"""


def test_defaults_are_safe_for_any_node():
    p = parse_policy("").for_node("anything")
    assert p == NodePolicy()
    assert p.expected_gpus is None and p.driver_version is None and not p.expect_idle


def test_groups_match_by_host_list_and_later_groups_win():
    policy = parse_policy(SAMPLE, "site.toml")
    canary = policy.for_node("gpu002")
    assert (canary.expected_gpus, canary.driver_version, canary.groups) == (8, "590.48.01", ("h200", "canary"))
    plain = policy.for_node("gpu010")
    assert (plain.driver_version, plain.require_persistence) == ("580.159.04", True)
    other = policy.for_node("cpu001")
    assert other.expected_gpus is None and other.require_persistence is True and other.groups == ()
    assert policy.models[0].max_sm_mhz == 1965


@pytest.mark.parametrize("text,line,fragment", [
    ("[defaults]\nrequire_persistance = true\n", 2, "unknown key 'require_persistance'"),
    ("[defaults]\nexpected_gpus = -1\n", 2, "expected_gpus must be an integer >= 0"),
    ("[defaults]\n\nexpected_gpus = 'eight'\n", 3, "expected_gpus"),
    ("[[group]]\nnodes = 'gpu[001-004]'\n\ndriver_version = 'latest'\n", 4, "dotted version"),
    ("[[group]]\nname = 'x'\nnodes = 'gpu[001-'\n", 3, "not a valid host list"),
    ("[[group]]\nname = 'x'\n", 1, "needs 'nodes'"),
    ("[defaults]\nrequire_ecc = yes\n", 2, "invalid TOML"),
    ("[default]\nrequire_ecc = true\n", 1, "unknown section"),
    ("[defaults]\ncompute_mode = 'Shared'\n", 2, "must be one of"),
    ('[models."B200"]\nmax_sm = 1\n', 2, "unknown key 'max_sm'"),
])
def test_bad_config_names_file_and_line(text, line, fragment):
    with pytest.raises(PolicyError) as err:
        parse_policy(text, "/etc/slurm-gpufleet/gpufleet.toml")
    message = str(err.value)
    assert message.startswith(f"/etc/slurm-gpufleet/gpufleet.toml:{line}: "), message
    assert fragment in message and "\n" not in message


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(PolicyError, match="cannot read config"):
        load_policy(str(tmp_path / "nope.toml"))


def test_shipped_sample_config_is_valid():
    from support import REPO
    policy = load_policy(str(REPO / "etc" / "gpufleet.toml"))
    assert policy.groups


def test_a_config_read_between_its_truncate_and_its_write_is_read_again(tmp_path, monkeypatch):
    """An in-place rewrite (`>`, an editor's save) leaves the file empty for a moment, and empty is valid
    TOML (the defaults).  The pause before the second read is where the writer finishes."""
    import time

    config = tmp_path / "gpufleet.toml"
    config.write_text("")
    paused = []

    def writer_finishes(seconds):
        paused.append(seconds)
        config.write_text(SAMPLE)

    monkeypatch.setattr(time, "sleep", writer_finishes)
    policy = load_policy(str(config))
    assert paused and policy.for_node("gpu002").groups == ("h200", "canary")
    # a config that is only comments (install's skeleton) is not empty: read once
    paused.clear()
    config.write_text("# the site's settings\n")
    assert load_policy(str(config)).for_node("gpu002").groups == () and paused == []
