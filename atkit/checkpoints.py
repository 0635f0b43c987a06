"""Checkpoint files: written atomically, read safely, one run per folder.

* A checkpoint is written to a temporary file beside its destination and renamed over
  it only when complete (atkit.files); a crash or a full disk leaves the old file.
* Everything in it is a tensor, a number, a string or a list/dict of those, so it loads
  with torch.load(weights_only=True), which refuses to run code stored in a file.
* A file that cannot be used is reported by name (CheckpointError), never as a bare
  error from deep inside torch.
* A run holds a lock on its folder (atkit.files.FolderLock): a second run into the same
  folder stops at once with an error instead of mixing its files with the first's.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
from pathlib import Path

import torch

from atkit.files import (
    FolderLock,
    atomic_open,
    check_writable,
    path_kind,
    raise_if_disk_full,
    writable_folder,
)
from atkit.settings import current_config, free_on_resume

CHECKPOINT_FORMAT = "annotated-transformer/3"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file."""


def _serialized(state: dict) -> memoryview:
    """The bytes torch.save writes for `state`. Serialising to memory first means a
    full disk shows as the operating system's own error (ENOSPC) at the write, not
    as a message from inside torch's zip writer that never says "disk"."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getbuffer()


def _write(data: memoryview, path: Path, previous: str | None) -> int:
    try:
        with atomic_open(path, "wb") as f:
            f.write(data)
            f.flush()  # a full disk shows here, before the old file is moved aside
            os.fsync(f.fileno())
            if previous is not None and path.exists():  # complete and on disk
                os.replace(path, path.with_name(previous))
    except OSError as err:
        kept = f"{path.name} is as it was"
        raise_if_disk_full(err, path, "the checkpoint", kept=kept)
        raise
    return len(data)


def save_checkpoint(state: dict, path) -> int:
    """Write `state` to `path` atomically; returns the bytes written. On a full disk
    the file at `path`, if any, is left as it was (DiskFullError says so)."""
    return _write(_serialized(state), Path(path), None)


def save_rotating(state: dict, path, previous: str = "prev.pt") -> int:
    """Write `state` to `path` atomically; the file it replaces becomes `previous`
    (beside it), so a damaged newest file still leaves one to resume from. Returns
    the bytes written."""
    return _write(_serialized(state), Path(path), previous)


def _first_sentence(err: BaseException) -> str:
    """An error's name and the first sentence of its message (PyTorch's go on with
    advice that is not ours to give), whole, or cut at a word with "..."."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err)).strip()
    first = re.split(r"(?<=\.)\s|\n", text, maxsplit=1)[0].strip()
    if len(first) > 200:
        first = first[:200].rsplit(" ", 1)[0] + " ..."
    if not first and isinstance(err, EOFError):
        first = "the file is empty or cut short"
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def load_checkpoint(path) -> dict:
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a checkpoint file")
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated, foreign or unsafe
        text = str(err)
        found = re.search(r"(?i)unsupported (?:global: )?GLOBAL (\S+)", text)
        if "Weights only load failed" in text and found:
            raise CheckpointError(
                f"{path} is not a checkpoint of this notebook: it holds Python "
                f"objects ({found[1]}) besides tensors and plain data, which loading "
                "would run as code, so it was not loaded; delete it, or give a "
                "checkpoint this notebook wrote"
            ) from None
        if "Weights only load failed" in text:  # torch's advice is not for here
            detail = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
            reason = f": {detail[1].strip()[:200]}" if detail else ""
            raise CheckpointError(
                f"{path} cannot be read ({type(err).__name__}{reason}); it is "
                "damaged or not a checkpoint of this notebook"
            ) from None
        raise CheckpointError(
            f"{path} cannot be read ({_first_sentence(err)}); it is damaged or not a "
            "checkpoint of this notebook"
        ) from err
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: not a checkpoint of this notebook")
    return state


def make_checkpoint(model, cfg, vocab_src, vocab_tgt, **extra) -> dict:
    """The one format: the run's config, both vocabularies, the weights, and extras."""
    return {
        "format": CHECKPOINT_FORMAT,
        "config": cfg.to_dict(),
        "vocab_src": vocab_src.state(),
        "vocab_tgt": vocab_tgt.state(),
        "model": model.state_dict(),
        **extra,
    }


def format_origin(state) -> str:
    """Who wrote a checkpoint of another format, in words."""
    found = state.get("format") if isinstance(state, dict) else None
    prefix, _, version = str(found).rpartition("/")
    ours = int(CHECKPOINT_FORMAT.rpartition("/")[2])
    if prefix == CHECKPOINT_FORMAT.rpartition("/")[0] and version.isdigit():
        if int(version) > ours:
            return "a newer version of this notebook wrote it; update your copy"
        return "an older version of this notebook wrote it; train the run again"
    return "it is not a checkpoint of this notebook"


