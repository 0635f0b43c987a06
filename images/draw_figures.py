"""Draw the notebook's diagrams as SVG and PNG files in this folder.

The figures are our own drawings of the ideas in "Attention Is All You Need"
(Vaswani et al., 2017); nothing is copied from the paper:

* transformer.svg    -- the whole encoder-decoder model, labelled with our class names
* attention.svg      -- scaled dot-product and multi-head attention, with tensor shapes
* residual_norm.svg  -- post-norm (the paper) next to pre-norm
* masks.svg          -- which positions may attend, for the three uses of attention

Run from the repository root:

    .venv/bin/python images/draw_figures.py            # writes images/*.svg, *.png

Only matplotlib (and Pillow, which it uses) is needed. In the SVG files text is
stored as paths (no font needed to view them), and they are byte-identical from one
run to the next. The notebook shows the PNG files, which are a quarter of the size:
130 dpi, reduced to a palette of 64 colours.
"""

import argparse
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle
from matplotlib.path import Path as MplPath

HERE = Path(__file__).resolve().parent

matplotlib.rcParams.update(
    {
        "font.family": "DejaVu Sans",  # ships with matplotlib
        "mathtext.fontset": "dejavusans",
        "svg.fonttype": "path",  # glyphs as outlines: no font needed to view
        "svg.hashsalt": "annotated-transformer",  # stable ids, reproducible files
    }
)

INK = "#2B2B2B"
MUTED = "#6B6F76"
MONO = "DejaVu Sans Mono"

# (fill, edge) per kind of block; the same colour means the same kind of thing.
PALETTE = {
    "attn": ("#FDE3C6", "#D9822B"),
    "ffn": ("#D8E9FA", "#3B7DC4"),
    "norm": ("#FFF3BF", "#BF9A1F"),
    "embed": ("#EADFF7", "#7B55B8"),
    "out": ("#D9F0DA", "#3F9142"),
    "op": ("#EFEFEF", "#7A7A7A"),
    "frame": ("#F5F6F8", "#A3A8B0"),
}
RESIDUAL = "#3F9142"


# ---------------------------------------------------------------------------------
# Small drawing helpers. Every figure uses one axes spanning the whole figure, with
# data coordinates in inches, so sizes and positions below read as inches.
# ---------------------------------------------------------------------------------


def canvas(width, height):
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_axis_off()
    return fig, ax


def box(ax, x, y, w, h, label, kind="op", sub=None, size=9.5, dashed=False, stack=0):
    """Rounded box centred at (x, y); `sub` is a smaller monospace line (class name).

    `stack` > 0 draws that many copies behind the box, for "h of these in parallel".
    """
    fill, edge = PALETTE[kind]
    for i in range(stack, -1, -1):
        d = 0.07 * i
        ax.add_patch(
            FancyBboxPatch(
                (x - w / 2 + d, y - h / 2 + d),
                w,
                h,
                boxstyle="round,pad=0,rounding_size=0.08",
                facecolor=fill,
                edgecolor=edge,
                linewidth=1.2,
                linestyle=(0, (4, 2.5)) if dashed else "-",
                zorder=3 - 0.1 * i,
            )
        )
    if sub is None:
        note(ax, x, y, label, size=size, color=INK)
    else:
        note(ax, x, y + 0.075, label, size=size, color=INK)
        note(ax, x, y - 0.115, sub, mono=True)


def arrow(ax, *points, color=INK, lw=1.2, head=True, zorder=2):
    """Polyline through `points`, with an arrow head at the last one."""
    path = MplPath(points, [MplPath.MOVETO] + [MplPath.LINETO] * (len(points) - 1))
    ax.add_patch(
        FancyArrowPatch(
            path=path,
            arrowstyle="-|>,head_length=0.45,head_width=0.22" if head else "-",
            mutation_scale=12,
            color=color,
            linewidth=lw,
            joinstyle="round",
            capstyle="round",
            zorder=zorder,
        )
    )


def dot(ax, x, y, color=INK):
    ax.add_patch(Circle((x, y), 0.035, color=color, zorder=5))


def plus(ax, x, y, r=0.12, color=INK):
    """A circled plus sign (element-wise addition)."""
    ax.add_patch(
        Circle((x, y), r, facecolor="white", edgecolor=color, lw=1.2, zorder=3)
    )
    ax.plot([x - r * 0.6, x + r * 0.6], [y, y], color=color, lw=1.2, zorder=4)
    ax.plot([x, x], [y - r * 0.6, y + r * 0.6], color=color, lw=1.2, zorder=4)


