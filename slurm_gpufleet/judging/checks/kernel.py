"""Will a reboot bring the GPUs back?  The kernel that boots next must have an NVIDIA module for the driver
the node runs: a new kernel from automatic updates with a failed DKMS build, or a module Secure Boot will
refuse, takes the node's GPUs away at its next reboot.  Pure: host facts (readers/host.py) in."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...readers.snapshot import HostFacts, known
from ..findings import Finding

if TYPE_CHECKING:
    from . import Context

NAME = "kernel"
ORDER = 50
NVIDIA_ADVICE = ("NVIDIA advises against automatic kernel updates on GPU nodes: a new kernel without a "
                 "matching module boots without GPUs")


def reboot_problem(facts: HostFacts | None, driver: str | None, kernel: str | None = None) -> str | None:
    """Why rebooting now would come back without GPUs (or, with `kernel`, on another kernel than the one
    a rollout installs), or None: one line, fit for a Slurm reason."""
    if facts is None or facts.next_boot is None:
        return None
    nxt = facts.next_boot
    if kernel and nxt.release != kernel:
        return f"next boot kernel {nxt.release}, not {kernel}"
    mod = nxt.module
    if mod is None:
        return f"next boot kernel {nxt.release} has no nvidia {driver or ''} module".replace("  ", " ")
    if driver and mod.version and mod.version != driver:
        return f"next boot kernel {nxt.release} has nvidia {mod.version}, not {driver}"
    if mod.vermagic and mod.vermagic.split()[0] != nxt.release:  # copied from another kernel: it will not load
        return f"next boot kernel {nxt.release}: nvidia module built for {mod.vermagic.split()[0]}"
    if facts.secure_boot and mod.signed is False:
        return f"next boot kernel {nxt.release}: nvidia module unsigned under Secure Boot"
    if facts.secure_boot and mod.signer and facts.trusted_keys is not None and mod.signer not in facts.trusted_keys:
        return f"next boot kernel {nxt.release}: nvidia module signed by {mod.signer}, a key the kernel does not trust"
    return None


def check(ctx: Context) -> list[Finding]:
    facts = ctx.snapshot.host_facts
    if facts is None:
        return []
    driver = known(ctx.snapshot.driver_version) or ctx.policy.driver_version
    out: list[Finding] = []
    problem = reboot_problem(facts, driver)
    if problem:
        detail = "a reboot would come back without GPUs"
        if facts.next_boot and facts.next_boot.note:
            detail += f"; {facts.next_boot.note}"
        out.append(Finding(NAME, "warn", "fix_config", None, problem[:80],
                           f"{detail} (next boot from {facts.next_boot_from})"))
    run, nxt = facts.running, facts.next_boot
    if run and nxt and run.release != nxt.release and run.module and nxt.module and (
            (run.module.version, run.module.flavour) != (nxt.module.version, nxt.module.flavour)):
        out.append(Finding(NAME, "warn", "watch", None,
                           f"next boot loads nvidia {nxt.module.version} {nxt.module.flavour or ''}".strip()
                           + f", running {run.module.version} {run.module.flavour or ''}".rstrip(),
                           f"kernel {run.release} now, {nxt.release} at the next boot"))
    if facts.secure_boot and run and run.module and run.module.signed is False and not problem:
        out.append(Finding(NAME, "warn", "fix_config", None, "nvidia module unsigned under Secure Boot",
                           f"{run.module.path}: it will not load after a reboot"))
    for what in facts.unread:
        out.append(Finding(NAME, "warn", "watch", None, "host facts not readable", what))
    for tool in facts.auto_updates:
        out.append(Finding(NAME, "warn", "fix_config", None, f"automatic kernel updates on ({tool})", NVIDIA_ADVICE))
    return out
