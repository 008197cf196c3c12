"""A pynvml whose nvmlInit runs a C call that holds the interpreter for minutes (a backtracking pattern
over a long line, as a reader's could): no thread of the process runs meanwhile, the watchdog's timer
included."""

import re


def nvmlInit():
    re.match(r"(a+)+$", "a" * 40 + "b")


def nvmlShutdown():
    pass