def checked_state(checkpoint) -> tuple[dict, str]:
    """(state, where) of a checkpoint file or dict, checked to be in the notebook's
    format; `where` names it in error messages."""
    where = str(checkpoint) if isinstance(checkpoint, str | Path) else "dict"
    state = load_checkpoint(checkpoint) if where != "dict" else checkpoint
    return check_format(state, where), where


@contextlib.contextmanager
def not_this_notebook(where: str):
    """Around rebuilding a model from a checkpoint: a failure (a missing key, a shape
    that does not fit) becomes one CheckpointError naming the file."""
    try:
        yield
    except (RuntimeError, ValueError, TypeError, KeyError) as err:
        raise CheckpointError(
            f"{where}: does not describe a model of this notebook "
            f"({type(err).__name__}: {str(err)[:300]})"
        ) from None


def check_format(ckpt, where: str) -> dict:
    keys = {"format", "config", "vocab_src", "vocab_tgt", "model"}
    if (
        isinstance(ckpt, dict)
        and "format" in ckpt
        and ckpt["format"] != CHECKPOINT_FORMAT
    ):
        raise CheckpointError(
            f"{where} is in format {ckpt['format']!r}, this notebook reads "
            f"{CHECKPOINT_FORMAT!r}: {format_origin(ckpt)}"
        )
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        found = sorted(ckpt)[:8] if isinstance(ckpt, dict) else type(ckpt).__name__
        raise CheckpointError(
            f"{where}: not a {CHECKPOINT_FORMAT} checkpoint "
            f"(needs {sorted(keys)}, found {found})"
        )
    bad = [
        name
        for name, t in ckpt["model"].items()
        if torch.is_tensor(t) and t.is_floating_point() and not torch.isfinite(t).all()
    ]
    if bad:
        raise CheckpointError(f"{where}: weights hold inf or NaN ({bad[:3]})")
    current_config(ckpt["config"])  # an earlier notebook's settings, read as today's
    return ckpt


def same_run(paths, states, may_differ=()) -> None:
    """Raise CheckpointError unless all checkpoints come from one run: the same
    config (seed included; settings in `may_differ` aside) and the same
    vocabularies."""
    states = [
        {**s, "config": {k: v for k, v in s["config"].items() if k not in may_differ}}
        if isinstance(s.get("config"), dict)
        else s
        for s in states
    ]
    first = states[0]
    for path, state in zip(paths[1:], states[1:], strict=True):
        for key, what in (
            ("config", "settings"),
            ("vocab_src", "source vocabulary"),
            ("vocab_tgt", "target vocabulary"),
        ):
            if not _equal(state.get(key), first.get(key)):
                diff = ""
                if key == "config":
                    a, b = first.get(key) or {}, state.get(key) or {}
                    diff = f" ({changed_settings(a, b, ())})"
                raise CheckpointError(
                    f"{path} and {paths[0]} come from different runs: their {what} "
                    f"differ{diff}; average checkpoints of one run only"
                )


def as_state_dict(checkpoint) -> dict:
    """A model state dict from a path, a state dict or a notebook checkpoint."""
    if isinstance(checkpoint, str | Path):
        checkpoint = load_checkpoint(checkpoint)
    if not isinstance(checkpoint, dict):
        raise ValueError(f"expected a path or a dict, got {type(checkpoint).__name__}")
    model = checkpoint.get("model")
    return model if isinstance(model, dict) else checkpoint


def states_to_average(sources, config_class=None) -> list[dict]:
    """The model state dicts of checkpoints (paths, notebook checkpoints or state
    dicts) that can be averaged: at least one; one run's (the same settings, those
    that may differ within one run of `config_class` aside, and vocabularies, where
    the notebook's format records them); the same keys, shapes and dtypes. Else an
    error that says which checkpoint differs."""
    if isinstance(sources, str | Path | dict):
        raise TypeError(
            "average_checkpoints takes a list of checkpoints (paths or state dicts), "
            "not a single one"
        )
    sources = list(sources)
    loaded = [load_checkpoint(c) if isinstance(c, str | Path) else c for c in sources]
    runs = [
        (i, c) for i, c in enumerate(loaded) if isinstance(c, dict) and "config" in c
    ]
    if len(runs) > 1:
        names = [
            str(sources[i]) if isinstance(sources[i], str | Path) else f"checkpoint {i}"
            for i, _ in runs
        ]
        states = [c for _, c in runs]
        free = free_on_resume(config_class, states[0]["config"]) if config_class else ()
        same_run(names, states, may_differ=free)
    states = [as_state_dict(c) for c in loaded]
    if not states:
        raise ValueError("average_checkpoints needs at least one checkpoint")
    first = states[0]
    for i, state in enumerate(states[1:], start=1):
        if state.keys() != first.keys():
            diff = sorted(set(state) ^ set(first))[:5]
            raise ValueError(f"checkpoint {i} has other keys than checkpoint 0: {diff}")
        for name, value in state.items():
            ref = first[name]
            same = not torch.is_tensor(ref) or (
                torch.is_tensor(value)
                and (value.shape, value.dtype) == (ref.shape, ref.dtype)
            )
            if not same:
                raise ValueError(
                    f"checkpoint {i} does not match checkpoint 0 at {name!r}: "
                    "different architectures cannot be averaged"
                )
    return states


