#!/usr/bin/env python3
"""Write the documentation's generated reference pages (docs/reference/*.md) from the code and the data files
(slurm_gpufleet/cli/docgen.py), and the generated blocks of the hand-written pages (docgen.EMBEDDED).  tests/test_docs.py fails when a page differs from what this writes.

    python scripts/gen_docs.py           # write them
    python scripts/gen_docs.py --check   # exit 1 naming the pages that differ, writing nothing
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurm_gpufleet.cli.docgen import EMBEDDED, pages, with_blocks  # noqa: E402


def main() -> int:
    out = ROOT / "docs" / "reference"
    docs = ROOT / "docs"
    blocks = {page: with_blocks(page, (docs / page).read_text()) for page in {p for p, _, _ in EMBEDDED}}
    if "--check" in sys.argv[1:]:
        stale = [name for name, text in pages().items()
                 if not (out / name).exists() or (out / name).read_text() != text]
        stale += [f"../{page}" for page, text in blocks.items() if (docs / page).read_text() != text]
        if stale:
            print(f"docs/reference/{', '.join(stale)} differ from the code: run `python scripts/gen_docs.py`",
                  file=sys.stderr)
            return 1
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for name, text in pages().items():
        (out / name).write_text(text)
        print(f"wrote docs/reference/{name}")
    for page, text in blocks.items():
        (docs / page).write_text(text)
        print(f"wrote the generated blocks of docs/{page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
