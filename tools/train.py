"""Train a preset of the notebook outside Jupyter; the same program runs under torchrun.

    python -m tools.train --preset cpu                     # Part 3's model
    python -m tools.train --preset ci --set steps=50 --set n_train=200
    python -m tools.train --preset cpu --set vocab='bpe' --set tie='all' --search beam
    python -m tools.train --preset ci --search beam --search-set alpha=1.0
    torchrun --standalone --nproc_per_node=2 -m tools.train --task copy --device cpu

It trains a task (`multi30k`, or Part 5's `copy` task) in a preset with any setting
changed by `--set key=value`, resumes an interrupted run, scores a Multi30k model with
sacreBLEU (the search named by `--search`, from the notebook's SEARCHES, its options
from `--search-set` checked against the search's record), and writes its
figures to a JSON file. The code it runs is the notebook's (the module
`annotated_transformer_lib` that nbexport.py generates from it), trained by the
pipeline's resumable run, so this trains exactly what the notebook trains.

Layers: this program parses the command line, checks what only it knows (the results
file, the device, torchrun's variables) before any work, and reports;
`pipeline.train` checks the checkpoint folder, honours `--fresh` (deleting only the
run's own checkpoint files) and holds the folder's lock. Any error ends in one
`error:` line (tools/errors.py). The results of a finished run are never lost: if
`--out` cannot be written, or holds the results of another run (their `ckpt_dir` says
whose they are), they go beside the checkpoints, or to standard output, and the
message says where.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import os
import sys
import time
from pathlib import Path

from atkit import config, runtime, searches
from atkit.files import (
    check_outputs,
    check_writable,
    writable_folder,
    write_text_atomic,
)
from tools.errors import UsageError, run_main

PROG = "python -m tools.train"
TASKS = ("multi30k", "copy")
# files of a run's folder that the results must not replace (besides its checkpoint
# files, atkit.checkpoints.RUN_FILES: its lock and probe)
RUN_FOLDER_EXTRA = (".lock", ".write-test.*.tmp")


def library():
    """The notebook's code, the module nbexport.py generates from it (imported
    here, not at the top: --help answers without loading torch)."""
    import annotated_transformer_lib

    return annotated_transformer_lib


def pipeline():
    """The pipeline that runs the notebook's code (imported when needed)."""
    import pipeline

    return pipeline


# ------------------------------------------------------------------ parsing


def parse_setting(text: str) -> tuple[str, object]:
    """'key=value' -> (key, value); the value is a Python literal, else a string.
    `inf`, `-inf` and `nan` are numbers (floats), as float() reads them, so that a
    setting refuses them as numbers out of range, not as text."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    if value.strip().lstrip("+-").lower() in ("inf", "infinity", "nan"):
        return key, float(value)
    return key, value


def add_set_option(parser: argparse.ArgumentParser) -> None:
    """The --set KEY=VALUE option (repeatable), shared by the tools."""
    parser.add_argument(
        "--set",
        dest="changes",
        action="append",
        default=[],
        type=parse_setting,
        metavar="KEY=VALUE",
        help="change a RunConfig or ModelConfig setting (repeatable)",
    )


def config_from_args(lib, preset, changes):
    """The RunConfig of `preset` with the --set changes; a setting the notebook
    refuses raises its ConfigError (the message names the setting)."""
    keys = [k for k, _ in changes]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise UsageError(f"--set {twice} given more than once")
    return pipeline().run_config(preset, **dict(changes))


def user_path(text: str) -> Path:
    """A path argument, with ~ expanded (the shell leaves `--ckpt-dir=~/runs` alone)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path")
    return Path(text).expanduser()


def file_path(text: str) -> Path:
    """A file name argument: one that ends in a slash names a folder."""
    if text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(
            f"{text!r} ends with a slash: a folder; give a file name, such as "
            f"{text}results.json"
        )
    return user_path(text)


