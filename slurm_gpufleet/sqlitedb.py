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

import sqlite_utils


def open_db(path: str, schema: Callable[[sqlite_utils.Database], None], timeout_s: float = 15) -> sqlite_utils.Database:
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    if not os.path.exists(path):
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    conn = sqlite3.connect(path, timeout=timeout_s)
    conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
    db = sqlite_utils.Database(conn)

    def setup() -> None:
        if db.journal_mode != "wal":
            db.enable_wal()
        with db.conn:
            db.execute("begin immediate")
            schema(db)

    retry_locked(setup, deadline=time.monotonic() + timeout_s)
    return db


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
