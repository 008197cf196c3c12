"""One way to say how far long work is (slurm_gpufleet/common/progress.py), for the simulators' pools, the fault
simulator and `maintain apply`: quiet when quick, a bar redrawn on a terminal and ended before anything
else prints, spaced plain lines in a log."""

from __future__ import annotations

import ast
import io

from support import REPO

from slurm_gpufleet.common.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_quick_run_says_nothing():
    out, clock = io.StringIO(), Clock()
    p = Progress(out, quiet_s=3.0, clock=clock)
    for done in range(1, 5):
        clock.now = done * 0.5
        p(done, 4, "runs")
    p.close()
    assert out.getvalue() == ""


def test_a_log_gets_a_line_at_most_every_every_s_and_always_the_last():
    out, clock = io.StringIO(), Clock()
    p = Progress(out, quiet_s=1.0, every_s=10.0, clock=clock)
    for done in range(1, 31):
        clock.now = float(done)
        p(done, 30, "runs")
    lines = out.getvalue().splitlines()
    assert lines == ["runs: 1/30 done, 1 s", "runs: 11/30 done, 11 s", "runs: 21/30 done, 21 s",
                     "runs: 30/30 done, 30 s"]


def test_a_terminal_bar_is_redrawn_in_place_and_ended_before_what_follows():
    out, clock = Terminal(), Clock()
    p = Progress(out, quiet_s=0.0, clock=clock)
    clock.now = 5.0
    p(3, 10, "days")
    assert out.getvalue() == "\rdays: [#########.....................] 3/10 5 s"
    p.close()
    p.close()
    assert out.getvalue().endswith(" 5 s\n") and out.getvalue().count("\n") == 1
    p(10, 10, "days")   # the last count ends its own line: close adds none
    p.close()
    assert out.getvalue().endswith("10/10 5 s\n") and out.getvalue().count("\n") == 2


def test_a_rollout_event_is_a_bar_on_a_terminal_and_a_timestamped_line_in_a_log():
    term, log = Terminal(), io.StringIO()
    for stream in (term, log):
        Progress(stream).event(2, 4, "done=2 upgrading=1", "n3 drained", "r1 n3: drained")
    assert term.getvalue().startswith("\r[###############...............] 2/4 done=2 upgrading=1 | n3 drained")
    assert len(term.getvalue()) == 160   # "\r" and the line, padded so it leaves no tail behind
    assert log.getvalue().endswith(" r1 n3: drained (done=2 upgrading=1)\n")


def test_the_package_has_one_progress_and_one_percentile():
    defined: dict[str, list[str]] = {}
    for path in (REPO / "slurm_gpufleet").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name.lstrip("_") in ("Progress",
                                                                                              "percentile"):
                defined.setdefault(node.name.lstrip("_"), []).append(str(path.relative_to(REPO)))
    assert defined == {"Progress": ["slurm_gpufleet/common/progress.py"], "percentile": ["slurm_gpufleet/simulators/trials.py"]}
