#!/usr/bin/env python3
"""Write slurm_gpufleet/data/nvlink5_decode.toml: NVIDIA's "XID 144-150 Decode" sheet, one row per rule.

The sheet (in the spreadsheet of https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)
decodes an NVLink5 Xid line by the unit it names, the bits of its first register (intrinfo: bits 20-25
are the sub-code) and the bit set in its second (the error status), to a severity and a resolution
bucket.  leptonai/gpud tabulates it in components/accelerator/nvidia/xid/catalog_generated.go
(Apache-2.0); this script reads that file and writes the rows as data, so that the check reads them and
the docs' table is generated from them.

    python scripts/vendor_nvlink5_decode.py GPUD_CATALOG_GENERATED_GO [COMMIT]

Re-running on the same file gives the same bytes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "slurm_gpufleet" / "data" / "nvlink5_decode.toml"
RULE = re.compile(r'\{Xid: (?P<xid>\d+), Unit: "(?P<unit>(?:[^"\\]|\\.)*)", '
                  r'IntrinfoPatternV1: "(?P<v1>[-01]*)", IntrinfoPatternV2: "(?P<v2>[-01]*)", '
                  r'ErrorStatus: (?P<status>0x[0-9a-fA-F]+), Resolution: "(?P<resolution>[A-Z_0-9]*)", '
                  r'Investigatory: "(?P<investigatory>(?:[^"\\]|\\.)*)", Severity: "(?P<severity>[^"]*)"')


def subcode(pattern: str) -> int | None:
    """Bits 20-25 of a 32-character pattern (bit 31 first), where they are all given."""
    if len(pattern) != 32 or "-" in pattern[6:12]:
        return None
    return int(pattern[6:12], 2)


def quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    source = Path(sys.argv[1]).read_text()
    commit = sys.argv[2] if len(sys.argv) > 2 else "unknown"
    rules = [m.groupdict() for m in RULE.finditer(source[source.index("var nvlinkRules"):])]
    if not rules:
        print("no NVLink rules found", file=sys.stderr)
        return 1
    lines = [
        "# NVLink5 Xids 144-150, decoded rule by rule: NVIDIA's \"XID 144-150 Decode\" sheet of the Xid catalog",
        "# (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), as tabulated by leptonai/gpud",
        f"# components/accelerator/nvidia/xid/catalog_generated.go (Apache-2.0), commit {commit}.",
        "# Written by scripts/vendor_nvlink5_decode.py; do not edit by hand.",
        "#",
        "# A line matches a row when it names the row's unit (any part of it, as the sheet writes \"A/B\"), its",
        "# second register equals `error_status`, and its first register (intrinfo) matches `intrinfo_v1` or",
        "# `intrinfo_v2` (bit 31 first; '-' any).  `subcode` is bits 20-25 of the pattern, as the sheet keys",
        "# NETIR_LINK_EVT by it.  [resolutions] gives the action each resolution bucket calls for.",
        "",
        "[resolutions]",
        "RESET_GPU = \"reset_gpu\"          # the sheet's immediate action: reset the GPU",
        "IGNORE = \"watch\"                 # nothing to do now: recorded, a warning",
        "XID_154_EVAL = \"follow_recovery_action\"   # do what the GPU's recovery action (Xid 154) says",
        "",
    ]
    for r in rules:
        lines += [
            "[[rule]]",
            f"xid = {int(r['xid'])}",
            f"unit = {quote(r['unit'].replace(chr(92) + 'n', ' '))}",
            f"subcode = {subcode(r['v2']) if subcode(r['v2']) is not None else subcode(r['v1'])}",
            f"intrinfo_v1 = {quote(r['v1'])}",
            f"intrinfo_v2 = {quote(r['v2'])}",
            f"error_status = {int(r['status'], 16)}",
            f"severity = {quote(r['severity'])}",
            f"resolution = {quote(r['resolution'])}",
            "",
        ]
    OUT.write_text("\n".join(lines))
    print(f"wrote {len(rules)} rules to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
