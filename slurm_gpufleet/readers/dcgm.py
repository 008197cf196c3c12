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


def _entries(result: dict) -> list[tuple[str, int | None, int | None]]:
    """A result's errors as (DCGM's words, error id, severity), in each shape dcgmi has printed:
    2.x to 3.1, `warnings` a plain string with neither id nor severity; 3.3.1 to 3.3.4, a deployment
    test's string with `error_id` and `error_severity` on the result itself; 3.3.5 on, a list of entries,
    a deployment test's keyed `warnings` and a GPU test's `warning`; 4.x, entries keyed `warning`."""
    out: list[tuple[str, int | None, int | None]] = []
    for key in ("warnings", "errors"):
        items = result.get(key)
        if isinstance(items, str):
            out.append((items, _int(result.get("error_id")), _int(result.get("error_severity"))))
            continue
        for item in items if isinstance(items, list) else ():
            if isinstance(item, dict):
                text = next((item[k] for k in ("warning", "warnings", "error", "msg") if isinstance(item.get(k), str)), "")
                out.append((text, _int(item.get("error_id")), _int(item.get("error_severity"))))
            elif item is not None:
                out.append((str(item), None, None))
    return [(" ".join(str(text).split())[:200], eid, sev) for text, eid, sev in out]


def _class_of(test: str, text: str, error_id: int | None, severity: int | None) -> int | None:
    """The severity class of one error: as DCGM printed it; else DCGM's table by the error's id, by the
    message formats of the table, or by the test (where all the errors that test reports share a class)."""
    from ..catalogs import dcgm_errors, dcgm_test_errors

    if severity is not None:
        return severity
    table = dcgm_errors()
    if error_id is not None and error_id in table and error_id != 0:
        return table[error_id].severity
    if text:
        for err in table.values():
            if err.pattern is not None and err.id > 2 and err.pattern.match(text):
                return err.severity
    names = dcgm_test_errors().get(test.strip().lower(), ())
    classes = {e.severity for e in table.values() if e.name in names}
    return classes.pop() if len(classes) == 1 else None


def _errors(test: str, result: dict) -> tuple[tuple[str, ...], int | None]:
    words, worst = [], None
    for text, error_id, severity in _entries(result):
        sev = _class_of(test, text, error_id, severity)
        if sev is not None and (worst is None or _RANK.get(sev, 0) > _RANK.get(worst, 0)):
            worst = sev
        if text:
            words.append(text)
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
    diag = DcgmDiag(version=version, covered=_entities(doc))
    if body.get("runtime_error"):
        diag.error = " ".join(str(body["runtime_error"]).split())[:160]
    for cat in body.get("test_categories") or []:
        if not isinstance(cat, dict):
            continue
        for test in cat.get("tests") or []:
            if isinstance(test, dict):
                _read_test(diag, str(cat.get("category") or ""), test)
    if diag.covered is None:   # before 4.x: the GPUs the results name
        named = {r.gpu for r in diag.results if r.gpu is not None and r.entity == "GPU"}
        diag.covered = sorted(named) if named else None
    if not diag.results and diag.error is None:
        diag.error = "dcgmi's diagnostic holds no test result"
    return diag


def _entities(doc: dict) -> list[int] | None:
    """The GPUs a 4.x run covered (`entity_groups`); None where the output does not list them."""
    groups = doc.get("entity_groups")
    if not isinstance(groups, list):
        return None
    out = []
    for group in groups:
        if isinstance(group, dict) and str(group.get("entity_group") or "").upper() == "GPU":
            out += [i for e in group.get("entities") or [] if isinstance(e, dict)
                    for i in [_int(e.get("entity_id"))] if i is not None]
    return sorted(set(out))


def _read_test(diag: DcgmDiag, category: str, test: dict) -> None:
    """One test's results, each for the GPUs it names.  A result without a status (3.3.1 to 3.3.4 list a
    deployment test's further errors so) is of the test's status; the test's summary (4.x) adds what no
    entity's result says (an error of the node, not of one GPU)."""
    name = str(test.get("name") or "")
    status, said = "skip", set()
    for result in test.get("results") or []:
        if not isinstance(result, dict):
            continue
        status = _status(result.get("status")) if "status" in result else status
        words, severity = _errors(name, result)
        said.update(words)
        for gpu in _gpus_of(result):
            diag.results.append(DcgmResult(category, name, gpu, status, severity, list(words),
                                           str(result.get("entity_group") or ("GPU" if gpu is not None else "?"))))
    summary = test.get("test_summary")
    if isinstance(summary, dict) and _status(summary.get("status")) in ("fail", "warn"):
        entries = [e for e in _entries(summary) if e[0] not in said]
        if entries:
            words, severity = _errors(name, {"warnings": [{"warning": t, "error_id": i, "error_severity": v}
                                                          for t, i, v in entries]})
            diag.results.append(DcgmResult(category, name, None, _status(summary.get("status")), severity,
                                           list(words), "node"))


def uncovered(diag: DcgmDiag, gpus: list[int]) -> list[int]:
    """The node's GPUs a run that judged GPUs did not judge: unverified, never passed."""
    if diag.covered is None:
        return []
    return [g for g in gpus if g not in diag.covered]


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