def frame(ax, x0, y0, x1, y1, kind="frame", dashed=False):
    fill, edge = PALETTE[kind]
    ax.add_patch(
        FancyBboxPatch(
            (x0, y0),
            x1 - x0,
            y1 - y0,
            boxstyle="round,pad=0,rounding_size=0.15",
            facecolor="none" if dashed else fill,
            edgecolor=edge,
            linewidth=1.0,
            linestyle=(0, (5, 3)) if dashed else "-",
            zorder=0 if dashed else 1,
        )
    )


def note(ax, x, y, text, size=7.5, color=MUTED, mono=False, **kw):
    kw.setdefault("ha", "center")
    kw.setdefault("va", "center")
    family = MONO if mono else "DejaVu Sans"
    ax.text(x, y, text, fontsize=size, color=color, family=family, zorder=6, **kw)


def save(fig, name, png_dir=None):
    import io

    from PIL import Image

    fig.savefig(HERE / name, format="svg", metadata={"Date": None})
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=130, metadata={"Software": None})
    image = Image.open(buffer).convert("RGB").quantize(colors=64)
    image.save(Path(png_dir or HERE) / Path(name).with_suffix(".png"), optimize=True)


# ---------------------------------------------------------------------------------
# Figure 1: the whole model
# ---------------------------------------------------------------------------------


def draw_layer_stack(ax, x, y0, blocks, outward):
    """Boxes of one encoder or decoder layer, bottom to top, from trunk height y0.

    `blocks` lists (label, kind, sub, inputs) with inputs "qkv" (self-attention:
    the trunk forks into three), "q" (queries only, keys and values come from the
    side) or None. Each "norm" block gets a residual line from the point where the
    trunk entered the sub-layer before it; the line runs on the `outward` side
    (-1 left, +1 right). Returns the trunk height at the top and the box centres.
    """
    w, h = 2.6, 0.44
    x_res = x + outward * (w / 2 + 0.2)
    y, branch, centres = y0, None, []
    for label, kind, sub, inputs in blocks:
        if kind == "norm":
            yc = y + 0.22 + h / 2
            arrow(ax, (x, y), (x, yc - h / 2))
            arrow(
                ax,
                (x, branch),
                (x_res, branch),
                (x_res, yc),
                (x + outward * w / 2, yc),
                color=RESIDUAL,
            )
            dot(ax, x, branch, RESIDUAL)
        else:
            branch = y + 0.12
            yc = branch + (0.36 if inputs == "qkv" else 0.2) + h / 2
            bottom = yc - h / 2
            if inputs == "qkv":
                fork = bottom - 0.18
                ax.plot([x, x], [y, fork], color=INK, lw=1.2, zorder=2)
                for dx, name in ((-0.75, "Q"), (0, "K"), (0.75, "V")):
                    arrow(ax, (x, fork), (x + dx, fork), (x + dx, bottom))
                    note(ax, x + dx + 0.1, fork + 0.09, name, size=7, color=INK)
            else:
                arrow(ax, (x, y), (x, bottom))
                if inputs == "q":
                    note(ax, x + 0.1, bottom - 0.1, "Q", size=7, color=INK)
        box(ax, x, yc, w, h, label, kind, sub)
        centres.append(yc)
        y = yc + h / 2
    return y, centres


