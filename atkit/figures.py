"""The notebook's drawings (images/*.svg, drawn by images/draw_figures.py) as cell
outputs, so that they show in Jupyter, in Colab and on the page alike; the style of
every plot (`use_page_style`, applied by atkit.runtime.setup()); and Part 6's heatmaps
of attention heads (`plot_heads`), sized for the page.

Plots and drawings are SVG: sharp at any zoom and on any screen, their words kept as
text. The page (tools/render_page.py) shows a figure at PAGE_PX_PER_IN CSS pixels per
inch of its matplotlib size, at most its column's width; at that scale a label of 7 pt
or more reads at 11 px or more in the 900 px column of a laptop
(tests/test_page_reader.py measures it in Chromium)."""

from __future__ import annotations

from pathlib import Path

IMAGES = Path(__file__).resolve().parents[1] / "images"
# How the page sizes a figure: CSS px per inch of its size in matplotlib (the SVG's
# width in pt times 120/72). 96 would be "actual size"; 120 is a figure of 7.5 inches
# across the 900 px column, and its 7 pt labels at 11.7 px.
PAGE_PX_PER_IN = 120
# One colour map for attention weights everywhere: the static heatmaps here and the
# interactive view of atkit/page/attention_view.js (its RAMP samples matplotlib's
# "Blues").
ATTENTION_CMAP = "Blues"
# What every plot of the notebook is drawn with (use_page_style).
PLOT_STYLE = {
    "svg.fonttype": "none",  # words stay text: crisp, searchable, read aloud
    "font.family": ["sans-serif"],
    "font.sans-serif": ["DejaVu Sans", "Arial"],  # named in each word of an SVG
    "savefig.dpi": 192,  # what an image inside a plot (imshow) is sampled at: 2x
    "figure.dpi": 96,
}


def use_page_style() -> None:
    """Draw every plot as SVG with PLOT_STYLE: in Jupyter and Colab the inline
    backend's figures become SVG outputs (no PNG beside them); elsewhere (a script,
    the tests) only the style changes. Called by atkit.runtime.setup()."""
    import matplotlib

    matplotlib.rcParams.update(PLOT_STYLE)
    try:
        from IPython import get_ipython
    except ImportError:  # no IPython: nothing displays figures inline
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    from IPython.core.pylabtools import select_figure_formats

    try:  # the inline backend's setting: it chooses the formats again when pyplot
        # loads it, at the first figure (after this call)
        from matplotlib_inline.config import InlineBackend

        InlineBackend.instance(parent=shell).figure_formats = {"svg"}
    except ImportError:  # no inline backend: the formatter alone
        pass
    select_figure_formats(shell, {"svg"}, bbox_inches="tight")


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
    """A drawing with a caption; Jupyter shows it through _repr_svg_ (the SVG of
    images/, its words drawn as outlines, so it looks the same everywhere)."""

    def __init__(self, name: str):
        if name not in CAPTIONS:
            raise ValueError(f"no figure {name!r}; there are {sorted(CAPTIONS)}")
        path = IMAGES / f"{name}.svg"
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: run the notebook from its repository (the Setup "
                "cell fetches it on Colab), or draw it: python images/draw_figures.py"
            )
        self.name, self.caption = name, CAPTIONS[name]
        self.svg = path.read_text(encoding="utf-8")

    def _repr_svg_(self):
        return self.svg

    def __repr__(self) -> str:
        return f"[figure: {self.caption}]"


def show_figure(name: str) -> Figure:
    """The drawing `name` (as the value of the cell, so Jupyter displays it)."""
    return Figure(name)


# --------------------------------------------------------------------------- heatmaps

# Sizes of Part 6's heatmaps, in points (1/72 inch) and inches: the labels are drawn at
# LABEL_PT, which the page shows at 16.7 px (PAGE_PX_PER_IN) or, in a figure wider than
# the column, scaled down with it; a cell is a little taller than a label, so that every
# row and column keeps its word.
LABEL_PT = 10.0
TITLE_PT = 11.0
CELL_IN = 0.2
COLORBAR_LABEL = "attention weight"


def as_array(x):
    """A float array from a torch tensor (any device or float type) or anything
    array-like: what matplotlib is given (a tensor itself makes numpy 2 warn)."""
    import numpy as np

    if hasattr(x, "detach"):  # torch.Tensor, without importing torch here
        x = x.detach().cpu().float().numpy()
    return np.asarray(x, dtype=float)


def draw_heads(weights, rows, cols, title, heads=None, ncols=2):
    """The figure of `plot_heads`, not shown: heatmaps of heads of one layer, rows
    labelled with the query tokens, columns with the key tokens, one colour bar
    (weights 0 to 1) for all of them.

    `weights`: (h, len(rows), len(cols)) for one layer (a tensor or an array); `heads`:
    which heads, counted from 1 (default all); `ncols`: heatmaps per row of the grid.
    The figure's size follows the number of tokens, so that its labels are drawn at
    10 pt: the page shows them at 11 px or more in its 900 px column and, for one head
    of up to 16 tokens, at 9 px or more in a phone's 366 px column
    (tests/test_attention_view.py). Colours: ATTENTION_CMAP, as the interactive view.
    """
    import matplotlib.pyplot as plt
    import seaborn as sns

    weights = as_array(weights)
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
            cmap=ATTENTION_CMAP,
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
