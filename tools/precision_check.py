"""Does training in low precision cost quality? Part 3's model trained twice, the same
preset and seed: once in the precision that precision="auto" picks on this machine and
once in float32; the validation loss at every evaluation and the sacreBLEU scores side
by side. The tests check that one step in low precision stays close to one in float32;
only whole runs show what low precision does to the scores.

    python -m tools.precision_check                    # the hardware's preset
    python -m tools.precision_check --preset ci --set steps=60
    python -m tools.precision_check --precision bf16   # bf16, whatever "auto" picks

"auto" means bfloat16 on GPUs that compute it natively (sm80 and up) and on CPUs with
bfloat16 instructions (AMX, AVX512-BF16), float16 with a GradScaler on older GPUs (a
T4, a V100), and float32 on other CPUs (atkit.runtime.auto_precision). Where it means
float32, the notebook trains in float32 and there is nothing to compare: the script
says so and stops (exit status 0) unless --precision names a precision to compare.

The runs go to <checkpoint root>/<preset>/precision-<p>/ (checkpoints/, or
$AT_CHECKPOINTS; a finished run is loaded, not trained again) and their results to
results/<preset>-precision-<p>.json, written by the training program (tools.train).
Settings and folders are checked before the first run starts; a failure ends in one
`error:` line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from atkit import config, files, runtime
from atkit.prose import say
from tools import errors
from tools import train as cli

PROG = "python -m tools.precision_check"
LOW = ("auto", "bf16", "fp16")  # what --precision may name


def compared_precision(device, asked: str = "auto") -> tuple[str, str]:
    """(the precision to compare with float32 on `device`, why that one)."""
    if asked != "auto":
        return asked, f"--precision {asked}"
    name, why = runtime.auto_precision(device)
    return name, f'precision="auto" is {name} on {device}: {why}'


def run_paths(preset: str, precision: str) -> tuple[Path, Path]:
    """(checkpoint folder, results file) of one of the two runs."""
    folder = runtime.checkpoint_root(preset) / f"precision-{precision}"
    return folder, Path("results") / f"{preset}-precision-{precision}.json"


def figure(value) -> str:
    """A results figure for the table: '-' where the run has none."""
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    config.add_preset_option(p)
    cli.add_set_option(p)
    p.add_argument(
        "--precision",
        choices=LOW,
        default="auto",
        help='the precision to compare with fp32 (default: what "auto" picks here)',
    )
    args = p.parse_args(argv)
    if any(key == "precision" for key, _ in args.changes):
        p.error("--set precision: this script sets it; use --precision instead")
    try:
        preset = args.preset or runtime.choose_preset()
    except ValueError as err:
        p.error(f"{err}, or give --preset")
    lib = cli.library()
    cli.config_from_args(lib, preset, args.changes)  # refuses a bad --set now
    device = runtime.default_device()
    low, why = compared_precision(device, args.precision)
    if low == "fp32":
        say(
            f"Nothing to compare: {why}, so the notebook trains in float32 here, as "
            "the reference run does. To see what bfloat16 costs, "
            "run this on a machine with bfloat16 (a GPU from sm80, a CPU with AMX "
            "or AVX512-BF16), or give --precision bf16 (emulated here, and slow)."
        )
        return 0
    from atkit import fast

    fast.choose_precision(device, low)  # refuses fp16 on a CPU, bf16 on a T4
    runs = {name: run_paths(preset, name) for name in (low, "fp32")}
    for folder, out in runs.values():  # both runs' folders, before the first trains
        files.writable_folder(folder, "checkpoint folder")
        files.writable_folder(out.parent, "results folder", out.name)
    print(f"comparing {low} with fp32 ({why})", flush=True)
    sets = [x for k, v in args.changes for x in ("--set", f"{k}={v!r}")]
    results = {}
    for precision, (folder, out) in runs.items():
        argv_run = ["--preset", preset, "--ckpt-dir", str(folder), "--out", str(out)]
        argv_run += ["--set", f"precision={precision!r}", *sets]
        print(
            f"--- {precision}: python -m tools.train {' '.join(argv_run)}", flush=True
        )
        status = cli.train_cli(argv_run)
        if status:
            return status  # tools.train printed its error: line
        results[precision] = json.loads(out.read_text())
    a, b = results[low], results["fp32"]
    print(f"\npreset {preset}, Part 3's model; validation loss at each evaluation")
    print(f"{'step':>6} {low:>8} {'fp32':>8} {'diff':>8}")
    steps, val_a, val_b = (
        a["history"]["steps"],
        a["history"]["val_loss"],
        b["history"]["val_loss"],
    )
    for step, x, y in zip(steps, val_a, val_b, strict=True):
        print(f"{step:>6} {x:>8.4f} {y:>8.4f} {x - y:>+8.4f}")
    print(f"{'':<24} {low:>8} {'fp32':>8}")
    keys = [f"bleu_{split}" for split in lib.EVAL_SPLITS]
    for key in (*keys, "tokens_per_s_per_process", "train_time_s"):
        print(f"{key:<24} {figure(a.get(key)):>8} {figure(b.get(key)):>8}")
    return 0


if __name__ == "__main__":
    sys.exit(errors.run_main(main, PROG))
