"""An interactive attention view for a notebook output and for the static page.

`AttentionView(sentences)` shows the encoder self-attention, decoder self-attention and
decoder-source attention of a few sentence pairs as a heatmap of one head: rows are the
queries, columns the keys, one cell per (query, key), darker for a larger weight, with
a legend that says what rows and columns are for the kind shown and a colour scale. It
opens on one head (by default head 1 of the last layer's decoder-source attention); the
reader picks sentence, kind, layer and head, or the average of the heads. Hovering or
tapping a cell or a row's word lists that query's weights, sorted, under the map; a
column's word, the weights on that key; a click pins it; the keyboard moves a cursor
over the map. The output is one HTML fragment: markup, a small inline script
(`page/attention_view.js`) and style (`page/attention_view.css`) read from this package,
and the weights quantised to bytes, deflated and base64-encoded in a JSON element. It
needs no server, no CDN and no require.js, so the same text works as a Jupyter or Colab
output (`_repr_html_`) and on the rendered page; several views on one page are
independent (one unique id each, no global names).

For a page that computes weights in the browser (an in-page translator), the same
script has one entry point: include `assets()` once (the style, and the script, which
then defines the global function `atkitAttentionView`), and call
`atkitAttentionView(element, spec)` with an object shaped like `AttentionView.spec()`,
or with the weights as nested arrays instead of bytes; `attention_view.js`'s header
documents it. It returns a promise of a controller and can be called again on the same
element for a new sentence.

Libraries weighed. bertviz's head view is the model for this one, but its output loads
require.js, d3 5.7.0 and jQuery 2.0.0 from cdnjs.cloudflare.com (`head_view.py`: the
`require.min.js` script tag "must be imported for Colab or JupyterLab";
`head_view.js`: `require.config` paths; jessevig/bertviz at 0fe6892, 2025-06-01), so
it does not work offline. Altair's default HTML renderer "requires a web connection"
(Altair docs, Displaying Altair Charts); it is offline only with the Vega, Vega-Lite
and Vega-Embed bundles inlined (`chart.save(..., inline=True)`, about 1 MB), which
alone would take the page's whole budget of 1 MB. Plotly's offline HTML inlines
plotly.js (over 3 MB), and
ipywidgets need a running kernel, so nothing would work on the static page. Hence this
small script of our own (about 20 KB with its style, per view) plus the data.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from atkit.figures import as_array

__all__ = [
    "AttentionView",
    "KINDS",
    "assets",
    "decode",
    "refresh",
    "script",
    "sentence",
    "style",
]

KINDS = ("encoder", "decoder", "cross")
# (rows, columns) of each kind: queries x keys, "src" or "tgt" tokens.
_AXES = {"encoder": ("src", "src"), "decoder": ("tgt", "tgt"), "cross": ("tgt", "src")}
_SHAPE_TEXT = {
    "encoder": "(N, h, S, S)",
    "decoder": "(N, h, T, T)",
    "cross": "(N, h, T, S)",
}
_HERE = Path(__file__).resolve().parent / "page"  # the pages' code
_DATA_RE = re.compile(
    r'<script type="application/json" class="atv-data">(.*?)</script>', re.DOTALL
)


def sentence(
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    encoder: Any,
    decoder: Any,
    cross: Any,
    label: str | None = None,
) -> dict:
    """One sentence for `AttentionView`, from stacked or per-layer weights.

    Each of `encoder`, `decoder`, `cross` is an array (N, h, q, k) or a sequence of N
    per-layer arrays (h, q, k) or (1, h, q, k) (a batch of one, as
    `MultiHeadedAttention` keeps it in `self.attn`). Maps longer than the token lists
    (padding) are cut to them.
    """
    out: dict[str, Any] = {
        "src_tokens": list(src_tokens),
        "tgt_tokens": list(tgt_tokens),
    }
    if label is not None:
        out["label"] = label
    n_tokens = {"src": len(out["src_tokens"]), "tgt": len(out["tgt_tokens"])}
    for kind, maps in zip(KINDS, (encoder, decoder, cross), strict=True):
        if isinstance(maps, (list, tuple)):
            layers = [as_array(m) for m in maps]
            layers = [m[0] if m.ndim == 4 and m.shape[0] == 1 else m for m in layers]
            arr = np.stack(layers) if layers else np.zeros((0,))
        else:
            arr = as_array(maps)
        if arr.ndim == 4:
            rows, cols = (n_tokens[a] for a in _AXES[kind])
            arr = arr[:, :, :rows, :cols]
        out[kind] = arr
    return out


def _check_tokens(name: str, where: str, tokens: Any) -> list[str]:
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise ValueError(f"{where}: {name!r} must be a list of strings, not {tokens!r}")
    if not tokens:
        raise ValueError(f"{where}: {name!r} is empty")
    bad = [t for t in tokens if not isinstance(t, str)]
    if bad:
        raise ValueError(f"{where}: {name!r} holds non-strings: {bad[:3]!r}")
    return list(tokens)


class AttentionView:
    """Interactive attention view of one model for a few sentence pairs.

    `sentences`: a list of dicts, each with `src_tokens` (S strings), `tgt_tokens` (T
    strings, the decoder input, starting with <s>), the weights `encoder` (N, h, S, S),
    `decoder` (N, h, T, T) and `cross` (N, h, T, S) as torch tensors or numpy arrays
    (rows are queries, columns keys, rows sum to 1), and optionally `label` (the text
    of the sentence menu). All sentences come from one model: the same h everywhere,
    the same N for each kind.

    `levels`: weights are stored as round(w * levels) in one byte (255: within 0.002).
    `compress`: deflate the bytes (the browser inflates them with DecompressionStream).
    `kind`, `layer`, `head`: what the view opens on: the kind of attention (one of
    KINDS), the layer (counted from 1; default the last) and the head (counted from 1,
    or "average" for the mean of the heads).
    """

    def __init__(
        self,
        sentences: Sequence[Mapping[str, Any]],
        *,
        levels: int = 255,
        compress: bool = True,
        kind: str = "cross",
        layer: int | None = None,
        head: int | str = 1,
    ):
        if isinstance(sentences, Mapping):
            sentences = [sentences]
        if not isinstance(sentences, Sequence) or not sentences:
            raise ValueError("AttentionView needs a non-empty list of sentence dicts")
        if not 1 <= int(levels) <= 255:
            raise ValueError(f"levels={levels}: must be in 1..255 (one byte)")
        self.levels = int(levels)
        self.compress = bool(compress)
        self.heads: int | None = None
        self.layers: dict[str, int] = {}
        self.sentences = [self._validate(i, s) for i, s in enumerate(sentences)]
        self.start = self._start(kind, layer, head)

    def _start(self, kind: str, layer: int | None, head: int | str) -> dict:
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r}: must be one of {list(KINDS)}")
        n = self.layers["encoder" if kind == "encoder" else "decoder"]
        layer = n if layer is None else layer
        if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= n:
            raise ValueError(f"layer={layer!r}: must be in 1..{n} (counted from 1)")
        if head == "average":
            return {"kind": kind, "layer": layer - 1, "head": "avg"}
        ok = isinstance(head, int) and not isinstance(head, bool)
        if not ok or not 1 <= head <= self.heads:
            raise ValueError(
                f"head={head!r}: must be in 1..{self.heads} (counted from 1) or "
                "'average'"
            )
        return {"kind": kind, "layer": layer - 1, "head": head - 1}

    @classmethod
    def from_maps(
        cls,
        src_tokens: Sequence[str],
        tgt_tokens: Sequence[str],
        maps: Mapping[str, Any],
        label: str | None = None,
        **kwargs: Any,
    ) -> AttentionView:
        """A view of one sentence pair; `maps` has `encoder`, `decoder`, `cross`."""
        missing = [k for k in KINDS if k not in maps]
        if missing:
            raise ValueError(f"maps lacks {missing}; it needs the keys {list(KINDS)}")
        one = sentence(src_tokens, tgt_tokens, *(maps[k] for k in KINDS), label=label)
        return cls([one], **kwargs)

    # ------------------------------------------------------------------ validation

    def _validate(self, index: int, s: Mapping[str, Any]) -> dict:
        if not isinstance(s, Mapping):
            raise ValueError(
                f"sentence {index}: expected a dict, got {type(s).__name__}"
            )
        label = s.get("label")
        where = f"sentence {index}" + (f" ({label!r})" if label is not None else "")
        missing = [k for k in ("src_tokens", "tgt_tokens", *KINDS) if k not in s]
        if missing:
            raise ValueError(f"{where}: missing {missing}")
        src = _check_tokens("src_tokens", where, s["src_tokens"])
        tgt = _check_tokens("tgt_tokens", where, s["tgt_tokens"])
        sizes = {"src": len(src), "tgt": len(tgt)}
        out: dict[str, Any] = {"src": src, "tgt": tgt}
        for kind in KINDS:
            arr = as_array(s[kind])
            rows, cols = (sizes[a] for a in _AXES[kind])
            expect = f"{_SHAPE_TEXT[kind]} with S={sizes['src']}, T={sizes['tgt']}"
            if arr.ndim != 4 or arr.shape[2:] != (rows, cols):
                raise ValueError(
                    f"{where}: {kind!r} has shape {tuple(arr.shape)}; expected "
                    f"{expect}, i.e. (N, h, {rows}, {cols})"
                )
            n, h = arr.shape[:2]
            if n == 0 or h == 0:
                raise ValueError(f"{where}: {kind!r} has no layers or no heads")
            if self.heads is None:
                self.heads = h
            if h != self.heads:
                raise ValueError(
                    f"{where}: {kind!r} has h={h} heads; earlier weights have "
                    f"{self.heads} (one model, one h)"
                )
            group = "encoder" if kind == "encoder" else "decoder"  # cross: decoder's N
            n_seen = self.layers.setdefault(group, n)
            if n != n_seen:
                raise ValueError(
                    f"{where}: {kind!r} has N={n} layers; expected {n_seen} "
                    f"(as the other {group} weights)"
                )
            if not np.isfinite(arr).all() or arr.min() < -1e-6 or arr.max() > 1 + 1e-6:
                raise ValueError(f"{where}: {kind!r} has weights outside [0, 1] or NaN")
            sums = arr.sum(-1)
            if np.abs(sums - 1).max() > 1e-2:
                raise ValueError(
                    f"{where}: {kind!r} rows must sum to 1 (softmax over keys); one "
                    f"sums to {sums.flat[np.abs(sums - 1).argmax()]:.4f}"
                )
            out[kind] = arr
        out["label"] = str(label) if label is not None else _default_label(src, tgt)
        return out

    # ------------------------------------------------------------------ output

    def spec(self) -> dict:
        """The JSON object embedded in the page (weights as base64 bytes)."""
        chunks = []
        for s in self.sentences:
            for kind in KINDS:
                q = np.clip(np.rint(s[kind] * self.levels), 0, self.levels)
                chunks.append(q.astype(np.uint8).tobytes())
        raw = b"".join(chunks)
        payload = zlib.compress(raw, 9) if self.compress else raw
        return {
            "version": 1,
            "levels": self.levels,
            "heads": self.heads,
            "layers": {
                "encoder": self.layers["encoder"],
                "decoder": self.layers["decoder"],
                "cross": self.layers["decoder"],
            },
            "encoding": "deflate" if self.compress else "raw",
            "start": self.start,
            "sentences": [
                {"label": s["label"], "src": s["src"], "tgt": s["tgt"]}
                for s in self.sentences
            ],
            "data": base64.b64encode(payload).decode("ascii"),
        }

    def html(self) -> str:
        """The view as one self-contained HTML fragment (a new element id each call)."""
        data = json.dumps(self.spec(), ensure_ascii=False, separators=(",", ":"))
        # Inside <script>, "</script>" or "<!--" in a token would end the element.
        data = data.replace("<", "\\u003c").replace(">", "\\u003e")
        data = data.replace("&", "\\u0026")
        return _fragment("atv-" + uuid.uuid4().hex[:12], data)

    def _repr_html_(self) -> str:
        return self.html()

    def __repr__(self) -> str:
        return (
            f"AttentionView({len(self.sentences)} sentences, "
            f"N={self.layers['encoder']}/{self.layers['decoder']} layers, "
            f"h={self.heads} heads)"
        )


def _fragment(uid: str, data: str) -> str:
    """A view's HTML: its root, style, data (JSON text, escaped for <script>) and
    script."""
    return (
        f'<div class="atv" id="{uid}" data-atkit="attention-view">'
        f"<style>{style()}</style>"
        f'<script type="application/json" class="atv-data">{data}</script>'
        '<p class="atv-fallback">Interactive attention view: it needs JavaScript. '
        "Run the cell (or trust the notebook) to see it.</p></div>\n"
        f'<script>(function () {{\n{script()}\natkitAttentionView("{uid}");\n}})();'
        "</script>"
    )


_VIEW_RE = re.compile(
    r'<div class="atv" id="(?P<uid>atv-[0-9a-f]+)" data-atkit="attention-view">'
    r"<style>.*?</style>"
    r'<script type="application/json" class="atv-data">(?P<data>.*?)</script>'
    r".*?</div>\n<script>\(function \(\) \{\n.*?"
    r'\natkitAttentionView\("(?P=uid)"\);\n\}\)\(\);</script>',
    re.DOTALL,
)


def refresh(html: str) -> str:
    """The same output with each view's style and script replaced by this version's
    (the weights and element ids kept): a page rendered from a notebook saved by an
    older atkit shows the current view. Other HTML is left as it is."""
    return _VIEW_RE.sub(lambda m: _fragment(m.group("uid"), m.group("data")), html)


def script() -> str:
    """The view's script: it defines `atkitAttentionView(target, spec)` (documented in
    its header). Run at a page's top level, that name is global."""
    return (_HERE / "attention_view.js").read_text(encoding="utf-8")


