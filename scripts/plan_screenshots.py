"""The plan HTML as an admin sees it, in headless Chromium: 32 and 250 nodes, with and without a
deadline, written as PNGs for the README (`python scripts/plan_screenshots.py DIR`).  The 250-node fleet is
the sample fleet grown as tests/test_plan_report.py grows it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def grown(path: Path, count: int) -> str:
    """The sample fleet grown to `count` nodes (node i a copy of sample node i % 40, with its jobs), written
    to `path`; returns the nodes as a host list."""
    sample = json.loads((REPO / "etc" / "sample-fleet.json").read_text())
    by_node: dict[str, list] = {}
    for j in sample["jobs"]:
        for n in j["nodes"]:
            by_node.setdefault(n, []).append(j)
    nodes, jobs = [], []
    for i in range(count):
        src = sample["nodes"][i % len(sample["nodes"])]
        name = f"n{i:04d}"
        nodes.append({**src, "name": name})
        jobs += [{**j, "job_id": f"{j['job_id']}{i:04d}", "nodes": [name]} for j in by_node.get(src["name"], [])]
    path.write_text(json.dumps({**sample, "nodes": nodes, "jobs": jobs}))
    return f"n[0000-{count - 1:04d}]"


def main(out: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        sys.exit("chromium is not installed")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        big = grown(t / "fleet250.json", 250)
        cases = {"plan-32": (REPO / "etc" / "sample-fleet.json", "gpu[001-032]", []),
                 "plan-32-deadline": (REPO / "etc" / "sample-fleet.json", "gpu[001-032]", ["--deadline", "72h"]),
                 "plan-250": (t / "fleet250.json", big, []),
                 "plan-250-deadline": (t / "fleet250.json", big, ["--deadline", "72h"])}
        for name, (fleet, nodes, extra) in cases.items():
            html = t / f"{name}.html"
            subprocess.run([sys.executable, "-m", "slurm_gpufleet.cli", "maintain", "plan", "--fleet", str(fleet),
                            "--config", str(REPO / "etc" / "gpufleet.toml"), "--nodes", nodes, "--target-driver",
                            "580.159.04", "--html", str(html), *extra], check=True, capture_output=True)
            subprocess.run([browser, *CHROMIUM, f"--user-data-dir={t / 'profile'}", "--window-size=1200,1400",
                            f"--screenshot={out / (name + '.png')}", html.as_uri()], check=True, capture_output=True,
                           timeout=120)
            print(out / f"{name}.png")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img"))