def make_parser(searches=("greedy", "beam")) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Train a preset of the annotated Transformer; runs under torchrun "
        "too.",
    )
    p.add_argument("--task", choices=TASKS, default="multi30k")
    config.add_preset_option(p)
    add_set_option(p)
    p.add_argument(
        "--ckpt-dir",
        type=user_path,
        default=None,
        help="default: <checkpoints>/<preset>/<task>, where <checkpoints> is "
        "$AT_CHECKPOINTS or ./checkpoints",
    )
    p.add_argument(
        "--out",
        type=file_path,
        default=None,
        help="results JSON (default: results/<preset>-<task>.json, or results.json "
        "in --ckpt-dir when it is given)",
    )
    p.add_argument(
        "--fresh", action="store_true", help="delete this run's checkpoint files first"
    )
    p.add_argument("--max-steps", type=int, default=None, help="stop early (resumable)")
    p.add_argument(
        "--search",
        choices=searches,
        default="greedy",
        help="how the scores decode (the notebook's SEARCHES)",
    )
    p.add_argument(
        "--search-set",
        dest="search_options",
        action="append",
        default=[],
        type=parse_setting,
        metavar="KEY=VALUE",
        help="an option of the search, within the bounds of its record in SEARCHES "
        "(beam: beam_size, alpha); repeatable",
    )
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument(
        "--timeout-s",
        type=float,
        default=300.0,
        help="how long a collective may wait for a silent rank",
    )
    return p


# ------------------------------------------------------------------ checks


def check_out(out: Path, ckpt_dir: Path) -> Path:
    """The results file to write (the file that a symbolic link `out` points to: the
    link stays), or an error if it cannot be one; then its folder is created and a
    file is written and deleted in it, named as the results' temporary file will be
    (a read-only folder, or a name too long for the file system, fails here, not
    after the training)."""
    from atkit import checkpoints, data

    read = [("--ckpt-dir", p) for p in sorted(Path(ckpt_dir).glob("*.pt"))]
    read += [("the Multi30k file", p) for p in data.data_files()]
    (out,) = check_outputs([("--out", out)], read, writes="the results")
    try:
        if out.is_symlink() and out.exists():
            out = Path(os.path.realpath(out))
        is_dir = out.is_dir()
    except OSError as err:  # a name too long for the file system, say
        raise UsageError(
            f"--out {out} cannot be a file ({err.strerror or err}); give another name"
        ) from err
    if is_dir:
        raise UsageError(f"--out {out} is a folder; give a file name")
    check_writable(out.parent, "--out")
    if out.exists() and not out.is_file():
        raise UsageError(f"--out {out} is not a regular file; give another name")
    if out.exists() and not os.access(out, os.W_OK):
        raise UsageError(f"--out {out} cannot be written; give another file")
    real_out, real_ckpt = Path(os.path.realpath(out)), Path(os.path.realpath(ckpt_dir))
    if real_out == real_ckpt or real_out in real_ckpt.parents:
        raise UsageError(
            f"--out {out} is the checkpoint folder --ckpt-dir {ckpt_dir}, or a folder "
            "above it; give the results file another name"
        )
    if real_out.parent == real_ckpt and any(
        fnmatch.fnmatch(out.name, pattern)
        for pattern in (*checkpoints.RUN_FILES, *RUN_FOLDER_EXTRA)
    ):
        raise UsageError(
            f"--out {out} would replace a file of the run in --ckpt-dir {ckpt_dir}; "
            "give the results file another name"
        )
    other = results_owner(out)
    if other is not None and other != os.path.realpath(ckpt_dir):
        raise UsageError(
            f"--out {out} holds the results of the run in {other}; give this run "
            f"(--ckpt-dir {ckpt_dir}) another results file, or delete that one"
        )
    writable_folder(out.parent, "--out", out.name)
    return out


