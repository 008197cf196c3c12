"""The Slurm layer's pure parts: parsing scontrol output, reasons, the decision table, history."""

import calendar
import json

import pytest

from slurm_gpufleet.judging.findings import Finding
from slurm_gpufleet.remedy.decide import Ladder, NodeHistory, decide
from slurm_gpufleet.slurm.actions import is_ours, make_reason
from slurm_gpufleet.slurm.base import NodeInfo, SlurmError
from slurm_gpufleet.slurm.commands import parse_node_json, parse_node_text, parse_nodes_text

SHOW_NODE_2205 = """NodeName=n1 Arch=x86_64 CoresPerSocket=1
   CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=0.14
   Gres=gpu:h200:8
   OS=Linux 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0
   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   BootTime=2026-11-29T20:19:30 SlurmdStartTime=2026-11-29T20:36:34
   Reason=admin: fan = broken [root@2026-11-29T20:36:34]
   Comment=hello world
   Extra={"a":1}
"""


def test_parse_scontrol_show_node_text():
    info = parse_node_text(SHOW_NODE_2205)
    assert (info.name, info.state, info.flags) == ("n1", "IDLE", {"DRAIN"})
    assert (info.reason, info.reason_user) == ("admin: fan = broken", "root")
    assert (info.comment, info.extra, info.boot_time) == ("hello world", '{"a":1}', "2026-11-29T20:19:30")
    assert info.drained and not info.rebooting


def test_parse_reboot_states():
    info = parse_node_text("NodeName=n3\n   State=MIXED+DRAIN+REBOOT_REQUESTED ThreadsPerCore=1\n   BootTime=None\n")
    assert info.state == "MIXED" and info.rebooting and info.boot_time is None


def test_parse_json_2311_shape():
    text = json.dumps({"nodes": [{"name": "n2", "state": ["IDLE", "DRAIN"], "reason": "x [gpufleet]",
                                  "comment": "", "extra": "", "boot_time": {"set": True, "number": 1795979330}}]})
    info = parse_node_json(text, "n2")
    # the boot as `scontrol show node` prints it (local time): one form across releases and backends (the
    # JSON's epoch once reached the engine as digits, and pyslurm's as ISO text: found on real 24.11)
    import datetime as dt

    assert info.state == "IDLE" and info.drained
    assert info.boot_time == dt.datetime.fromtimestamp(1795979330).isoformat(timespec="seconds")


def test_parse_json_2411_who_drained_and_partitions():
    # the keys of `scontrol --json show node` on a real Slurm 24.11.5 (the mini-cluster's trixie root)
    text = json.dumps({"nodes": [{
        "name": "n1", "state": ["IDLE", "DRAIN"], "reason": "test reason [gpufleet]", "reason_set_by_user": "root",
        "reason_changed_at": {"set": True, "infinite": False, "number": 1796046218},
        "boot_time": {"set": True, "infinite": False, "number": 1796032479},
        "slurmd_start_time": {"set": True, "infinite": False, "number": 1796046217}, "comment": "", "extra": "",
        "partitions": ["gpu", "dev"], "weight": 1, "gres": "gpu:h200:8",
        "features": ["gpufleet_drv580"], "active_features": ["gpufleet_drv580"]}]})
    info = parse_node_json(text, "n1")
    assert (info.reason_user, info.partitions, info.reason_time) == ("root", ["gpu", "dev"], 1796046218.0)
    assert info.slurmd_start == 1796046217.0 and info.features == ["gpufleet_drv580"]


