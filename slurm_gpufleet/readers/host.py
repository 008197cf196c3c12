"""The host side of "will a reboot bring the GPUs back": the running kernel, the kernel that boots next,
the NVIDIA module each has, Secure Boot, automatic kernel updates.

Reads files only, under a root directory (`check --host-root DIR` for a mounted node image or a test
tree; "/" on a node): DIR/proc/sys/kernel/osrelease, DIR/boot, DIR/lib/modules, DIR/etc, DIR/var/lib/dkms
and DIR/sys/firmware/efi.  Never runs a command, never loads a module.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .snapshot import FabricManager, HostFacts, KernelFacts, KernelModule

# NVIDIA's own name, and Debian's (its DKMS package builds nvidia-current.ko, loaded under the alias nvidia)
MODULE_NAMES = frozenset(f"{name}.ko{ext}" for name in ("nvidia", "nvidia-current") for ext in ("", ".xz", ".gz", ".zst"))
SIGNATURE_MAGIC = b"~Module signature appended~\n"
SECURE_BOOT_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
_RELEASE = re.compile(r"(\d+\.\d+(?:\.\d+)?[-+.\w]*)")


def read_host(root: str = "/") -> HostFacts:
    base = Path(root)
    facts = HostFacts(root=str(base))
    running = (_text(base / "proc/sys/kernel/osrelease") or "").strip() or None
    if running and not _is_release(running):
        # the release names a directory under /lib/modules: anything else is said, never walked
        facts.unread.append(f"proc/sys/kernel/osrelease: value not read as given ({running[:64]!r})")
        running = None
    elif running:
        facts.running = kernel_facts(base, running)
    nxt, how = next_boot_release(base, running)
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
    # one walk of the kernel's ~4,000 modules, not one a name
    found = sorted(Path(top) / name for top, _, names in os.walk(mod_dir) for name in names if name in MODULE_NAMES)
    if found:
        facts.module = read_module(found[0], base)
    else:
        trees = sorted((base / "var/lib/dkms").glob("nvidia*"))  # nvidia, Debian's nvidia-current
        if any(t.is_dir() for t in trees):
            logs = sorted(str(p.relative_to(base)) for t in trees for p in t.glob("*/build/make.log"))
            facts.note = f"DKMS has nvidia sources but built no module for {release}" + (
                f" (see /{logs[-1]})" if logs else "")
        elif not mod_dir.is_dir():
            facts.note = f"no /lib/modules/{release}"
    return facts


def read_module(path: Path, base: Path) -> KernelModule:
    rel = "/" + str(path.relative_to(base))
    mod = KernelModule(path=rel, source="dkms" if "/updates/dkms/" in rel or "/dkms/" in rel else "precompiled")
    try:
        with _module_data(path) as data:
            if data is None:
                return mod
            info = modinfo(data)
            mod.signed = len(data) >= len(SIGNATURE_MAGIC) and data[-len(SIGNATURE_MAGIC):] == SIGNATURE_MAGIC
            if mod.signed:
                mod.signer = module_signer(data)
    except (OSError, EOFError, ValueError, struct.error):
        return mod
    if "version" in info:
        mod.version = info["version"]
    if "vermagic" in info:
        mod.vermagic = info["vermagic"].strip()
    license_ = info.get("license", "")
    mod.flavour = "open" if "MIT" in license_ or "GPL" in license_ else ("proprietary" if license_ else None)
    return mod


def modinfo(data: bytes | mmap.mmap) -> dict[str, str]:
    """What `modinfo` prints of an ELF module: the key=value strings of its .modinfo section, found through
    the section headers (the first value of a key).  A scan of the whole file instead cost 1.9 s a health
    check on Debian's 65 MB nvidia-current.ko; this reads a few hundred bytes of it."""
    section = _elf_section(data, b".modinfo")
    info: dict[str, str] = {}
    for entry in (section or b"").split(b"\x00"):
        key, sep, value = entry.partition(b"=")
        if sep and key:
            info.setdefault(key.decode("ascii", "replace"), value.decode("ascii", "replace"))
    return info


