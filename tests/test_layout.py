"""The package is laid out by domain (slurm_gpufleet.DOMAINS, lowest first), and its imports point one way:
a module imports its own domain and the domains before it, never one after, at module level or inside a
function alike.  The root keeps the public API and little else."""

import ast
import pathlib

from support import REPO

import slurm_gpufleet

PACKAGE = REPO / "slurm_gpufleet"


def _modules() -> dict[str, tuple[pathlib.Path, bool]]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _imports(name: str, path: pathlib.Path, is_package: bool):
    """(line, imported module) for every import of the package's own modules in one file."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                yield node.lineno, target, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None


def _domain(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_domain_is_a_folder_with_a_docstring_and_the_root_holds_little_else():
    assert len(set(slurm_gpufleet.DOMAINS)) == len(slurm_gpufleet.DOMAINS)
    for domain in slurm_gpufleet.DOMAINS:
        init = PACKAGE / domain / "__init__.py"
        assert init.is_file(), domain
        assert ast.get_docstring(ast.parse(init.read_text())), f"{domain}/__init__.py says nothing of what it owns"
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(slurm_gpufleet.DOMAINS), folders ^ set(slurm_gpufleet.DOMAINS)
    root_modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root_modules) < 12, root_modules


def test_imports_point_one_way():
    rank = {d: i for i, d in enumerate(slurm_gpufleet.DOMAINS)}
    modules = _modules()
    against = []
    for name, (path, is_package) in modules.items():
        mine = _domain(name)
        for line, target, imported in _imports(name, path, is_package):
            if target == "slurm_gpufleet":
                if f"slurm_gpufleet.{imported}" in modules:
                    target = f"slurm_gpufleet.{imported}"
                elif mine is None:
                    continue
                else:
                    against.append(f"{path.relative_to(REPO)}:{line} imports the root's {imported}")
                    continue
            if not target.startswith("slurm_gpufleet."):
                continue
            theirs = _domain(target)
            if mine is None or mine == theirs:
                continue
            if rank[theirs] > rank[mine]:
                against.append(f"{path.relative_to(REPO)}:{line} ({mine}) imports {target} ({theirs})")
    assert against == [], "\n".join(against)


def test_the_order_test_sees_an_import_against_the_order(tmp_path):
    """The rule's own probe: an upward import, inside a function, is found."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from ..cli import output\n")
    found = list(_imports("slurm_gpufleet.readers.probe", probe, False))
    assert found == [(2, "slurm_gpufleet.cli", "output")]


def test_no_module_is_over_600_lines():
    long = {str(p.relative_to(REPO)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}


def test_no_function_is_over_80_lines():
    """A function a screen can hold: none in the package is longer than 80 lines (its def to its end)."""
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 80:
                long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} {node.end_lineno - node.lineno + 1}")
    assert long == []
