"""Fixtures: the vendored real captures and fault injection into them."""

from __future__ import annotations

import copy
import json
import os
import tempfile

import pytest
from support import H200


def _trusted_tmp() -> str:
    """Where tests keep their files: the health check, hooks and `maintain` refuse configs, templates and
    state in a directory others can write (slurm_gpufleet/policy/trust.py), and /tmp is one.  Root's tests use
    /var/lib/gpufleet-tests, a user's ~/.cache/gpufleet-tests; GPUFLEET_TEST_TMP names another."""
    base = os.environ.get("GPUFLEET_TEST_TMP") or (
        "/var/lib/gpufleet-tests" if os.geteuid() == 0 else os.path.expanduser("~/.cache/gpufleet-tests"))
    os.makedirs(base, mode=0o755, exist_ok=True)
    os.chmod(base, 0o755)
    return base


# before pytest makes its first tmp_path (and for every program a test starts)
os.environ["TMPDIR"] = tempfile.tempdir = _trusted_tmp()


@pytest.fixture(scope="session")
def h200_xml_snapshot():
    from slurm_gpufleet.readers.report import read_report_file

    return read_report_file(str(H200 / "nvidia-smi-q.xml"))


@pytest.fixture
def h200(h200_xml_snapshot):
    """A fresh copy of the healthy H200 snapshot, for one test to inject one fault into."""
    return copy.deepcopy(h200_xml_snapshot)


@pytest.fixture
def probe():
    with open(H200 / "nvml_probe.json") as fh:
        return json.load(fh)




@pytest.fixture(autouse=True)
def rollout_budget_invariant(monkeypatch):
    """Over every rollout path the in-memory Slurm runs (the engine tests, the crash and outage tests, the
    simulators): after every step, the nodes a rollout holds out of service (schedule.held: under way,
    failed, idle in a begun slot, done but not yet given back) are no more than its budget.  A canary,
    or a whole domain, wider than the budget goes alone: that width is the bound then."""
    from slurm_gpufleet.maintain import states as S
    from slurm_gpufleet.maintain.reconcile import Engine
    from slurm_gpufleet.maintain.schedule import held, waves_as_stages
    from slurm_gpufleet.maintain.strategy import strategy as strategy_named
    from slurm_gpufleet.maintain.units import StepView
    from slurm_gpufleet.maintain.world import read_world
    from slurm_gpufleet.simulators.simslurm import SimSlurm

    step = Engine.step

    def checked(self, rid):
        state = step(self, rid)
        if not isinstance(self.slurm, SimSlurm):
            return state
        calls = dict(self.slurm.calls)  # the check's read is not the step's: its counts are kept as they were
        world = read_world(self.slurm, self.clock())
        self.slurm.calls.clear()
        self.slurm.calls.update(calls)
        rollout = self.store.rollout(rid)
        plan = self.plan(rid, rollout)
        view = StepView(rid, plan, self.s, world, self.store.nodes(rid), S.direction_of(rollout["state"]),
                        strategy_named(plan.strategy))
        ours, _ = held(view)
        canary, _ = waves_as_stages(plan.waves)
        widest = max([len(canary), *(len(d) for d in plan.domains.values())]) if plan.budget.whole_domain \
            else len(canary)
        bound = max(plan.budget.max_unavailable, widest)
        assert len(ours) <= bound, (f"rollout {rid} ({rollout['state']}) holds {len(ours)} node(s), budget "
                                    f"{plan.budget.max_unavailable}: {sorted(ours)}")
        return state

    monkeypatch.setattr(Engine, "step", checked)
