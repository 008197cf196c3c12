"""Where the vendored data lives: real GPU captures and the bundled job history (see data/README.md).

The package carries them so that a clone or an installed wheel has everything its demo, tests and
`maintain simulate` need; nothing here reads outside the package.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import TextIO

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
CAPTURES = DATA_DIR / "captures"
H200_REAL = CAPTURES / "h200-real"
PUBLIC = CAPTURES / "public"
GB_SESSIONS = CAPTURES / "gb-sessions"
HELIOS_SACCT = DATA_DIR / "traces" / "helios_15k.sacct.txt.gz"
HELIOS_LABEL = ("bundled Helios trace (SenseTime, SC'21; CC BY 4.0): 15,000 jobs in sacct shape, "
                "slurm_gpufleet/data/traces/helios_15k.sacct.txt.gz")


def open_text(path: str | Path) -> TextIO:
    """Open a text file, transparently gunzipping `.gz` (job histories are kept compressed)."""
    path = Path(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")
