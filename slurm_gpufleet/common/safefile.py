"""The one way slurm-gpufleet writes a file: outputs (`--out`, `-o`, `--html`), state, the breaker, counters,
caches, digests and records.

A regular file (or a new one) is replaced whole: the data goes to a temporary of a random name in the same
directory, created with O_CREAT|O_EXCL|O_NOFOLLOW (no link another user planted can stand in for it),
fsynced, then renamed over the target, so that a reader never sees half of it.  A target that is a device,
a FIFO or a socket (`-o /dev/stdout`, `--out /dev/full`) is written as a stream, never replaced by a file.
A target that is a symbolic link is followed only where the link is this user's own (a link in a
world-writable directory is another user's way to make root overwrite a file of root's): any other is
refused, with the error `UnsafeTarget`.
"""

from __future__ import annotations

import os
import stat


class UnsafeTarget(OSError):
    """A target the tool will not write through (a symbolic link of another user's)."""


def write_file(path: str, data: bytes | str, *, mode: int = 0o644, make_dirs: bool = False,
               dir_mode: int = 0o700, exclusive: bool = False) -> bool:
    """Write `data` to `path` (see the module's rules); `mode`: a new file's permissions; `make_dirs`: make
    the missing directories (`dir_mode`); `exclusive`: never replace a file that is there (the first
    writer's stays).  Returns False where `exclusive` left one there.  Raises OSError."""
    body = data.encode() if isinstance(data, str) else data
    if make_dirs:
        os.makedirs(os.path.dirname(path) or ".", mode=dir_mode, exist_ok=True)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        if st.st_uid != os.geteuid():
            raise UnsafeTarget(f"{path}: a symbolic link of another user's: not written through")
        real = os.path.realpath(path)
        return write_file(real, body, mode=mode, exclusive=exclusive) if real != path else False
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        # a device, a FIFO or a socket: written as a stream, never replaced by a file
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
        return True
    if st is not None and exclusive:
        return False
    folder, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{name}.{os.urandom(6).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        if exclusive:
            try:
                os.link(tmp, path)   # fails where another writer got there first: theirs stays
            except FileExistsError:
                return False
            return True
        os.replace(tmp, path)
        return True
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


__all__ = ["UnsafeTarget", "write_file"]
