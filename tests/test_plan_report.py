"""`maintain plan` on the sample fleet: one screen of text, JSON, and an HTML report that renders in a
real headless Chromium (DOM and screenshot)."""

import html as html_lib
import json
import re
import shutil
import struct
import subprocess
import sys

import pytest
from support import REPO, run_cli, trusted

FLEET = str(REPO / "etc" / "sample-fleet.json")
POLICY = str(trusted(REPO / "etc" / "gpufleet.toml"))  # also from a clone under /tmp
NODES = "gpu[001-032],a100-[01-08]"


def test_plan_on_the_sample_fleet_fits_one_screen(tmp_path):
    r = run_cli("maintain", "plan", "--target-driver", "580.159.04", "--nodes", NODES, "--fleet", FLEET,
                "--config", POLICY, "--out", str(tmp_path / "plan.json"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert len(lines) <= 40 and max(len(line) for line in lines) <= 120
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["waves"][0]["kind"] == "canary"
    # one canary per (model, firmware) combination: H200 on two VBIOS builds, and the A100s
    assert len(plan["waves"][0]["nodes"]) == 3
    assert all(len(w["nodes"]) <= plan["budget"]["max_unavailable"] for w in plan["waves"])
    skipped = {s["node"]: s["why"] for s in plan["skipped"]}
    assert skipped["gpu012"] == "already at 580.159.04" and "admin: IB cable swap" in skipped["gpu007"]
    planned = [n for w in plan["waves"] for n in w["nodes"]]
    assert len(planned) == len(set(planned)) == 38
    # the debug partition (less critical) goes before prod (critical)
    debug = [planned.index(n) for n in ("gpu001", "gpu002", "gpu003", "gpu004")]
    prod = [planned.index(f"gpu{i:03d}") for i in range(17, 33)]
    assert max(debug) < min(prod)
    assert plan["gating_jobs"][0]["job_id"] == "999"
    # every planned node: when apply takes it at the latest (its slot, epoch s) and the job that decides it
    slots = {n["node"]: n for n in plan["nodes"]}
    assert set(slots) == set(planned)
    for n in slots.values():
        assert plan["created"] <= n["slot_start"] < n["slot_end"] and isinstance(n["slot_start"], float)
        if n["decided_by"] and n["decided_by"]["end"] is not None:
            assert n["slot_start"] >= n["decided_by"]["end"]  # never before its job ends by its limit
    assert slots["gpu030"]["decided_by"]["job_id"] == "999"


def test_plan_takes_config_like_apply_and_the_old_policy_name(tmp_path):
    config = tmp_path / "site.toml"
    config.write_text("[maintain]\nmax_unavailable = 3\n")
    for flag in ("--config", "--policy"):
        r = run_cli("maintain", "plan", "--target-driver", "580.159.04", "--nodes", NODES, "--fleet", FLEET,
                    flag, str(config), "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["budget"]["max_unavailable"] == 3


def test_the_plans_budget_is_typed_and_read_back_as_written(tmp_path):
    from slurm_gpufleet.maintain.plan import Budget, Plan, PlanError

    r = run_cli("maintain", "plan", "--target-driver", "580.159.04", "--nodes", NODES, "--fleet", FLEET,
                "--config", POLICY, "--out", str(tmp_path / "plan.json"))
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "plan.json").read_text())
    plan = Plan.from_dict(data)
    assert isinstance(plan.budget, Budget) and plan.budget.max_unavailable == data["budget"]["max_unavailable"] > 0
    assert plan.budget.max_failures == data["budget"]["max_failures"] and not plan.budget.by_domain
    assert plan.to_dict()["budget"] == data["budget"]
    for budget in ({**data["budget"], "max_unavailble": 3}, [3], 3):   # a misspelt key, another shape
        with pytest.raises(PlanError, match="not a slurm-gpufleet plan"):
            Plan.from_dict({**data, "budget": budget})
    (tmp_path / "bad.json").write_text(json.dumps({**data, "budget": {"max_unavailble": 3}}))
    r = run_cli("maintain", "apply", str(tmp_path / "bad.json"), "--config", POLICY)
    assert r.returncode == 2 and len(r.stderr.decode().strip().splitlines()) == 1, r.stderr


def test_gate_refuses_volta_past_r580(tmp_path):
    fleet = json.loads(open(FLEET).read())
    for n in fleet["nodes"]:
        if n["name"].startswith("a100"):
            n["gpus"] = "8xTesla V100-SXM2-32GB"
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(fleet))
    r = run_cli("maintain", "plan", "--target-driver", "595.71.05", "--nodes", NODES, "--fleet", str(path),
                "--config", POLICY, "--json")
    assert r.returncode == 1
    plan = json.loads(r.stdout)
    assert plan["refused"] and not plan["gate"]["a100-legacy"]["ok"] and plan["gate"]["h200"]["ok"]
    assert "Volta is not supported after the R580 branch" in plan["gate"]["a100-legacy"]["problems"][0]
    r = run_cli("maintain", "plan", "--target-driver", "595.71.05", "--nodes", NODES, "--fleet", str(path),
                "--config", POLICY, "--force")
    assert r.returncode == 0 and b"FORCED" in r.stdout


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


