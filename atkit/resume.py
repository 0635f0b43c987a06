"""A training run's state on disk: saved at evaluation points, put back on a restart.

The notebook's `train` (Part 3) keeps, in its checkpoint folder, a snapshot of the
weights at every evaluation and, every `resume_every` evaluations, the whole state of
the run in `last.pt` (weights, optimiser, schedule, gradient scaler, the position in
the shuffled epoch, every process's random state and partial loss). Started again on
that folder, it continues from `last.pt` (or from `prev.pt`, the one before, if
`last.pt` is damaged) and ends with exactly the weights of an uninterrupted run. This
module holds that machinery, so that the notebook's loop stays readable:

* `TrainingRun`, what a run is made of and what it has done so far;
* `run_folder`, which checks, locks and prepares the folder around a run;
* `resume` / `restore_run`, which put a saved run back after checking that it was made
  with the same settings and vocabularies (the settings that may change say so on
  their fields: `atkit.settings.setting`), and `save_run`, which writes it;
* `save_snapshot`, `kept_steps` and `prune_snapshots`: the per-evaluation snapshots,
  of which a run keeps those that checkpoint averaging may need (Part 4).

A run here is duck-typed: anything with the attributes of `TrainingRun`; a *world* is
the notebook's `SingleProcess` or its data-parallel kind (Part 5): `rank`, `size`,
`is_main`, `gather`, `barrier`.
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import torch

from atkit import checkpoints
from atkit.settings import ConfigError, check_setting, free_on_resume


class NonFiniteLossError(RuntimeError):
    """The training loss became inf or NaN; the weights are no longer usable. `step`
    is the first bad step, when known."""

    def __init__(self, message: str, step: int | None = None):
        super().__init__(message)
        self.step = step


# ------------------------------------------------------------------ the run


def _new_history() -> dict:
    return dict(
        steps=[],
        train_loss=[],
        val_loss=[],
        time_s=[],
        train_time_s=0.0,
        tokens=0,
        best_step=None,
        world_size=1,
        run_id=new_run_id(),
    )


def new_run_id() -> str:
    """A run's identity, drawn when it starts (never from the seed: two runs with the
    same settings are still two runs). last.pt keeps it in the history, and every
    snapshot carries it, so that a file copied in from another run is told apart."""
    return secrets.token_hex(6)


@dataclass
class TrainingRun:
    """A run's parts (the notebook's RunConfig, TranslationData, model, optimiser,
    schedule, loss, Precision), where it writes, and how far it has got."""

    cfg: object
    data: object
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    loss_compute: object
    precision: object
    ckpt_dir: Path
    device: torch.device
    progress: dict = field(
        # epoch; batches of its shuffled order done; this window's loss and tokens
        default_factory=lambda: dict(step=0, epoch=0, batch=0, loss=0.0, ntokens=0)
    )
    history: dict = field(default_factory=_new_history)
    window_s: float = 0.0  # training seconds since the last evaluation


@contextlib.contextmanager
def run_folder(ckpt_dir, world, fresh=False, log=print):
    """The one gate of a run's folder: check `ckpt_dir`, hold its lock (one run per
    folder) on the main process, delete an earlier run's checkpoint files if `fresh`
    (only those: never the folder or anything else in it), and prepare it; every
    process waits until it is ready. A bad folder is refused before anything in it
    is created or removed."""
    checkpoints.check_ckpt_dir(ckpt_dir)
    lock = checkpoints.run_lock(ckpt_dir) if world.is_main else contextlib.nullcontext()
    with lock:
        if world.is_main:
            if fresh:
                removed = checkpoints.remove_run_files(ckpt_dir)
                if removed:
                    n = len(removed)
                    log(f"fresh: removed {n} checkpoint file(s) of an earlier run")
            checkpoints.prepare_ckpt_dir(ckpt_dir)
        world.barrier()
        yield Path(ckpt_dir)


def check_max_steps(run: TrainingRun, max_steps) -> None:
    """`max_steps` (stop early, resumable): an integer beyond the steps already done."""
    check_setting("train", "max_steps", max_steps, int, low=1, optional=True)
    done = run.progress["step"]
    if max_steps is not None and max_steps <= done:
        raise ConfigError(
            f"max_steps={max_steps}, but the run in {run.ckpt_dir} has done "
            f"{done} steps already: nothing to train"
        )


def check_lengths(run: TrainingRun) -> None:
    """Every training and validation sentence fits the positional encoding, also
    once its batch is padded to a multiple of `pad_multiple`."""
    data, max_len = run.data, run.cfg.model.max_len
    longest = max(len(x) for pairs in (data.train, data.val) for p in pairs for x in p)
    if longest > max_len:
        raise ConfigError(
            f"a sentence of {longest} ids is longer than the positional "
            f"encoding's ModelConfig.max_len={max_len}"
        )
    m = getattr(run.cfg, "pad_multiple", 1)
    padded = -(-longest // m) * m
    if padded > max_len:
        raise ConfigError(
            f"RunConfig.pad_multiple={m} pads the longest sentence, {longest} ids, "
            f"to {padded} positions, more than the positional encoding's "
            f"ModelConfig.max_len={max_len}: give a pad_multiple of at most "
            f"{max_len - longest + 1} (or a larger max_len)"
        )


# ------------------------------------------------------------------ resuming


def resume(run: TrainingRun, world, log=print) -> bool:
    """Put back the run saved in run.ckpt_dir, if there is one; True if there was."""
    found = checkpoints.resume_state(run.ckpt_dir, log)
    if found is not None:
        restore_run(run, *found, world, log)
    return found is not None


def _same_vocab(vocab, saved) -> bool:
    if not isinstance(saved, dict) or saved.get("kind") != vocab.kind:
        return False
    try:
        return type(vocab).from_state(saved).itos == vocab.itos
    except (KeyError, ValueError, TypeError, RuntimeError):
        return False


def restore_run(run: TrainingRun, path, state, world, log=print) -> None:
    """Put the state saved in `path` back into `run`, on each process its own."""
    free = free_on_resume(type(run.cfg), state["config"])
    changed = checkpoints.changed_settings(state["config"], run.cfg.to_dict(), free)
    if changed:
        raise ConfigError(
            f"{run.ckpt_dir} holds a run with other settings ({changed}); give "
            "another ckpt_dir, change them back, or delete its checkpoints"
        )
    for side in ("vocab_src", "vocab_tgt"):
        if not _same_vocab(getattr(run.data, side), state[side]):
            raise ConfigError(f"{run.ckpt_dir} was trained with another vocabulary")
    try:
        run.model.load_state_dict(state["model"])
        run.optimizer.load_state_dict(state["optimizer"])
        run.scheduler.load_state_dict(state["scheduler"])
        # the next step's rate by this run's schedule: the saved one is the saving
        # run's, which a branch (`branch_run`) may have changed after this step
        s, groups = run.scheduler, run.optimizer.param_groups
        for group, base, f in zip(groups, s.base_lrs, s.lr_lambdas, strict=True):
            group["lr"] = base * f(s.last_epoch)
        if run.precision.scaler is not None and state.get("scaler"):
            run.precision.scaler.load_state_dict(state["scaler"])
        progress, history = dict(state["progress"]), dict(state["history"])
        ranks = state["ranks"]  # what each process of the saving run had of its own
        if len(ranks) == world.size:
            mine = ranks[world.rank]
        else:  # another process count: rank 0 carries the window's partial loss
            log(f"resuming with {world.size} process(es) a run saved by {len(ranks)}")
            mine = {
                "rng": ranks[world.rank % len(ranks)]["rng"],
                "loss": sum(r["loss"] for r in ranks) if world.rank == 0 else 0.0,
                "ntokens": sum(r["ntokens"] for r in ranks) if world.rank == 0 else 0,
            }
        checkpoints.set_rng_state(mine["rng"], run.device)
        progress.update(loss=mine["loss"], ntokens=mine["ntokens"])
    except (RuntimeError, ValueError, TypeError, KeyError, IndexError) as err:
        raise checkpoints.CheckpointError(
            f"{path} does not fit this run ({type(err).__name__}: {str(err)[:300]}); "
            "it was edited or damaged: delete it to resume from prev.pt, or start "
            "the run again"
        ) from None
    run.progress, run.history = progress, history


# ------------------------------------------------------------------ saving


def save_run(run: TrainingRun, world) -> int:
    """Write last.pt (the old one becomes prev.pt); returns the bytes written. Every
    process contributes its random state and partial loss; the first one writes.
    Weights holding inf or NaN are never written over a good last.pt."""
    p = run.progress
    ranks = world.gather(
        {
            "rng": checkpoints.rng_state(run.device),
            "loss": p["loss"],
            "ntokens": p["ntokens"],
        }
    )
    if not world.is_main:
        return 0
    if not all(bool(torch.isfinite(w).all()) for w in run.model.parameters()):
        raise NonFiniteLossError(
            f"the weights hold inf or NaN at step {p['step']}; "
            f"{run.ckpt_dir / 'last.pt'} was left as it was",
            step=p["step"],
        )
    scaler = run.precision.scaler
    state = checkpoints.make_checkpoint(
        run.model,
        run.cfg,
        run.data.vocab_src,
        run.data.vocab_tgt,
        optimizer=run.optimizer.state_dict(),
        scheduler=run.scheduler.state_dict(),
        scaler=scaler.state_dict() if scaler is not None else {},
        progress=dict(p),
        history=run.history,
        ranks=ranks,
    )
    return checkpoints.save_rotating(state, run.ckpt_dir / "last.pt", "prev.pt")


def snapshot_path(ckpt_dir, step: int) -> Path:
    return Path(ckpt_dir) / f"step{step:06d}.pt"


def save_snapshot(run: TrainingRun, world, val_loss: float) -> int:
    """The weights at this step (the main process writes); returns the bytes."""
    if not world.is_main:
        return 0
    step = run.progress["step"]
    snapshot = checkpoints.make_checkpoint(
        run.model,
        run.cfg,
        run.data.vocab_src,
        run.data.vocab_tgt,
        step=step,
        val_loss=val_loss,
        **_identity(run.history),
    )
    return checkpoints.save_checkpoint(snapshot, snapshot_path(run.ckpt_dir, step))


def _identity(history: dict) -> dict:
    """{"run_id": ...} for a snapshot; nothing for a run that an older version of
    this module started (its last.pt has no id)."""
    run_id = history.get("run_id")
    out = {} if run_id is None else {"run_id": run_id}
    if history.get("code"):  # the fingerprint of the code that trains (pipeline)
        out["code"] = history["code"]
    return out


def load_snapshot(ckpt_dir, history: dict, step: int) -> dict:
    """The snapshot of `step` in ckpt_dir, checked to be the one that the run whose
    `history` this is wrote there: the same run id, step and validation loss (a
    file that lacks one, written by an older version, is not held to it). Anything
    else, such as another run's snapshot copied in under this name, is refused."""
    if step is None:
        raise ValueError("the run has not been evaluated yet: it has no snapshot")
    path = snapshot_path(ckpt_dir, step)
    state = checkpoints.check_format(checkpoints.load_checkpoint(path), str(path))
    if step not in history["steps"]:
        raise ValueError(f"the run's history has no evaluation at step {step}")
    val = history["val_loss"][history["steps"].index(step)]
    found = (state.get("run_id"), state.get("step"), state.get("val_loss"))
    wanted = (history.get("run_id"), step, val)
    what = ("run id", "step", "validation loss")
    for name, a, b in zip(what, found, wanted, strict=True):
        if a is not None and b is not None and a != b:
            raise checkpoints.CheckpointError(
                f"{path} is not this run's snapshot: its {name} is {a!r} where this "
                f"run has {b!r} (another run's file, copied here?); move it away and "
                "put back this run's own, or train the run again (fresh)"
            )
    return state


