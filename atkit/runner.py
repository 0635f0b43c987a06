"""What a training run shows and checks, needing neither the notebook nor the
pipeline: the progress bar of Part 2's `run_epoch`, the check that a window's losses
are finite, the single-process `world` (Part 5 has the data-parallel kind), and the
run's log lines, summary and loss curves. The loop itself is the notebook's; the
resumable run around it is `pipeline.run`.
"""

from __future__ import annotations

import math

import torch

from atkit import runtime
from atkit.resume import NonFiniteLossError


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
