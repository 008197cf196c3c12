"""Write slurm_gpufleet/data/dcgm_errors.toml from a DCGM checkout: DCGM's own error table, each error's id,
name, severity class, category and message format (dcgmlib/dcgm_errors.h, dcgmlib/src/dcgm_errors.c).

    python scripts/vendor_dcgm_errors.py DCGM_CHECKOUT [COMMIT]

The reader classes an error whose output carries no severity (DCGM 2.x to 3.1) by this table, through its
id where the output has one, else through its message format.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "slurm_gpufleet" / "data" / "dcgm_errors.toml"


def _show(repo: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def _strings(body: str) -> str:
    """The C string literals of a macro's body, joined ("a" "b" -> ab), escapes left as C wrote them."""
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', body))


def main(repo: str, commit: str = "HEAD") -> None:
    header = _show(repo, commit, "dcgmlib/dcgm_errors.h")
    table = _show(repo, commit, "dcgmlib/src/dcgm_errors.c")
    sha = subprocess.run(["git", "-C", repo, "rev-parse", commit], check=True, capture_output=True,
                         text=True).stdout.strip()
    ids = {name: int(num) for name, num in re.findall(r"^\s*(DCGM_FR_\w+)\s*=\s*(\d+)\s*,", header, re.M)}
    severities = {name: int(num) for name, num in re.findall(r"^\s*(DCGM_ERROR_\w+)\s*=\s*(\d+)\s*,", header, re.M)}
    categories = {name: int(num) for name, num in re.findall(r"^\s*(DCGM_FR_EC_\w+)\s*=\s*(\d+)\s*,", header, re.M)}
    # a #define's body runs on over lines ending in a backslash
    defines = {m.group(1): _strings(m.group(2)) for m in
               re.finditer(r"^#define\s+(DCGM_FR_\w+_MSG)\b((?:.*\\\n)*.*)$", header, re.M)}
    rows = re.findall(r"DCGM_ERROR_TABLE_ENTRY\(\s*(DCGM_FR_\w+)\s*,\s*(DCGM_ERROR_\w+)\s*,\s*(DCGM_FR_EC_\w+)\s*\)",
                      table)
    lines = [
        "# DCGM's own error table: every error DCGM's diagnostic can report, with the severity class DCGM gives it",
        "# (dcgmErrorSeverity_t: 1 MONITOR, 2 ISOLATE, 3 UNKNOWN, 4 TRIAGE, 5 CONFIG, 6 RESET; dcgm.toml says what",
        "# each asks of the node), its category and its message format.  Written by scripts/vendor_dcgm_errors.py",
        "# from dcgmlib/dcgm_errors.h and dcgmlib/src/dcgm_errors.c; do not edit by hand.",
        f'source = "NVIDIA DCGM dcgmlib/dcgm_errors.h, dcgmlib/src/dcgm_errors.c @{sha[:10]} (Apache-2.0)"',
        "",
    ]
    for name, severity, category in rows:
        if name not in ids:
            continue
        message = defines.get(f"{name}_MSG", "").replace("\\", "\\\\").replace('"', '\\"')
        lines += [f"[error.{ids[name]}]", f'name = "{name}"', f"severity = {severities[severity]}",
                  f"category = {categories[category]}", f'message = "{message}"', ""]
    OUT.write_text("\n".join(lines))
    print(f"{OUT}: {len(rows)} errors")


if __name__ == "__main__":
    main(*sys.argv[1:])