def last_snapshots(history: dict, n: int) -> list[int]:
    """The steps of the n snapshots that end at the best one (checkpoint averaging's
    "last checkpoints", for a run whose best point is known)."""
    best = history["steps"].index(history["best_step"])
    return history["steps"][max(0, best - n + 1) : best + 1]


def load_last_snapshots(ckpt_dir, history: dict, n: int) -> list[dict]:
    """The n snapshots that end at the best one (`last_snapshots`), each checked by
    `load_snapshot`; refused, naming them, when some were not kept."""
    steps = last_snapshots(history, n)
    missing = [p.name for s in steps if not (p := snapshot_path(ckpt_dir, s)).exists()]
    if missing:
        raise FileNotFoundError(
            f"{ckpt_dir}: snapshots {missing} were not kept (the run's keep is "
            f"smaller than n_avg={n}); average fewer, or train with a larger keep"
        )
    return [load_snapshot(ckpt_dir, history, s) for s in steps]


def kept_steps(history: dict, keep: int) -> set[int]:
    """Steps whose snapshots may still be averaged: the last `keep` evaluations and
    the `keep` that end at the best one."""
    steps = history["steps"]
    best = steps.index(history["best_step"])
    return set(steps[-keep:]) | set(steps[max(0, best - keep + 1) : best + 1])


