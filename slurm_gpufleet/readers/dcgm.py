"""DCGM's diagnostic read as data: `dcgmi diag -r N -j`, each test's result per GPU with the severity DCGM
gives its errors (DCGM 4.x: "DCGM Diagnostic", results per entity; DCGM 3.x: "DCGM GPU Diagnostic", results
per `gpu_ids`).  What DCGM itself could not do (dcgmi missing or hung, a host engine that does not answer or
is of another version, a run that printed no diagnostic) is `error`: a broken dependency, never a GPU fault.

`read_diag` is pure (text in); `run_diag` runs dcgmi under a time limit.
"""

from __future__ import annotations

import json

from .snapshot import DcgmDiag, DcgmResult

# how much of dcgmi's output is read (a level 4 run on 8 GPUs prints well under 1 MiB)
MAX_OUTPUT_BYTES = 16 << 20


def _status(value) -> str:
    text = str(value or "").strip().lower()
    return {"passed": "pass", "failed": "fail", "warning": "warn", "skipped": "skip", "not run": "skip"}.get(
        text, text or "skip")


def _int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _gpus_of(result: dict) -> list[int | None]:
    """The GPUs one result is about: 4.x's entity (GPU group only), 3.x's gpu_ids ("0,1") or gpu_id."""
    group = result.get("entity_group")
    if group is not None or "entity_id" in result:
        return [_int(result.get("entity_id"))] if str(group or "GPU").upper() == "GPU" else [None]
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if isinstance(ids, list):
        return [_int(i) for i in ids] or [None]
    if ids is None:
        return [None]
    return [_int(i) for i in str(ids).split(",") if str(i).strip()] or [None]


def _errors(result: dict) -> tuple[tuple[str, ...], int | None]:
    words, worst = [], None
    for key in ("warnings", "errors"):
        items = result.get(key)
        if not isinstance(items, list):
            continue
        for item in items:
            if isinstance(item, dict):
                text = item.get("warning") or item.get("error") or item.get("msg") or ""
                sev = _int(item.get("error_severity"))
                if sev is not None and (worst is None or _RANK.get(sev, 0) > _RANK.get(worst, 0)):
                    worst = sev
            else:
                text = str(item)
            if text:
                words.append(" ".join(str(text).split())[:200])
    return tuple(words), worst


# which severity says more when a result has several: RESET and ISOLATE take the GPU away, CONFIG does not
_RANK = {0: 0, 1: 1, 5: 2, 3: 3, 4: 4, 2: 5, 6: 6}


def read_diag(text: str) -> DcgmDiag:
    """The diagnostic in dcgmi's JSON output; an output with none is `error`, in DCGM's own words."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        said = next((line.strip() for line in text.splitlines() if line.strip()), "no output")
        return DcgmDiag(error=f"dcgmi printed no diagnostic: {said[:160]}")
    try:
        doc = json.loads(text[start:end + 1])
    except (ValueError, RecursionError) as exc:
        return DcgmDiag(error=f"dcgmi's output is not JSON: {str(exc)[:120]}")
    if not isinstance(doc, dict):
        return DcgmDiag(error="dcgmi's output is not a diagnostic")
    body = doc.get("DCGM Diagnostic", doc.get("DCGM GPU Diagnostic"))
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else doc
    version = meta.get("version") if isinstance(meta.get("version"), str) else None
    if not isinstance(body, dict):
        return DcgmDiag(error="dcgmi's output holds no diagnostic", version=version)
    diag = DcgmDiag(version=version)
    if body.get("runtime_error"):
        diag.error = " ".join(str(body["runtime_error"]).split())[:160]
    for cat in body.get("test_categories") or []:
        if not isinstance(cat, dict):
            continue
        for test in cat.get("tests") or []:
            if not isinstance(test, dict):
                continue
            for result in test.get("results") or []:
                if not isinstance(result, dict):
                    continue
                words, severity = _errors(result)
                for gpu in _gpus_of(result):
                    diag.results.append(DcgmResult(
                        str(cat.get("category") or ""), str(test.get("name") or ""), gpu,
                        _status(result.get("status")), severity, list(words),
                        str(result.get("entity_group") or ("GPU" if gpu is not None else "?"))))
    if not diag.results and diag.error is None:
        diag.error = "dcgmi's diagnostic holds no test result"
    return diag


def run_diag(dcgmi: str, level: int, timeout_s: float) -> DcgmDiag:
    """`dcgmi diag -r LEVEL -j`, ended at `timeout_s`: a hung host engine is DCGM's fault, said as such."""
    import subprocess

    try:
        done = subprocess.run([dcgmi, "diag", "-r", str(level), "-j"], capture_output=True, timeout=timeout_s)
    except FileNotFoundError:
        return DcgmDiag(error=f"{dcgmi} not found", level=level)
    except subprocess.TimeoutExpired:
        return DcgmDiag(error=f"dcgmi diag -r {level} still running after {timeout_s:g} s: is nv-hostengine hung?",
                        level=level)
    except OSError as exc:
        return DcgmDiag(error=f"{dcgmi}: {exc.strerror or exc}", level=level)
    text = (done.stdout[:MAX_OUTPUT_BYTES] + b"\n" + done.stderr[:65536]).decode("utf-8", "replace")
    diag = read_diag(text)
    diag.level = level
    return diag
