"""Documents another tool or a person wrote (a saved fleet, a plan), mutated field by field: every field of
the sample set to a value of every JSON kind (null, numbers small, negative, of 400 digits and fractional,
strings, lists, objects, booleans).  The contract is the property: the command ends with a code of its row
of `exitcodes.BY_COMMAND` (never 70) and the library raises its own one-line error, never another
exception."""

from __future__ import annotations

import copy
import json

import pytest
from click.testing import CliRunner
from support import REPO

from slurm_gpufleet.cli import cli
from slurm_gpufleet.common import exitcodes

VALUES = [None, 5, -1, 10**400, 1.5, "x", "", [], {}, ["a"], {"a": 1}, True]


def _paths(o, p=()):
    """Each field's path once (a list's first item stands for its items)."""
    yield p
    if isinstance(o, dict):
        for k, v in o.items():
            yield from _paths(v, (*p, k))
    elif isinstance(o, list) and o:
        yield from _paths(o[0], (*p, 0))


def _mutants(base, values=VALUES):
    for path in _paths(base):
        for value in values:
            doc = copy.deepcopy(base)
            if not path:
                yield path, value, value
                continue
            cur = doc
            for k in path[:-1]:
                cur = cur[k]
            cur[path[-1]] = value
            yield path, value, doc


@pytest.mark.parametrize("values", [pytest.param([None, 10**400, "x", ["a"]], id="four-kinds"),
                                    pytest.param(VALUES, id="every-kind", marks=pytest.mark.slow)])
def test_a_saved_fleet_of_any_shape_is_a_documented_exit(tmp_path, values):
    base = json.loads((REPO / "etc" / "sample-fleet.json").read_text())
    fleet = tmp_path / "fleet.json"
    runner, crashed, runs = CliRunner(), [], 0
    for path, value, doc in _mutants(base, values):
        fleet.write_text(json.dumps(doc))
        for argv in (["fleet", "--fleet", str(fleet), "--json"],
                     ["maintain", "plan", "--fleet", str(fleet), "--target-driver", "580.159.04", "--nodes",
                      "gpu[001-004]", "--json"]):
            runs += 1
            r = runner.invoke(cli, argv)
            allowed = exitcodes.of("maintain plan" if argv[0] == "maintain" else "fleet")
            if r.exit_code not in allowed or (r.exception is not None and not isinstance(r.exception, SystemExit)):
                crashed.append((path, json.dumps(value)[:20], argv[0], repr(r.exception)[:80]))
    assert runs > 50 * len(values) and crashed == [], crashed[:10]


def test_a_plan_of_any_shape_is_a_plan_error_or_a_plan(tmp_path):
    from slurm_gpufleet.maintain.plan import Plan, PlanError

    out = tmp_path / "plan.json"
    r = CliRunner().invoke(cli, ["maintain", "plan", "--fleet", str(REPO / "etc" / "sample-fleet.json"),
                                 "--target-driver", "580.159.04", "--nodes", "gpu[001-008]", "--out", str(out)])
    assert r.exit_code == 0, r.output
    crashed, docs = [], 0
    for path, value, doc in _mutants(json.loads(out.read_text())):
        docs += 1
        try:
            plan = Plan.from_dict(doc)
            plan.to_dict()
            [plan.target_for(n) for n in plan.slots]
        except PlanError as exc:
            assert "\n" not in str(exc)
        except Exception as exc:  # noqa: BLE001 - the property: no other exception
            crashed.append((path, json.dumps(value)[:20], repr(exc)[:80]))
    assert docs > 1000 and crashed == [], crashed[:10]


@pytest.mark.parametrize("doc,says", [
    ({"nodes": [], "jobs": [{"job_id": "1", "nodes": "gpu001", "end_time": None}]}, "jobs[0] ('1'): nodes is"),
    ({"nodes": [], "taken_at": "yesterday"}, "taken_at is \"yesterday\", not a time"),
])
def test_a_saved_fleet_field_of_the_wrong_kind_is_named(tmp_path, doc, says):
    """A job whose `nodes` is a string would have left its busy node out of its job (and in the canary)."""
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps(doc))
    r = CliRunner().invoke(cli, ["fleet", "--fleet", str(fleet)])
    assert r.exit_code == 2 and says in r.output, r.output


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v == float("inf") else repr(v))
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return "{" + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + "}"


def test_a_rates_file_of_any_shape_is_a_rates_error_or_a_bounded_draw(tmp_path):
    """Every key of a failure class and every top-level table at every TOML kind, and rates of 1e300 (a
    draw for ever before): RatesError in one line, or a model whose draw is bounded."""
    from slurm_gpufleet.catalogs import failure_classes_data
    from slurm_gpufleet.simulators.faultmodel import RatesError, draw_faults, load_model

    base = failure_classes_data()
    first = base["class"][0]
    values = [v for v in VALUES if v is not None] + [1e300, float("nan"), float("inf")]
    docs = [f'[[class]]\nname = {_toml(v)}\n' if key == "name" else
            f'[[class]]\nname = "{first["name"]}"\n{key} = {_toml(v)}\n' for key in first for v in values]
    docs += [f"{key} = {_toml(v)}\n" for key in base if key != "class" for v in values]
    path, crashed = tmp_path / "rates.toml", []
    for doc in docs:
        path.write_text(doc)
        try:
            draw_faults(load_model(str(path)), 50, 30 * 86400, 1)
        except RatesError as exc:
            assert "\n" not in str(exc)
        except Exception as exc:  # noqa: BLE001 - the property: no other exception
            crashed.append((doc.strip()[:60], repr(exc)[:80]))
    assert len(docs) > 150 and crashed == [], crashed[:10]


def test_a_document_past_its_size_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """A saved fleet, a plan, a baseline or a timings file is read whole only within MAX_DOCUMENT_BYTES."""
    from slurm_gpufleet.common import shapes
    from slurm_gpufleet.maintain.fleet import FleetState

    big = tmp_path / "fleet.json"
    big.write_text(json.dumps({"nodes": [{"name": f"n{i}"} for i in range(200)]}))
    assert len(FleetState.from_file(str(big)).nodes) == 200
    monkeypatch.setattr(shapes, "MAX_DOCUMENT_BYTES", 1024)
    with pytest.raises(ValueError, match="larger than 1,024 bytes"):
        shapes.load_json(str(big), shapes.MAX_DOCUMENT_BYTES)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deep"):
        shapes.load_json(str(deep))
