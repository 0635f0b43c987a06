"""The seed-to-seed spread of a preset's scores (tools/seed_spread.py measures it):
where its summary lives, and reading it back for Part 4's table."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

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


def load_spread(preset: str, configs: dict) -> tuple[dict | None, str]:
    """(the preset's spread, '') if it was measured with these configs (model name
    -> RunConfig dict, the seed aside), else (None, why not)."""
    path = spread_path(preset)
    if not path.is_file():
        return None, f"not measured for preset {preset} ({path.name} is missing)"
    spread = json.loads(path.read_text())
    for name, cfg in configs.items():
        measured = spread["models"].get(name, {}).get("config")
        if measured is None or {**measured, "seed": 0} != {**cfg, "seed": 0}:
            return None, (
                f"{path.name} was measured with other settings of {name!r} than "
                f"this run's: run `{spread['command']}` again"
            )
    return spread, ""
