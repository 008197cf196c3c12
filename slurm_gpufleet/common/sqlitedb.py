"""Opening one of our SQLite files: created 0600, WAL, and its schema made by one process at a time.

Every file here may be opened by several processes at once (a node's prolog, epilog and health check; an
apply and an admin's status), and the first of them creates or migrates the schema.  Checking for a table
or column and then creating it is two steps, so the whole schema function runs in one immediate
transaction: the others wait for it and then find what it made.  SQLite does not wait on a journal-mode
change or on the first write lock with its busy timeout alone, so both are retried until a deadline.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils


def open_db(path: str, schema: Callable[[sqlite_utils.Database], None], timeout_s: float = 15) -> sqlite_utils.Database:
    """The file as a sqlite-utils Database, its schema made by `schema`."""
    import sqlite_utils

    holder: dict[int, sqlite_utils.Database] = {}

    def made(conn: sqlite3.Connection) -> None:
        schema(holder.setdefault(0, sqlite_utils.Database(conn)))

    conn = open_conn(path, made, timeout_s)
    return holder.get(0) or sqlite_utils.Database(conn)


def open_conn(path: str, schema: Callable[[sqlite3.Connection], None], timeout_s: float = 15) -> sqlite3.Connection:
    """The file as a plain sqlite3 connection, for the hooks slurmd runs every interval: importing
    sqlite-utils (and click, which it imports) costs about as much as the rest of a health check's work."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    if not os.path.exists(path):
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    conn = sqlite3.connect(path, timeout=timeout_s)
    conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")

    def setup() -> None:
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode=wal")
        with conn:
            conn.execute("begin immediate")
            schema(conn)  # checks before it makes: a retry after "locked" finds what is there

    retry_locked(setup, deadline=time.monotonic() + timeout_s)
    return conn


def retry_locked(fn: Callable[[], None], deadline: float) -> None:
    delay = 0.01
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
