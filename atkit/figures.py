"""The notebook's drawings (images/*.png, drawn by images/draw_figures.py with an SVG
twin) as cell outputs, so that they show in Jupyter, in Colab and on the page alike;
and Part 6's heatmaps of attention heads (`plot_heads`), sized for the page."""

from __future__ import annotations

from pathlib import Path

IMAGES = Path(__file__).resolve().parents[1] / "images"

CAPTIONS = {
    "transformer": "The whole model: embeddings and positional encodings, N encoder "
    "layers, N decoder layers, and the output projection.",
    "residual_norm": "Post-norm (the paper) and pre-norm residual blocks side by side.",
    "attention": "Scaled dot-product attention (left) and multi-head attention "
    "(right), with the shapes used in this notebook.",
    "masks": "Which positions each of the three attentions may look at, for a source "
    "of five tokens (the last one padding) and a target of four.",
}


class Figure:
    """A drawing with a caption; Jupyter shows it through _repr_png_, at the size it
    was drawn for (130 dpi, shown at 100)."""

    def __init__(self, name: str):
        if name not in CAPTIONS:
            raise ValueError(f"no figure {name!r}; there are {sorted(CAPTIONS)}")
        path = IMAGES / f"{name}.png"
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: run the notebook from its repository (the Setup "
                "cell fetches it on Colab), or draw it: python images/draw_figures.py"
            )
        self.name, self.caption = name, CAPTIONS[name]
        self.png = path.read_bytes()
        width = int.from_bytes(self.png[16:20], "big")  # from the PNG header
        self.width = round(width * 100 / 130)

    def _repr_png_(self):
        return self.png, {"width": self.width}

    def __repr__(self) -> str:
        return f"[figure: {self.caption}]"


def show_figure(name: str) -> Figure:
    """The drawing `name` (as the value of the cell, so Jupyter displays it)."""
    return Figure(name)


# --------------------------------------------------------------------------- heatmaps

# Sizes of Part 6's heatmaps, in points (1/72 inch) and inches: the labels are drawn at
# LABEL_PT, which at the notebook's 80 dpi is 11 px, and a cell is a little taller than
# a label, so that every row and column keeps its word.
LABEL_PT = 10.0
TITLE_PT = 11.0
CELL_IN = 0.2
COLORBAR_LABEL = "attention weight"


def _array(weights):
    """A float array from a torch tensor (any device) or anything array-like."""
    import numpy as np

    if hasattr(weights, "detach"):
        weights = weights.detach().cpu().float().numpy()
    return np.asarray(weights, dtype=float)


def draw_heads(weights, rows, cols, title, heads=None, ncols=2):
    """The figure of `plot_heads`, not shown: heatmaps of heads of one layer, rows
    labelled with the query tokens, columns with the key tokens, one colour bar
    (weights 0 to 1) for all of them.

    `weights`: (h, len(rows), len(cols)) for one layer (a tensor or an array); `heads`:
    which heads, counted from 1 (default all); `ncols`: heatmaps per row of the grid.
    The figure's size follows the number of tokens, so that its labels are drawn at
    10 pt (11 px at 80 dpi): the page shows them at that size in its 900 px column and,
    for one head of up to 16 tokens, at 9 px or more in a phone's 366 px column
    (tests/test_attention_view.py).
    """
    import matplotlib.pyplot as plt
    import seaborn as sns

    weights = _array(weights)
    if weights.ndim != 3 or weights.shape[1:] != (len(rows), len(cols)):
        raise ValueError(
            f"weights has shape {weights.shape}; expected (h, {len(rows)}, {len(cols)})"
            " for the row and column labels given"
        )
    h = weights.shape[0]
    heads = list(range(1, h + 1)) if heads is None else list(heads)
    bad = [k for k in heads if not 1 <= k <= h]
    if bad or not heads:
        raise ValueError(f"heads {bad or heads} out of 1..{h} (heads count from 1)")
    ncols = max(1, min(ncols, len(heads)))
    nrows = -(-len(heads) // ncols)
    longest = max(map(len, [*map(str, rows), *map(str, cols)]), default=1)
    label_in = 0.3 + 0.6 * LABEL_PT / 72 * min(longest, 14)  # a word beside a map
    map_w, map_h = CELL_IN * len(cols), CELL_IN * len(rows)
    fig = plt.figure(
        figsize=(
            ncols * (label_in + map_w) + 0.35 * (ncols - 1) + 1.1,
            nrows * (label_in + map_h + 0.35) + 0.45,
        ),
        layout="constrained",
    )
    axes = fig.subplots(nrows, ncols, squeeze=False)
    mesh = None
    for ax, head in zip(axes.flat, heads, strict=False):
        sns.heatmap(
            weights[head - 1],
            ax=ax,
            vmin=0,
            vmax=1,
            cmap="viridis",
            cbar=False,
            square=True,
            xticklabels=list(cols),
            yticklabels=list(rows),
        )
        mesh = ax.collections[0]
        ax.set_title(f"head {head}", fontsize=TITLE_PT)
        ax.tick_params(labelsize=LABEL_PT, length=0)
        ax.tick_params(axis="x", labelrotation=90)
        ax.tick_params(axis="y", labelrotation=0)
    for ax in list(axes.flat)[len(heads) :]:
        ax.axis("off")
    bar = fig.colorbar(
        mesh, ax=axes, shrink=min(1.0, 0.35 + 0.05 * len(rows)), aspect=30, pad=0.02
    )
    bar.set_label(COLORBAR_LABEL, fontsize=LABEL_PT)
    bar.ax.tick_params(labelsize=LABEL_PT)
    fig.suptitle(title, fontsize=TITLE_PT + 1)
    return fig


def plot_heads(weights, rows, cols, title, heads=None, ncols=2):
    """Show heatmaps of heads of one layer (see `draw_heads`): Part 6's plots."""
    import matplotlib.pyplot as plt

    draw_heads(weights, rows, cols, title, heads, ncols)
    plt.show()