# `scontrol show nodes` of a real Slurm 24.11.5 (the mini-cluster's trixie root), two nodes: a line of
# spaces inside each block, after CurrentWatts
SHOW_NODES_2411 = "\n".join([
    'NodeName=n1 Arch=x86_64 CoresPerSocket=1 ',
    '   CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=2.88',
    '   AvailableFeatures=gpufleet_drv580,gpufleet_drv580.159.04,gpufleet_cuda13.0',
    '   ActiveFeatures=gpufleet_drv580,gpufleet_drv580.159.04,gpufleet_cuda13.0',
    '   Gres=gpu:h200:8',
    '   NodeAddr=127.0.0.1 NodeHostName=localhost Port=47001 Version=24.11.5',
    '   OS=Linux 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0 ',
    '   RealMemory=64000 AllocMem=0 FreeMem=23484 Sockets=16 Boards=1',
    '   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A',
    '   Partitions=gpu,dev ',
    '   BootTime=2026-11-30T09:54:39 SlurmdStartTime=2026-11-30T13:51:57',
    '   LastBusyTime=2026-11-30T13:51:57 ResumeAfterTime=None',
    '   CfgTRES=cpu=16,mem=62.50G,billing=16',
    '   AllocTRES=',
    '   CurrentWatts=0 AveWatts=0',
    '   ',
    '   Extra={"gpufleet":1,"v":"ok","drv":"580.159.04","cuda":"13.0","gpus":"8xNVIDIA H200","fw":"96.00.A5.00.1A","t":"2026-11-30T13:51:57Z","boot":"89315907","gsp":"580.159.04","kern":"6.1.0-28-amd64","modf":"open","cdmm":"default"}',
    '',
    'NodeName=n2 Arch=x86_64 CoresPerSocket=1 ',
    '   CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=2.88',
    '   AvailableFeatures=gpufleet_drv580,gpufleet_drv580.159.04,gpufleet_cuda13.0',
    '   ActiveFeatures=gpufleet_drv580,gpufleet_drv580.159.04,gpufleet_cuda13.0',
    '   Gres=gpu:h200:8',
    '   NodeAddr=127.0.0.1 NodeHostName=localhost Port=47002 Version=24.11.5',
    '   OS=Linux 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0 ',
    '   RealMemory=64000 AllocMem=0 FreeMem=23478 Sockets=16 Boards=1',
    '   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A',
    '   Partitions=gpu,dev ',
    '   BootTime=2026-11-30T09:54:39 SlurmdStartTime=2026-11-30T13:51:57',
    '   LastBusyTime=2026-11-30T13:51:57 ResumeAfterTime=None',
    '   CfgTRES=cpu=16,mem=62.50G,billing=16',
    '   AllocTRES=',
    '   CurrentWatts=0 AveWatts=0',
    '   ',
    '   Reason=memory gpu5 row remapping failed [gpufleet] [root@2026-11-30T13:51:57]',
    '   Extra={"gpufleet":1,"v":"drain","drv":"580.159.04","cuda":"13.0","gpus":"8xNVIDIA H200","fw":"96.00.A5.00.1A","t":"2026-11-30T13:51:57Z","boot":"89315907","gsp":"580.159.04","kern":"6.1.0-28-amd64","modf":"open","cdmm":"default","f":"row remapping failed"}',
]) + "\n"


def test_show_nodes_2411_blank_line_inside_a_block_keeps_reason_and_extra():
    n1, n2 = parse_nodes_text(SHOW_NODES_2411)
    assert (n1.name, n1.drained, n1.reason) == ("n1", False, "")
    assert json.loads(n1.extra)["drv"] == "580.159.04"
    assert (n2.name, n2.drained, n2.reason, n2.reason_user) == (
        "n2", True, "memory gpu5 row remapping failed [gpufleet]", "root")
    assert n2.reason_time and json.loads(n2.extra)["v"] == "drain"
    assert (n1.slurmd_version, n2.slurmd_version) == ("24.11.5", "24.11.5")   # the slurmd that registered it


def test_reason_is_one_safe_line():
    f = Finding("memory", "drain", "inspect_hardware", 3, "row 'remap'\nfailed \"now\"" + "x" * 300)
    reason = make_reason(f)
    assert reason.startswith("memory gpu3 row remap failed now")
    assert len(reason) <= 120 and "\n" not in reason and "'" not in reason and '"' not in reason
    assert is_ours(reason) and not is_ours("admin: gpufleet: no")


def node(**kw):
    return NodeInfo(name="n1", state=kw.pop("state", "IDLE"), **kw)


