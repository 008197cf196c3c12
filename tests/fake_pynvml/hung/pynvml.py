"""A pynvml whose nvmlInit never returns, as a wedged driver does: the call sits in C (libc sleep via
ctypes, which releases the GIL like every real NVML call)."""

import ctypes


def nvmlInit():
    ctypes.CDLL(None).sleep(3600)


def nvmlShutdown():
    pass
