"""The plots of Parts 1 and 2 (positional encodings, learning-rate schedules, label
smoothing), drawn from numbers the notebook computed: the notebook's cell holds the
idea and the numbers, one call here draws them and prints what a reader checks.
matplotlib is imported by each function (a program's --help never loads it)."""

from __future__ import annotations

from atkit.figures import as_array


def positional_encoding(pe, dims=(4, 5, 6, 7)) -> None:
    """A few columns of a positional-encoding table (positions, d_model) against
    the position, beside the whole table as an image."""
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.2))
    for dim in dims:
        a.plot(pe[:, dim], label=f"dim {dim}")
    a.set_xlabel("position")
    a.legend()
    a.set_title("a few columns of PE")
    im = b.imshow(as_array(pe).T, aspect="auto", cmap="RdBu", interpolation="nearest")
    b.set_xlabel("position")
    b.set_ylabel("dimension")
    b.set_title("the whole table")
    fig.colorbar(im, ax=b)
    plt.show()


def learning_rates(curves: dict) -> None:
    """label -> the rate of each step (step 1 first): one line each, and a printed
    line per curve with its peak (and the step of it) and its last rate."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    for label, lrs in curves.items():
        ax.plot(lrs, label=label)
        peak = max(range(len(lrs)), key=lrs.__getitem__)
        print(
            f"{label}: peak {lrs[peak]:.2e} at step {peak + 1}, last step {lrs[-1]:.2e}"
        )
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
    fig.tight_layout()
    plt.show()


def smoothed_targets(q, ylabel) -> None:
    """A (labels, vocab) matrix of target probabilities as a heatmap, each cell
    written out."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 3))
    im = ax.imshow(as_array(q), cmap="viridis", vmin=0, vmax=1)
    for row in range(q.shape[0]):
        for col in range(q.shape[1]):
            value = float(q[row, col])
            ax.text(col, row, f"{value:.2f}", ha="center", va="center", color="w")
    ax.set_xlabel("token")
    ax.set_ylabel(ylabel)
    ax.set_title("smoothed targets q")
    fig.colorbar(im, ax=ax)
    plt.show()


def loss_curves(curves: dict, xlabel: str, at: str) -> None:
    """label -> (x values, losses): one line each, and a printed line per curve
    with its lowest loss and where it lies (`at` names the x value there)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    for label, (xs, losses) in curves.items():
        best = min(range(len(losses)), key=losses.__getitem__)
        print(f"{label}: lowest loss {losses[best]:.3f} at {at} {float(xs[best]):.2f}")
        ax.plot(xs, losses, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("loss")
    ax.legend()
    plt.show()