def _equal(a, b) -> bool:
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if (
        isinstance(a, float)
        and isinstance(b, float)
        and math.isnan(a)
        and math.isnan(b)
    ):
        return True
    return a == b


# ------------------------------------------------------------------ a run's folder

RUN_FILES = (
    "last.pt",
    "prev.pt",
    "step[0-9][0-9][0-9][0-9][0-9][0-9].pt",
    ".*.pt.*.tmp",
)


def run_lock(ckpt_dir) -> FolderLock:
    """The lock that keeps a second run out of `ckpt_dir` (see FolderLock)."""
    return FolderLock(ckpt_dir, "training run")


def check_ckpt_dir(ckpt_dir, what: str = "ckpt_dir") -> Path:
    """A usable checkpoint folder (it may not exist yet), or an error naming it; done
    before the folder is locked or created, so a bad one changes nothing. `what`
    names it in the messages (a program's option: "--ckpt-dir")."""
    if ckpt_dir is None or str(ckpt_dir) in ("", "."):
        raise ValueError(f"{what} is empty: give a folder for this run's checkpoints")
    ckpt_dir = Path(ckpt_dir)
    try:
        ckpt_dir.exists()
    except OSError as err:  # a name too long for the file system, say
        raise NotADirectoryError(
            f"{what} {ckpt_dir} cannot be a folder ({err.strerror or err}); give "
            "another path"
        ) from err
    if ckpt_dir.exists() and not ckpt_dir.is_dir():
        kind = path_kind(ckpt_dir) or "a file"  # a FIFO, /dev/null: said as such
        raise NotADirectoryError(f"{what} {ckpt_dir} is {kind}; give a folder")
    if ckpt_dir.is_dir() and not os.access(ckpt_dir, os.R_OK):
        # its files can be opened by name, but not listed: --fresh and the clean-up
        # of a killed save would find nothing to delete, and say nothing
        raise PermissionError(
            f"{what} {ckpt_dir} cannot be read (no permission to list it); allow "
            "reading it (chmod u+r) or give another folder"
        )
    for name in ("last.pt", "prev.pt"):
        if (ckpt_dir / name).is_dir():
            raise CheckpointError(
                f"{ckpt_dir / name} is a folder where the run keeps a checkpoint "
                f"file; move it out of the way (or give another {what})"
            )
    return check_writable(ckpt_dir, what)


def prepare_ckpt_dir(ckpt_dir) -> Path:
    """Create the folder and make sure files can be written in it; call with its lock
    held: then the `*.tmp` files in it are leftovers of a killed save of this run,
    never another run's write in flight. `check_ckpt_dir` has vetted it."""
    ckpt_dir = writable_folder(ckpt_dir, "ckpt_dir")
    for pattern in (".*.pt.*.tmp", ".write-test.*.tmp"):  # a killed save's or probe's
        for orphan in ckpt_dir.glob(pattern):
            orphan.unlink()
    return ckpt_dir


