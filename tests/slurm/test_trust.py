"""Root trusts only root's files, on the real mini-cluster: a config a user owns names the program the
health check would run as scontrol (issue 24's scenario).  The nodes never run it: they publish "config
refused", `fleet` lists them, they are still checked on the packaged defaults, and jobs still run."""

from __future__ import annotations

import json
import os

NOBODY = 65534


def test_a_config_a_user_owns_is_refused_and_its_program_never_runs(mc):
    config = mc.dir / "etc" / "gpufleet.toml"
    original = config.read_text()
    marker = mc.dir / "ran-as-root"
    evil = mc.dir / "evil-scontrol.sh"
    evil.write_text(f"#!/bin/sh\ntouch {marker}\nexec scontrol \"$@\"\n")
    evil.chmod(0o755)
    text = "\n".join(f'scontrol = "{evil}"' if line.startswith("scontrol =") else line for line in original.splitlines())
    assert f'scontrol = "{evil}"' in text
    try:
        config.write_text(text + "\n")
        os.chown(config, NOBODY, NOBODY)  # mode 0644, in a root-owned directory
        mc.wait(lambda: all('"cfg":"refused"' in mc.node(n).get("Extra", "") for n in mc.nodes),
                max(4 * mc.hc_interval, 60), "every node publishing config refused")
        assert not marker.exists(), "the health check ran the config's program as root"
        for n in mc.nodes:  # still checked, on the packaged defaults
            extra = json.loads(mc.node(n)["Extra"])
            assert extra["v"] in ("ok", "warn") and extra["drv"] == "580.159.04", extra
        admin = mc.dir / "etc" / "admin.toml"  # an admin's own config: `fleet` refuses the user's one too
        admin.write_text(original)
        assert mc.gpufleet("fleet", "--json").returncode == 2 and not marker.exists()
        inv = mc.gpufleet("fleet", "--json", env={"SLURM_GPUFLEET_CONFIG": str(admin)})
        off = [o for g in json.loads(inv.stdout)["groups"].values() for o in g["off_standard"]]
        assert sorted(o["node"] for o in off if "config refused" in o["why"]) == sorted(mc.nodes), off
        job = mc.sbatch("-w", mc.nodes[0], "--gres=gpu:1", "--time=1", "--wrap", "true")  # prolog and epilog run
        mc.wait(lambda: mc.run("squeue", "-h", "-j", job, check=False).stdout.strip() == "", 60, f"job {job} ended")
        assert "DRAIN" not in mc.state(mc.nodes[0]) and not marker.exists()
        refused = mc.gpufleet("maintain", "status")
        assert refused.returncode == 2 and f"{config}: owned by nobody" in refused.stderr, refused.stderr
    finally:
        config.write_text(original)
        os.chown(config, 0, 0)
    mc.wait(lambda: not any('"cfg"' in mc.node(n).get("Extra", "") for n in mc.nodes), max(4 * mc.hc_interval, 60),
            "every node trusting its config again")
