"""The seed-to-seed spread of a preset's scores (tools/seed_spread.py measures it):
where its summary lives, and reading it back for Part 4's table."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from atkit.resume import UNREAD

RUNS = Path(__file__).resolve().parents[1] / "runs"


def spread_path(preset: str) -> Path:
    return RUNS / f"seed-spread-{preset}.json"


def summary(values: list[float]) -> dict:
    """Mean, min, max and range of one score over the seeds."""
    return {
        "values": values,
        "mean": round(statistics.fmean(values), 2),
        "min": min(values),
        "max": max(values),
        "range": round(max(values) - min(values), 2),
    }


def same_settings(a: dict, b: dict) -> bool:
    """Do two RunConfig dicts train the same model, the seed aside? Settings that
    their vocabulary kind never reads (a word-level run's BPE size) do not count."""
    if a.get("vocab") != b.get("vocab"):
        return False
    drop = {"seed", *UNREAD.get(a.get("vocab"), ())}
    return {k: v for k, v in a.items() if k not in drop} == {
        k: v for k, v in b.items() if k not in drop
    }


def load_spread(preset: str, configs: dict) -> tuple[dict | None, str]:
    """(the preset's spread, '') if it was measured with these configs (model name
    -> RunConfig dict, the seed aside), else (None, why not)."""
    path = spread_path(preset)
    if not path.is_file():
        return None, f"not measured for preset {preset} ({path.name} is missing)"
    spread = json.loads(path.read_text())
    for name, cfg in configs.items():
        measured = spread["models"].get(name, {}).get("config")
        if measured is None or not same_settings(measured, cfg):
            return None, (
                f"{path.name} was measured with other settings of {name!r} than "
                f"this run's: run `{spread['command']}` again"
            )
    return spread, ""