def remove_run_files(ckpt_dir) -> list[str]:
    """Delete the checkpoint files of a run, and nothing else."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return []
    removed = []
    for pattern in RUN_FILES:
        for path in ckpt_dir.glob(pattern):
            path.unlink()
            removed.append(path.name)
    return sorted(removed)


TRAINING_STATE = ("optimizer", "scheduler", "progress", "history", "ranks")


def resume_state(ckpt_dir: Path, log=print):
    """(path, state) of the run saved in ckpt_dir (last.pt, else prev.pt), or None.
    A file that is damaged, of another format, incomplete or holds inf/NaN weights is
    passed over for prev.pt, with a message."""
    errors = []
    for name in ("last.pt", "prev.pt"):
        path = Path(ckpt_dir) / name
        if path.exists():
            try:
                state = load_checkpoint(path)
                if state.get("format") != CHECKPOINT_FORMAT:
                    raise CheckpointError(
                        f"{path} is in format {state.get('format')!r}, this notebook "
                        f"reads {CHECKPOINT_FORMAT!r}: {format_origin(state)}"
                    )
                missing = [k for k in TRAINING_STATE if k not in state]
                if missing:
                    raise CheckpointError(
                        f"{path}: not a training state of this notebook (no {missing})"
                    )
                check_format(state, str(path))
                check_training_state(state, path)
                if errors:
                    log(f"{errors[-1]}; resuming from {name} instead")
                return path, state
            except CheckpointError as err:
                errors.append(str(err))
    if errors:
        raise CheckpointError(
            " and ".join(errors) + ". Delete the damaged files (or "
            "the folder's checkpoints) to start this run again."
        )
    return None


def _count(x, low=0) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= low


def _amount(x) -> bool:
    """A finite number of at least 0 (a loss, seconds)."""
    ok = isinstance(x, int | float) and not isinstance(x, bool)
    return ok and math.isfinite(x) and x >= 0


def training_state_problem(state: dict) -> str | None:
    """What is wrong with the progress, history and ranks of a training state, in
    words; None if they are what `train` writes: counts that are counts, a history
    of one entry per evaluation, a best step among those evaluated (the lowest
    validation loss), no step beyond the run's budget, one random state per
    process."""
    p, h, ranks = state["progress"], state["history"], state["ranks"]
    if not (isinstance(p, dict) and isinstance(h, dict) and isinstance(ranks, list)):
        return "its progress, history or ranks is not what a run saves"
    for key in ("step", "epoch", "batch", "ntokens"):
        if not _count(p.get(key)):
            return f"progress[{key!r}] is {p.get(key)!r}, not a count"
    if not _amount(p.get("loss")):
        return f"progress['loss'] is {p.get('loss')!r}"
    budget = state["config"].get("steps") if isinstance(state["config"], dict) else 0
    if _count(budget) and p["step"] > budget:
        return f"it says {p['step']} steps are done, of a run of {budget}"
    steps = h.get("steps")
    if not (
        isinstance(steps, list)
        and all(_count(s, 1) for s in steps)
        and steps == sorted(set(steps))
    ):
        return "history['steps'] is not a rising list of steps"
    if steps and steps[-1] > p["step"]:
        return f"its history reaches step {steps[-1]}, its progress step {p['step']}"
    for key in ("train_loss", "val_loss", "time_s"):
        values = h.get(key)
        if not (
            isinstance(values, list)
            and len(values) == len(steps)
            and all(_amount(v) for v in values)
        ):
            return f"history[{key!r}] does not hold one number per evaluation"
    if not (_amount(h.get("train_time_s")) and _count(h.get("tokens"))):
        return "history['train_time_s'] or history['tokens'] is not a number"
    best = h.get("best_step")
    if (best is None) != (not steps) or (best is not None and best not in steps):
        return f"history['best_step'] is {best!r}, not one of the steps evaluated"
    if steps and h["val_loss"][steps.index(best)] != min(h["val_loss"]):
        return f"history['best_step'] ({best}) is not the lowest validation loss"
    if not isinstance(h.get("run_id", ""), str):
        return f"history['run_id'] is {h['run_id']!r}"
    size = h.get("world_size")
    if not (_count(size, 1) and len(ranks) == size):
        return f"it has {len(ranks)} ranks' states for {size!r} processes"
    for rank in ranks:
        if not (
            isinstance(rank, dict)
            and isinstance(rank.get("rng"), dict)
            and torch.is_tensor(rank["rng"].get("torch"))
            and _amount(rank.get("loss"))
            and _count(rank.get("ntokens"))
        ):
            return "the state of a process (ranks) is not what a run saves"
    return None


def check_training_state(state: dict, path) -> dict:
    """`state` if its progress, history and ranks are what `train` writes; else a
    CheckpointError that names the file and what is wrong with it."""
    problem = training_state_problem(state)
    if problem:
        raise CheckpointError(f"{path} was edited or damaged: {problem}")
    return state


def changed_settings(saved: dict, wanted: dict, resumable) -> list[str]:
    """Settings (model ones as model.NAME) whose change would alter what the saved
    run computed; `resumable` names those that may differ."""
    out = []
    for key in sorted(saved.keys() | wanted.keys()):
        a, b = saved.get(key), wanted.get(key)
        if key == "model" and isinstance(a, dict) and isinstance(b, dict):
            out += [
                f"model.{k}"
                for k in sorted(a.keys() | b.keys())
                if a.get(k) != b.get(k)
            ]
        elif key not in resumable and a != b:
            out.append(key)
    return out


# ------------------------------------------------------------------ random state


def rng_state(device) -> dict:
    """This process's random state: the CPU generator and, on a GPU, its own device's
    generator only (asking for all of them would start a context on every GPU)."""
    state = {"torch": torch.get_rng_state()}
    device = torch.device(device)
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device) -> None:
    torch.set_rng_state(state["torch"])
    device = torch.device(device)
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