def _elf_section(data: bytes | mmap.mmap, name: bytes) -> bytes | None:
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        return None  # not ELF: `modinfo` refuses it too
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    if wide:
        shoff, = struct.unpack_from(order + "Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x3A)
        header = order + "IIQQQQ"
    else:
        shoff, = struct.unpack_from(order + "I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x2E)
        header = order + "IIIIII"
    if not shnum or shstrndx >= shnum or shentsize < struct.calcsize(header) or shoff + shnum * shentsize > len(data):
        return None
    sections = [struct.unpack_from(header, data, shoff + i * shentsize) for i in range(shnum)]
    _, _, _, _, str_off, str_size = sections[shstrndx]
    names = data[str_off:str_off + str_size]
    for sh_name, sh_type, _, _, offset, size in sections:
        if names[sh_name:names.find(b"\x00", sh_name)] == name and sh_type != 8:  # 8: SHT_NOBITS
            return data[offset:offset + size] if offset + size <= len(data) else None
    return None


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


# NVIDIA's module is about 65 MB unpacked (Debian's nvidia-current.ko): a file that unpacks past this is
# not one, and is never unpacked whole
MODULE_MAX_BYTES = 512 << 20


def _decompressed(path: Path, raw: bytes) -> bytes | None:
    """The module unpacked, never past MODULE_MAX_BYTES; ValueError where it is not what its name says."""
    try:
        if path.name.endswith(".xz"):
            import lzma

            unpacker = lzma.LZMADecompressor()
            plain = unpacker.decompress(raw, max_length=MODULE_MAX_BYTES + 1)
        elif path.name.endswith(".gz"):
            import zlib

            plain = zlib.decompressobj(wbits=31).decompress(raw, MODULE_MAX_BYTES + 1)
        else:
            try:
                import zstandard  # type: ignore[import-not-found]
            except ImportError:
                return None  # version unknown; the module is there
            plain = zstandard.ZstdDecompressor().decompress(raw, max_output_size=MODULE_MAX_BYTES + 1)
    except Exception as exc:  # each library's own error class: lzma.LZMAError, zlib.error, zstandard.ZstdError
        raise ValueError(f"{path}: {exc}") from exc
    if len(plain) > MODULE_MAX_BYTES:
        raise ValueError(f"{path}: unpacks past {MODULE_MAX_BYTES} bytes")
    return plain


@contextmanager
def _module_data(path: Path) -> Iterator[bytes | mmap.mmap | None]:
    """The module's bytes: mapped when stored plain (its sections are read, not the whole file), else
    decompressed (None where the compression needs a library this node lacks)."""
    if path.name.endswith((".xz", ".gz", ".zst")):
        # the decompressors are imported here: most modules are stored plain, and each health check of every
        # node imports this file
        with open(path, "rb") as fh:
            raw = fh.read(MODULE_MAX_BYTES + 1)
        if len(raw) > MODULE_MAX_BYTES:
            raise ValueError(f"{path}: over {MODULE_MAX_BYTES} bytes")
        yield _decompressed(path, raw)
        return
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b""
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield data


def next_boot_release(base: Path, running: str | None) -> tuple[str | None, str | None]:
    """The kernel the bootloader starts next: GRUB's saved entry where set, else its first entry (the
    newest installed kernel), else the newest under /boot."""
    installed = installed_kernels(base)
    env = _text(base / "boot/grub/grubenv") or _text(base / "boot/grub2/grubenv") or ""
    saved = re.search(r"^saved_entry=(.+)$", env, re.M)
    default = re.search(r'^GRUB_DEFAULT=["\']?([^"\'\n]*)', _text(base / "etc/default/grub") or "", re.M)
    wanted = saved.group(1) if saved and (not default or default.group(1) == "saved") else None
    if wanted:
        m = _RELEASE.search(wanted.split(">")[-1][-256:])   # a kernel release is short: never a long search
        if m and m.group(1) in installed:
            return m.group(1), "grubenv"
    if installed:
        return installed[-1], "newest in /boot"
    return running, "running" if running else None


def _is_release(text: str) -> bool:
    from ..catalogs.bundle import KERNEL_GRAMMAR  # the one grammar of a kernel release (a light module)

    return len(text) <= 128 and KERNEL_GRAMMAR.fullmatch(text) is not None   # a path component, never too long


def installed_kernels(base: Path) -> list[str]:
    names = {p.name[len("vmlinuz-"):] for p in (base / "boot").glob("vmlinuz-*")}
    names = {n for n in names if _is_release(n)}
    return sorted(names, key=_version_key)


def _version_key(release: str) -> tuple:
    """6.1.0-31-amd64 after 6.1.0-28-amd64; a number sorts before a word in the same place (never compared
    with it)."""
    return tuple((0, int(x), "") if x.isascii() and x.isdecimal() else (1, 0, x) for x in re.split(r"[.\-+]", release))


def secure_boot(base: Path) -> bool | None:
    var = base / SECURE_BOOT_VAR
    try:
        with open(var, "rb") as fh:
            data = fh.read(64)   # 4 bytes of attributes and 1 of value
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


# the files read here are a few KB (osrelease, grubenv, /proc/keys, apt's configuration): a larger one is
# read to this much
TEXT_MAX_BYTES = 1 << 20


def _text(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(TEXT_MAX_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None




def read_fabric_manager(systemctl: str | None = None, uptime_s: float | None = None,
                        timeout_s: float = 5.0) -> FabricManager | None:
    """nvidia-fabricmanager as systemd shows it (`systemctl show`), within `timeout_s`.  None where
    systemd cannot be asked (no systemctl, a container without it, a hang): not read is not judged.
    systemctl is root's own (trust.ROOT_PATH), never the caller's PATH."""
    import subprocess

    from ..policy.trust import root_program

    systemctl = systemctl or root_program("systemctl")
    if systemctl is None:
        return None
    try:
        done = subprocess.run([systemctl, "show", "nvidia-fabricmanager.service", "--no-pager", "-p",
                               "LoadState,ActiveState,NRestarts,StateChangeTimestampMonotonic"],
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return parse_systemctl_show(done.stdout, uptime_s)


def remember_fabric_manager(fm: FabricManager, path: str, now: float, probe_s: float, window_s: float) -> None:
    """Fill `fm.failed_probes` and `fm.restarts_in_window` from the probes earlier runs left in `path` (a
    small JSON file of the node's own), and add this one.  A failed probe counts once `probe_s` have passed
    since the last one counted; a good probe clears them.  Restarts are systemd's NRestarts, seen at each
    probe: the rise within `window_s`.  An unreadable file is a fresh start, never an error."""
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            kept = json.load(fh)
        failures = [float(t) for t in kept.get("failures", []) if isinstance(t, int | float)]
        samples = [(float(t), int(n)) for t, n in kept.get("restarts", [])
                   if isinstance(t, int | float) and isinstance(n, int)]
    except (OSError, ValueError, TypeError, AttributeError):
        failures, samples = [], []
    if fm.installed and fm.active == "active":
        failures = []
    elif not failures or now - failures[-1] >= probe_s:
        failures.append(now)
    fm.failed_probes = max(1, len(failures)) if failures else 0
    samples = [(t, n) for t, n in samples if now - t <= window_s and t <= now]
    if isinstance(fm.restarts, int):
        samples.append((now, fm.restarts))
        fm.restarts_in_window = fm.restarts - min(n for _, n in samples)
    try:
        from ..common.safefile import write_file

        write_file(path, json.dumps({"failures": failures[-10:], "restarts": samples[-50:]}), mode=0o600)
    except OSError:
        pass  # the next run starts afresh: a probe not kept is a probe not counted, never a drain


def parse_systemctl_show(text: str, uptime_s: float | None) -> FabricManager | None:
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    load = values.get("LoadState")
    if load is None:
        return None
    if load in ("not-found", "masked"):
        return FabricManager(installed=False, active=values.get("ActiveState"))
    restarts = values.get("NRestarts", "")
    changed = values.get("StateChangeTimestampMonotonic", "")
    since = None
    if changed.isdecimal() and int(changed) > 0 and uptime_s is not None:
        since = max(0.0, uptime_s - int(changed) / 1e6)
    return FabricManager(installed=True, active=values.get("ActiveState"),
                         restarts=int(restarts) if restarts.isdecimal() else None, active_since_s=since)
