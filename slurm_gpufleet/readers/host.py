"""The host side of "will a reboot bring the GPUs back": the running kernel, the kernel that boots next,
the NVIDIA module each has, Secure Boot, automatic kernel updates.

Reads files only, under a root directory (`check --host-root DIR` for a mounted node image or a test
tree; "/" on a node): DIR/proc/sys/kernel/osrelease, DIR/boot, DIR/lib/modules, DIR/etc, DIR/var/lib/dkms
and DIR/sys/firmware/efi.  Never runs a command, never loads a module.
"""

from __future__ import annotations

import gzip
import lzma
import re
from pathlib import Path

from ..snapshot import HostFacts, KernelFacts, KernelModule

MODULE_NAMES = ("nvidia.ko", "nvidia.ko.xz", "nvidia.ko.gz", "nvidia.ko.zst")
SIGNATURE_MAGIC = b"~Module signature appended~\n"
SECURE_BOOT_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
_RELEASE = re.compile(r"(\d+\.\d+(?:\.\d+)?[-+.\w]*)")


def read_host(root: str = "/") -> HostFacts:
    base = Path(root)
    facts = HostFacts(root=str(base))
    running = _text(base / "proc/sys/kernel/osrelease")
    if running:
        facts.running = kernel_facts(base, running.strip())
    nxt, how = next_boot_release(base, running.strip() if running else None)
    if nxt:
        facts.next_boot = facts.running if facts.running and facts.running.release == nxt else kernel_facts(base, nxt)
        facts.next_boot_from = how
    facts.secure_boot = secure_boot(base)
    facts.auto_updates = auto_updates(base)
    facts.cdmm = coherent_memory_mode(base)
    facts.trusted_keys = trusted_keys(base)
    return facts


def trusted_keys(base: Path) -> list[str] | None:
    """The X.509 keys the kernel holds (built-in, secondary, MOK), by name: /proc/keys lines such as
    `... asymmetri Debian Secure Boot CA: 6ccece7e...: X509.rsa 00b8a2a8 []`.  None where unreadable or
    where it lists none (not root: the keyrings are not visible)."""
    text = _text(base / "proc/keys")
    names = []
    for line in (text or "").splitlines():
        parts = line.split(None, 8)
        if len(parts) == 9 and parts[7] == "asymmetri" and ": X509." in parts[8]:
            names.append(parts[8].rsplit(": X509.", 1)[0].rsplit(": ", 1)[0].strip())
    return names or None


