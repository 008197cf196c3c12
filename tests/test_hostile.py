"""Hostile text (node names, reasons, GPU names, template values with quotes, `;`, `$()`, newlines, very
long text) never reaches a shell: Slurm gets argv lists, the upgrade template quotes every value."""

import json
import os
import stat
import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_gpufleet.maintain.upgrade import render
from slurm_gpufleet.slurm.actions import MAX_REASON
from slurm_gpufleet.slurm.commands import CommandBackend

NASTY = st.one_of(
    st.sampled_from(["a;b", "$(touch PWNED)", "`touch PWNED`", "x' ; touch PWNED ; '", 'q"q', "l1\nl2",
                     "$HOME", "a\\b", "*", "-rf /", "n[1-3];id", "x" * 5000, "ümlaut", "\x00nul"]),
    st.text(max_size=80))
FEW = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))


@FEW
@given(node=NASTY, target=NASTY, previous=NASTY)
def test_template_values_are_data_never_shell(tmp_path_factory, node, target, previous):
    work = tmp_path_factory.mktemp("tpl")
    template = work / "upgrade.j2"
    template.write_text("printf '%s\\0' {{ node }} {{ target_driver }} {{ previous_driver }}\n")
    script = render(str(template), node=node.replace("\x00", ""), target_driver=target.replace("\x00", ""),
                    previous_driver=previous.replace("\x00", ""))
    out = subprocess.run(["/bin/bash", "-c", script], capture_output=True, cwd=work, timeout=10)
    assert out.returncode == 0, out.stderr
    # bytes, not text: text mode would turn a value's "\r" into "\n"
    got = out.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]
    assert got == [v.replace("\x00", "") for v in (node, target, previous)]
    assert not (work / "PWNED").exists()


def _fake_scontrol(tmp_path):
    """A stand-in scontrol at the library boundary: it records its argv, one JSON list a line."""
    log = tmp_path / "argv.jsonl"
    exe = tmp_path / "scontrol"
    exe.write_text(f"#!{sys.executable} -SI\nimport json, sys\nopen({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return CommandBackend(str(exe)), log


# 20 cases, two scontrol processes each, in the fast tier; the slow tier's fuzz goes further
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(names=st.lists(NASTY.filter(lambda s: s and "\x00" not in s), min_size=1, max_size=4), reason=NASTY)
def test_slurm_gets_one_argument_per_field_and_a_one_line_reason(tmp_path_factory, names, reason):
    tmp = tmp_path_factory.mktemp("sc")
    backend, log = _fake_scontrol(tmp)
    backend.drain_nodes(names, reason)
    backend.set_weight_nodes(names, 1001)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    drain, weight = calls
    assert drain[0] == "update" and drain[1].startswith("nodename=") and drain[2] == "state=drain"
    assert len(drain) == 4 and drain[3].startswith("reason=")
    sent = drain[3][len("reason="):]
    assert "\n" not in sent and "'" not in sent and '"' not in sent and "`" not in sent
    assert len(sent) <= MAX_REASON
    assert weight == ["update", drain[1], "weight=1001"]
    assert not os.path.exists(tmp / "PWNED")


def test_a_job_comment_reaches_slurm_whole_on_one_line():
    from slurm_gpufleet.slurm.actions import job_comment

    owner = "gpufleet:signal=B:USR1@30; $(x) 'q' " + "y" * 900
    assert job_comment(owner + "\nnext") == owner + " next"  # never cut, quotes kept: an argv value