def draw_transformer(png_dir=None):
    W, H = 8.0, 9.9
    fig, ax = canvas(W, H)
    xe, xd = 2.35, 5.65
    bw, bh = 2.6, 0.44

    # Outer dashed frame: everything inside is one EncoderDecoder.
    frame(ax, 0.12, 0.78, W - 0.12, 9.05, dashed=True)
    note(ax, 0.3, 8.85, "EncoderDecoder", size=8.5, mono=True, ha="left")

    # --- inputs, embeddings and positional encodings (both sides) ---
    for x, side, text in (
        (xe, -1, "source tokens  (B, S)"),
        (xd, +1, "target tokens, shifted right  (B, T)"),
    ):
        note(ax, x, 0.5, text, size=8.5, color=INK)
        arrow(ax, (x, 0.62), (x, 1.12))
        box(
            ax,
            x,
            1.34,
            bw,
            bh,
            r"Embedding  $\times\sqrt{d_{\mathrm{model}}}$",
            "embed",
            "Embeddings",
        )
        arrow(ax, (x, 1.56), (x, 1.82))
        plus(ax, x, 1.94)
        xs = x + side * 0.8
        arrow(ax, (xs, 1.94), (x + side * 0.12, 1.94))
        ha = "right" if side < 0 else "left"
        note(ax, xs + side * 0.08, 2.0, "positional encoding", size=8, color=INK, ha=ha)
        note(ax, xs + side * 0.08, 1.84, "PositionalEncoding", size=7, mono=True, ha=ha)

    # --- encoder ---
    enc_blocks = [
        ("Multi-head self-attention", "attn", "MultiHeadedAttention", "qkv"),
        ("Add & Norm", "norm", "SublayerConnection", None),
        ("Feed-forward", "ffn", "PositionwiseFeedForward", None),
        ("Add & Norm", "norm", "SublayerConnection", None),
    ]
    ax.plot([xe, xe], [2.06, 2.3], color=INK, lw=1.2, zorder=2)
    e_top, _ = draw_layer_stack(ax, xe, 2.3, enc_blocks, outward=-1)
    ex0, ex1, ey0, ey1 = xe - bw / 2 - 0.42, xe + bw / 2 + 0.15, 2.2, e_top + 0.15
    frame(ax, ex0, ey0, ex1, ey1)
    note(ax, ex0 - 0.06, (ey0 + ey1) / 2, r"$\times N$", size=13, color=INK, ha="right")
    note(ax, ex0 + 0.02, ey1 + 0.3, "Encoder", size=10.5, color=INK, ha="left")
    note(ax, ex0 + 0.02, ey1 + 0.12, "Encoder, EncoderLayer", mono=True, ha="left")

    # --- decoder ---
    dec_blocks = [
        ("Masked multi-head self-attention", "attn", "MultiHeadedAttention", "qkv"),
        ("Add & Norm", "norm", "SublayerConnection", None),
        ("Encoder-decoder attention", "attn", "MultiHeadedAttention", "q"),
        ("Add & Norm", "norm", "SublayerConnection", None),
        ("Feed-forward", "ffn", "PositionwiseFeedForward", None),
        ("Add & Norm", "norm", "SublayerConnection", None),
    ]
    ax.plot([xd, xd], [2.06, 2.3], color=INK, lw=1.2, zorder=2)
    d_top, d_centres = draw_layer_stack(ax, xd, 2.3, dec_blocks, outward=+1)
    dx0, dx1, dy0, dy1 = xd - bw / 2 - 0.15, xd + bw / 2 + 0.42, 2.2, d_top + 0.15
    frame(ax, dx0, dy0, dx1, dy1)
    note(ax, dx1 + 0.06, (dy0 + dy1) / 2, r"$\times N$", size=13, color=INK, ha="left")
    note(ax, dx1 - 0.02, dy1 + 0.3, "Decoder", size=10.5, color=INK, ha="right")
    note(ax, dx1 - 0.02, dy1 + 0.12, "Decoder, DecoderLayer", mono=True, ha="right")

    # --- memory: encoder output -> keys and values of encoder-decoder attention ---
    y_mem, x_gap = ey1 + 0.62, (ex1 + dx0) / 2
    y_cross = d_centres[2]
    arrow(
        ax,
        (xe, e_top),
        (xe, y_mem),
        (x_gap, y_mem),
        (x_gap, y_cross),
        (xd - bw / 2, y_cross),
    )
    note(ax, (xe + x_gap) / 2, y_mem + 0.26, "memory", size=8.5, color=INK)
    note(ax, (xe + x_gap) / 2, y_mem + 0.11, "(B, S, d_model)", size=7.5)
    note(ax, x_gap + 0.08, y_cross + 0.1, "K, V", size=7, color=INK, ha="left")

    # --- generator ---
    arrow(ax, (xd, d_top), (xd, d_top + 0.7))
    y_lin = d_top + 0.7 + bh / 2
    box(ax, xd, y_lin, bw, bh, "Linear", "out")
    arrow(ax, (xd, y_lin + bh / 2), (xd, y_lin + bh / 2 + 0.22))
    y_soft = y_lin + bh / 2 + 0.22 + bh / 2
    box(ax, xd, y_soft, bw, bh, "Softmax", "out", "log_softmax in the code")
    xb = xd + bw / 2 + 0.12
    ax.plot(
        [xb - 0.05, xb, xb, xb - 0.05],
        [y_lin - bh / 2, y_lin - bh / 2, y_soft + bh / 2, y_soft + bh / 2],
        color=MUTED,
        lw=1.0,
    )
    note(ax, xb + 0.07, (y_lin + y_soft) / 2, "Generator", mono=True, ha="left")
    arrow(ax, (xd, y_soft + bh / 2), (xd, 9.38))
    note(ax, xd, 9.52, "next-token probabilities  (B, T, vocab)", size=8.5, color=INK)

    for i, line in enumerate(
        (
            "Each sub-layer and the Add & Norm above it form",
            "one SublayerConnection: dropout, residual add",
            "(green), LayerNorm. Post-norm shown.",
        )
    ):
        note(ax, 0.3, 8.6 - 0.16 * i, line, ha="left", size=7.5)
    save(fig, "transformer.svg", png_dir)