DRAIN = [Finding("memory", "drain", "inspect_hardware", 1, "row remapping failed")]
REBOOT = [Finding("memory", "reboot", "reset_gpu", 1, "row remap pending")]


@pytest.mark.parametrize("info,verdict,findings,history,kind", [
    (node(), "ok", [], NodeHistory(clean_runs=5), "none"),
    (node(), "drain", DRAIN, NodeHistory(), "drain"),
    (node(flags={"DRAIN"}, reason="admin: fan", reason_user="alice"), "drain", DRAIN, NodeHistory(), "none"),
    (node(flags={"DRAIN"}, reason="admin: fan"), "ok", [], NodeHistory(clean_runs=9), "none"),
    (node(state="DOWN", reason="Not responding"), "drain", DRAIN, NodeHistory(), "none"),
    (node(flags={"DRAIN"}, reason="memory gpu1 row remapping failed [gpufleet]"), "drain", DRAIN, NodeHistory(), "none"),
    (node(flags={"DRAIN"}, reason="thermal gpu0 fan error [gpufleet]"), "drain", DRAIN, NodeHistory(), "set_reason"),
    (node(flags={"DRAIN"}, reason="x [gpufleet]"), "ok", [], NodeHistory(clean_runs=1), "none"),
    (node(flags={"DRAIN"}, reason="x [gpufleet]"), "warn", [], NodeHistory(clean_runs=3), "resume"),
    (node(flags={"DRAIN"}, reason="performance gpu3 memory bandwidth 3300 GB/s [gpufleet]"), "ok", [],
     NodeHistory(clean_runs=9), "none"),
    (node(flags={"DRAIN"}, reason="maintain ab12 upgrading to 580.95.05 [gpufleet]"), "ok", [],
     NodeHistory(clean_runs=9), "none"),
    (node(flags={"DRAIN"}, reason="Prolog error"), "drain", DRAIN, NodeHistory(hook_failure=True), "set_reason"),
    (node(flags={"DRAIN"}, reason="Prolog error"), "drain", DRAIN, NodeHistory(hook_failure=False), "none"),
    (node(boot_time="B1"), "reboot", REBOOT, NodeHistory(resets={"memory:1:reset_gpu": ["B1"]}), "reboot"),
    (node(boot_time="B1"), "reboot", REBOOT, NodeHistory(reboot_boots={"memory:1:reset_gpu": ["B1"]}), "none"),
    (node(boot_time="B2"), "reboot", REBOOT, NodeHistory(reboot_boots={"memory:1:reset_gpu": ["B1"]}), "reboot"),
    (node(boot_time="B3"), "reboot", REBOOT, NodeHistory(reboot_boots={"memory:1:reset_gpu": ["B1", "B2"]}), "drain"),
    (node(flags={"REBOOT_REQUESTED", "DRAIN"}, reason="memory gpu1 row remap pending [gpufleet]"), "reboot", REBOOT,
     NodeHistory(), "none"),
    (node(flags={"REBOOT_REQUESTED"}, reason="admin: kernel update"), "drain", DRAIN, NodeHistory(), "none"),
])
def test_decision_table(info, verdict, findings, history, kind):
    action = decide(info, verdict, findings, history, clean_runs_to_resume=3, reboots_before_drain=2)
    assert action.kind == kind, action


KEY = "memory:1:reset_gpu"