def style() -> str:
    """The view's style sheet (every rule scoped to `.atv`)."""
    return (_HERE / "attention_view.css").read_text(encoding="utf-8")


def assets() -> str:
    """The style and the script, for a page that draws views from its own JavaScript
    with `atkitAttentionView(element, spec)`; include it once."""
    return f"<style>{style()}</style>\n<script>\n{script()}</script>"


def _default_label(src: list[str], tgt: list[str], width: int = 70) -> str:
    text = " ".join(src) + " → " + " ".join(tgt)
    return text if len(text) <= width else text[: width - 1] + "…"


def decode(html_or_spec: str | Mapping[str, Any]) -> list[dict]:
    """The sentences embedded in a view's HTML (or spec), weights as stored.

    Returns one dict per sentence: `label`, `src_tokens`, `tgt_tokens` and float arrays
    `encoder`, `decoder`, `cross` holding the quantised weights the browser draws. With
    several views in the HTML, the first one's.
    """
    spec = html_or_spec
    if isinstance(spec, str):
        match = _DATA_RE.search(spec)
        if not match:
            raise ValueError("no attention view data in this HTML")
        spec = json.loads(match.group(1))
    raw = base64.b64decode(spec["data"])
    if spec["encoding"] == "deflate":
        raw = zlib.decompress(raw)
    data = np.frombuffer(raw, dtype=np.uint8)
    h, at, out = spec["heads"], 0, []
    for s in spec["sentences"]:
        sizes = {"src": len(s["src"]), "tgt": len(s["tgt"])}
        item = {"label": s["label"], "src_tokens": s["src"], "tgt_tokens": s["tgt"]}
        for kind in KINDS:
            rows, cols = (sizes[a] for a in _AXES[kind])
            shape = (spec["layers"][kind], h, rows, cols)
            size = int(np.prod(shape))
            item[kind] = data[at : at + size].reshape(shape) / spec["levels"]
            at += size
        out.append(item)
    if at != data.size:
        raise ValueError(f"view data holds {data.size} bytes; the shapes use {at}")
    return out