# ---------------------------------------------------------------------------------
# Figure 2: scaled dot-product attention and multi-head attention
# ---------------------------------------------------------------------------------


def draw_attention(png_dir=None):
    fig, ax = canvas(8.0, 5.8)
    h, y_in, y_top = 0.4, 0.64, 4.65  # box height, input labels, top of the arrows

    def inputs(x, name, shape):
        note(ax, x, y_in, name, size=10, color=INK)
        note(ax, x, y_in - 0.18, shape, size=7)

    def heading(x, title, code, *formulas):
        note(ax, x, 5.6, title, size=11, color=INK)
        note(ax, x, 5.4, code, mono=True)
        for i, formula in enumerate(formulas):
            note(ax, x, 5.13 - 0.25 * i, formula, size=9, color=INK)

    # Left panel: scaled dot-product attention, eq. 1.
    heading(
        1.75,
        "Scaled dot-product attention",
        "attention(query, key, value, mask)",
        r"$\mathrm{softmax}\left(QK^{\top}/\sqrt{d_k}\right)\,V$   (eq. 1)",
    )
    xt, w = 1.2, 1.55
    xq, xk, xv = 0.7, 1.7, 2.85
    inputs(xq, "Q", "(B, h, T, d_k)")
    inputs(xk, "K", "(B, h, S, d_k)")
    inputs(xv, "V", "(B, h, S, d_k)")
    rows = [
        (1.3, r"MatMul  $QK^{\top}$", None, False),
        (2.0, r"Scale  $\times 1/\sqrt{d_k}$", None, False),
        (2.7, "Mask (optional)", "blocked → dtype min", True),
        (3.4, "Softmax over keys", None, False),
        (4.1, "MatMul with V", None, False),
    ]
    arrow(ax, (xq, y_in + 0.13), (xq, rows[0][0] - h / 2))
    arrow(ax, (xk, y_in + 0.13), (xk, rows[0][0] - h / 2))
    for i, (y, label, sub, dashed) in enumerate(rows):
        box(ax, xt, y, w, h, label, "op", sub, size=9, dashed=dashed)
        if i:
            arrow(ax, (xt, rows[i - 1][0] + h / 2), (xt, y - h / 2))
    arrow(ax, (xv, y_in + 0.13), (xv, rows[-1][0]), (xt + w / 2, rows[-1][0]))
    note(ax, xt + 0.1, 1.65, "scores (B, h, T, S)", size=7, ha="left")
    note(ax, xt + 0.1, 3.75, "weights (B, h, T, S)", size=7, ha="left")
    arrow(ax, (xt, rows[-1][0] + h / 2), (xt, y_top))
    note(ax, xt + 0.1, 4.46, "output (B, h, T, d_k)", size=7, ha="left")

    ax.plot([3.45, 3.45], [0.15, 5.7], color=PALETTE["frame"][1], lw=0.8)

    # Right panel: multi-head attention.
    xc = 5.7
    heading(
        xc,
        "Multi-head attention",
        "MultiHeadedAttention",
        r"$\mathrm{Concat}(\mathrm{head}_1,\ldots,\mathrm{head}_h)\,W^O$",
        r"$\mathrm{head}_i = \mathrm{Attention}(QW_i^Q, KW_i^K, VW_i^V)$",
    )
    y_lin, y_att, y_cat, y_out = 1.3, 2.4, 3.35, 4.1
    for x, name, shape, weight in (
        (4.55, "Q", "(B, T, d_model)", r"$W_i^Q$"),
        (5.7, "K", "(B, S, d_model)", r"$W_i^K$"),
        (6.85, "V", "(B, S, d_model)", r"$W_i^V$"),
    ):
        inputs(x, name, shape)
        arrow(ax, (x, y_in + 0.13), (x, y_lin - h / 2))
        box(ax, x, y_lin, 1.0, h, "Linear " + weight, "ffn", size=9, stack=2)
        arrow(ax, (x, y_lin + h / 2 + 0.14), (x, y_att - h / 2))
    note(ax, 4.45, y_lin + 0.65, "split into heads", size=7, ha="right")
    note(ax, 4.45, y_lin + 0.5, "(B, h, len, d_k)", size=7, ha="right")
    note(ax, 7.55, y_lin + 0.04, r"$\times h$", size=10, color=INK, ha="left")
    box(ax, xc, y_att, 3.3, h, "Scaled dot-product attention", "attn", size=9, stack=2)
    note(ax, 7.55, y_att + 0.04, r"$\times h$", size=10, color=INK, ha="left")
    arrow(ax, (xc, y_att + h / 2 + 0.14), (xc, y_cat - h / 2))
    note(ax, xc + 0.1, y_att + 0.5, "h heads (B, h, T, d_k)", size=7, ha="left")
    box(ax, xc, y_cat, 1.8, h, "Concat heads", "op", size=9)
    arrow(ax, (xc, y_cat + h / 2), (xc, y_out - h / 2))
    note(ax, xc + 0.1, (y_cat + y_out) / 2, "(B, T, h·d_k)", size=7, ha="left")
    box(ax, xc, y_out, 1.8, h, r"Linear $W^O$", "ffn", size=9)
    arrow(ax, (xc, y_out + h / 2), (xc, y_top))
    note(ax, xc + 0.1, 4.46, "output (B, T, d_model)", size=7, ha="left")
    note(ax, xc, 0.12, "base model: h = 8 heads, d_k = d_model / h = 64", size=7)
    save(fig, "attention.svg", png_dir)


