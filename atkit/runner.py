"""The real run around the notebook's step: micro-batches, precision, a progress bar,
checks on the loss, checkpoints and resumption.

Part 2 of the notebook defines a training step and loop in their essence: one batch,
forward, loss, backward, optimiser and schedule. A run on a real corpus needs more
around that same step, and this module holds it so that the notebook's main path
stays on the paper (its deep dive "How a run survives a crash" explains it):

* `train_step`: the notebook's step for a list of *micro-batches* whose gradients add
  up before one optimiser step (each loss divided by the label tokens of all of them,
  so the step is that of one batch made of them all); under a data-parallel model
  the gradients are exchanged once, after the last one (`no_sync`); with a
  `Precision` (the notebook's faster step) it runs under autocast, with float16's
  gradient scaler. For one batch in float32 it is exactly the notebook's step (a test
  holds them equal).
* `run_epoch`: one pass over batches with a progress bar; it reads the losses from
  the device once per `log_every` steps and stops, naming the first bad step, on a
  loss that is no longer finite.
* `train` / `train_run`: the run in its folder: every `eval_every` steps a validation
  loss and a snapshot, every `resume_every` evaluations the whole state (`last.pt`,
  `atkit.resume`), so that a run started again continues where it stopped.

atkit never imports the notebook: what a run is built from comes in as `Parts`, the
notebook's own functions.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from atkit import checkpoints, config, fast, resume, runtime
from atkit.data import check_token_budget, epoch_order
from atkit.resume import NonFiniteLossError, TrainingRun


@dataclass(frozen=True)
class Parts:
    """What a run takes from the notebook: Part 1's model, Part 2's loss and
    optimiser, Part 3's batches. `build` puts them together for one config, with
    the faster step (`atkit.fast`) where the config asks for it."""

    build_model: Callable  # (model config, n_src, n_tgt) -> the model
    label_smoothing: Callable  # (size, padding_idx, smoothing) -> the criterion
    loss_compute: Callable  # (generator, criterion) -> the loss of a batch
    make_optimizer: Callable  # (model, d_model, factor, warmup, fused=, **options)
    batches: Callable  # (pairs, cfg, device) -> list of Batch
    pad: int  # the padding id
    order: Callable = epoch_order  # (n_batches, seed, epoch) -> batch order
    check_budget: Callable = check_token_budget  # (cfg, pairs)
    compile: Callable = fast.maybe_compile  # (model, enabled, device, log) -> model

    def build(self, cfg, n_src, n_tgt, device):
        """(model, optimizer, scheduler, loss_compute, precision) for a config."""
        torch.manual_seed(cfg.seed)
        model = self.build_model(cfg.model, n_src, n_tgt)
        precision = fast.choose_precision(device, cfg.precision)
        criterion = self.label_smoothing(n_tgt, self.pad, cfg.eps_ls)
        loss_compute = self.loss_compute(model.generator, criterion)
        if cfg.fast:
            fast.set_fast_path(model, attn_impl=fast.fast_attention_impl(precision))
            loss_compute = fast.FastLossCompute(model.generator, self.pad, cfg.eps_ls)
        optimizer, scheduler = self.make_optimizer(
            model.to(device),
            cfg.model.d_model,
            cfg.factor,
            cfg.warmup,
            fused=cfg.fast,
            total=cfg.steps,
            cooldown=cfg.cooldown,
            weight_decay=cfg.weight_decay,
        )
        return model, optimizer, scheduler, loss_compute, precision

    def load(self, checkpoint, device="cpu"):
        """(model in eval mode, RunConfig, source vocab, target vocab) of a
        checkpoint file or dict in the notebook's format."""
        state, where = checkpoints.checked_state(checkpoint)
        with checkpoints.not_this_notebook(where):
            cfg = config.RunConfig.from_dict(state["config"])
            vs, vt = (
                config.vocab_from_state(state[k]) for k in ("vocab_src", "vocab_tgt")
            )
            model = self.build_model(cfg.model, len(vs), len(vt))
            model.load_state_dict(state["model"])
        return model.to(device).eval(), cfg, vs, vt