def results_owner(out: Path) -> str | None:
    """The checkpoint folder of the run whose results `out` holds (None: no such
    file, or one that does not say)."""
    try:
        owner = json.loads(out.read_text(encoding="utf-8")).get("ckpt_dir")
    except (OSError, ValueError, AttributeError):
        return None
    return owner if isinstance(owner, str) else None


def check_args(args, preset) -> None:
    """What only the command line knows, checked before anything is read, trained
    or removed: the results file, the device, torchrun's variables, the search."""
    import torch

    from atkit import checkpoints

    default_out = Path("results") / f"{preset}-{args.task}.json"
    if args.ckpt_dir is None:  # $AT_CHECKPOINTS is checked where it is used
        args.ckpt_dir = runtime.checkpoint_root(preset) / args.task
    else:  # one results file per run folder: two runs never share one
        # checked as itself first: a file given here is no fault of --out's
        checkpoints.check_ckpt_dir(args.ckpt_dir, "--ckpt-dir")
        default_out = args.ckpt_dir / "results.json"
    args.out = check_out(args.out or default_out, args.ckpt_dir)
    if not 0 < args.timeout_s < float("inf"):
        raise UsageError(f"--timeout-s {args.timeout_s}: give a number of seconds > 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda, but PyTorch sees no CUDA device here")
    if "WORLD_SIZE" in os.environ and "LOCAL_RANK" not in os.environ:
        raise UsageError("WORLD_SIZE is set but LOCAL_RANK is not: start with torchrun")
    keys = [k for k, _ in args.search_options]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise UsageError(f"--search-set {twice} given more than once")


def check_model_size(lib, model_cfg, n_src: int, n_tgt: int, device) -> None:
    """A model too large to train on `device` at all is refused naming its sizes,
    before it is built (PyTorch's own failure would name none): it is counted on the
    "meta" device, which holds no numbers."""
    with lib.torch.device("meta"):
        model = lib.build_model(model_cfg, n_src, n_tgt)
    m = model_cfg
    vocab = f"{n_src:,}" if n_src == n_tgt else f"{n_src:,} and {n_tgt:,}"
    runtime.check_model_memory(
        model,
        device,
        f"the model of N={m.N}, d_model={m.d_model}, d_ff={m.d_ff} and a "
        f"vocabulary of {vocab}",
    )


def search_from_args(lib, args):
    """The decoding function the scores use: the options are checked against the
    search's record in the notebook's SEARCHES (names and bounds)."""
    return lib.make_search(args.search, **dict(args.search_options))


# ------------------------------------------------------------------ the run


def train_cli(argv=None) -> int:
    import nbexport

    # the command line is read before torch and the notebook load (--help is quick)
    args = make_parser(nbexport.registry_names("SEARCHES")).parse_args(argv)
    lib = library()
    torch = lib.torch
    preset = args.preset or runtime.choose_preset()
    cfg = config_from_args(lib, preset, args.changes)
    check_args(args, preset)
    search = search_from_args(lib, args)  # checked for either task; copy: unused
    from atkit import launch

    world = None
    if "WORLD_SIZE" in os.environ:
        rank, size, local_rank, local_size, device = launch.setup_distributed(
            args.device, args.timeout_s
        )
        world = lib.DataParallel(rank, size, local_rank, local_size, device)
    else:
        device = (
            runtime.default_device()
            if args.device == "auto"
            else torch.device(args.device)
        )
        if device.type == "cuda" and device.index is None:  # name the GPU: cuda:0
            device = torch.device("cuda", torch.cuda.current_device())
    torch.set_num_threads(
        runtime.torch_threads(preset, world.local_size if world else 1)
    )
    is_main = world is None or world.is_main
    log = (lambda m: print(m, flush=True)) if is_main else (lambda m: None)
    pl = pipeline()
    data = lib.copy_task_data(cfg) if args.task == "copy" else pl.prepare_data(cfg)
    check_model_size(lib, cfg.model, len(data.vocab_src), len(data.vocab_tgt), device)
    model, history = pl.train(
        cfg,
        data,
        args.ckpt_dir,
        device,
        max_steps=args.max_steps,
        world=world,
        fresh=args.fresh,
        log=log,
    )
    status = 0
    if is_main:
        results = run_results(lib, args, preset, cfg, data, model, history, device)
        if history["best_step"] is not None and args.task == "multi30k":
            found = scores(lib, args.ckpt_dir, history, data, cfg, search, device)
            results.update(found)
        status = write_results(results, args.out, args.ckpt_dir)
    if world:
        launch.finish_distributed()
    return status


