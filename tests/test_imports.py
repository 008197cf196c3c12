"""The health-check path stays light: no click, jinja2 or sqlite-utils before they are needed."""

import subprocess
import sys

from support import H200, REPO

HEAVY = ("click", "jinja2", "sqlite_utils")


def test_engine_path_imports_nothing_heavy():
    code = ("import sys; from slurm_gpufleet.judging.pipeline import Source, gather, evaluate; "
            "from slurm_gpufleet.readers.report import read_report_file; "
            "snap = gather(Source(report=sys.argv[1])); evaluate(snap); "
            "print(','.join(m for m in ('click', 'jinja2', 'sqlite_utils') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, str(H200 / "nvidia-smi-q.xml")],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


def test_importtime_report_has_no_heavy_module():
    r = subprocess.run([sys.executable, "-X", "importtime", "-c", "import slurm_gpufleet.judging.pipeline"],
                       capture_output=True, text=True, cwd=REPO)
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if "|" in line}
    assert not {m for m in imported if m.split(".")[0] in HEAVY}
    assert "slurm_gpufleet.judging.pipeline" in imported
