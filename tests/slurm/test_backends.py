"""One contract, every backend, against the real slurmctld."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_gpufleet.slurm import SlurmError
from slurm_gpufleet.slurm.base import ReservationMissing
from slurm_gpufleet.slurm.commands import CommandBackend
from slurm_gpufleet.slurm.pyslurm_backend import PyslurmBackend, pyslurm_usable

# every case here is about what a release's commands answer
pytestmark = pytest.mark.release("the backends' reads and writes against each release's commands")

HERE = Path(__file__).resolve().parent


@pytest.fixture(params=["commands", "pyslurm"])
def backend(request, mc):
    # the real scontrol (or libslurm) of the mini-cluster: it finds the cluster through SLURM_CONF
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = mc.env["SLURM_CONF"]
    try:
        scontrol = mc.run("which", "scontrol").stdout.strip()
        if request.param == "pyslurm":
            site = _pyslurm_site(mc)
            if site and mc.root is None and site not in sys.path:  # the host's release: this interpreter's build
                sys.path.insert(0, site)
            usable, why = pyslurm_usable(scontrol)
            if not usable:
                pytest.skip(_why_not(mc, why))
            yield PyslurmBackend(scontrol)
        else:
            yield CommandBackend(scontrol)
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved


def _pyslurm_site(mc) -> str | None:
    """Where tests/slurm/pyslurm_build.sh put pyslurm for the release under test, as its python sees it;
    built first (minutes, once: kept like the release roots) where PYSLURM_SRC is a PySlurm checkout for
    this release.  None: no pyslurm for this release (the skip then says why)."""
    release = f"{mc.release[0]}.{mc.release[1]:02d}"
    script = str(HERE / "pyslurm_build.sh")
    r = subprocess.run([script, "path", release], capture_output=True, text=True)
    if r.returncode == 0 and r.stdout.strip():
        return r.stdout.strip()
    src = os.environ.get("PYSLURM_SRC", "")
    if not src:
        _PYSLURM_WHY[release] = "PYSLURM_SRC is not set (a PySlurm checkout of this release's branch)"
        return None
    of = subprocess.run([script, "release-of", src], capture_output=True, text=True)
    if of.returncode != 0 or of.stdout.strip() != release:
        found = of.stdout.strip() or f"? ({of.stderr.strip()})"
        _PYSLURM_WHY[release] = f"PYSLURM_SRC={src} is for Slurm {found}, this cluster runs {release}"
        return None
    built = subprocess.run([script, "build", release, src], capture_output=True, text=True, timeout=3600)
    if built.returncode != 0:
        pytest.fail(f"pyslurm for {release} from PYSLURM_SRC={src} did not build: {built.stderr.strip()[-800:]}")
    r = subprocess.run([script, "path", release], capture_output=True, text=True)
    return r.stdout.strip() or None


_PYSLURM_WHY: dict[str, str] = {}


def _why_not(mc, why: str) -> str:
    release = f"{mc.release[0]}.{mc.release[1]:02d}"
    return f"pyslurm backend not usable here: {why}" + (f"; {_PYSLURM_WHY[release]}" if release in _PYSLURM_WHY
                                                          else "")


def test_both_backends_read_a_node_the_same_field_by_field(mc):
    """pyslurm's types mapped onto the contract: what scontrol shows, field by field, and pyslurm's writes
    read back by scontrol; run by the node's own interpreter (the release root's for 24.11), where a
    pyslurm built for the running release is installed (tests/slurm/pyslurm_build.sh) or importable."""
    site = _pyslurm_site(mc)
    mc.run("scontrol", "update", "nodename=n3", "state=drain", "reason=contract: field by field",
           "comment=rack 3", 'extra={"gpufleet":1}')
    job = mc.run("sbatch", "--parsable", "-w", "n2", "--gres=gpu:2", "-t", "30", "--comment", "ckpt=SIGUSR1@600",
                 "--wrap", "sleep 300").stdout.strip().split(";")[0]
    try:
        mc.wait(lambda: job in mc.run("squeue", "-h", "-t", "R", "-o", "%i").stdout.split(), 60, f"job {job} running")
        r = subprocess.run([str(mc.dir / "bin" / "node-python"), str(HERE / "backend_fields.py"), "scontrol", "n3",
                            "n5", *([site] if site else [])], capture_output=True, text=True, env=mc.env, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        out = json.loads(r.stdout)
        if not out["usable"]:
            pytest.skip(_why_not(mc, out["why"]))
        a, b = out["commands"], out["pyslurm"]
        for field in ("name", "state", "flags", "reason", "reason_user", "comment", "extra", "gres", "partitions",
                      "features", "active_features", "weight"):
            assert a[field] == b[field], (field, a[field], b[field])
        assert a["boot_time"] and b["boot_time"] and a["boot_time"][:16] == b["boot_time"][:16]
        assert a["reason_time"] and b["reason_time"] and abs(a["reason_time"] - b["reason_time"]) < 2
        # pyslurm's writes (through libslurm), read back by scontrol
        steps = dict((name, info) for name, info in out["writes"])
        assert "DRAIN" in steps["drain"]["flags"] and steps["drain"]["reason"].endswith("row remapping failed")
        assert steps["drain"]["reason_user"] == "root"
        assert steps["set_reason"]["reason"].endswith("after 2 reboots") and "DRAIN" in steps["set_reason"]["flags"]
        assert (steps["set_field"]["extra"], steps["set_field"]["comment"]) == ('{"gpufleet":1,"v":"drain"}', "rack 12")
        assert "DRAIN" not in steps["resume"]["flags"] and steps["unknown node"] == "SlurmError"
        # the engine's fleet reads: every node as scontrol shows it, the running jobs as squeue lists them
        fleet = out["fleet"]
        by_name = {name: {n["name"]: n for n in fleet[name]["nodes"]} for name in fleet}
        assert sorted(by_name["pyslurm"]) == sorted(by_name["commands"]) and len(by_name["commands"]) == len(mc.nodes)
        for node, a in by_name["commands"].items():
            b = by_name["pyslurm"][node]
            for field in ("state", "flags", "reason", "reason_user", "comment", "extra", "gres", "partitions",
                          "features", "active_features", "weight"):
                assert a[field] == b[field], (node, field, a[field], b[field])
            assert (a["boot_time"] or "")[:16] == (b["boot_time"] or "")[:16], node
        jobs = {name: {j["job_id"]: j for j in fleet[name]["jobs"]} for name in fleet}
        assert sorted(jobs["pyslurm"]) == sorted(jobs["commands"]) and job in jobs["commands"], jobs
        for jid, a in jobs["commands"].items():
            differ = {k: (v, jobs["pyslurm"][jid][k]) for k, v in a.items() if v != jobs["pyslurm"][jid][k]}
            assert not differ, (jid, differ)
        assert (jobs["pyslurm"][job]["nodes"], jobs["pyslurm"][job]["gpus_per_node"],
                jobs["pyslurm"][job]["comment"]) == (["n2"], 2, "ckpt=SIGUSR1@600")
        print(f"\npyslurm {out['pyslurm_version']} on Slurm {'.'.join(map(str, mc.release))}: every field as scontrol, "
              f"{len(by_name['pyslurm'])} nodes and {len(jobs['pyslurm'])} running job(s) as scontrol and squeue")
    finally:
        mc.run("scancel", job, check=False)
        for node in ("n3", "n5"):
            mc.run("scontrol", "update", f"nodename={node}", "state=resume", "comment=", "extra=", check=False)
            # its summary gone from Slurm: its next health check reads Slurm and publishes it again
            (mc.dir / "state" / "gpufleet" / f"slurm-view-{node}.json").unlink(missing_ok=True)


def test_backend_contract(backend, mc):
    info = backend.node("n1")
    assert (info.name, info.state, info.drained, info.gres) == ("n1", "IDLE", False, "gpu:h200:8")
    assert info.boot_time

    # an admin's reason: a gpufleet one would be the health check's to resume after its clean runs, which
    # on a loaded machine can come before this test's own resume
    backend.drain("n1", "contract: memory gpu2 row remapping failed")
    info = backend.node("n1")
    assert info.drained and info.reason == "contract: memory gpu2 row remapping failed" and info.reason_user == "root"

    backend.set_reason("n1", "contract: memory gpu2 row remapping failed after 2 reboots")
    assert backend.node("n1").reason.endswith("after 2 reboots")

    backend.set_field("n1", "extra", '{"gpufleet":1,"v":"drain"}')
    backend.set_field("n1", "comment", "rack 12")
    info = backend.node("n1")
    assert (info.extra, info.comment) == ('{"gpufleet":1,"v":"drain"}', "rack 12")

    backend.resume("n1")
    mc.wait(lambda: mc.state("n1") == "IDLE", 10, "n1 idle")
    assert not backend.node("n1").drained

    backend.reboot_asap("n2", "memory gpu0 row remap pending [gpufleet]")
    mc.wait(lambda: mc.state("n2") == "IDLE" and os.path.exists(mc.dir / "log" / "reboots.log"), 30, "n2 rebooted")

    with pytest.raises(SlurmError):
        backend.node("nosuchnode")


@pytest.fixture
def release_env(mc):
    """The mini-cluster's SLURM_CONF and PATH (its release's commands) for backends made in the test."""
    saved = {k: os.environ.get(k) for k in ("SLURM_CONF", "PATH")}
    os.environ.update(SLURM_CONF=mc.env["SLURM_CONF"], PATH=mc.env["PATH"])
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def test_what_differs_by_release_is_handled(mc, release_env):
    """Each Slurm release's differences, named (run on 22.05, 24.11 and 26.05: SLURM_RELEASE)."""
    version = mc.run("scontrol", "--version").stdout.split()[-1]
    release = tuple(int(x) for x in version.split(".")[:2])
    backend = CommandBackend(mc.run("which", "scontrol").stdout.strip())
    # `scontrol --json` from 23.02: one node is read from JSON there and from the text on 22.05, the same
    assert backend.has_json() == (release >= (23, 2))
    mc.run("scontrol", "update", "nodename=n3", "state=drain", "reason=release check [gpufleet]")
    try:
        from slurm_gpufleet.slurm.commands import parse_node_text

        one = backend.node("n3")
        text = parse_node_text(mc.run("scontrol", "show", "node", "n3").stdout)
        for field in ("name", "state", "drained", "reason", "reason_user", "gres", "partitions", "weight", "extra"):
            assert getattr(one, field) == getattr(text, field), (field, getattr(one, field), getattr(text, field))
        assert one.slurmd_start and abs(one.slurmd_start - text.slurmd_start) < 2
    finally:
        mc.run("scontrol", "update", "nodename=n3", "state=resume")
    # HealthCheckTimeout from 26.05 (default 60 s; slurmd kills a run past it): our lines set it there
    # only (22.05 would refuse the unknown key), long enough for the watchdog's drain.  Here that is above
    # the 5 s interval, which 26.05 accepts with one logged error
    lines = (mc.dir / "etc" / "slurm.conf.gpufleet").read_text()
    limit = re.search(r"^HealthCheckTimeout=(\d+)$", lines, re.M)
    assert bool(limit) == (release >= (26, 5)), lines
    if limit:
        assert int(limit.group(1)) >= mc.hc_interval
        assert (f"HealthCheckTimeout ({limit.group(1)}) must be less than HealthCheckInterval ({mc.hc_interval})"
                in (mc.dir / "log" / "slurmctld.log").read_text())
        assert mc.run("scontrol", "show", "config").stdout.count(f"= {limit.group(1)} sec") >= 1
    # reboot: every release refuses nextstate=DRAIN ("Valid states: DOWN, RESUME"): we ask only RESUME
    r = mc.run("scontrol", "reboot", "ASAP", "nextstate=DRAIN", "reason=probe", "n4", check=False)
    if r.returncode == 0:
        mc.run("scontrol", "reboot", "cancel", "n4", check=False)
    assert r.returncode != 0 and "Valid states: DOWN, RESUME" in r.stderr, r.stderr


