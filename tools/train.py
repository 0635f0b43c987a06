"""Train a Multi30k preset outside Jupyter and write its figures to a JSON file.

    python tools/train.py --preset cpu                 # results/cpu.json
    python tools/train.py --preset ci --set epochs=2 --set n_train=200
    python tools/train.py --preset cpu --set time_budget_s=900 --fresh

The code comes from the notebook's library cells (via nbexport), so this script
trains exactly what the notebook trains. An interrupted run resumes from
checkpoints/<preset>/last.pt unless --fresh is given.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import platform
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nbexport  # noqa: E402


def parse_override(text: str) -> tuple[str, object]:
    """'key=value' -> (key, value); value is a Python literal or else a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--preset", default=None, help="ci, cpu or gpu (default: PRESET)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        type=parse_override,
        metavar="KEY=VALUE",
        help="override a Multi30kConfig field (repeatable)",
    )
    parser.add_argument("--notebook", type=Path, default=nbexport.NOTEBOOK)
    parser.add_argument(
        "--ckpt-dir", type=Path, default=None, help="default: checkpoints/<preset>"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="default: results/<preset>.json"
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="delete the preset's checkpoints before training",
    )
    args = parser.parse_args(argv)

    lib = nbexport.load(args.notebook)
    preset = args.preset or lib.PRESET
    cfg = lib.multi30k_config(preset, **dict(args.overrides))
    ckpt_dir = args.ckpt_dir or ROOT / "checkpoints" / preset
    out = args.out or ROOT / "results" / f"{preset}.json"
    if args.fresh and ckpt_dir.exists():
        shutil.rmtree(ckpt_dir)

    print(f"preset {preset}: {cfg}", flush=True)
    data = lib.prepare_multi30k(cfg)
    model, history = lib.train_multi30k(cfg, data, ckpt_dir)
    start = time.perf_counter()
    scores = lib.evaluate_multi30k(model, data, cfg)
    results = {
        "preset": preset,
        "config": {  # JSON has no infinity: an unlimited budget is null
            k: None if v == float("inf") else v
            for k, v in dataclasses.asdict(cfg).items()
        },
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab": {"de": len(data.vocab_src), "en": len(data.vocab_tgt)},
        "epochs": len(history["train_loss"]),
        "steps": history["steps"][-1] if history["steps"] else 0,
        "train_time_s": round(history["train_time_s"], 3),
        "tokens_per_s": round(history["tokens"] / max(history["train_time_s"], 1e-9)),
        "train_loss": history["train_loss"],
        "val_loss": history["val_loss"],
        "bleu_val": round(scores["val"]["bleu"], 2),
        "bleu_test_2016_flickr": round(scores["test_2016_flickr"]["bleu"], 2),
        "sacrebleu_signature": scores["signature"],
        "eval_time_s": round(time.perf_counter() - start, 1),
        "device": str(lib.DEVICE),
        "torch_threads": lib.torch.get_num_threads(),
        "machine": platform.platform(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    summary = {
        k: results[k]
        for k in (
            "bleu_val",
            "bleu_test_2016_flickr",
            "train_time_s",
            "tokens_per_s",
            "parameters",
        )
    }
    print(json.dumps(summary), f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
