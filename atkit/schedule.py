"""A run's learning-rate schedule, read from its config: the notebook's `rate` (Part 2:
eq. 3 times `factor`, with the optional linear cool-down) at a RunConfig's settings.
Part 4's table asks where a run's cool-down begins, the highest rate its schedule
reaches, its rates at some steps and its last rate. atkit never imports the notebook:
`rate` comes in as an argument."""

from __future__ import annotations

import math


def schedule_of(c, rate):
    """step -> the rate of RunConfig `c` at that step (steps count from 1)."""
    return lambda s: rate(s, c.model.d_model, c.factor, c.warmup, c.steps, c.cooldown)


def cooldown_start(c) -> int:
    """The last step of a RunConfig `c` before its cool-down: eq. 3's rate up to it."""
    return math.floor(round(c.steps * (1 - c.cooldown), 6))


def end_rate(c, rate) -> float:
    """The rate of a RunConfig `c`'s last step."""
    return schedule_of(c, rate)(c.steps)


def reached_peak(c, rate) -> float:
    """The highest rate a RunConfig `c`'s schedule reaches."""
    at = schedule_of(c, rate)
    return max(at(s) for s in range(1, c.steps + 1))


def rates_at(c, rate, steps) -> list[float]:
    """The rates of a RunConfig `c` at some steps."""
    at = schedule_of(c, rate)
    return [at(s) for s in steps]
