"""The kernel check over fake host trees: will a reboot bring the GPUs back?"""

import json
import lzma

import pytest
from support import H200, run_cli

from slurm_gpufleet import evaluate
from slurm_gpufleet.checks.kernel import reboot_problem
from slurm_gpufleet.readers import read_report_file
from slurm_gpufleet.readers.host import SIGNATURE_MAGIC, read_host

DRIVER = "580.159.04"  # what the real H200 capture runs
RUNNING = "6.1.0-28-amd64"
NEW = "6.1.0-31-amd64"


def module_bytes(version=DRIVER, license_="Dual MIT/GPL", signed=True):
    body = b"\x7fELF...code..." + f"\x00version={version}\x00license={license_}\x00vermagic=x\x00".encode()
    return body + (b"\x00sig" + SIGNATURE_MAGIC if signed else b"")


def tree(tmp_path, *, kernels=(RUNNING,), modules=None, running=RUNNING, grubenv=None, secure_boot=None,
         unattended=False, dkms_log=False):
    """A node's root: /proc/sys/kernel/osrelease, /boot/vmlinuz-*, /lib/modules/*/..., /etc, /sys."""
    root = tmp_path / "root"
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/osrelease").write_text(running + "\n")
    (root / "boot").mkdir()
    for k in kernels:
        (root / "boot" / f"vmlinuz-{k}").write_bytes(b"kernel")
        (root / "lib/modules" / k / "kernel").mkdir(parents=True)
    for k, (where, data) in (modules if modules is not None else {RUNNING: ("updates/dkms/nvidia.ko",
                                                                             module_bytes())}).items():
        path = root / "lib/modules" / k / where
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(lzma.compress(data) if where.endswith(".xz") else data)
    if grubenv:
        (root / "boot/grub").mkdir(parents=True)
        (root / "boot/grub/grubenv").write_text(f"# GRUB Environment Block\nsaved_entry={grubenv}\n")
        (root / "etc/default").mkdir(parents=True)
        (root / "etc/default/grub").write_text("GRUB_DEFAULT=saved\n")
    if secure_boot is not None:
        var = root / "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
        var.parent.mkdir(parents=True)
        var.write_bytes(b"\x06\x00\x00\x00" + (b"\x01" if secure_boot else b"\x00"))
    if unattended:
        (root / "etc/apt/apt.conf.d").mkdir(parents=True)
        (root / "etc/apt/apt.conf.d/20auto-upgrades").write_text(
            'APT::Periodic::Update-Package-Lists "1";\nAPT::Periodic::Unattended-Upgrade "1";\n')
    if dkms_log:
        log = root / f"var/lib/dkms/nvidia/{DRIVER}/build/make.log"
        log.parent.mkdir(parents=True)
        log.write_text("error: implicit declaration of function 'drm_fbdev_generic_setup'\n")
    return root


def judge(root):
    snap = read_report_file(str(H200 / "nvidia-smi-q.xml"))
    snap.host_facts = read_host(str(root))
    return [f for f in evaluate(snap).findings if f.check == "kernel"]


def test_healthy_host_has_no_kernel_findings(tmp_path):
    facts = read_host(str(tree(tmp_path)))
    assert facts.running.module.version == DRIVER and facts.running.module.flavour == "open"
    assert facts.running.module.source == "dkms" and facts.running.module.signed is True
    assert facts.next_boot.release == RUNNING and facts.next_boot_from == "newest in /boot"
    assert judge(tree(tmp_path / "again")) == []


def test_next_kernel_without_module_would_lose_the_gpus(tmp_path):
    root = tree(tmp_path, kernels=(RUNNING, NEW), unattended=True)
    found = judge(root)
    messages = [f.message for f in found]
    assert f"next boot kernel {NEW} has no nvidia {DRIVER} module" in messages
    assert "automatic kernel updates on (unattended-upgrades)" in messages
    assert "NVIDIA advises" in next(f.detail for f in found if "automatic" in f.message)


def test_dkms_build_failed_is_named(tmp_path):
    root = tree(tmp_path, kernels=(RUNNING, NEW), dkms_log=True)
    (f,) = judge(root)
    assert "DKMS has nvidia sources but built no module" in f.detail and "make.log" in f.detail


def test_unsigned_module_under_secure_boot(tmp_path):
    root = tree(tmp_path, modules={RUNNING: ("updates/dkms/nvidia.ko", module_bytes(signed=False))},
                secure_boot=True)
    assert reboot_problem(read_host(str(root)), DRIVER) == \
        f"next boot kernel {RUNNING}: nvidia module unsigned under Secure Boot"
    assert not judge(tree(tmp_path / "off", modules={RUNNING: ("updates/dkms/nvidia.ko",
                                                               module_bytes(signed=False))}, secure_boot=False))


def test_next_kernel_newer_with_its_own_module_of_another_version(tmp_path):
    root = tree(tmp_path, kernels=(RUNNING, NEW),
                modules={RUNNING: ("updates/dkms/nvidia.ko", module_bytes()),
                         NEW: ("updates/dkms/nvidia.ko", module_bytes("575.57.08"))})
    messages = [f.message for f in judge(root)]
    assert f"next boot kernel {NEW} has nvidia 575.57.08, not {DRIVER}" in messages
    assert any(m.startswith("next boot loads nvidia 575.57.08") for m in messages)


def test_precompiled_open_module_only_compressed(tmp_path):
    root = tree(tmp_path, kernels=(RUNNING, NEW),
                modules={RUNNING: ("updates/dkms/nvidia.ko", module_bytes()),
                         NEW: ("kernel/drivers/video/nvidia.ko.xz", module_bytes())})
    facts = read_host(str(root))
    mod = facts.next_boot.module
    assert (mod.version, mod.flavour, mod.source) == (DRIVER, "open", "precompiled")
    assert reboot_problem(facts, DRIVER) is None


def test_grub_saved_entry_wins_over_the_newest_kernel(tmp_path):
    root = tree(tmp_path, kernels=(RUNNING, NEW), grubenv=f"Advanced options for Debian GNU/Linux>Debian GNU/Linux, "
                                                          f"with Linux {RUNNING}")
    facts = read_host(str(root))
    assert facts.next_boot.release == RUNNING and facts.next_boot_from == "grubenv"
    assert reboot_problem(facts, DRIVER) is None


def test_proprietary_flavour_is_read(tmp_path):
    root = tree(tmp_path, modules={RUNNING: ("updates/dkms/nvidia.ko", module_bytes(license_="NVIDIA"))})
    assert read_host(str(root)).running.module.flavour == "proprietary"


def test_cli_host_root_and_json(tmp_path):
    root = tree(tmp_path, kernels=(RUNNING, NEW))
    r = run_cli("check", "--nvidia-smi-q", str(H200 / "nvidia-smi-q.xml"), "--host-root", str(root), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["verdict"] == "warn"
    assert [f["message"] for f in out["findings"] if f["check"] == "kernel"] == [
        f"next boot kernel {NEW} has no nvidia {DRIVER} module"]


@pytest.mark.parametrize("bad", ["relative/dir"])
def test_host_root_must_exist(bad):
    assert run_cli("check", "--nvidia-smi-q", str(H200 / "nvidia-smi-q.xml"), "--host-root", bad).returncode == 2
