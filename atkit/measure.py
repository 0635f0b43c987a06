"""Counting and timing one call: the FLOPs PyTorch counts for it, and its fastest
time over a few repeats (the minimum is robust to a busy machine)."""

from __future__ import annotations

import time


def flops(fn, *args) -> int:
    """The floating-point operations of fn(*args), without gradients."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        fn(*args)
    return counter.get_total_flops()


def fastest(fn, *args, repeats=5) -> float:
    """The fastest of `repeats` calls of fn(*args) in seconds, after one warm-up,
    without gradients."""
    import torch

    best = float("inf")
    with torch.no_grad():
        fn(*args)  # warm-up
        for _ in range(repeats):
            start = time.perf_counter()
            fn(*args)
            best = min(best, time.perf_counter() - start)
    return best
