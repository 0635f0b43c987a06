"""How much does a score move with the seed alone? Part 3's model and the full
recipe's model of Part 4, each trained with several seeds (same preset, data and
steps), scored with sacreBLEU (greedy, the best snapshot), summarised in a JSON file
that is committed and that Part 4's table reads.

    python -m tools.seed_spread --preset cpu              # seeds 0 1 2
    python -m tools.seed_spread --preset ci --seeds 0 1   # a quick look

Every run trains into a folder of its own, <checkpoints>/<preset>/seeds/<model>-<seed>
(<checkpoints>: $AT_CHECKPOINTS or ./checkpoints), never into the notebook's: the
notebook reads only the summary. Each run is the notebook's training program
(tools/train.py). The summary records the precision the runs computed in (what
precision="auto" gives on this machine), and Part 4 refuses a summary made in another.
A model that the summary already holds with the same seeds and settings, on the same
machine, torch and precision, is kept as it is: a setting that the model never reads
(the BPE size, for Part 3's word-level model) trains nothing again. --rerun measures
all.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from atkit import config, runtime
from atkit.config import RunConfig
from atkit.files import check_outputs, writable_folder, write_text_atomic
from atkit.records import MalformedFileError, read_json
from atkit.seeds import SCORES, read_spread, same_settings, spread_path, summary
from atkit.settings import ConfigError
from tools import train
from tools.errors import UsageError, run_main

# the models whose spread the table needs: (name, folder name, --set changes)
MODELS = (
    ("part3", "part3", []),
    ("full recipe", "full-recipe", ["--set", "vocab='bpe'", "--set", "tie='all'"]),
)
# what this program reads of a run's results file (tools/train.py writes it)
RESULTS_SCHEMA = {
    "type": "object",
    "required": ["preset", "config", "steps", "history", *SCORES],
    "properties": {
        "preset": {"type": "string"},
        "config": {"type": "object"},
        "steps": {"type": "integer"},
        "history": {
            "type": "object",
            "properties": {"steps": {"type": "array", "items": {"type": "integer"}}},
        },
        **{key: {"type": "number"} for key in SCORES},
    },
}


def cpu_name() -> str:
    """The processor's name as Linux reports it, else the platform's."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def wanted_config(preset: str, seed: int, sets: list[str]) -> dict:
    """The RunConfig dict that the preset with these --set changes gives."""
    changes = dict(train.parse_setting(text) for text in sets[1::2])
    return train.pipeline().run_config(preset, seed=seed, **changes).to_dict()


def finished(res: Path, preset: str, seed: int, sets: list[str]) -> dict | None:
    """The results file `res` of a finished run with exactly the settings this
    program asks for (its training program writes it last), else None."""
    try:  # a file that is no such record is trained again (and written anew)
        done = read_json(res, RESULTS_SCHEMA)
    except (OSError, MalformedFileError):
        return None
    wanted = wanted_config(preset, seed, sets)
    steps = done.get("history", {}).get("steps") or [None]
    config = done.get("config") or {}
    ok = (
        done.get("preset") == preset
        and config.get("seed") == seed
        and same_settings(RunConfig, config, wanted)
    )
    return done if ok and steps[-1] == wanted["steps"] else None


def measured(old: dict | None, where: dict, seeds: list[int], sets: list[str], name):
    """What the summary `old` holds for model `name` if it was measured with these
    seeds and settings (those the model never reads aside) and `where` (preset,
    machine, torch, precision) matches, else None."""
    entry = (old or {}).get("models", {}).get(name)
    same_place = all(old.get(k) == v for k, v in where.items()) if old else False
    if not entry or not same_place or entry.get("seeds") != seeds:
        return None
    wanted = wanted_config(where["preset"], 0, sets)
    return entry if same_settings(RunConfig, entry["config"], wanted) else None


def run_paths(root: Path, preset: str, folder: str, seed: int) -> tuple[Path, Path]:
    """(checkpoint folder, results file) of one seed's run."""
    ckpt = root / "seeds" / f"{folder}-{seed}"
    return ckpt, Path("results") / f"{preset}-seed-{folder}-{seed}.json"