# ---------------------------------------------------------------------------------
# Figure 3: where the LayerNorm sits
# ---------------------------------------------------------------------------------


def draw_residual_norm(png_dir=None):
    fig, ax = canvas(8.0, 6.0)
    w, h = 1.9, 0.42
    y_frame0, y_frame1, y_final = 0.62, 3.95, 4.5

    def panel(xc, title, code, formula, blocks, final, residual_note):
        note(ax, xc, 5.78, title, size=11, color=INK)
        note(ax, xc, 5.58, code, mono=True)
        note(ax, xc, 5.3, formula, size=8.5, color=INK)
        note(ax, xc, 0.25, "x  (B, len, d_model)", size=8.5, color=INK)
        frame(ax, xc - 1.45, y_frame0, xc + 1.45, y_frame1)
        note(
            ax,
            xc - 1.38,
            y_frame1 - 0.06,
            "one sub-layer;\n2 in each encoder\nlayer, 3 in each\ndecoder layer",
            size=7,
            ha="left",
            va="top",
            linespacing=1.3,
        )
        y_branch = 0.85
        ax.plot([xc, xc], [0.38, y_branch], color=INK, lw=1.2, zorder=2)
        y = y_branch
        x_res = xc + w / 2 + 0.3
        for label, kind, sub in blocks:
            if label == "+":
                yc = y + 0.3
                arrow(ax, (xc, y), (xc, yc - 0.12))
                plus(ax, xc, yc)
                arrow(
                    ax,
                    (xc, y_branch),
                    (x_res, y_branch),
                    (x_res, yc),
                    (xc + 0.12, yc),
                    color=RESIDUAL,
                )
                dot(ax, xc, y_branch, RESIDUAL)
                note(
                    ax,
                    x_res + 0.1,
                    (y_branch + yc) / 2,
                    residual_note,
                    size=7.5,
                    color=RESIDUAL,
                    rotation=90,
                )
                y = yc + 0.12
            else:
                yc = y + 0.22 + h / 2
                arrow(ax, (xc, y), (xc, yc - h / 2))
                box(ax, xc, yc, w, h, label, kind, sub, size=9)
                y = yc + h / 2
        arrow(ax, (xc, y), (xc, y_final - h / 2))
        box(ax, xc, y_final, w, h, *final, size=9, dashed=final[1] == "op")
        arrow(ax, (xc, y_final + h / 2), (xc, 5.1))

    sublayer = ("Sublayer", "attn", "attention or feed-forward")
    dropout = ("Dropout", "op", None)
    norm = ("LayerNorm", "norm", None)
    panel(
        2.15,
        "Post-norm (the paper)",
        'SublayerConnection(norm="post")',
        r"$x \leftarrow \mathrm{LayerNorm}(x + "
        r"\mathrm{Dropout}(\mathrm{Sublayer}(x)))$",
        [sublayer, dropout, ("+", None, None), norm],
        ("no final norm", "op", "each layer ends in one"),
        "residual, then LayerNorm",
    )
    panel(
        6.0,
        "Pre-norm",
        'SublayerConnection(norm="pre")',
        r"$x \leftarrow x + "
        r"\mathrm{Dropout}(\mathrm{Sublayer}(\mathrm{LayerNorm}(x)))$",
        [norm, sublayer, dropout, ("+", None, None)],
        ("Final LayerNorm", "norm", "Encoder.norm, Decoder.norm"),
        "residual: identity path",
    )
    ax.plot([4.05, 4.05], [0.15, 5.9], color=PALETTE["frame"][1], lw=0.8)
    save(fig, "residual_norm.svg", png_dir)


