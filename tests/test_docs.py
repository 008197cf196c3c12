"""The documentation stays true: the generated reference pages are what the code and data give today
(scripts/gen_docs.py writes them), every command, option, config key and metric is documented, the README
is short and for users, and its links lead somewhere."""

from __future__ import annotations

import re

import pytest
from support import REPO

from slurm_gpufleet.cli import docgen


def test_the_generated_reference_pages_are_current():
    stale = [name for name, text in docgen.pages().items()
             if not (REPO / "docs" / "reference" / name).exists()
             or (REPO / "docs" / "reference" / name).read_text() != text]
    assert stale == [], f"docs/reference/{stale} differ from the code: run `python scripts/gen_docs.py`"


def test_the_lifecycle_pictures_are_drawn_from_the_tables_the_code_runs():
    """docs/remedies.md opens with the remedy machine as remedy/table.MOVES gives it today, and every move
    of both tables is an edge of its picture."""
    from slurm_gpufleet.maintain.states import TRANSITIONS, Direction
    from slurm_gpufleet.remedy.table import MOVES

    for page, _, _ in docgen.EMBEDDED:
        text = (REPO / "docs" / page).read_text()
        assert docgen.with_blocks(page, text) == text, f"docs/{page}: run `python scripts/gen_docs.py`"
    picture = docgen.remedy_diagram()
    assert all(f"    {a} --> {b}" in picture for (a, b) in MOVES if a != b)
    assert picture.count(" --> ") == 1 + sum(1 for a, b in MOVES if a != b)
    forward = docgen.rollout_diagram("forward")
    assert forward.count(" --> ") == sum(len(t) for t in TRANSITIONS[Direction.FORWARD].values())
    with pytest.raises(ValueError, match="no <!-- remedy-machine -->"):
        docgen.with_blocks("remedies.md", "# a page without its block\n")


def test_every_command_option_key_and_metric_is_documented():
    import click

    from slurm_gpufleet.cli import cli

    undocumented: list[str] = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        if not (cmd.help or "").strip():
            undocumented.append(" ".join(path))
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip():
                undocumented.append(f"{' '.join(path)} {p.opts[0]}")
        if isinstance(cmd, click.Group):
            for sub in cmd.commands:
                walk(cmd.commands[sub], [*path, sub])

    walk(cli, ["slurm-gpufleet"])
    assert undocumented == []
    commands = (REPO / "docs" / "reference" / "commands.md").read_text()
    assert [n for n in docgen.command_names() if f"## `{n}`" not in commands] == []
    settings = (REPO / "docs" / "reference" / "settings.md").read_text()
    rows = {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `(\w+)` \|.*\| ([^|]*) \|$", settings, re.M)}
    assert [k for k in docgen.setting_names() if not rows.get(k)] == []
    metrics = (REPO / "docs" / "reference" / "metrics.md").read_text()
    names = docgen.metric_names()
    assert len(names) >= 10 and [m for m in names if f"`{m}`" not in metrics] == []


def test_the_readme_is_for_users_and_its_links_lead_somewhere():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    # no work log: dates, run numbers, commit hashes
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b|\bCI run \d+|\brun \d+\b|\b[0-9a-f]{7,40}\b(?= )", readme)
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        if not target.startswith("http"):
            assert (REPO / target).exists(), target
    for page in (REPO / "docs").glob("*.md"):
        for target in re.findall(r"\]\(([^)#]+)\)", page.read_text()):
            if not target.startswith("http"):
                assert (page.parent / target).exists(), (page.name, target)


def test_the_python_api_page_runs_as_it_is_written():
    """Each ```python block of docs/api.md, in a fresh interpreter from the repository's root."""
    import subprocess
    import sys

    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "api.md").read_text(), re.S)
    assert len(blocks) >= 4
    for block in blocks:
        r = subprocess.run([sys.executable, "-c", block], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, block + r.stderr


def test_the_changelog_keeps_the_keep_a_changelog_form():
    """Releases are `[Unreleased]` or `[X.Y.Z] - YYYY-MM-DD`, newest first; a release's sections are Keep a
    Changelog's six kinds in its order; every entry names the issue it came from."""
    text = (REPO / "CHANGELOG.md").read_text()
    assert "keepachangelog.com" in text
    releases = re.findall(r"^## (.*)$", text, re.M)
    assert releases and all(r == "[Unreleased]" or re.fullmatch(r"\[\d+\.\d+\.\d+\] - \d{4}-\d\d-\d\d", r)
                            for r in releases), releases
    assert releases.count("[Unreleased]") <= 1 and "[Unreleased]" in releases[:1]
    dated = [r.split(" - ")[1] for r in releases if " - " in r]
    assert dated == sorted(dated, reverse=True)
    kinds = ["Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"]
    for body in re.split(r"^## .*$", text, flags=re.M)[1:]:
        sections = re.findall(r"^### (.*)$", body, re.M)
        assert sections and all(s in kinds for s in sections), sections
        assert sections == sorted(sections, key=kinds.index)
        entries = re.split(r"^- ", body, flags=re.M)[1:]
        assert entries and [e[:60] for e in entries if not re.search(r"\(#\d+\)\s*$", e.split("\n### ")[0])] == []


def test_the_site_builds_with_no_warning_and_every_page_in_its_navigation(tmp_path):
    """`make docs`: MkDocs in strict mode, where a page left out of the navigation, a link or an anchor that
    leads nowhere is an error (mkdocs.yml's `validation`)."""
    import subprocess
    import sys

    nav = (REPO / "mkdocs.yml").read_text()
    pages = sorted(p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md"))
    assert [p for p in pages if f": {p}" not in nav] == []
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", str(REPO / "mkdocs.yml"),
                        "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "site" / "remedies" / "index.html").exists()