def prune_snapshots(run: TrainingRun, world) -> None:
    """Delete the snapshots that the history saved in last.pt no longer needs."""
    keep = kept_steps(run.history, run.cfg.keep)
    for step in run.history["steps"] if world.is_main else ():
        if step not in keep:
            snapshot_path(run.ckpt_dir, step).unlink(missing_ok=True)


# ------------------------------------------------------------------ branching


def branch_run(src_dir, dst_dir, cfg, step: int, may_differ, log=print) -> bool:
    """Start the run in `dst_dir`, with settings `cfg` (a RunConfig), from the state
    that the run in `src_dir` saved at `step`; the notebook's `train` then goes on
    from there. The settings named in `may_differ` may differ between the two runs, and
    the caller vouches that up to `step` they change nothing (Part 4 branches where the
    cool-down begins: up to there both rates are eq. 3's). The snapshots the branch
    may average are copied along, relabelled with its settings. Returns False when
    dst_dir holds a run already (a branch made before, which `train` resumes or
    loads), True after branching."""
    src_dir, dst_dir = Path(src_dir), Path(dst_dir)
    checkpoints.check_ckpt_dir(dst_dir)
    with checkpoints.run_lock(dst_dir):
        checkpoints.prepare_ckpt_dir(dst_dir)
        if checkpoints.resume_state(dst_dir, log) is not None:
            return False
        found = checkpoints.resume_state(src_dir, log)
        done = None if found is None else found[1]["progress"]["step"]
        if done != step:
            where = "no saved run" if found is None else f"a run saved at step {done}"
            raise ConfigError(
                f"cannot branch {dst_dir} at step {step}: {src_dir} holds {where}; "
                f"train it with max_steps={step} first (on a fresh folder)"
            )
        # a run of its own from here: a new id, which the copied snapshots carry
        history = dict(found[1]["history"], run_id=new_run_id())
        state = dict(found[1], config=cfg.to_dict(), history=history)
        changed = checkpoints.changed_settings(
            found[1]["config"],
            state["config"],
            free_on_resume(type(cfg), found[1]["config"]) | set(may_differ),
        )
        if changed:
            raise ConfigError(
                f"cannot branch {dst_dir} from {src_dir}: settings {changed} differ, "
                f"and only {sorted(may_differ)} may"
            )
        for s in kept_steps(state["history"], cfg.keep):
            snap = load_snapshot(src_dir, found[1]["history"], s)
            snap.update(config=state["config"], **_identity(history))
            checkpoints.save_checkpoint(snap, snapshot_path(dst_dir, s))
        checkpoints.save_checkpoint(state, dst_dir / "last.pt")
    log(f"{dst_dir.name}: branched from {src_dir.name} at step {step}")
    return True


def share_steps(train_src, src_dir, dst_dir, cfg, step: int, may_differ, log=print):
    """Let the run in `dst_dir` (settings `cfg`) start from the first `step` steps of
    the run in `src_dir`, which the two share: `train_src(n)` trains the source up to
    step n, then `branch_run` copies its state. Returns True after branching, False
    when there is nothing to share: `dst_dir` holds a run already (`train` resumes or
    loads it), or the source has gone past `step` (then `dst_dir` trains from step 0,
    which gives the same numbers in more time)."""
    if checkpoints.resume_state(dst_dir, log) is not None:
        return False
    found = checkpoints.resume_state(src_dir, log)
    done = 0 if found is None else found[1]["progress"]["step"]
    if done > step:
        log(
            f"{Path(dst_dir).name}: {Path(src_dir).name} is past step {step} "
            f"(at {done}), so it trains from step 0"
        )
        return False
    if done < step:
        train_src(step)
    return branch_run(src_dir, dst_dir, cfg, step, may_differ, log)
