"""Root trusts only root's files.  The health check, prolog and epilog run as root on every node and
`maintain apply` runs a rendered template as root: whatever they read to decide what to execute or where
to write must be writable by no one but root.

The rule, as OpenSSH's StrictModes, sudo and cron apply it: a path is trusted when it and every directory
above it up to `/` are owned by root (or by the user running the program, when that is not root) and
writable by neither group nor others.  A world-writable directory is never a trusted parent, sticky or
not (`/tmp`).  A symbolic link is judged by the path it names and by the path it resolves to; a path that
does not exist yet (a database about to be created) by the directories that would hold it.

The one exception: `[slurm] trusted_group` (a group name) may hold group write on the paths the config
names (template, state directory, databases, breaker file) and their directories.  The config file and
its own directories are judged without it: a file cannot vouch for itself.

Paths judged (`policy_paths`): the config file (before it is parsed), the upgrade template, every
program the config names (`[slurm] scontrol`, and every Slurm program beside it the backend runs:
squeue, sinfo, sbatch, scancel, sacct, sacctmgr; `imex_ctl`, which the
prolog and epilog of every IMEX job run; `systemctl`; the reset command's program; the programs of `lemon_check` and
`validation_job` where they name one by absolute path), the state directory, the rollout database, the
breaker file and `instep_share_dir` (the samplers' shared directory: never `/tmp`).  A program root runs directly and the config names bare (`nvidia-smi` in the reset command,
`systemctl` for the fabric manager) is found on root's own fixed PATH (`ROOT_PATH`), never the caller's.  What each program does on refusal is the caller's: the hooks fall back to the packaged
defaults and say so; `maintain`, `install` and `breaker` refuse.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass

# every Slurm program the commands backend runs, found beside `scontrol`: each one root runs is judged here
SLURM_PROGRAMS = ("scontrol", "squeue", "sinfo", "sbatch", "scancel", "sacct", "sacctmgr")


@dataclass(frozen=True)
class Refusal:
    """A path that root's programs must not run or read, and why."""

    path: str          # the path named by the config (or the config itself)
    where: str         # the path or directory that fails the rule
    why: str           # owner and mode, in words

    def line(self) -> str:
        named = "" if self.where == self.path else f" (for {self.path})"
        return (f"{self.where}{named}: {self.why}: not trusted (owned by root, writable by no one else); "
                f"{self.fix()}")

    def fix(self) -> str:
        """What to do, in one clause: the command that makes `where` pass, or where to move the file."""
        if "writable by others" in self.why and "sticky" in self.why and self.where != self.path:
            return f"move it out of {self.where} (a shared directory), e.g. to /etc/slurm-gpufleet/"
        if self.why.startswith("owned by"):
            return f"fix: chown root {self.where}, or move it where root owns every directory"
        if self.why.startswith("writable"):
            return f"fix: chmod go-w {self.where}"
        return "move it where root owns every directory, writable by no one else"


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _judge(p: str, st: os.stat_result, uid: int, group: int | None) -> str | None:
    if st.st_uid not in (0, uid):
        return f"owned by {_owner(st.st_uid)}"
    if stat.S_ISLNK(st.st_mode):
        return None  # a link's own mode means nothing; where it leads is judged too
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_IWOTH:
        return f"writable by others (mode {mode:04o}{', sticky' if mode & stat.S_ISVTX else ''})"
    if mode & stat.S_IWGRP and st.st_gid != group:
        return f"writable by group {_group(st.st_gid)} (mode {mode:04o})"
    return None


def _walk(path: str, uid: int, group: int | None) -> tuple[str, str] | None:
    """(the first prefix of `path` that fails, why), or None; from `/` down, as the kernel resolves it."""
    parts = [p for p in path.split("/") if p]
    prefix = "/"
    prefixes = [prefix]
    for part in parts:
        prefix = os.path.join(prefix, part)
        prefixes.append(prefix)
    for p in prefixes:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return None  # judged by the directories that would hold it
        except OSError as exc:
            return p, f"cannot be examined: {exc.strerror or exc}"
        why = _judge(p, st, uid, group)
        if why:
            return p, why
    return None


def problem(path: str, *, uid: int | None = None, group: int | None = None) -> Refusal | None:
    """Why a program running as `uid` (default: this process's) must not trust `path`, or None."""
    uid = os.geteuid() if uid is None else uid
    absolute = os.path.abspath(path)
    for candidate in dict.fromkeys((absolute, os.path.realpath(absolute))):
        found = _walk(candidate, uid, group)
        if found:
            return Refusal(path, found[0], found[1])
    return None


def group_id(name: str | None) -> int | None:
    if not name:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


# where root's programs are found when named bare: root's own directories, never the caller's PATH (a
# slurmd started with another PATH, a user's directory first on it)
ROOT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def root_program(name: str) -> str | None:
    """The program root runs: an absolute path as given, a bare name found on ROOT_PATH (None: not there)."""
    if os.path.isabs(name):
        return name
    if os.sep in name:
        return None  # a relative path: where it points depends on the directory it runs in
    import shutil

    return shutil.which(name, path=ROOT_PATH)


def policy_paths(policy) -> tuple[list[str], list[str]]:
    """(the config's own paths, the paths it names) that decide what runs and where it writes."""
    own = [policy.path] if policy.path and policy.path != "<config>" else []
    s, m = policy.slurm, policy.maintain
    named = [s.scontrol]
    bindir = os.path.dirname(s.scontrol)
    named += [os.path.join(bindir, exe) for exe in SLURM_PROGRAMS
              if exe != "scontrol" and os.path.exists(os.path.join(bindir, exe))]
    named += [s.state_dir, s.breaker_path, s.lemon_path, s.sweep_path, m.db, s.imex_ctl]
    if s.instep_share_dir:   # the samplers write there as root, and the checks decide on what they read
        named.append(s.instep_share_dir)
    if s.systemctl:
        named.append(s.systemctl)
    if s.dcgm_diag_level:   # the deep check runs it as root
        named.append(s.dcgmi)
    reset = _first_word(s.reset_command)
    reset_program = root_program(reset) if reset else None
    if reset_program:
        named.append(reset_program)
    if m.upgrade_template:
        named.append(m.upgrade_template)
    # the programs the jobs it submits run (as root where root submits them): the command line's program
    named += [p for p in (program_of(s.lemon_check), program_of(m.validation_job),
                          program_of(s.validation_command), program_of(s.sweep_command)) if p]
    return own, named


def program_of(command: str | None) -> str | None:
    """The program a shell command line runs, when it names one by absolute path (else the job's PATH
    finds it, which is Slurm's to judge)."""
    word = _first_word(command)
    return word if word and word.startswith("/") else None


def _first_word(command: str | None) -> str | None:
    import shlex

    try:
        words = shlex.split(command or "")
    except ValueError:
        return None
    while words and "=" in words[0] and not words[0].startswith("/"):
        words = words[1:]  # VAR=value before the program
    return words[0] if words else None


def refusals(policy, *, uid: int | None = None, own_judged: bool = False) -> list[Refusal]:
    """Every path of the policy that fails the rule (the config first; not again where the caller judged
    it before parsing: `own_judged`)."""
    own, named = policy_paths(policy)
    if own_judged:
        own = []
    group = group_id(getattr(policy.slurm, "trusted_group", None))
    out = [r for r in (problem(p, uid=uid) for p in own) if r]
    out += [r for r in (problem(p, uid=uid, group=group) for p in dict.fromkeys(named)) if r]
    return out