@pytest.mark.parametrize("info,history,kw,kind,rung,reason", [
    # the first rung: a reset of the idle GPUs, with the node idle in Slurm
    (node(boot_time="B1"), NodeHistory(), {"gpus_idle": True}, "reset", "reset", "memory gpu1 row remap pending [gpufleet]"),
    # busy GPUs or a busy node: drained, so the reset can run when its jobs end; no remedy yet
    (node(boot_time="B1"), NodeHistory(), {}, "drain", "", "memory gpu1 row remap pending [gpufleet]"),
    (node(boot_time="B1", state="ALLOCATED"), NodeHistory(), {"gpus_idle": True}, "drain", "", None),
    # already drained by us for it: waits for the jobs, no rewrite
    (node(boot_time="B1", state="ALLOCATED", flags={"DRAIN"}, reason="memory gpu1 row remap pending [gpufleet]"),
     NodeHistory(), {"gpus_idle": True}, "none", "", None),
    # the reset was tried in this episode: the next rung
    (node(boot_time="B1"), NodeHistory(resets={KEY: ["B1"]}, attempts={"ecc": 1}, running={"ecc"}), {"gpus_idle": True},
     "reboot", "reboot", None),
    # the third fault of the class within the window: drained for repair, not remedied again
    (node(boot_time="B1"), NodeHistory(attempts={"ecc": 2}), {"gpus_idle": True}, "drain", "repair",
     "repair ecc attempt 3 of 3 in 7d: memory gpu1 row remap pending [gpufleet]"),
    # ... but an attempt under way climbs its own ladder to the end
    (node(boot_time="B2"), NodeHistory(resets={KEY: ["B1"]}, reboot_boots={KEY: ["B1"]}, attempts={"ecc": 3},
                                      running={"ecc"}), {}, "reboot", "reboot", None),
    # a cap of 5 leaves the third fault to the ladder
    (node(boot_time="B1"), NodeHistory(attempts={"ecc": 2}), {"gpus_idle": True, "ladder": Ladder(max_attempts=5)},
     "reset", "reset", None),
    # quarantine: drained, never reset or rebooted
    (node(boot_time="B1"), NodeHistory(), {"gpus_idle": True, "ladder": Ladder(mode="quarantine")}, "drain", "", None),
    # a reboot_node fault has no reset rung
    (node(boot_time="B1"), NodeHistory(), {"gpus_idle": True, "findings": [
        Finding("inventory", "reboot", "reboot_node", 2, "GPU lost")]}, "reboot", "reboot", None),
    # drained for repair: only an admin resumes it, however clean it runs
    (node(flags={"DRAIN"}, reason="repair ecc attempt 3 of 3 in 7d: memory gpu1 row remap pending [gpufleet]"),
     NodeHistory(clean_runs=9), {"verdict": "ok", "findings": []}, "none", "", None),
])
def test_the_ladder_cheapest_first_capped_per_class(info, history, kw, kind, rung, reason):
    verdict, findings = kw.pop("verdict", "reboot"), kw.pop("findings", REBOOT)
    action = decide(info, verdict, findings, history, 3, **kw)
    assert (action.kind, action.rung) == (kind, rung), action
    if reason is not None:
        assert action.reason == reason


def test_escalated_reason_says_why():
    action = decide(node(boot_time="B3"), "reboot", REBOOT,
                    NodeHistory(reboot_boots={"memory:1:reset_gpu": ["B1", "B2"]}), 3, 2)
    assert action.reason == "memory gpu1 row remap pending after 2 reboots [gpufleet]"


def test_history_counts_clean_runs_and_reboots(tmp_path):
    from slurm_gpufleet.records.history import History

    h = History(str(tmp_path / "n1.db"))
    assert oct((tmp_path / "n1.db").stat().st_mode & 0o777) == "0o600"
    h.record_run("n1", "healthcheck", "drain", DRAIN)
    h.record_run("n1", "healthcheck", "ok", [])
    h.record_run("n1", "healthcheck", "warn", [])
    assert h.node_history("n1").clean_runs == 2
    h.record_run("n1", "prolog", "drain", DRAIN, job_id="7")
    nh = h.node_history("n1")
    assert nh.clean_runs == 0 and nh.hook_failure
    h.record_action("n1", "healthcheck", "resume", "", "", True)
    assert not h.node_history("n1").hook_failure
    h.record_run("n1", "healthcheck", "reboot", REBOOT)
    h.record_reboot("n1", "memory:1:reset_gpu", "B1")
    assert h.node_history("n1").reboot_boots == {"memory:1:reset_gpu": ["B1"]}
    assert h.db.journal_mode == "wal"
    assert [r["verdict"] for r in h.runs(2)] == ["reboot", "drain"]


