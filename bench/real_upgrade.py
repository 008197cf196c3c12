"""The upgrade step for real, on a copy of the node image (tests/slurm/node_image.sh): the sample
template's package path (etc/upgrade.sh.j2, rendered and run by the same functions `maintain apply` uses,
commands reaching the node by chroot), DKMS building, `reboot-check` judging the real `.ko`, a kernel
installed without its headers, then with them, and the template's rollback.  Needs root and Debian's
archive (bookworm, bookworm-security, bookworm-backports).  Run through bench/real_upgrade.sh.

Prints one JSON object (--json) or a line per step: image_build_s, upgrade_s (the template's run),
dkms_build_s (the DKMS build alone: nvidia-kernel-dkms's configure step in the image's dpkg log, where
its postinst has DKMS build the module), module_version,
module_signer, reboot_check_after, rollback_s, rollback_ok, drift_kernel, drift_caught, drift_message,
drift_fixed, drift_how, failed_reason, and each step's detail.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_gpufleet.maintain.upgrade import render, run  # noqa: E402

IMAGE_SCRIPT = REPO / "tests" / "slurm" / "node_image.sh"
OLD, NEW = "535.261.03", "535.309.01"
RUNNING_KERNEL = "6.1.0-50-amd64"   # bookworm's kernel in the image (read back from it below)
DRIFT_KERNEL_PACKAGE = "linux-image-6.12.95+deb12-amd64"  # bookworm-backports
H200_REPORT = REPO / "slurm_gpufleet" / "data" / "captures" / "h200-real" / "nvidia-smi-q.xml"


def gpufleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "slurm-gpufleet"), *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO)


def in_node(root: Path, command: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([str(IMAGE_SCRIPT), "sh", str(root), command], capture_output=True, text=True,
                          timeout=timeout)


def reboot_check(root: Path, driver: str) -> dict:
    r = gpufleet("reboot-check", "--driver", driver, "--host-root", str(root), "--json")
    out = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {"problem": r.stderr.strip()}
    return {**out, "rc": r.returncode}


def dkms_build_s(root: Path, version: str) -> float | None:
    """The DKMS build alone: dpkg runs nvidia-kernel-dkms's postinst (DKMS building and installing the
    module for every kernel with headers) between its `half-configured` and `installed` status lines in
    the image's /var/log/dpkg.log (whole seconds); the last such configure of `version`."""
    from datetime import datetime

    start = took = None
    try:
        lines = (root / "var" / "log" / "dpkg.log").read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[2] != "status" or not parts[4].startswith("nvidia-kernel-dkms:"):
            continue
        if not parts[5].startswith(f"{version}-"):
            continue
        at = datetime.strptime(f"{parts[0]} {parts[1]}", "%Y-%m-%d %H:%M:%S")
        if parts[3] == "half-configured":
            start = at
        elif parts[3] == "installed" and start is not None:
            took, start = (at - start).total_seconds(), None
    return took