# ---------------------------------------------------------------------------------
# Figure 4: masks for the three uses of attention
# ---------------------------------------------------------------------------------


def draw_masks(png_dir=None):
    src = ["<s>", "Hunde", "bellen", "</s>", "<blank>"]
    tgt = ["<s>", "the", "dogs", "bark"]
    n_real = 4  # the source's last token is padding
    panels = [
        (
            "Encoder self-attention",
            "Q, K, V: source",
            "src_mask (B, 1, S)",
            "the padding key is hidden",
            src,
            src,
            lambda q, k: k < n_real,
        ),
        (
            "Masked decoder self-attention",
            "Q, K, V: target",
            "tgt_mask (B, T, T)",
            "no position sees later ones",
            tgt,
            tgt,
            lambda q, k: k <= q,
        ),
        (
            "Encoder-decoder attention",
            "Q: target, K and V: memory",
            "src_mask (B, 1, S)",
            "the padding key is hidden",
            tgt,
            src,
            lambda q, k: k < n_real,
        ),
    ]
    fig, ax = canvas(8.0, 3.55)
    cell, label_w = 0.3, 0.55
    allowed, blocked = "#8CC8A0", "#E4E4E4"
    top = 2.62
    for i, (title, sub, mask_name, gist, queries, keys, rule) in enumerate(panels):
        xc = 1.35 + i * 2.65
        x0 = xc - (len(keys) * cell - label_w) / 2
        note(ax, xc, 3.38, title, size=9.5, color=INK)
        note(ax, xc, 3.2, sub, size=7.5)
        for k, token in enumerate(keys):
            note(
                ax,
                x0 + (k + 0.5) * cell,
                top + 0.06,
                token,
                size=7,
                color=MUTED if token == "<blank>" else INK,
                mono=True,
                rotation=50,
                ha="left",
                va="bottom",
                rotation_mode="anchor",
            )
        for q, token in enumerate(queries):
            y = top - (q + 1) * cell
            color = MUTED if token == "<blank>" else INK
            note(
                ax,
                x0 - 0.06,
                y + cell / 2,
                token,
                size=7,
                color=color,
                mono=True,
                ha="right",
            )
            for k in range(len(keys)):
                ax.add_patch(
                    Rectangle(
                        (x0 + k * cell, y),
                        cell,
                        cell,
                        facecolor=allowed if rule(q, k) else blocked,
                        edgecolor="white",
                        linewidth=1.5,
                        zorder=2,
                    )
                )
        y_low = top - len(queries) * cell
        xg = x0 + len(keys) * cell / 2
        note(ax, xg, y_low - 0.16, mask_name, mono=True)
        note(ax, xg, y_low - 0.33, gist, size=7.5, color=INK)
    # Legend and how to read the grids.
    y = 0.3
    for x, color, text in (
        (1.2, allowed, "may attend (True)"),
        (3.0, blocked, "blocked (False)"),
    ):
        ax.add_patch(Rectangle((x, y - 0.09), 0.18, 0.18, facecolor=color, zorder=2))
        note(ax, x + 0.26, y, text, size=8, color=INK, ha="left")
    note(ax, 4.6, y, "rows: queries, columns: keys", size=8, ha="left")
    save(fig, "masks.svg", png_dir)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--png", metavar="DIR", help="write the PNG files to DIR")
    args = parser.parse_args()
    draw_transformer(args.png)
    draw_attention(args.png)
    draw_residual_norm(args.png)
    draw_masks(args.png)


if __name__ == "__main__":
    main()