def test_the_in_memory_slurm_shows_what_real_slurm_shows(mc, release_env):
    """The simulator's Slurm (simulators/simslurm.py) against the real one: one scenario of the writes a
    rollout makes, each through the same backend method; after each, what the two show must be the same
    (a reason with quotes and past 120 characters, a reason change, a resume, a reservation's create,
    update, postpone and delete, a reboot)."""
    import time

    from slurm_gpufleet.simulators.rollout import SimFleet

    real = CommandBackend(mc.run("which", "scontrol").stdout.strip())
    fleet = SimFleet(len(mc.nodes), now=time.time())
    for node, name in zip(fleet.sim.nodes, mc.nodes, strict=True):
        node.name = name
    fleet.slurm.index = {n.name: n for n in fleet.sim.nodes}
    sim = fleet.slurm
    name = "gpufleet_contract_s1"

    def nodes(backend, names):
        return {i.name: (i.drained, i.reason) for i in backend.nodes() if i.name in names}

    def reservations(backend, t0):
        return {r.name: (sorted(r.nodes), round(r.start - t0), round(r.end - t0), "MAINT" in r.flags)
                for r in backend.reservations() if r.name.startswith("gpufleet_contract")}

    def both(method, *args):
        fleet.sim.now = time.time()  # the in-memory Slurm's clock is the real one here (it read it once, at creation)
        for backend in (real, sim):
            getattr(backend, method)(*args)

    quoted = ('maintain c0ffee01 failed: validation failed: "nvidia-smi" said \'GPU 3 has fallen off the '
              'bus\' after 2 reboots; driver 595.71.05 + kernel 6.1.0-31-amd64 + vbios 96.00.AF.00.01 + inforom G525'
              ' [gpufleet]')
    try:
        both("drain_nodes", ["n3", "n4"], quoted)
        shown = nodes(real, {"n3", "n4"})
        assert shown == nodes(sim, {"n3", "n4"}) and all(d for d, _ in shown.values())
        assert '"' not in shown["n3"][1] and len(shown["n3"][1]) <= 120, shown
        both("set_reason_nodes", ["n3"], "maintain c0ffee01 upgrading to 595.71.05 [gpufleet]")
        assert nodes(real, {"n3", "n4"}) == nodes(sim, {"n3", "n4"})
        both("resume_nodes", ["n3", "n4"])
        mc.wait(lambda: not any(d for d, _ in nodes(real, {"n3", "n4"}).values()), 10, "n3, n4 resumed")
        assert nodes(real, {"n3", "n4"}) == nodes(sim, {"n3", "n4"}) == {"n3": (False, ""), "n4": (False, "")}

        t0 = float(int(time.time()) + 3600)
        both("create_reservation", name, ["n5", "n6"], t0, 90)
        assert reservations(real, t0) == reservations(sim, t0) == {name: (["n5", "n6"], 0, 5400, True)}
        both("update_reservation", name, ["n5"])
        assert reservations(real, t0) == reservations(sim, t0) == {name: (["n5"], 0, 5400, True)}
        both("postpone_reservation", name, t0 + 1800)
        assert reservations(real, t0) == reservations(sim, t0) == {name: (["n5"], 1800, 7200, True)}
        both("delete_reservation", name)
        assert reservations(real, t0) == reservations(sim, t0) == {}
        # one that is gone: both say so by the same exception class, whatever Slurm's words
        for method, args in (("delete_reservation", ()), ("update_reservation", (["n5"],)),
                             ("postpone_reservation", (t0 + 3600,))):
            for backend in (real, sim):
                with pytest.raises(ReservationMissing):
                    getattr(backend, method)(name, *args)
        # a reservation that has begun cannot be postponed: both refuse, and keep it as it was
        now = float(int(time.time()))
        both("create_reservation", name, ["n5"], now, 60)
        # (24.11 starts one made "now" a second later: until then it may still move)
        mc.wait(lambda: "State=ACTIVE" in mc.run("scontrol", "show", "reservation", name, check=False).stdout, 10,
                f"{name} begun")
        refused = []
        fleet.sim.now = time.time()
        for backend in (real, sim):
            try:
                backend.postpone_reservation(name, now + 1800)
            except SlurmError as exc:
                refused.append("already started" in str(exc))
        assert refused == [True, True], refused
        # kept where it was (24.11 starts one made "now" a second later)
        kept = [reservations(b, now)[name] for b in (real, sim)]
        assert all(k[0] == ["n5"] and k[3] and abs(k[1]) <= 2 and k[2] - k[1] == 3600 for k in kept), kept
        both("delete_reservation", name)

        # rebooted: slurmd registers again (a mini-cluster's "reboot" restarts it; the host keeps its boot time)
        boots = [{i.name: i.slurmd_start for i in b.nodes()}["n7"] for b in (real, sim)]
        both("reboot_asap_nodes", ["n7"], "maintain c0ffee01 reboot [gpufleet]", "RESUME")
        mc.wait(lambda: nodes(real, {"n7"}) == {"n7": (False, "")} and mc.state("n7") == "IDLE", 60, "n7 rebooted")
        assert nodes(real, {"n7"}) == nodes(sim, {"n7"}) == {"n7": (False, "")}
        for b, before in zip((real, sim), boots, strict=True):
            mc.wait(lambda b=b, before=before: {i.name: i.slurmd_start for i in b.nodes()}["n7"] != before, 30,
                    "n7's slurmd start")
    finally:
        mc.run("scontrol", "delete", f"reservationname={name}", check=False)
        mc.run("scontrol", "update", "nodename=n3,n4", "state=resume", check=False)