def run_results(lib, args, preset, cfg, data, model, history, device) -> dict:
    """What a reader would compare runs by: the config, the parameter count, the
    history and throughput."""
    import torch

    seconds = max(history["train_time_s"], 1e-9)
    return {
        "task": args.task,
        "preset": preset,
        "ckpt_dir": os.path.realpath(args.ckpt_dir),  # whose results these are
        "config": cfg.to_dict(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": history["steps"][-1] if history["steps"] else 0,
        "best_step": history["best_step"],
        "history": {
            k: history[k] for k in ("steps", "train_loss", "val_loss", "time_s")
        },
        "train_time_s": round(seconds, 3),
        "processes": history["world_size"],
        "tokens_per_s_per_process": round(
            history["tokens"] / seconds / history["world_size"]
        ),
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
    }


def scores(lib, ckpt_dir, history, data, cfg, search, device) -> dict:
    """sacreBLEU of the best snapshot on each evaluation split, with `search`."""
    best = pipeline().best_model(ckpt_dir, history, device)
    out = {"search": searches.search_name(search, lib.SEARCHES)}
    for split in lib.EVAL_SPLITS:
        r = lib.bleu(best, data, split, search=search, decode_tokens=cfg.decode_tokens)
        out[f"bleu_{split}"] = round(r["bleu"], 2)
        out["sacrebleu_signature"] = r["signature"]
    return out


def write_results(results: dict, out: Path, ckpt_dir: Path) -> int:
    """Write the results to `out` (atomically). If that fails (a full disk, a folder
    gone read-only since the start), to a file beside the checkpoints, else to
    standard output: a finished run's figures are never lost. Returns the exit
    status: 0, or 2 when they did not go to `out`."""
    text = json.dumps(results, indent=2) + "\n"
    summary = {k: v for k, v in results.items() if k.startswith(("bleu_", "tokens_"))}
    other = results_owner(out)
    mine = results.get("ckpt_dir", os.path.realpath(ckpt_dir))
    if other is not None and other != mine:  # another run finished first
        first = f"{out}, which now holds the results of the run in {other}"
    else:
        try:
            write_text_atomic(out, text)
            print(json.dumps({**summary, "best_step": results["best_step"]}), "->", out)
            return 0
        except OSError as err:
            first = f"{out}: {err.strerror or err}"
    fallback = Path(ckpt_dir) / f"results-{time.strftime('%Y%m%d-%H%M%S')}.json"
    try:
        write_text_atomic(fallback, text)
        where = f"they are in {fallback} instead"
    except OSError as err:
        print(text, flush=True)
        where = (
            f"nor beside the checkpoints ({fallback}: {err.strerror or err}); they "
            "are printed above"
        )
    print(
        f"{PROG}: error: the run finished, but its results could not be written to "
        f"{first}; {where}",
        file=sys.stderr,
        flush=True,
    )
    return 2


def main(argv=None) -> int:
    """The program: train_cli with its errors as one line each, and under torchrun
    an exit that skips the interpreter's teardown (see atkit.launch.worker_exit)."""
    status = run_main(lambda: train_cli(argv), PROG)
    if "WORLD_SIZE" not in os.environ:
        return status
    from atkit import launch

    launch.worker_exit(status)


if __name__ == "__main__":
    sys.exit(main())