def coherent_memory_mode(base: Path) -> str | None:
    """`CoherentGPUMemoryMode: "driver"` in the loaded driver's /proc/driver/nvidia/params (R580 on)."""
    params = _text(base / "proc/driver/nvidia/params")
    for line in (params or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "CoherentGPUMemoryMode":
            return value.strip().strip('"') or "default"
    return None


def kernel_facts(base: Path, release: str) -> KernelFacts:
    facts = KernelFacts(release=release)
    mod_dir = base / "lib/modules" / release
    found = sorted(p for name in MODULE_NAMES for p in mod_dir.rglob(name)) if mod_dir.is_dir() else []
    if found:
        facts.module = read_module(found[0], base)
    else:
        dkms = base / "var/lib/dkms/nvidia"
        if dkms.is_dir():
            logs = sorted(str(p.relative_to(base)) for p in dkms.glob("*/build/make.log"))
            facts.note = f"DKMS has nvidia sources but built no module for {release}" + (
                f" (see /{logs[-1]})" if logs else "")
        elif not mod_dir.is_dir():
            facts.note = f"no /lib/modules/{release}"
    return facts


def read_module(path: Path, base: Path) -> KernelModule:
    rel = "/" + str(path.relative_to(base))
    mod = KernelModule(path=rel, source="dkms" if "/updates/dkms/" in rel or "/dkms/" in rel else "precompiled")
    data = _module_bytes(path)
    if data is None:
        return mod
    info = dict(re.findall(rb"(?:^|\x00)(version|license|vermagic)=([^\x00]*)", data))
    if b"version" in info:
        mod.version = info[b"version"].decode("ascii", "replace")
    license_ = info.get(b"license", b"").decode("ascii", "replace")
    mod.flavour = "open" if "MIT" in license_ or "GPL" in license_ else ("proprietary" if license_ else None)
    mod.signed = data.endswith(SIGNATURE_MAGIC)
    if mod.signed:
        mod.signer = module_signer(data)
    return mod


_CN = re.compile(rb"\x06\x03\x55\x04\x03[\x0c\x13\x14\x16](.)", re.S)  # OID 2.5.4.3 (commonName), a string


def module_signer(data: bytes) -> str | None:
    """The signer modinfo shows: the issuer CN in the PKCS#7 signature the kernel's sign-file appends
    (struct module_signature, 12 bytes, then the magic; the kernel signs without certificates, so the
    only name in it is the signing key's issuer)."""
    end = len(data) - len(SIGNATURE_MAGIC)
    if end < 12:
        return None
    info = data[end - 12:end]
    id_type, sig_len = info[2], int.from_bytes(info[8:12], "big")
    if id_type != 2 or not 0 < sig_len <= end - 12:  # 2: PKEY_ID_PKCS7
        return None
    blob = data[end - 12 - sig_len:end - 12]
    names = [blob[m.end():m.end() + m.group(1)[0]] for m in _CN.finditer(blob) if m.group(1)[0] < 0x80]
    return names[-1].decode("utf-8", "replace") if names else None


def _module_bytes(path: Path) -> bytes | None:
    try:
        raw = path.read_bytes()
        if path.name.endswith(".xz"):
            return lzma.decompress(raw)
        if path.name.endswith(".gz"):
            return gzip.decompress(raw)
        if path.name.endswith(".zst"):
            try:
                import zstandard  # type: ignore[import-not-found]
            except ImportError:
                return None  # version unknown; the module is there
            return zstandard.ZstdDecompressor().decompress(raw, max_output_size=512 << 20)
        return raw
    except (OSError, lzma.LZMAError, EOFError, ValueError):
        return None


def next_boot_release(base: Path, running: str | None) -> tuple[str | None, str | None]:
    """The kernel the bootloader starts next: GRUB's saved entry where set, else its first entry (the
    newest installed kernel), else the newest under /boot."""
    installed = installed_kernels(base)
    env = _text(base / "boot/grub/grubenv") or _text(base / "boot/grub2/grubenv") or ""
    saved = re.search(r"^saved_entry=(.+)$", env, re.M)
    default = re.search(r'^GRUB_DEFAULT=["\']?([^"\'\n]*)', _text(base / "etc/default/grub") or "", re.M)
    wanted = saved.group(1) if saved and (not default or default.group(1) == "saved") else None
    if wanted:
        m = _RELEASE.search(wanted.split(">")[-1])
        if m and m.group(1) in installed:
            return m.group(1), "grubenv"
    if installed:
        return installed[-1], "newest in /boot"
    return running, "running" if running else None


def installed_kernels(base: Path) -> list[str]:
    names = {p.name[len("vmlinuz-"):] for p in (base / "boot").glob("vmlinuz-*")}
    return sorted(names, key=_version_key)


def _version_key(release: str) -> tuple:
    return tuple(int(x) if x.isdecimal() else x for x in re.split(r"[.\-+]", release))


def secure_boot(base: Path) -> bool | None:
    var = base / SECURE_BOOT_VAR
    try:
        data = var.read_bytes()
        return bool(data[-1]) if data else None
    except FileNotFoundError:
        return False if (base / "sys/firmware/efi").is_dir() else None
    except OSError:
        return None


def auto_updates(base: Path) -> list[str]:
    found = []
    apt = base / "etc/apt/apt.conf.d"
    if apt.is_dir():
        text = "\n".join(_text(p) or "" for p in sorted(apt.iterdir()) if p.is_file())
        if re.search(r'APT::Periodic::Unattended-Upgrade\s+"?1"?\s*;', text):
            found.append("unattended-upgrades")
    dnf = _text(base / "etc/dnf/automatic.conf") or ""
    if re.search(r"^\s*apply_updates\s*=\s*(yes|true|1)\s*$", dnf, re.M | re.I) and any(
            (base / "etc/systemd/system/timers.target.wants").glob("dnf-automatic*.timer")):
        found.append("dnf-automatic")
    return found


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


