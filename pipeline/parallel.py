"""Part 5's check of data parallelism: two processes against one.

`two_processes_against_one` trains the copy task with two torchrun processes (CPU,
gloo) and then, in this process, takes the same optimiser steps on the same global
batches (`global_batch_steps`: each step Part 2's `train_step` over the epoch's next W
batches as micro-batches, `MicroBatches`); `plot_two_runs` draws the two loss curves
and prints how far apart they are. The program the workers run comes in as an
argument (this package starts no program of tools/ by name).
"""

from __future__ import annotations

from pathlib import Path

import annotated_transformer_lib as book
from atkit import checkpoints, launch
from pipeline import run as resumable


class _Gate:
    """An optimiser or schedule whose `zero_grad` acts only on the first micro-batch
    and whose `step` only on the last."""

    def __init__(self, inner, first, last):
        self.inner, self.first, self.last = inner, first, last

    def zero_grad(self, set_to_none=True):
        if self.first:
            self.inner.zero_grad(set_to_none=set_to_none)

    def step(self):
        if self.last:
            self.inner.step()


def micro_batch_step(model, group, loss_compute, optimizer, scheduler):
    """One optimiser step over the batches of `group` as micro-batches: Part 2's
    `train_step` on each, the gradients adding up (zero_grad before the first, the
    optimiser and the schedule step after the last), each loss divided by the label
    tokens of all of them: the step of one batch made of them all. Returns the
    summed loss (a detached tensor)."""
    ntokens = sum(b.ntokens for b in group)

    def loss_of_all(x, y, _own_ntokens):
        return loss_compute(x, y, ntokens)

    total = 0.0
    for i, b in enumerate(group):
        first, last = i == 0, i == len(group) - 1
        opt, sched = (_Gate(o, first, last) for o in (optimizer, scheduler))
        total = total + book.train_step(model, b, loss_of_all, opt, sched)
    return total


def global_batch_steps(cfg, data, world_size, steps, folder, device="cpu"):
    """One process taking the steps that `world_size` ranks take together: each
    optimiser step on the epoch's next `world_size` batches as micro-batches.
    Returns (model, the loss per label token of each step)."""
    ckpt_dir = checkpoints.prepare_ckpt_dir(folder)
    run = resumable.start_run(cfg, data, ckpt_dir, device)  # the ranks' weights
    batches = book.make_batches(data.train, cfg, device)
    usable = len(batches) // world_size * world_size  # what the ranks share out
    losses, epoch = [], 0
    while len(losses) < steps:
        order = book.epoch_order(len(batches), cfg.seed, epoch)[:usable]
        for k in range(0, usable, world_size):
            group = [batches[j] for j in order[k : k + world_size]]
            loss = micro_batch_step(
                run.model, group, run.loss_compute, run.optimizer, run.scheduler
            )
            losses.append(loss.item() / sum(b.ntokens for b in group))
            if len(losses) == steps:
                break
        epoch += 1
    return run.model, losses


def two_processes_against_one(folder, cfg, data=None, worker=None, preset="ci"):
    """The copy task (`data`, by default the book's copy_task_data of `cfg`, settings
    `cfg` of `preset`) trained by two torchrun processes that run `worker` (Python
    source; by default tools/train.py's) on CPU with gloo, and by one process on the
    same global batches: each run's loss per step."""
    data = book.copy_task_data(cfg) if data is None else data
    worker = launch.worker_code("tools.train") if worker is None else worker
    changes = dict(
        steps=cfg.steps,
        eval_every=cfg.eval_every,
        resume_every=cfg.resume_every,
        P_drop=cfg.model.P_drop,
    )
    args = ["--task", "copy", "--preset", preset, "--device", "cpu", "--fresh"]
    args += ["--ckpt-dir", folder, "--out", Path(folder) / "results.json"]
    args += [a for k, v in changes.items() for a in ("--set", f"{k}={v}")]
    launch.launch_torchrun(args, worker, nproc=2, timeout_s=600, echo=False)
    history = checkpoints.load_checkpoint(Path(folder) / "last.pt")["history"]
    one_folder = Path(folder).parent / f"{Path(folder).name}-one"
    _, one = global_batch_steps(cfg, data, 2, cfg.steps, one_folder)
    return history["train_loss"], one


def plot_two_runs(two, one):
    """The two loss curves side by side, and how far apart they are."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(8, 3), sharey=True)
    for ax, losses, title in (
        (axes[0], two, "2 processes (DDP)"),
        (axes[1], one, "1 process, same global batches"),
    ):
        ax.plot(range(1, len(losses) + 1), losses, marker=".")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("optimiser step")
    axes[0].set_ylabel("loss per label token")
    fig.tight_layout()
    plt.show()
    gap = max(abs(a - b) for a, b in zip(two, one, strict=True))
    print(f"{len(one)} steps; the largest difference between the curves: {gap:.1e}")