# ------------------------------------------------------------------ one step


def train_step(
    model, batch, loss_compute, optimizer, scheduler, norm=None, precision=None
):
    """One optimiser step over a Batch or a list of micro-batches; returns the
    summed loss of their label tokens (a detached tensor)."""
    micro = list(batch) if isinstance(batch, list | tuple) else [batch]
    norm = sum(b.ntokens for b in micro) if norm is None else norm
    autocast = precision.autocast if precision else contextlib.nullcontext
    scaler = precision.scaler if precision else None
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for i, b in enumerate(micro):
        last = i == len(micro) - 1
        no_sync = getattr(model, "no_sync", None)  # only a DDP-wrapped model has it
        with no_sync() if no_sync and not last else contextlib.nullcontext():
            with autocast():
                out = model(b.src, b.tgt, b.src_mask, b.tgt_mask)  # (B, T, d_model)
                loss_sum, loss = loss_compute(out, b.tgt_y, norm)
            (scaler.scale(loss) if scaler else loss).backward()
        total = total + loss_sum
    if scaler:
        scaler.step(optimizer)  # skipped when a float16 gradient overflowed
        scaler.update()
    else:
        optimizer.step()
    scheduler.step()
    return total


def evaluate_step(model, micro, loss_compute, precision=None):
    """The summed loss of some batches, without gradients or dropout."""
    autocast = precision.autocast if precision else contextlib.nullcontext
    model.eval()
    total = 0.0
    with torch.no_grad(), autocast():
        for b in micro:
            out = model(b.src, b.tgt, b.src_mask, b.tgt_mask)
            total = total + loss_compute(out, b.tgt_y, b.ntokens)[0]
    return total


def checked_sum(losses, steps_before, desc=""):
    """Sum of per-step loss tensors (one host sync); raises on inf or NaN."""
    values = torch.stack([torch.as_tensor(x) for x in losses]).double().cpu()
    bad = (~torch.isfinite(values)).nonzero()
    if len(bad):
        step = steps_before + int(bad[0, 0]) + 1
        raise NonFiniteLossError(
            f"{desc + ': ' if desc else ''}the loss is {values[bad[0, 0]].item()} at "
            f"step {step}; lower the learning rate (factor) or check the data. "
            "Nothing was saved after it.",
            step=step,
        )
    return values.sum().item()


# ------------------------------------------------------------------ one pass


def progress(batches, desc=""):
    """`batches` with a progress bar (none when $AT_PROGRESS=0: the committed run)."""
    from tqdm import tqdm

    return tqdm(
        batches,
        desc=desc,
        leave=False,
        mininterval=1.0,
        disable=not runtime.show_progress(),
    )


def run_epoch(
    batches,
    model,
    loss_compute,
    optimizer=None,
    scheduler=None,
    *,
    precision=None,
    norm=None,
    log_every=50,
    desc="",
    first_step=1,
):
    """One pass over `batches` (each a Batch or a list of micro-batches); returns
    (summed loss, label tokens, steps). With an optimiser it trains, else it only
    measures the loss, dropout off. `norm(micro)`, if given, is each step's
    normaliser; `first_step` numbers the first batch in error messages."""
    training = optimizer is not None
    window, total, ntokens, start = [], 0.0, 0, time.perf_counter()
    bar = progress(batches, desc or ("train" if training else "eval"))
    for step, batch in enumerate(bar, start=1):
        micro = list(batch) if isinstance(batch, list | tuple) else [batch]
        if training:
            n = norm(micro) if norm is not None else None
            loss_sum = train_step(
                model, micro, loss_compute, optimizer, scheduler, n, precision
            )
        else:
            loss_sum = evaluate_step(model, micro, loss_compute, precision)
        window.append(loss_sum)
        ntokens += sum(b.ntokens for b in micro)
        if step % log_every == 0 or step == len(batches):
            total += checked_sum(window, first_step - 1 + step - len(window), desc)
            window = []
            lr = optimizer.param_groups[0]["lr"] if training else 0.0
            rate = ntokens / (time.perf_counter() - start)
            bar.set_postfix(
                loss=f"{total / max(ntokens, 1):.3f}",
                lr=f"{lr:.1e}",
                tok_s=f"{rate:,.0f}",
                refresh=False,
            )
    bar.close()
    return total, ntokens, len(batches)