@pytest.mark.parametrize("flags,state,reason,owner", [
    (set(), "IDLE", "", "free"),
    ({"DRAIN"}, "IDLE", "memory gpu3 row remap pending [gpufleet]", "health"),
    ({"DRAIN"}, "IDLE", "maintain 0abc upgrading to 580.95.05 [gpufleet]", "maintain"),
    ({"DRAIN"}, "IDLE", "performance gpu1 memory bandwidth [gpufleet]", "straggler"),
    ({"DRAIN"}, "IDLE", "Prolog error", "hook"),
    ({"DRAIN"}, "IDLE", "admin: PSU swap", "other"),
    (set(), "DOWN", "NVML timeout [gpufleet]", "other"),
])
def test_one_answer_to_whose_node_it_is(flags, state, reason, owner):
    from slurm_gpufleet.slurm import ownership as O

    info = NodeInfo("n1", state, flags, reason)
    assert O.owner(info) == owner
    # every actor may take a free node; each may only touch its own drains after that
    for actor in (O.HEALTH, O.MAINTAIN, O.STRAGGLER):
        assert O.may_drain(info, actor) == (owner in ("free", actor))
        assert O.owns(info, actor) == (owner == actor)


def test_nvml_timeout_watchdog_never_replaces_a_rollouts_reason(tmp_path):
    """The watchdog drains through ownership: a rollout's drain keeps its reason (it used to be replaced).
    A stand-in scontrol at the library boundary shows the node drained with `reason` and logs updates."""
    import json as _json
    import stat

    from slurm_gpufleet.hooks import common as hooks
    from slurm_gpufleet.policy import Policy, SlurmSettings

    log = tmp_path / "updates.jsonl"
    exe = tmp_path / "scontrol"
    for reason, drained in (("maintain 0abc upgrading to 580.95.05 [gpufleet]", False), ("admin: fan", False),
                            ("memory gpu1 remap [gpufleet]", True)):
        exe.write_text("#!/usr/bin/env python3\nimport json, sys\na = sys.argv[1:]\n"
                       "if a == ['--version']: print('slurm 22.05.8')\n"
                       f"elif a[:1] == ['show']: print('NodeName=n1 Arch=x86_64\\n   State=IDLE+DRAIN Weight=1\\n"
                       f"   Reason={reason} [root@2026-11-30T10:00:00]')\n"
                       f"else: open({str(log)!r}, 'a').write(json.dumps(a) + '\\n')\n")
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
        log.unlink(missing_ok=True)
        settings = SlurmSettings(scontrol=str(exe), state_dir=str(tmp_path))
        hooks._drain_if_free(hooks.Setup("n1", Policy(slurm=settings), settings), hooks.TIMEOUT_REASON)
        updates = [_json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        assert bool(updates) == drained, (reason, updates)
        if drained:  # our own drain: only its reason changes
            assert updates == [["update", "nodename=n1", "reason=NVML timeout [gpufleet]"]]


def test_driver_features_are_ours_alone_to_change():
    from slurm_gpufleet.hooks.published import _feature_fields, driver_features

    assert driver_features("gpufleet_", "580.159.04", "13.0") == [
        "gpufleet_drv580", "gpufleet_drv580.159.04", "gpufleet_cuda13.0"]
    node = NodeInfo("n5", "IDLE", set(), "", features=["ib", "h200", "gpufleet_drv570", "gpufleet_drv570.172.08"],
                    active_features=["ib", "gpufleet_drv570", "gpufleet_drv570.172.08"])
    fields = _feature_fields(node, "gpufleet_", "580.159.04", "13.0")
    available, active = fields["availablefeatures"].split(","), fields["activefeatures"].split(",")
    assert available == ["ib", "h200", "gpufleet_drv580", "gpufleet_drv580.159.04", "gpufleet_cuda13.0"]
    assert active == ["ib", "gpufleet_drv580", "gpufleet_drv580.159.04", "gpufleet_cuda13.0"]
    node.features, node.active_features = available, active
    assert _feature_fields(node, "gpufleet_", "580.159.04", "13.0") == {}  # unchanged: nothing to write
    assert _feature_fields(node, "gpufleet_", None, None) == {}  # unreadable driver: keep what the node had


def test_numbers_that_only_look_like_digits_are_not_numbers():
    """Found by the 10,000-case fuzz: "¹" passes str.isdigit() but not int()."""
    info = parse_node_text("NodeName=n2 Arch=x86_64\n   State=IDLE Weight=\u00b91\n")
    assert info.weight is None


def test_an_unchanged_summary_is_published_again_once_slurmd_restarted():
    """An upgrade repeated after a crash installs the same driver again: the first check after the node's
    slurmd restarts must still publish, or a rollout waiting for a summary newer than its command waits
    in vain (found by the kill -9 chaos test on real Slurm)."""
    from slurm_gpufleet.hooks.published import _news
    from slurm_gpufleet.slurm.base import NodeInfo

    summary = {"gpufleet": 1, "v": "ok", "drv": "595.71.05"}
    old = json.dumps({**summary, "t": "2026-11-30T13:16:41Z"})
    started = calendar.timegm((2026, 11, 30, 13, 17, 0, 0, 0, 0))
    new = {**summary, "t": "2026-11-30T13:17:02Z"}
    # same content, already published by this slurmd: no write
    assert _news(NodeInfo("n1", "IDLE", extra=old, slurmd_start=started - 60), "extra", new) is None
    again = _news(NodeInfo("n1", "IDLE", extra=old, slurmd_start=started), "extra", new)
    assert json.loads(again)["t"] == "2026-11-30T13:17:02Z"
    # someone else's text in the field is never overwritten
    assert _news(NodeInfo("n1", "IDLE", extra="rack=7"), "extra", new) is None


def test_the_slurm_release_is_learned_once_per_installed_scontrol(tmp_path):
    import os

    from slurm_gpufleet.slurm.release import parse_release, slurm_release

    exe = tmp_path / "scontrol"
    exe.write_text("#!/bin/sh\n")
    asked = []

    def ask(text="slurm 22.05.8"):
        asked.append(text)
        return text

    assert slurm_release(str(exe), str(tmp_path / "state"), ask) == (22, 5)
    assert slurm_release(str(exe), str(tmp_path / "state"), ask) == (22, 5)
    assert len(asked) == 1  # kept in the state directory
    exe.write_text("#!/bin/sh\n# the package was upgraded\n")
    os.utime(exe, ns=(0, 1_900_000_000_000_000_000))
    assert slurm_release(str(exe), str(tmp_path / "state"), lambda: ask("slurm 24.11.5")) == (24, 11)
    assert len(asked) == 2  # a new binary is asked again
    assert slurm_release(str(exe), None, ask) == (22, 5) and len(asked) == 3  # no cache: asked every time
    assert parse_release("slurm-wlm 26.05.0-0rc1") == (26, 5)
    with pytest.raises(SlurmError):
        parse_release("garbage")


def test_a_down_node_is_ours_only_back_from_the_reboot_we_asked_for():
    """`scontrol reboot ASAP nextstate=DOWN` for a validation: Slurm keeps our reason and appends its own
    words; that node, responding, is the health check's to validate and resume.  Any other down node is
    someone else's, whatever its reason says."""
    from slurm_gpufleet.slurm.base import NodeInfo
    from slurm_gpufleet.slurm.ownership import HEALTH, OTHER, owner

    back = "validate after reboot: memory gpu1 row remap pending [gpufleet] : reboot issued : reboot complete"
    assert owner(NodeInfo("n4", "DOWN", set(), back)) == HEALTH
    assert owner(NodeInfo("n4", "DOWN", {"NOT_RESPONDING"}, back)) == OTHER
    # under way, as 22.05 shows it: DOWN+DRAIN+REBOOT_ISSUED, our reason and ": reboot issued"
    assert owner(NodeInfo("n4", "DOWN", {"DRAIN", "REBOOT_ISSUED"}, back.split(" : reboot complete")[0])) == HEALTH
    assert owner(NodeInfo("n4", "DOWN", set(), "memory gpu1 row remap pending [gpufleet]")) == OTHER
    assert owner(NodeInfo("n4", "DOWN", set(), "validate after reboot: x [gpufleet] : reboot issued")) == OTHER
