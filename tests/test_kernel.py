"""The kernel check over fake host trees: will a reboot bring the GPUs back?"""

import json
import lzma
import sys

import pytest
from support import H200, REPO, run_cli

sys.path.insert(0, str(REPO / "tests" / "slurm"))
from gpustate import elf_module, nvidia_module  # noqa: E402

from slurm_gpufleet import evaluate
from slurm_gpufleet.judging.checks.kernel import reboot_problem
from slurm_gpufleet.readers.host import SIGNATURE_MAGIC, read_host
from slurm_gpufleet.readers.report import read_report_file

DRIVER = "580.159.04"  # what the real H200 capture runs
RUNNING = "6.1.0-28-amd64"
NEW = "6.1.0-31-amd64"


def module_bytes(version=DRIVER, license_="Dual MIT/GPL", signed=True, vermagic=None, **layout):
    return nvidia_module(version, license_, signed, vermagic, **layout)


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


def test_reboot_check_before_the_upgrades_reboot(tmp_path):
    """`slurm-gpufleet reboot-check --driver V`: what the upgrade template runs between install and reboot."""
    ok = tree(tmp_path / "ok", kernels=(RUNNING, NEW),
              modules={RUNNING: ("updates/dkms/nvidia.ko", module_bytes()), NEW: ("updates/dkms/nvidia.ko", module_bytes())})
    r = run_cli("reboot-check", "--driver", DRIVER, "--host-root", str(ok))
    assert r.returncode == 0 and r.stdout.decode().strip() == (
        f"next boot kernel {NEW} has nvidia {DRIVER} (open): a reboot brings {DRIVER} back")
    # a bundle's kernel: the one that boots next must be it
    r = run_cli("reboot-check", "--driver", DRIVER, "--kernel", RUNNING, "--host-root", str(ok))
    assert r.returncode == 1 and r.stdout.decode().strip() == f"next boot kernel {NEW}, not {RUNNING}"
    assert run_cli("reboot-check", "--driver", DRIVER, "--kernel", NEW, "--host-root", str(ok)).returncode == 0
    # the newer kernel from automatic updates has no module: no
    missing = tree(tmp_path / "missing", kernels=(RUNNING, NEW))
    r = run_cli("reboot-check", "--driver", DRIVER, "--host-root", str(missing))
    assert r.returncode == 1 and r.stdout.decode().strip() == f"next boot kernel {NEW} has no nvidia {DRIVER} module"
    # the install left the old version for the next kernel: no, and --json says which
    r = run_cli("reboot-check", "--driver", "595.71.05", "--host-root", str(ok), "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 1 and out["ok"] is False and out["module_version"] == DRIVER
    assert out["problem"] == f"next boot kernel {NEW} has nvidia {DRIVER}, not 595.71.05"
    # unsigned under Secure Boot: no
    unsigned = tree(tmp_path / "unsigned", secure_boot=True,
                    modules={RUNNING: ("updates/dkms/nvidia.ko", module_bytes(signed=False))})
    r = run_cli("reboot-check", "--driver", DRIVER, "--host-root", str(unsigned))
    assert r.returncode == 1 and b"unsigned under Secure Boot" in r.stdout
    assert run_cli("reboot-check", "--driver", DRIVER, "--host-root", str(tmp_path / "nope")).returncode == 2


@pytest.mark.parametrize("line,mode", [('CoherentGPUMemoryMode: "driver"', "driver"),
                                       ('CoherentGPUMemoryMode: "numa"', "numa"),
                                       ('CoherentGPUMemoryMode: ""', "default"),  # what an x86 R580 host shows
                                       ("EnableMSI: 1", None)])                    # a driver without the parameter
def test_cdmm_mode_read_from_the_loaded_drivers_params(tmp_path, line, mode):
    root = tree(tmp_path)
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/params").write_text(f"CreateImexChannel0: 0\n{line}\nDeviceFileGID: 0\n")
    assert read_host(str(root)).cdmm == mode
    assert read_host(str(tree(tmp_path / "none"))).cdmm is None  # no driver loaded: not reported


def signed_module(signer: str, version=DRIVER) -> bytes:
    """A module as the kernel's sign-file leaves it: the code, a PKCS#7 signature whose only name is the
    signing key's issuer CN, struct module_signature (id_type 2, sig_len big-endian), then the magic."""
    cn = signer.encode()
    name = b"\x31" + bytes([11 + len(cn)]) + b"\x30" + bytes([9 + len(cn)]) + b"\x06\x03\x55\x04\x03\x0c" + \
        bytes([len(cn)]) + cn
    pkcs7 = b"\x30\x82\x01\x00" + b"\x06\x09\x2a\x86\x48\x86\xf7\x0d\x01\x07\x02" + b"\x30" + bytes([len(name)]) + name \
        + b"\x02\x10" + b"\x11" * 16 + b"\x04\x20" + b"\x22" * 32
    signature = bytes([0, 0, 2, 0, 0, 0, 0, 0]) + len(pkcs7).to_bytes(4, "big")
    return module_bytes(version=version, signed=False) + pkcs7 + signature + SIGNATURE_MAGIC


def _keys(root, *names):
    (root / "proc/keys").write_text("".join(
        f"{i:08x} I------     1 perm 1f030000     0     0 asymmetri {n}: {i:040x}: X509.rsa {i:08x} []\n"
        for i, n in enumerate(names, 1)) + "0a0b0c0d I------     1 perm 1f0b0000     0     0 keyring   "
                                           ".builtin_trusted_keys: 2\n")


def test_module_signer_is_read_and_a_foreign_one_under_secure_boot_blocks_the_reboot(tmp_path):
    root = tree(tmp_path, kernels=(RUNNING, NEW), secure_boot=True,
                modules={RUNNING: ("updates/dkms/nvidia.ko", signed_module("DKMS module signing key")),
                         NEW: ("updates/dkms/nvidia.ko", signed_module("Someone Else's Key"))})
    _keys(root, "Debian Secure Boot CA", "DKMS module signing key")
    facts = read_host(str(root))
    assert facts.running.module.signer == "DKMS module signing key" and facts.running.module.signed
    assert facts.trusted_keys == ["Debian Secure Boot CA", "DKMS module signing key"]
    assert reboot_problem(facts, DRIVER) == (f"next boot kernel {NEW}: nvidia module signed by "
                                             "Someone Else's Key, a key the kernel does not trust")
    # the same module signed by an enrolled key is fine; without Secure Boot the signer does not matter
    _keys(root, "Debian Secure Boot CA", "DKMS module signing key", "Someone Else's Key")
    assert reboot_problem(read_host(str(root)), DRIVER) is None
    (root / "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c").write_bytes(b"\x06\0\0\0\0")
    _keys(root, "Debian Secure Boot CA")
    assert reboot_problem(read_host(str(root)), DRIVER) is None


def test_unreadable_keyrings_do_not_judge_the_signer(tmp_path):
    root = tree(tmp_path, secure_boot=True, modules={RUNNING: ("updates/dkms/nvidia.ko", signed_module("Any Key"))})
    facts = read_host(str(root))  # no /proc/keys (not root): the signer is read, not judged
    assert facts.trusted_keys is None and facts.running.module.signer == "Any Key"
    assert reboot_problem(facts, DRIVER) is None


def test_debians_module_name_and_a_module_built_for_another_kernel(tmp_path):
    """Debian's DKMS package builds nvidia-current.ko; a module whose vermagic names another kernel will
    not load in the one it sits under."""
    root = tree(tmp_path, kernels=(RUNNING, NEW), modules={
        RUNNING: ("updates/dkms/nvidia-current.ko", module_bytes(vermagic=RUNNING)),
        NEW: ("updates/dkms/nvidia-current.ko", module_bytes(vermagic=RUNNING))})
    facts = read_host(str(root))
    assert facts.running.module.path.endswith("nvidia-current.ko") and facts.running.module.vermagic.startswith(RUNNING)
    assert reboot_problem(facts, DRIVER) == f"next boot kernel {NEW}: nvidia module built for {RUNNING}"


def test_no_module_after_a_failed_debian_dkms_build_names_its_log(tmp_path):
    root = tree(tmp_path, kernels=(RUNNING, NEW), modules={
        RUNNING: ("updates/dkms/nvidia-current.ko", module_bytes(vermagic=RUNNING))})
    log = root / "var/lib/dkms/nvidia-current/535.261.03/build/make.log"
    log.parent.mkdir(parents=True)
    log.write_text("error\n")
    r = run_cli("reboot-check", "--driver", DRIVER, "--host-root", str(root))
    assert r.returncode == 1
    assert r.stdout.decode().strip() == (
        f"next boot kernel {NEW} has no nvidia {DRIVER} module: DKMS has nvidia sources but built no module for "
        f"{NEW} (see /var/lib/dkms/nvidia-current/535.261.03/build/make.log)")


@pytest.mark.parametrize("wide,little", [(True, True), (False, False), (False, True)])
def test_module_facts_come_from_its_modinfo_section_whatever_the_elf_layout(tmp_path, wide, little):
    # strings in the code that look like modinfo's are not it: only the .modinfo section is read
    data = elf_module(b"version=575.57.08\x00license=NVIDIA\x00", wide=wide, little=little,
                      code=b"\x00version=1.0\x00license=GPL\x00" * 3)
    root = tree(tmp_path, modules={RUNNING: ("updates/dkms/nvidia.ko", data)})
    module = read_host(str(root)).running.module
    assert (module.version, module.flavour, module.signed) == ("575.57.08", "proprietary", False)


@pytest.mark.parametrize("data", [b"", b"version=580.159.04\x00license=GPL\x00", b"\x7fELF" + bytes(60),
                                  elf_module(b"version=580.159.04\x00")[:200]])
def test_a_module_that_is_not_whole_elf_has_no_version_and_the_check_says_so(tmp_path, data):
    root = tree(tmp_path, modules={RUNNING: ("updates/dkms/nvidia.ko", data)})
    module = read_host(str(root)).running.module
    assert module.path.endswith("/nvidia.ko") and module.version is None