# ------------------------------------------------------------------ the run


class SingleProcess:
    """The processes that share a run: one. Part 5 has the data-parallel kind."""

    rank, size, is_main = 0, 1, True
    norm = None  # each step divides by its own label tokens

    def shard(self, order):
        return order

    def wrap(self, model):
        return model

    def all_sum(self, values: torch.Tensor) -> torch.Tensor:
        return values

    def gather(self, obj) -> list:
        return [obj]

    def barrier(self):
        pass


def train(
    cfg,
    data,
    ckpt_dir,
    device,
    parts: Parts,
    *,
    log=print,
    max_steps=None,
    world=None,
    fresh=False,
):
    """Train, resume, or load the finished run in ckpt_dir; returns (model, history).
    `fresh` deletes an earlier run's checkpoint files in ckpt_dir first; `world` is
    the processes that share the run (one by default)."""
    world = world or SingleProcess()
    log = log if world.is_main else (lambda *args, **kw: None)
    with resume.run_folder(ckpt_dir, world, fresh, log):  # checked and locked
        run = start_run(cfg, data, ckpt_dir, device, parts, world, log)
        return train_run(run, world, log, max_steps, parts)


def start_run(cfg, data, ckpt_dir, device, parts, world=None, log=print):
    """The run's parts as a TrainingRun, put back from the folder's last.pt (or
    prev.pt) if it has one."""
    world = world or SingleProcess()
    built = parts.build(cfg, len(data.vocab_src), len(data.vocab_tgt), device)
    run = TrainingRun(cfg, data, *built, Path(ckpt_dir), torch.device(device))
    resume.resume(run, world, log)
    return run


def train_run(run, world, log, max_steps, parts):
    """Train `run` up to its budget, or to max_steps; every eval_every steps, a
    validation loss and a snapshot. Returns (model, history)."""
    cfg, p = run.cfg, run.progress
    resume.check_max_steps(run, max_steps)
    if p["step"] >= cfg.steps:
        return finished_run(run, log)
    batches, val_batches = run_batches(run, world, parts)
    net = parts.compile(world.wrap(run.model), cfg.compile, run.device, log)
    stop = min(cfg.steps, max_steps or cfg.steps)
    while p["step"] < stop:
        todo, epoch_done = next_window(run, world, len(batches), stop, parts)
        start = time.perf_counter()
        loss, ntokens, steps = run_epoch(
            [batches[j] for j in todo],
            net,
            run.loss_compute,
            run.optimizer,
            run.scheduler,
            precision=run.precision,
            norm=world.norm,
            desc=f"steps {p['step'] + 1}-{p['step'] + len(todo)} of {cfg.steps}",
            first_step=p["step"] + 1,
        )
        seconds = time.perf_counter() - start
        advance(run, world, steps, loss, ntokens, seconds, epoch_done)
        if p["step"] % cfg.eval_every == 0 or p["step"] == cfg.steps:
            evaluate(run, val_batches, world, log, last=p["step"] == stop)
        elif p["step"] == stop:  # stopped early by max_steps: resumable
            resume.save_run(run, world)
    return run.model, run.history


def run_batches(run, world, parts):
    """The run's training and validation batches, collated once on its device,
    after checking that every sentence fits the positional encoding and every batch
    its token budget."""
    cfg, data = run.cfg, run.data
    resume.check_lengths(run)
    parts.check_budget(cfg, data.train)
    batches = parts.batches(data.train, cfg, run.device)
    val_batches = parts.batches(data.val, cfg, run.device)
    if len(batches) < world.size:
        raise ValueError(f"{len(batches)} batches cannot feed {world.size} processes")
    run.history["world_size"] = world.size
    return batches, val_batches


