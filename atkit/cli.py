"""The notebook's training program for a terminal, and for torchrun's workers.

    python -m tools.train --preset cpu                  # Part 3's model
    python -m tools.train --preset ci --set steps=50 --set n_train=200
    torchrun --standalone --nproc_per_node=2 -m tools.train --task copy --device cpu

It trains a task (`multi30k`, or Part 5's `copy` task) in a preset with any setting
changed by `--set key=value`, resumes an interrupted run, scores a Multi30k model with
sacreBLEU, and writes its figures to a JSON file (atomically). Under torchrun it joins
the process group and gives each process its share of the CPU cores. Every setting and
flag is checked before anything is read or removed; `--fresh` deletes only the files a
run writes (its checkpoints), never the folder or anything else in it. The code it runs
is the notebook's, imported from the module that nbexport.py generates.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fnmatch
import json
import os
import sys
from pathlib import Path

from atkit import checkpoints, runtime
from atkit.data import DataUnavailableError
from atkit.files import (
    FolderBusyError,
    check_writable,
    writable_folder,
    write_text_atomic,
)
from atkit.settings import ConfigError, check_setting


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


def config_from_args(lib, parser, preset, changes):
    """The RunConfig of `preset` with the --set changes, or a parser error."""
    keys = [k for k, _ in changes]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        parser.error(f"--set {twice} given more than once")
    try:
        return lib.run_config(preset, **dict(changes))
    except (ConfigError, TypeError) as err:
        parser.error(str(err))


def library():
    import nbexport

    return nbexport.load()


TASKS = ("multi30k", "copy")


def user_path(text: str) -> Path:
    """A path argument, with ~ expanded (the shell leaves `--ckpt-dir=~/runs` alone)."""
    return Path(text).expanduser()


def file_path(text: str) -> Path:
    """A file name argument: one that ends in a slash names a folder."""
    if text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(
            f"{text!r} ends with a slash: a folder; give a file name, such as "
            f"{text}results.json"
        )
    return user_path(text)


# files of a run's folder that results must not replace (its lock and probe as well)
RUN_FOLDER_FILES = (*checkpoints.RUN_FILES, ".lock", ".write-test.*.tmp")


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tools.train",
        description="Train a preset of the annotated Transformer; runs under torchrun "
        "too.",
    )
    p.add_argument("--task", choices=TASKS, default="multi30k")
    p.add_argument(
        "--preset",
        choices=runtime.PRESET_NAMES,
        default=None,
        help="default: $AT_PRESET, else by hardware",
    )
    add_set_option(p)
    p.add_argument(
        "--ckpt-dir",
        type=user_path,
        default=None,
        help="default: checkpoints/<preset>/<task>",
    )
    p.add_argument(
        "--out",
        type=file_path,
        default=None,
        help="results JSON (default: results/<preset>-<task>.json)",
    )
    p.add_argument(
        "--fresh", action="store_true", help="delete this run's checkpoint files first"
    )
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument(
        "--timeout-s",
        type=float,
        default=300.0,
        help="how long a collective may wait for a silent rank",
    )
    return p


def check_args(p, args, preset) -> None:
    """Every flag checked before anything is read, trained or removed."""
    try:
        check_setting("train", "max_steps", args.max_steps, int, low=1, optional=True)
        check_setting("train", "timeout_s", args.timeout_s, float, above=0)
    except ConfigError as err:
        p.error(str(err))
    if args.ckpt_dir is not None and str(args.ckpt_dir) in ("", "."):
        p.error("--ckpt-dir is empty: give a folder for the run's checkpoints")
    ckpt_dir = args.ckpt_dir or Path("checkpoints") / preset / args.task
    out = args.out or Path("results") / f"{preset}-{args.task}.json"
    try:
        checkpoints.check_ckpt_dir(ckpt_dir)
    except (OSError, ValueError) as err:
        message = path_error("--ckpt-dir", err)  # ours say ckpt_dir, as train()'s
        if message.startswith("ckpt_dir"):
            message = "--ckpt-dir" + message.removeprefix("ckpt_dir")
        p.error(message)
    try:
        out = check_out(out, ckpt_dir)
    except (OSError, ValueError) as err:
        p.error(path_error("--out", err))
    if args.device == "cuda" and not runtime.torch.cuda.is_available():
        p.error("--device cuda, but PyTorch sees no CUDA device here")
    if "WORLD_SIZE" in os.environ and "LOCAL_RANK" not in os.environ:
        p.error("WORLD_SIZE is set but LOCAL_RANK is not: start workers with torchrun")
    args.ckpt_dir, args.out = ckpt_dir, out


def path_error(flag: str, err: Exception) -> str:
    """The message of a refused path: ours, or the system's error (a name too long,
    a loop of links) with the flag in front."""
    if isinstance(err, OSError) and str(err).startswith("[Errno"):
        return f"{flag} {err.filename}: {err.strerror}; give another path"
    return str(err)


def check_out(out: Path, ckpt_dir: Path) -> Path:
    """The results file to write (the file that a symbolic link `out` points to: the
    link stays), or an error if it cannot be one."""
    if out.is_symlink() and out.exists():
        out = Path(os.path.realpath(out))
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; give a file name")
    check_writable(out.parent, "--out")
    if out.exists() and not out.is_file():
        raise ValueError(f"--out {out} is not a regular file; give another name")
    if out.exists() and not os.access(out, os.W_OK):
        raise PermissionError(f"--out {out} cannot be written")
    real_out, real_ckpt = Path(os.path.realpath(out)), Path(os.path.realpath(ckpt_dir))
    if real_out == real_ckpt or real_out in real_ckpt.parents:
        raise ValueError(
            f"--out {out} is the checkpoint folder --ckpt-dir {ckpt_dir}, or a folder "
            "above it; give the results file another name"
        )
    if real_out.parent == real_ckpt and any(
        fnmatch.fnmatch(out.name, pattern) for pattern in RUN_FOLDER_FILES
    ):
        raise ValueError(
            f"--out {out} would replace a file of the run in --ckpt-dir {ckpt_dir}; "
            "give the results file another name"
        )
    return out


def prepare_paths(p, args) -> None:
    """Create the checkpoint folder and the results file's folder, and write and
    delete a file in each (the results one named as the results' temporary file
    will be): a folder that refuses new files, a file system that refuses names
    this long, or one mounted read-only fails here, not after the training."""
    for flag, folder, name in (
        ("--ckpt-dir", args.ckpt_dir, None),
        ("--out", args.out.parent, args.out.name),
    ):
        try:
            writable_folder(folder, flag, name)
        except OSError as err:
            p.error(path_error(flag, err))


# A setting, a file or a folder that the run cannot use, found before it trains: the
# message names it and a traceback would add nothing.
RUN_REFUSED = (
    ConfigError,
    checkpoints.CheckpointError,
    FolderBusyError,
    PermissionError,
    NotADirectoryError,
    DataUnavailableError,
)


def refuse(p, err) -> int:
    print(f"{p.prog}: error: {err}", file=sys.stderr, flush=True)
    return 2


def train_cli(argv=None) -> int:
    lib = library()
    p = make_parser()
    args = p.parse_args(argv)
    try:
        preset = args.preset or runtime.choose_preset()
    except ValueError as err:
        p.error(f"{err}, or give --preset")
    cfg = config_from_args(lib, p, preset, args.changes)
    check_args(p, args, preset)
    if args.task == "copy" and (cfg.vocab != "words" or cfg.src_lang != "de"):
        p.error("the copy task has no languages or subwords: leave vocab and src_lang")
    prepare_paths(p, args)
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
            else runtime.torch.device(args.device)
        )
        if device.type == "cuda" and device.index is None:  # name the GPU: cuda:0
            device = runtime.torch.device("cuda", runtime.torch.cuda.current_device())
    runtime.torch.set_num_threads(
        runtime.torch_threads(preset, world.local_size if world else 1)
    )
    is_main = world is None or world.is_main
    # rank 0 holds the run's folder from before --fresh to the results: a second run
    # into it stops here, before preparing any data, and deletes nothing of the first
    lock = checkpoints.run_lock(args.ckpt_dir) if is_main else contextlib.nullcontext()
    try:
        with lock:
            if args.fresh and is_main:
                removed = checkpoints.remove_run_files(args.ckpt_dir)
                if removed:
                    print(
                        f"--fresh: removed {len(removed)} file(s) of an earlier run "
                        f"in {args.ckpt_dir}",
                        flush=True,
                    )
            if world:
                world.barrier()
            data = (
                lib.copy_task_data(cfg)
                if args.task == "copy"
                else lib.prepare_data(cfg)
            )
            model, history = lib.train(
                cfg,
                data,
                args.ckpt_dir,
                device,
                max_steps=args.max_steps,
                world=world,
                log=lambda m: print(m, flush=True),
            )
            if is_main:
                write_results(lib, args, preset, cfg, data, model, history, device)
    except RUN_REFUSED as err:
        return refuse(p, err)
    if world:
        launch.finish_distributed()
    return 0


def write_results(lib, args, preset, cfg, data, model, history, device):
    """What a reader would compare runs by, traceable to a file: the config, the
    parameter count, the history, throughput, and the sacreBLEU scores."""
    seconds = max(history["train_time_s"], 1e-9)
    results = {
        "task": args.task,
        "preset": preset,
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
        "torch_threads": runtime.torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
    }
    if args.task == "multi30k" and history["best_step"] is not None:
        best = lib.best_model(args.ckpt_dir, history, device)
        for split in lib.EVAL_SPLITS:
            r = lib.bleu(best, data, split, decode_tokens=cfg.decode_tokens)
            results[f"bleu_{split}"] = round(r["bleu"], 2)
            results["sacrebleu_signature"] = r["signature"]
    write_text_atomic(args.out, json.dumps(results, indent=2) + "\n")
    summary = {k: v for k, v in results.items() if k.startswith(("bleu_", "tokens_"))}
    print(json.dumps({**summary, "best_step": results["best_step"]}), "->", args.out)


def main(argv=None) -> int:
    """The program: train_cli, and under torchrun an exit that skips the
    interpreter's teardown (see atkit.launch.worker_exit)."""
    status = train_cli(argv)
    if "WORLD_SIZE" not in os.environ:
        return status
    from atkit import launch

    launch.worker_exit(status)


if __name__ == "__main__":
    sys.exit(main())
