"""A check or a setting touches only itself: a module dropped into checks/ is a check, with no other edit;
and the package's imports form no cycle."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

from support import H200, REPO, run_cli

PACKAGE = REPO / "slurm_gpufleet"

PROBE = '''"""A check that exists only while a test runs."""
from ..findings import Finding

NAME = "registration_probe"
ORDER = 5


def check(ctx):
    return [Finding(NAME, "warn", "watch", None, f"probe saw {len(ctx.snapshot.gpus)} GPU(s)")]
'''


def test_a_module_in_checks_is_a_check_with_no_other_edit(tmp_path):
    # a copy of the package, so that tests running beside this one never see the probe
    shutil.copytree(PACKAGE, tmp_path / "slurm_gpufleet", ignore=shutil.ignore_patterns("__pycache__", "data"))
    (tmp_path / "slurm_gpufleet" / "data").symlink_to(PACKAGE / "data")
    (tmp_path / "slurm_gpufleet" / "judging" / "checks" / "registration_probe.py").write_text(PROBE)
    r = run_cli("check", "--nvidia-smi-q", str(H200 / "nvidia-smi-q.xml"), "--json",
                env={"PYTHONPATH": str(tmp_path)}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    found = [f for f in out["findings"] if f["check"] == "registration_probe"]
    assert [f["message"] for f in found] == ["probe saw 1 GPU(s)"], out["findings"][:3]
    assert out["findings"][0]["check"] == "registration_probe"  # ORDER 5: before inventory
    assert out["verdict"] == "warn"


def _imports(path: Path) -> set[str]:
    """The package modules this file imports (module level and inside functions alike)."""
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    package = parts if path.name == "__init__.py" else parts[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = base + (node.module.split(".") if node.module else [])
            else:
                target = (node.module or "").split(".")
            if target and target[0] == "slurm_gpufleet":
                name = ".".join(target)
                for alias in node.names:  # `from . import states`: a module, not a name
                    sub = f"{name}.{alias.name}"
                    out.add(sub if _exists(sub) else name)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("slurm_gpufleet")}
    return {m for m in out if _exists(m)}


def _exists(module: str) -> bool:
    p = REPO.joinpath(*module.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_package_imports_form_no_cycle():
    graph = {_module_name(p): _imports(p) for p in PACKAGE.rglob("*.py")}
    for mod, deps in graph.items():  # a package's __init__ importing its own modules is not a cycle
        graph[mod] = {d for d in deps if d != mod and not mod.startswith(d + ".")}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(mod: str, trail: list[str]) -> None:
        state[mod] = 1
        for dep in sorted(graph.get(mod, ())):
            if state.get(dep) == 1:
                cycles.append(trail[trail.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, trail + [dep])
        state[mod] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [mod])
    assert len(graph) > 60
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


def test_a_state_unit_calls_no_other_unit_no_engine_no_store_no_slurm():
    """maintain/units.py returns moves and effects; only the engine applies them."""
    units = PACKAGE / "maintain" / "units.py"
    imported = _imports(units)
    for forbidden in ("reconcile", "store", "writes", "executor", "simslurm", "slurm.commands",
                      "slurm.pyslurm_backend", "slurm.actuator"):
        assert not [m for m in imported if m.endswith("." + forbidden)], (forbidden, imported)
    tree = ast.parse(units.read_text())
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in ("advance", "effects", "take")):
            names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
            assert "UNITS" not in names, f"{cls.name}.{fn.name} reaches another unit"
            calls = {n.func.attr for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
            assert not calls & {"advance", "effects", "take", "step", "flush", "apply"}, (cls.name, fn.name, calls)