def next_window(run, world, n_batches, stop, parts):
    """(batch indices up to the next evaluation or `stop`, whether they end the
    epoch): this process's share of the rest of the epoch's order."""
    cfg, p = run.cfg, run.progress
    order = parts.order(n_batches, cfg.seed, p["epoch"])
    mine = world.shard(order[p["batch"] :])
    next_eval = (p["step"] // cfg.eval_every + 1) * cfg.eval_every
    todo = mine[: min(next_eval, stop) - p["step"]]
    return todo, len(todo) == len(mine)


def advance(run, world, steps, loss, ntokens, seconds, epoch_done):
    """Count a window's steps, summed loss, label tokens and time into the run."""
    p = run.progress
    run.window_s += seconds  # training seconds since the last evaluation
    run.history["train_time_s"] += seconds
    p.update(
        step=p["step"] + steps,
        batch=p["batch"] + steps * world.size,
        loss=p["loss"] + loss,
        ntokens=p["ntokens"] + ntokens,
    )
    if epoch_done:
        p.update(epoch=p["epoch"] + 1, batch=0)


def finished_run(run, log):
    """A run that reached its budget: its log as it was, and its model."""
    log(f"finished run loaded from {run.ckpt_dir}:")
    for i in range(len(run.history["steps"])):
        log(history_line(run.history, i))
    return run.model.eval(), run.history


def validation_loss(run: TrainingRun, val_batches) -> float:
    total, ntokens, _ = run_epoch(
        val_batches,
        run.model,
        run.loss_compute,
        precision=run.precision,
        desc="validation",
    )
    return total / ntokens


def evaluate(run, val_batches, world, log=print, last=False):
    """Validate, snapshot, and every resume_every evaluations (and at the last step
    of a call to train) write last.pt."""
    p, h = run.progress, run.history
    summed = world.all_sum(torch.tensor([p["loss"], p["ntokens"]], dtype=torch.float64))
    loss, ntokens = summed.tolist()
    val = validation_loss(run, val_batches)
    h["steps"].append(p["step"])
    h["train_loss"].append(loss / max(ntokens, 1))
    h["val_loss"].append(val)
    h["time_s"].append(run.window_s)
    h["tokens"] += int(ntokens)
    if h["best_step"] is None or val < h["val_loss"][h["steps"].index(h["best_step"])]:
        h["best_step"] = p["step"]
    p.update(loss=0.0, ntokens=0)
    run.window_s = 0.0
    resume.save_snapshot(run, world, val)
    if last or len(h["steps"]) % run.cfg.resume_every == 0:
        resume.save_run(run, world)
        resume.prune_snapshots(run, world)  # keeps those Part 4 may average
    world.barrier()
    log(history_line(h, len(h["steps"]) - 1))


def history_line(h: dict, i: int) -> str:
    better = h["val_loss"][i] < min(h["val_loss"][:i], default=math.inf)
    best = " (best so far)" if better else ""
    return (
        f"step {h['steps'][i]:>5}: train loss {h['train_loss'][i]:.3f}, val loss "
        f"{h['val_loss'][i]:.3f}, {h['time_s'][i]:4.0f} s{best}"
    )


def summary(model, history) -> str:
    """One line on a trained run: its size, steps, best step and speed."""
    best = history["steps"].index(history["best_step"])
    seconds = history["train_time_s"]
    return (
        f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
        f"{history['steps'][-1]} steps; best: step {history['best_step']} (val loss "
        f"{history['val_loss'][best]:.3f}); {seconds:.0f} s of training, "
        f"{history['tokens'] / seconds:,.0f} label tokens/s"
    )


def plot_history(history, title):
    """The training and validation loss at each evaluation, the best step marked."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot(history["steps"], history["train_loss"], marker="o", label="train")
    ax.plot(history["steps"], history["val_loss"], marker="o", label="validation")
    best = history["best_step"]
    ax.axvline(best, color="grey", linestyle=":", label=f"best (step {best})")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("label-smoothed loss per token")
    ax.set_xticks(history["steps"][:: max(1, len(history["steps"]) // 6)])
    ax.set_title(title)
    ax.legend()
    plt.show()