CHROMIUM = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]


# Chromium's render (1.5-3.5 s each, a browser process per page): the slow tier, with make test and CI
@pytest.mark.slow
def test_html_report_renders_in_chromium(tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (make test installs it when run as root)")
    html = tmp_path / "plan.html"
    r = run_cli("maintain", "plan", "--target-driver", "580.159.04", "--nodes", NODES, "--fleet", FLEET,
                "--config", POLICY, "--html", str(html))
    assert r.returncode == 0
    base = [browser, *CHROMIUM, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert "Rollout" in dom and "<svg" in dom and dom.count("<rect") >= 9
    assert "a100-legacy" in dom and "h200" in dom
    shot = tmp_path / "plan.png"
    subprocess.run([*base, "--window-size=1280,1000", f"--screenshot={shot}", html.as_uri()], capture_output=True,
                   timeout=120)
    assert _png_size(shot) == (1280, 1000)
    # a rendered page with tables and a timeline, not a blank one (a white 1280x1000 PNG is ~5 KB)
    assert shot.stat().st_size > 40_000


def _big_fleet(path, count: int) -> str:
    """The sample fleet grown to `count` nodes, as the README's screenshots grow it."""
    sys.path.insert(0, str(REPO / "scripts"))
    from plan_screenshots import grown

    return grown(path, count)


# what the test adds to a page to measure it: every SVG text inside its SVG, every table cell inside the page,
# the result into the DOM
MEASURE = """<script>window.addEventListener('load', () => {
  const out = [];
  for (const svg of document.querySelectorAll('svg')) {
    const box = svg.getBoundingClientRect();
    for (const t of svg.querySelectorAll('text')) {
      const r = t.getBoundingClientRect();
      if (r.left < box.left - 0.5 || r.right > box.right + 0.5) out.push(t.textContent);
    }
  }
  // and every table cell within the page's width: a long host list wraps, never runs off the page
  const width = document.documentElement.clientWidth;
  for (const td of document.querySelectorAll('td')) {
    if (td.getBoundingClientRect().right > width + 0.5) out.push('cell: ' + td.textContent.slice(0, 60));
  }
  document.body.setAttribute('data-clipped', JSON.stringify(out));
});</script></body>"""


@pytest.mark.slow  # Chromium's render, as above
@pytest.mark.parametrize("count,deadline", [(32, None), (32, "72h"), (250, None), (250, "72h")])
def test_html_plan_clips_no_label_and_shows_the_deadline(tmp_path, count, deadline):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (make test installs it when run as root)")
    fleet = tmp_path / "fleet.json"
    nodes = _big_fleet(fleet, count) if count != 32 else "gpu[001-032]"
    html = tmp_path / "plan.html"
    args = ["maintain", "plan", "--target-driver", "580.159.04", "--nodes", nodes,
            "--fleet", str(fleet) if count != 32 else FLEET, "--config", POLICY, "--html", str(html), "--json"]
    r = run_cli(*args, *(["--deadline", deadline] if deadline else []))
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    page = html.read_text()
    measured = tmp_path / "measured.html"
    measured.write_text(page.replace("</body>", MEASURE))
    base = [browser, *CHROMIUM, f"--user-data-dir={tmp_path / 'profile'}"]
    # measured at the width the README's screenshots are taken at (scripts/plan_screenshots.py)
    dom = subprocess.run([*base, "--window-size=1200,1400", "--dump-dom", measured.as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    clipped = re.search(r'data-clipped="([^"]*)"', dom)
    assert clipped, "the page did not load"
    assert json.loads(html_lib.unescape(clipped.group(1))) == []
    # times with their date and UTC offset
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC[+-]\d{4}", page)
    if deadline:
        stopped = [j for j in plan["deadline"]["jobs"] if j["action"] != "wait"]
        assert stopped and "Deadline" in page
        for j in stopped:  # each stopped job is named, and no row shows it running past its stop
            assert f"<td>{j['job_id']}</td>" in page
        for n in plan["nodes"]:
            d = n["decided_by"]
            if d and d.get("stopped"):
                assert f"job {d['job_id']} until" not in page
    else:
        assert "Deadline" not in page
