"""The seed-to-seed spread of a preset's scores (tools/seed_spread.py measures it):
where its summary lives, and reading it back for Part 4's table."""

from __future__ import annotations

import copy
import statistics
from pathlib import Path

from atkit.settings import current_config, unread

RUNS = Path(__file__).resolve().parents[1] / "runs"
# the scores a spread summarises, each over the seeds
SCORES = ("bleu_test_2016_flickr", "bleu_val")

_NUMBER = {"type": "number"}
_SUMMARY = {  # one score over the seeds: `summary()`
    "type": "object",
    "required": ["values", "mean", "min", "max", "range"],
    "properties": {
        "values": {"type": "array", "items": _NUMBER, "minItems": 1},
        "mean": _NUMBER,
        "min": _NUMBER,
        "max": _NUMBER,
        "range": {"type": "number", "minimum": 0},
    },
}
_TEXT = {"type": "string"}
# runs/seed-spread-<preset>.json, as tools/seed_spread.py writes it; required is what
# its readers read (load_spread, Part 4's table and report, the tool itself)
SPREAD_SCHEMA = {
    "type": "object",
    "required": ["machine", "torch", "precision", "command", "models"],
    "properties": {
        **{key: _TEXT for key in ("preset", "machine", "torch", "precision")},
        "command": {"type": "string", "pattern": "^python -m tools.seed_spread"},
        "models": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "type": "object",
                "required": ["seeds", "config", SCORES[0]],
                "properties": {
                    "seeds": {
                        "type": "array",
                        "items": {"type": "integer", "minimum": 0},
                        "minItems": 2,
                    },
                    "steps": {"type": "integer", "minimum": 0},
                    "config": {
                        "type": "object",
                        "required": ["model"],
                        "properties": {"model": {"type": "object"}},
                    },
                    **{key: _SUMMARY for key in SCORES},
                },
            },
        },
    },
}


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


def read_spread(path: Path, preset: str, fix: str | None = None) -> dict:
    """The spread summary of `preset` at `path`; a file that is not one (not JSON, a
    conflict marker, a score that is no number, a key missing) is a
    MalformedFileError naming it and what to do (by default: measure it again). A
    missing file raises FileNotFoundError."""
    from atkit.records import read_json

    again = f"python -m tools.seed_spread --preset {preset}"
    return read_json(path, SPREAD_SCHEMA, fix=fix or f"measure it again with `{again}`")


def same_settings(cls, a: dict, b: dict) -> bool:
    """Do two config dicts of dataclass `cls` (the notebook's RunConfig) train the
    same model, the seed aside? Settings that a run never reads (a word-level run's
    BPE size: declared on the field) do not count, nor do retired model settings at
    the value that changed nothing (a summary written before they were retired)."""
    a, b = (current_config(copy.deepcopy(c)) for c in (a, b))
    if unread(cls, a) != unread(cls, b):
        return False
    drop = {"seed", *unread(cls, a)}
    return {k: v for k, v in a.items() if k not in drop} == {
        k: v for k, v in b.items() if k not in drop
    }


def load_spread(
    preset: str, configs: dict, cls, precision: str
) -> tuple[dict | None, str]:
    """(the preset's spread, '') if it was measured with these configs (model name
    -> config dict of `cls`, the seed aside) in this `precision` ("fp32", "bf16",
    "fp16": what the run computes in), else (None, why not). A spread measured in
    another precision is refused: its numbers are another machine's. A file that is
    no such summary is a MalformedFileError naming it (`read_spread`)."""
    path = spread_path(preset)
    if not path.is_file():
        return None, f"not measured for preset {preset} ({path.name} is missing)"
    spread = read_spread(path, preset)
    if spread.get("precision") != precision:
        return None, (
            f"{path.name} was measured in {spread.get('precision')} on "
            f"{spread.get('machine')}, and this run computes in {precision}: run "
            f"`{spread['command']}` on this machine"
        )
    for name, cfg in configs.items():
        measured = spread["models"].get(name, {}).get("config")
        if measured is None or not same_settings(cls, measured, cfg):
            return None, (
                f"{path.name} was measured with other settings of {name!r} than "
                f"this run's: run `{spread['command']}` again"
            )
    return spread, ""