def template(root: Path, action: str, driver: str, previous: str) -> tuple[bool, float, str]:
    """The sample template as `maintain apply` renders and runs it, for one node whose root is `root`."""
    values = {"node": "n1", "action": action, "rollout": "bench", "reservation": "", "target_driver": driver,
              "target_kernel": None, "target_firmware": {}, "power_cycle": False, "previous_driver": previous,
              "previous": {"driver": previous, "kernel": None, "firmware": {}}}
    script = render(str(REPO / "etc" / "upgrade.sh.j2"), **values)
    env_before = os.environ.get("GPUFLEET_NODE_ROOT")
    os.environ["GPUFLEET_NODE_ROOT"] = str(root)
    os.environ["PATH"] = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # slurm-gpufleet, as installed
    t = time.monotonic()
    try:
        result = run(script, 3600)
    finally:
        if env_before is None:
            os.environ.pop("GPUFLEET_NODE_ROOT", None)
    return result.ok, round(time.monotonic() - t, 1), result.output


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--work", default="/var/tmp/gpufleet-node-image/work", help="where the node's copy goes")
    ap.add_argument("--upgraded", metavar="ROOT",
                    help=f"a copy of the image that a rollout already moved to {NEW} through the template "
                         "(tests/slurm/test_real_image_node.py): judge it and go on from there, instead of "
                         "copying the image and upgrading the copy here")
    args = ap.parse_args()
    out: dict = {}
    t = time.monotonic()
    r = subprocess.run([str(IMAGE_SCRIPT), "build"], capture_output=True, text=True, timeout=3600)
    if r.returncode:
        print(f"real_upgrade: the node image could not be built: {r.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return 2
    image = Path(subprocess.run([str(IMAGE_SCRIPT), "path"], capture_output=True, text=True).stdout.strip())
    built = json.loads((image / ".gpufleet-node-image").read_text() or "{}")
    out["image_build_s"] = built.get("image_build_s")
    out["image_build_parts_s"] = {k: v for k, v in built.items() if k != "image_build_s"}
    out["image_ready_s"] = round(time.monotonic() - t, 1)  # 0-ish when it was there already
    if args.upgraded:
        root = Path(args.upgraded)
        out["before"] = reboot_check(image, OLD)  # the image the rollout's node started from
        out["upgrade_ok"], out["upgrade_s"] = True, None
        out["dkms_build_s"] = dkms_build_s(root, NEW)  # the rollout's upgrade, from the image's dpkg log
        out["upgrade_last_line"] = f"upgraded by a rollout, before this ran ({root})"
    else:
        root = Path(args.work) / "n1"
        t = time.monotonic()
        subprocess.run([str(IMAGE_SCRIPT), "copy", str(root)], check=True, timeout=600)
        out["copy_s"] = round(time.monotonic() - t, 1)
        (root / "proc/sys/kernel").mkdir(parents=True, exist_ok=True)
        (root / "proc/sys/kernel/osrelease").write_text(RUNNING_KERNEL + "\n")  # the kernel the node runs
        out["before"] = reboot_check(root, OLD)
        # 1. the upgrade through the template: apt to 535.309.01, DKMS rebuilding for 6.1
        ok, seconds, output = template(root, "upgrade", NEW, OLD)
        out["upgrade_ok"], out["upgrade_s"] = ok, seconds
        out["dkms_build_s"] = dkms_build_s(root, NEW)
        out["upgrade_last_line"] = (output.strip().splitlines() or [""])[-1]
    after = reboot_check(root, NEW)
    out["module_version"], out["module_signer"] = after.get("module_version"), after.get("module_signer")
    out["module_vermagic"], out["module_flavour"] = after.get("module_vermagic"), after.get("module_flavour")
    out["module_path"] = after.get("module_path")
    out["reboot_check_after"] = after["rc"]
    # 2. the template's rollback path: --allow-downgrades to the recorded version
    ok, seconds, output = template(root, "rollback", OLD, NEW)
    out["rollback_s"] = seconds
    back = reboot_check(root, OLD)
    out["rollback_ok"] = ok and back["rc"] == 0 and back.get("module_version") == OLD
    out["rollback_detail"] = back.get("problem") or (output.strip().splitlines() or [""])[-1]
    # 3. kernel drift: a newer kernel (the next boot) without the headers DKMS needs
    # only the kernel from backports, as an automatic update brings it (`-t` would move the metapackages, and
    # with them the headers, too)
    r = in_node(root, f"apt-get install -y -q --no-install-recommends {DRIFT_KERNEL_PACKAGE}/bookworm-backports")
    out["drift_kernel"] = DRIFT_KERNEL_PACKAGE.removeprefix("linux-image-")
    if r.returncode:
        out["drift_install_error"] = (r.stdout + r.stderr).strip().splitlines()[-1:]
    drift = reboot_check(root, OLD)
    out["drift_caught"] = drift["rc"] == 1 and out["drift_kernel"] in str(drift.get("problem"))
    out["drift_message"] = drift.get("problem")
    check = gpufleet("check", "--nvidia-smi-q", str(H200_REPORT), "--host-root", str(root), "--json")
    findings = json.loads(check.stdout).get("findings", []) if check.stdout.strip().startswith("{") else []
    out["check_kernel_finding"] = next((f["message"] for f in findings
                                        if f.get("check") == "kernel" and f.get("severity") != "ok"), None)
    # 4. the headers: DKMS builds 535.261.03 for the new kernel, or its build fails and is named
    t = time.monotonic()
    headers = DRIFT_KERNEL_PACKAGE.replace("linux-image-", "linux-headers-")
    r = in_node(root, f"apt-get install -y -q --no-install-recommends -t bookworm-backports {headers}")
    out["drift_dkms_s"] = round(time.monotonic() - t, 1)
    fixed = reboot_check(root, OLD)
    out["drift_fixed_check"] = fixed.get("problem") or f"ok: {fixed.get('module_version')}"
    if fixed["rc"] == 0:
        out["drift_fixed"], out["drift_how"] = True, "DKMS built the module for the new kernel; reboot-check passes"
    else:
        named = "DKMS" in str(fixed.get("problem"))
        out["drift_fixed"], out["drift_how"] = named, ("the DKMS build failed and the check names it" if named else
                                                       "refused without naming the DKMS build")
        out["drift_apt_tail"] = (r.stdout + r.stderr).strip().splitlines()[-3:]
    # 5. bad input: a package that does not exist fails the template half-way, with apt's last line
    ok, _, output = template(root, "upgrade", "535.999.99", OLD)
    out["failed_ok"], out["failed_reason"] = ok, (output.strip().splitlines() or [""])[-1]
    # what DKMS compiled here serves the next copies (node_image.sh: builds cached by their inputs)
    subprocess.run([str(IMAGE_SCRIPT), "keep-cache", str(root)], check=False, timeout=600)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