def run_files(root: Path, preset: str, seeds) -> list[tuple[str, Path]]:
    """What the runs write and this program reads back, as (what, path): the summary
    may be none of them (atkit.files.check_outputs)."""
    found = []
    for _, folder, _ in MODELS:
        for seed in seeds:
            ckpt, res = run_paths(root, preset, folder, seed)
            found += [(f"seed {seed}'s results", res)]
            found += [(f"seed {seed}'s checkpoint", ckpt / "last.pt")]
    return found


def read_summary(path: Path, preset: str) -> dict | None:
    """The summary this program wrote to `path` before (None: none there). One that
    cannot be read is refused naming it, before any training: it is committed, and
    writing over it unread would hide what happened to it."""
    try:
        return read_spread(
            path,
            preset,
            fix="give --rerun to measure every seed again and write a new one",
        )
    except FileNotFoundError:
        return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    config.add_preset_option(p)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument(
        "--out", type=Path, default=None, help="default: runs/seed-spread-<preset>.json"
    )
    p.add_argument(
        "--rerun",
        action="store_true",
        help="train or evaluate every run again, even where its results file or the "
        "summary is up to date",
    )
    args = p.parse_args(argv)
    preset = args.preset or runtime.choose_preset()
    if len(set(args.seeds)) < 2 or min(args.seeds) < 0:
        p.error(f"--seeds {args.seeds}: give at least two different seeds >= 0")
    for seed in args.seeds:  # every run's settings, before the first one trains
        for _, _, sets in MODELS:
            try:
                wanted_config(preset, seed, sets)
            except ConfigError as err:
                raise UsageError(f"--seeds {seed}: {err}") from None
    out = args.out or spread_path(preset)
    root = runtime.checkpoint_root(preset)
    (out,) = check_outputs([("--out", out)], run_files(root, preset, args.seeds))
    if out.is_dir():
        p.error(f"--out {out} is a folder; give a file name")
    writable_folder(out.parent, "--out", out.name)  # before hours of training
    command = f"python -m tools.seed_spread --preset {preset} --seeds " + " ".join(
        map(str, args.seeds)
    )
    import torch

    where = {
        "preset": preset,
        "machine": f"{os.cpu_count()} CPU cores, {cpu_name()}",
        "torch": torch.__version__.split("+")[0],
        # what precision="auto" gives here: a CPU's name may hide whether it has
        # bfloat16 (two "AMD EPYC" machines, one with and one without, trained apart)
        "precision": runtime.auto_precision(runtime.default_device())[0],
    }
    old = None if args.rerun else read_summary(out, preset)
    models = {}
    for name, folder, sets in MODELS:
        entry = measured(old, where, args.seeds, sets, name)
        if entry is not None:  # e.g. a word-level model when only bpe_size changed
            print(
                f"--- {name}: {out} holds seeds {args.seeds} with these settings",
                flush=True,
            )
            models[name] = entry
            continue
        runs = []
        for seed in args.seeds:
            ckpt, res = run_paths(root, preset, folder, seed)
            argv_run = [
                "--preset",
                preset,
                "--ckpt-dir",
                str(ckpt),
                "--out",
                str(res),
                "--set",
                f"seed={seed}",
                *sets,
            ]
            done = None if args.rerun else finished(res, preset, seed, sets)
            if done is not None:
                print(
                    f"--- {name}, seed {seed}: {res} holds the finished run "
                    "with these settings",
                    flush=True,
                )
                runs.append(done)
                continue
            print(
                f"--- {name}, seed {seed}: python -m tools.train {' '.join(argv_run)}",
                flush=True,
            )
            status = train.train_cli(argv_run)
            if status:
                return status
            runs.append(read_json(res, RESULTS_SCHEMA))
        models[name] = {
            "seeds": args.seeds,
            "steps": runs[0]["steps"],
            "config": runs[0]["config"],
            **{key: summary([r[key] for r in runs]) for key in SCORES},
        }
    result = {**where, "command": command, "models": models}
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, json.dumps(result, indent=2) + "\n")
    for name, m in models.items():
        t = m["bleu_test_2016_flickr"]
        print(
            f"{name}: test_2016 BLEU {t['values']} (mean {t['mean']}, range "
            f"{t['range']})"
        )
    print("->", out)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, "python -m tools.seed_spread"))
