"""Part 5's check of data parallelism: two processes against one.

`two_processes_against_one` trains the copy task with two torchrun processes (CPU,
gloo) and then, in this process, takes the same optimiser steps on the same global
batches (`global_batch_steps`: each step on the epoch's next W batches as
micro-batches of the runner's step); `plot_two_runs` draws the two loss curves and
prints how far apart they are. The program the workers run and the notebook's parts
come in as arguments: atkit never imports the notebook or a program of tools/.
"""

from __future__ import annotations

from pathlib import Path

from atkit import checkpoints, launch, runner


def global_batch_steps(cfg, data, world_size, steps, parts, folder, device="cpu"):
    """One process taking the steps that `world_size` ranks take together: each
    optimiser step on the epoch's next `world_size` batches as micro-batches.
    Returns (model, the loss per label token of each step)."""
    ckpt_dir = checkpoints.prepare_ckpt_dir(folder)
    run = runner.start_run(cfg, data, ckpt_dir, device, parts)  # the ranks' weights
    batches = parts.batches(data.train, cfg, device)
    usable = len(batches) // world_size * world_size  # what the ranks share out
    losses, epoch = [], 0
    while len(losses) < steps:
        order = parts.order(len(batches), cfg.seed, epoch)[:usable]
        for k in range(0, usable, world_size):
            group = [batches[j] for j in order[k : k + world_size]]
            loss = runner.train_step(
                run.model, group, run.loss_compute, run.optimizer, run.scheduler
            )
            losses.append(loss.item() / sum(b.ntokens for b in group))
            if len(losses) == steps:
                break
        epoch += 1
    return run.model, losses


def two_processes_against_one(folder, cfg, data, parts, worker, preset="ci"):
    """The copy task (`data`, settings `cfg` of `preset`) trained by two torchrun
    processes that run `worker` (Python source) on CPU with gloo, and by one process
    on the same global batches: each run's loss per step."""
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
    _, one = global_batch_steps(cfg, data, 2, cfg.steps, parts, one_folder)
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
