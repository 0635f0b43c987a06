"""Does bfloat16 training cost quality? Part 3's model trained twice, the same preset
and seed, once in bfloat16 and once in float32; the validation loss at every
evaluation and the sacreBLEU scores side by side.

    python -m tools.precision_check                 # the cpu preset (about 20 min here)
    python -m tools.precision_check --preset ci --set steps=60

The runs go to checkpoints/<preset>/precision-<bf16|fp32>/ (a finished run is loaded,
not trained again) and their results to results/<preset>-precision-<p>.json, written by
the notebook's training program (atkit.cli).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from atkit import runtime
from tools import train as cli


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=runtime.PRESET_NAMES, default=None)
    cli.add_set_option(p)
    args = p.parse_args(argv)
    preset = args.preset or runtime.choose_preset()
    sets = [x for k, v in args.changes for x in ("--set", f"{k}={v!r}")]
    results = {}
    for precision in ("bf16", "fp32"):
        folder = Path("checkpoints") / preset / f"precision-{precision}"
        out = Path("results") / f"{preset}-precision-{precision}.json"
        argv_run = ["--preset", preset, "--ckpt-dir", str(folder), "--out", str(out),
                    "--set", f"precision={precision!r}", *sets]  # fmt: skip
        print(
            f"--- {precision}: python -m tools.train {' '.join(argv_run)}", flush=True
        )
        status = cli.train_cli(argv_run)
        if status:
            return status
        results[precision] = json.loads(out.read_text())
    a, b = results["bf16"], results["fp32"]
    print(f"\npreset {preset}, Part 3's model; validation loss at each evaluation")
    print(f"{'step':>6} {'bf16':>8} {'fp32':>8} {'diff':>8}")
    for step, x, y in zip(a["history"]["steps"], a["history"]["val_loss"],
                          b["history"]["val_loss"], strict=True):  # fmt: skip
        print(f"{step:>6} {x:>8.4f} {y:>8.4f} {x - y:>+8.4f}")
    print(f"{'':>6} {'bf16':>8} {'fp32':>8}")
    for key in ("bleu_val", "bleu_test_2016_flickr", "tokens_per_s_per_process"):
        print(f"{key:<24} {a[key]:>8} {b[key]:>8}")
    print(f"{'train_time_s':<24} {a['train_time_s']:>8.0f} {b['train_time_s']:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
