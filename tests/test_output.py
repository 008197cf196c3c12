"""Every text a command prints for people comes from one module (slurm_gpufleet/cli/output.py), from the same
data its --json gives: the words and the JSON cannot disagree."""

from __future__ import annotations

import ast
import json

import pytest
from support import REPO, run_cli
from test_simulate import EXCERPT


@pytest.mark.slow   # a whole simulation, twice (about 2 s)
def test_maintain_simulate_prints_from_the_json_it_gives():
    args = ("maintain", "simulate", "--sacct", EXCERPT, "--nodes", "6", "--rollout-at", "30", "--jobs", "1",
            "--domain-size", "3")
    data = json.loads(run_cli(*args, "--json").stdout)
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[0] == f"job history: {EXCERPT}"
    for name, m in data["strategies"].items():
        row = next(line for line in lines if line.startswith(f"{name} ") and "done by deadline" not in line
                   and len(line.split()) == 7)
        shown = row.split()
        assert shown[1] == ("not done" if m["makespan_h"] is None else f"{m['makespan_h']:.2f}")
        assert float(shown[2]) == round(m["gpu_hours_lost"], 1)
    assert any(line.startswith("strategy     domains") for line in lines)


def test_the_cli_modules_print_through_the_output_module():
    """No command builds a table of its own: a line with two or more aligned fields (`:>8`, `:<12`) in an
    f-string belongs to output.py."""
    aligned = []
    for path in sorted(p for p in (REPO / "slurm_gpufleet" / "cli").glob("*.py") if p.name not in ("output.py", "docgen.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.JoinedStr):
                specs = [v.format_spec for v in node.values if isinstance(v, ast.FormattedValue) and v.format_spec]
                if sum(1 for s in specs if any(c in ast.unparse(s) for c in "<>")) >= 2:
                    aligned.append(f"{path.name}:{node.lineno}")
    assert aligned == [], aligned


def test_the_shared_options_are_spelled_once():
    """--config, --json and --fleet come from cli/common.py's decorators (a command may word their help)."""
    spelled = []
    for path in sorted(p for p in (REPO / "slurm_gpufleet" / "cli").glob("*.py") if p.name not in ("output.py", "docgen.py")):
        if path.name == "common.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "click.option" and node.args and \
                    isinstance(node.args[0], ast.Constant) and node.args[0].value in ("--config", "--json", "--fleet"):
                spelled.append(f"{path.name}:{node.lineno} {node.args[0].value}")
    assert spelled == [], spelled


def test_what_a_command_prints_on_stdout_comes_from_the_output_module():
    """A command's text for people on stdout is made in output.py: no click.echo in another CLI module
    builds one from an f-string (a one-line notice on stderr, err=True, may)."""
    built = []
    for path in sorted(p for p in (REPO / "slurm_gpufleet" / "cli").glob("*.py") if p.name not in ("output.py", "docgen.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "click.echo" and node.args \
                    and not any(k.arg == "err" for k in node.keywords) \
                    and any(isinstance(n, ast.JoinedStr) for n in ast.walk(node.args[0])):
                built.append(f"{path.name}:{node.lineno}")
    assert built == []

