"""The notebook's drawings (images/*.png, drawn by images/draw_figures.py with an SVG
twin) as cell outputs, so that they show in Jupyter, in Colab and on the page alike."""

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
