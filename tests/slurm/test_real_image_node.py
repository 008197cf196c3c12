"""The upgrade step for real (issue 21), on a copy of the Debian node image (tests/slurm/node_image.sh:
bookworm, its 6.1 kernel and headers, Debian's nvidia-kernel-dkms 535.261.03 built by DKMS).

1. One mini-cluster node on the image (part 5): n1's host root is the copy.  A rollout to 535.309.01
   runs the sample template unchanged (etc/upgrade.sh.j2, commands reaching the node by chroot), then the
   cluster's boot of that image (`boot-image`): the node's simulated NVML reports the version of the
   module the image boots, read by the image's own modinfo.  So the rollout's validation (the health
   check's summary after the boot, the kernel check over the image) judges what apt and DKMS really
   installed.
2. From there, bench/real_upgrade.py --upgraded (parts 2-4): `reboot-check` on the real `.ko`, the
   template's rollback, a kernel installed without its headers and then with them, a template failing
   half-way.  The bench alone does its own upgrade; here the rollout's is the one DKMS build of the
   upgrade, not a second.

Root, Debian's archive and DKMS builds (minutes each): marker `image`, run by `make test` beside the
real-Slurm tiers, at the lowest CPU priority, its cluster on ports of its own."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import pytest
from conftest import REPO, start_cluster

from slurm_gpufleet.judging import summary
from slurm_gpufleet.slurm.commands import slurm_time

pytestmark = [pytest.mark.image,
              pytest.mark.skipif(os.geteuid() != 0, reason="the node image needs root (debootstrap, chroot)")]

IMAGE_SCRIPT = REPO / "tests" / "slurm" / "node_image.sh"
OLD, NEW = "535.261.03", "535.309.01"


def modinfo(root, kernel: str) -> str:
    return subprocess.run(["chroot", str(root), "/sbin/modinfo", "-k", kernel, "-F", "version", "nvidia-current"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def imaged():
    """A 2-node cluster on ports of its own; every node has its own host root (host_root .../nodehosts/%n):
    n1 a copy of the real image, booted once (its GPUs report the image's driver), n2 the simulated tree."""
    r = subprocess.run([str(IMAGE_SCRIPT), "build"], capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, f"the node image could not be built: {r.stderr[-1500:]}"
    gen = start_cluster("image", 2, 26817, 27001)
    c = next(gen)
    try:
        hosts = c.dir / "nodehosts"
        subprocess.run([str(IMAGE_SCRIPT), "copy", str(hosts / "n1")], check=True, timeout=900)
        subprocess.run(["cp", "-a", str(c.dir / "host"), str(hosts / "n2")], check=True)
        config = c.dir / "etc" / "gpufleet.toml"
        config.write_text(config.read_text().replace(f'host_root = "{c.dir}/host"', f'host_root = "{hosts}/%n"')
                          .replace("upgrade_timeout_s = 60", "upgrade_timeout_s = 3600")
                          .replace("return_timeout_s = 60", "return_timeout_s = 300")
                          .replace("validate_timeout_s = 30", "validate_timeout_s = 300"))
        booted_at = time.time()
        boot = subprocess.run([str(c.dir / "bin" / "boot-image"), "n1", str(hosts / "n1")], capture_output=True,
                              text=True, env=c.env, timeout=120)
        assert boot.returncode == 0, boot.stdout + boot.stderr

        def registered_and_published() -> bool:
            # slurmctld has the new slurmd's registration, and a health check since it published the image's
            # driver: a rollout taking n1 before that would record the registration before the boot
            info = c.node("n1")
            start = slurm_time(info.get("SlurmdStartTime", ""))
            data = summary.parse(info.get("Extra"))
            checked = summary.published_at(data) if data else None
            return bool(start and start >= math.floor(booted_at) and checked and checked >= start
                        and data.get("drv") == OLD)

        c.wait(registered_and_published, 120, lambda: f"n1 registered after its boot: {c.node('n1')}")
        yield c
    finally:
        # the compilations DKMS made in this copy serve the next run's (node_image.sh keep-cache)
        subprocess.run([str(IMAGE_SCRIPT), "keep-cache", str(c.dir / "nodehosts" / "n1")], check=False, timeout=600)
        next(gen, None)


@pytest.fixture(scope="module")
def rolled(imaged, tmp_path_factory):
    """The rollout of n1 to 535.309.01 through the real packages, and what n1 showed before it."""
    mc, tmp_path = imaged, tmp_path_factory.mktemp("rollout")
    root = mc.dir / "nodehosts" / "n1"
    kernel = (root / "proc" / "sys" / "kernel" / "osrelease").read_text().strip()
    before = {"nvml": mc.driver("n1"), "modinfo": modinfo(root, kernel),
              "published": json.loads(mc.node("n1")["Extra"])}
    # the sample template as shipped, then the cluster's boot of the image in place of `systemctl reboot`
    template = tmp_path / "upgrade.sh.j2"
    template.write_text((REPO / "etc" / "upgrade.sh.j2").read_text()
                        + f'\n# the mini-cluster\'s boot of the node image\n{mc.dir}/bin/boot-image "$node" "$root"\n')
    template.chmod(0o644)
    config = tmp_path / "gpufleet.toml"
    config.write_text((mc.dir / "etc" / "gpufleet.toml").read_text()
                      .replace(f'upgrade_template = "{mc.dir}/etc/upgrade.sh.j2"', f'upgrade_template = "{template}"'))
    env = {"SLURM_GPUFLEET_CONFIG": str(config), "GPUFLEET_NODE_ROOT": f"{mc.dir}/nodehosts/%n",
           "PATH": f"{os.path.dirname(sys.executable)}:{mc.env['PATH']}"}
    plan_file = tmp_path / "plan.json"
    r = mc.gpufleet("maintain", "plan", "--target-driver", NEW, "--nodes", "n1", "--out", str(plan_file), "--force",
                    env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    t = time.monotonic()
    r = mc.gpufleet("maintain", "apply", str(plan_file), env=env, timeout=4000)
    status = json.loads(mc.gpufleet("maintain", "status", "--json", env=env).stdout)
    audit = mc.maintain_db("select event, detail from audit order by ts")
    if r.returncode:
        audit.append(("n1 now", mc.node("n1").get("Extra", "")))
    return {"rc": r.returncode, "out": r.stdout + r.stderr[-3000:], "status": status, "audit": audit[-16:],
            "apply_s": round(time.monotonic() - t, 1), "kernel": kernel, "before": before, "root": root,
            "env": env, "tmp": tmp_path}


def test_a_rollout_on_a_node_booting_the_real_image_validates_what_apt_and_dkms_installed(imaged, rolled):
    mc, root, kernel, before = imaged, rolled["root"], rolled["kernel"], rolled["before"]
    # before: the image's module, as booted, is what NVML reports and the health check publishes
    assert before["nvml"] == OLD == before["modinfo"], before
    assert before["published"]["drv"] == OLD and before["published"]["kern"] == kernel, before
    assert before["published"]["v"] in ("ok", "warn"), before  # the kernel check over the image: it matches
    assert rolled["rc"] == 0 and rolled["status"]["counts"] == {"done": 1}, \
        rolled["out"] + "\n" + "\n".join(map(str, rolled["audit"]))
    # what the package manager really installed: Debian's 535.309.01 build, its module built by DKMS for
    # the kernel the image boots, loaded by the "boot", reported by NVML, judged by the health check
    dpkg = subprocess.run(["chroot", str(root), "dpkg-query", "-W", "-f", "${Version}", "nvidia-kernel-dkms"],
                          capture_output=True, text=True, check=True).stdout
    assert dpkg.startswith(f"{NEW}-"), dpkg
    assert modinfo(root, kernel) == NEW == mc.driver("n1")
    ko = root / "lib" / "modules" / kernel / "updates" / "dkms" / "nvidia-current.ko"
    assert ko.exists(), sorted(p.name for p in ko.parent.glob("*"))
    assert f"n1 booted {kernel}, nvidia {NEW}" in (mc.dir / "log" / "boots.log").read_text()
    published = json.loads(mc.node("n1")["Extra"])
    assert published["drv"] == NEW and published["kern"] == kernel, published
    # the validation itself: the driver from the summary after the boot, the rest as the engine keeps it
    done = mc.maintain_db("select detail from audit where node = 'n1' and event = 'done'")
    assert done and done[0][0].startswith(f"driver {NEW}, verdict ok"), done
    validated = json.loads(dict(mc.maintain_db("select node, validated from nodes"))["n1"])
    assert validated["kern"] == kernel and validated["gsp"] == NEW, validated
    assert "DRAIN" not in mc.state("n1") and "DRAIN" not in mc.state("n2")
    print(f"\nrollout of n1 through the real packages: {rolled['apply_s']} s")


def test_a_rollout_whose_package_manager_fails_half_way_names_its_last_line(imaged, rolled):
    """From 535.309.01 to a version n1's apt sources do not have: the template fails half-way (apt finds no
    such package), and the rollout fails the node with the template's last line, in `maintain status` and
    in the reason Slurm shows, and leaves its packages as they were."""
    mc, env, root = imaged, rolled["env"], rolled["root"]
    assert rolled["rc"] == 0, "the first rollout did not finish: nothing to go on from"
    plan_file = rolled["tmp"] / "plan-missing.json"
    r = mc.gpufleet("maintain", "plan", "--target-driver", "535.999.99", "--nodes", "n1", "--out", str(plan_file),
                    "--force", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        r = mc.gpufleet("maintain", "apply", str(plan_file), env=env, timeout=1200)
        status = json.loads(mc.gpufleet("maintain", "status", "--json", env=env).stdout)
        node = next(n for n in status["nodes"] if n["node"] == "n1")
        assert node["state"] == "failed", (r.stdout + r.stderr[-2000:], status)
        # the template's last line: the first of the driver's packages the node holds has no such version
        last = node["error"]
        assert last.startswith("no ") and last.endswith(" 535.999.99 in the node's apt sources"), last
        assert any(event == "failed" and last in detail for event, detail in
                   mc.maintain_db("select event, detail from audit where node = 'n1'")), "the audit names it"
        reason = mc.node("n1").get("Reason", "")
        # cut to Slurm's length, never lost at its start
        assert "DRAIN" in mc.state("n1") and f"failed: {last[:40]}" in reason, reason
        dpkg = subprocess.run(["chroot", str(root), "dpkg-query", "-W", "-f", "${Version}", "nvidia-kernel-dkms"],
                              capture_output=True, text=True, check=True).stdout
        assert dpkg.startswith(f"{NEW}-"), dpkg
    finally:  # the node back in service for what follows (the bench judges its image, not Slurm's state)
        mc.run("scontrol", "update", "nodename=n1", "state=resume")


@pytest.fixture(scope="module")
def result(rolled):
    """bench/real_upgrade.py from where the rollout left n1's image: rollback, drift, a failing template."""
    assert rolled["rc"] == 0, "the rollout did not upgrade the node: nothing to go on from"
    r = subprocess.run([sys.executable, str(REPO / "bench" / "real_upgrade.py"), "--json", "--upgraded",
                        str(rolled["root"])], capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stderr[-2000:]
    (REPO / "out").mkdir(exist_ok=True)
    (REPO / "out" / "real-upgrade.json").write_text(r.stdout)  # the figures, for the README
    return {**json.loads(r.stdout), "apply_s": rolled["apply_s"]}


def test_the_template_upgraded_the_real_package_and_dkms_built_the_module(result):
    assert result["before"]["module_version"] == OLD and result["before"]["ok"]
    assert result["upgrade_ok"], result["upgrade_last_line"]
    assert result["module_version"] == NEW and result["reboot_check_after"] == 0
    # the DKMS build alone, from the image's dpkg log: the rollout's configure of nvidia-kernel-dkms
    assert result["dkms_build_s"] is not None and result["dkms_build_s"] > 0, result
    assert result["module_vermagic"].split()[0] == result["before"]["next_boot_kernel"]
    assert result["module_path"].endswith("/updates/dkms/nvidia-current.ko")  # Debian's name, found
    assert result["module_flavour"] == "proprietary" and result["module_signer"] == "DKMS module signing key"


def test_the_rollback_path_brings_the_recorded_version_back(result):
    assert result["rollback_ok"], result["rollback_detail"]


def test_a_kernel_without_headers_is_refused_and_named_then_the_headers_fix_it(result):
    kernel = result["drift_kernel"]
    assert result["drift_caught"], result["drift_message"]
    assert result["drift_message"].startswith(f"next boot kernel {kernel} has no nvidia {OLD} module")
    assert result["check_kernel_finding"] and kernel in result["check_kernel_finding"]
    assert result["drift_fixed"], result["drift_how"]


def test_a_template_that_fails_half_way_fails_with_the_package_managers_last_line(result):
    assert not result["failed_ok"]
    reason = result["failed_reason"]  # the first of the driver's packages the node holds, whichever it is
    assert reason.startswith("no ") and reason.endswith(" 535.999.99 in the node's apt sources"), reason
