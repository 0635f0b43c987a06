"""The attention view (atkit.attention_view): its data in Python, its page in Chromium.

The Python tests check the input validation, that the weights embedded in the HTML
decode to the input within the quantisation step, and the size of a view. The browser
tests open pages with views of known (seeded) weights from file:// in headless Chromium
(the `browser` fixture of tests/conftest.py, shared with tests/test_page.py), drive the
controls, the hover and the keyboard, and compare every weight the page draws (each
cell of the heatmap) and writes (the readout) with the numbers embedded in the HTML;
the view opens on one head, says what its rows and columns are, fits a phone's width
without overlapping words, and draws a sentence handed to its JavaScript entry point.
The static heatmaps of Part 6 (atkit.figures.plot_heads) are checked for the size of
their labels on the page and their colour bar. Screenshots go to
build/screenshots/attention-view-*.png and their paths are printed.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_page import PAGE, SCREENSHOTS

from atkit import attention_view, figures
from atkit.attention_view import KINDS, AttentionView, decode, sentence
from tools import render_page

STEP = 0.5 / 255  # the largest quantisation error at the default levels=255

WORDS = (
    "zwei junge weiße männer sind im freien in der nähe vieler büsche . ein mann mit "
    "einem orangefarbenen hut starrt auf etwas , während eine frau zuschaut"
).split()


def softmax_maps(rng, shape, temperature=3.0, causal=False) -> np.ndarray:
    """Attention-like weights: a softmax over keys of random logits, rows sum to 1."""
    logits = rng.normal(size=shape) * temperature
    if causal:  # the decoder's mask: query t sees keys 0..t
        t = shape[-1]
        logits = np.where(np.triu(np.ones((t, t), bool), 1), -1e9, logits)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def synthetic_sentence(rng, S, T, N, h, label=None, temperature=3.0) -> dict:
    src = ["<s>", *WORDS[: S - 2], "</s>"]
    tgt = ["<s>", *(w.capitalize() for w in WORDS[: T - 1])]
    out = {
        "src_tokens": src,
        "tgt_tokens": tgt,
        "encoder": softmax_maps(rng, (N, h, S, S), temperature),
        "decoder": softmax_maps(rng, (N, h, T, T), temperature, causal=True),
        "cross": softmax_maps(rng, (N, h, T, S), temperature),
    }
    if label is not None:
        out["label"] = label
    return out


# --------------------------------------------------------------------------- Python


@pytest.mark.parametrize("compress", [True, False])
def test_embedded_weights_round_trip(compress):
    rng = np.random.default_rng(0)
    sents = [synthetic_sentence(rng, 12, 9, 3, 4), synthetic_sentence(rng, 7, 11, 3, 4)]
    sents[1]["src_tokens"][3] = "</script><!--&\"'"  # must not end the JSON element
    sents[1]["label"] = "a <b>label</b> & more"
    html = AttentionView(sents, compress=compress).html()
    assert html.count("</script>") == 2 and "<!--" not in html
    back = decode(html)
    assert len(back) == 2
    for given, got in zip(sents, back, strict=True):
        assert got["src_tokens"] == given["src_tokens"]
        assert got["tgt_tokens"] == given["tgt_tokens"]
        for kind in KINDS:
            assert got[kind].shape == given[kind].shape
            assert np.abs(got[kind] - given[kind]).max() <= STEP + 1e-12
            np.testing.assert_array_equal(got[kind], np.rint(given[kind] * 255) / 255)
    assert back[1]["label"] == "a <b>label</b> & more"
    assert back[0]["label"].startswith("<s> zwei junge")  # the default label


def test_torch_per_layer_maps_and_padding():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    N, h, S, T, pad = 2, 4, 6, 5, 3  # maps of a padded batch of one

    def maps(q, k):
        return [
            torch.softmax(torch.randn(1, h, q, k, generator=g), -1) for _ in range(N)
        ]

    src, tgt = [f"s{i}" for i in range(S)], ["<s>", *(f"t{i}" for i in range(T - 1))]
    enc, dec, cross = maps(S + pad, S), maps(T, T), maps(T, S + pad)
    one = sentence(src, tgt, enc, dec, cross, label="typed")
    assert one["encoder"].shape == (N, h, S, S) and one["cross"].shape == (N, h, T, S)
    # Padded keys cut off: rows no longer sum to 1, so re-normalise as a masked model's
    # (whose padded keys weigh 0) would.
    for kind in ("encoder", "cross"):
        one[kind] = one[kind] / one[kind].sum(-1, keepdims=True)
    view = AttentionView([one])
    assert repr(view) == "AttentionView(1 sentences, N=2/2 layers, h=4 heads)"
    stacked = {k: torch.tensor(one[k]) for k in KINDS}
    again = AttentionView.from_maps(src, tgt, stacked, label="typed")
    np.testing.assert_array_equal(
        decode(again.html())[0]["decoder"], decode(view.html())[0]["decoder"]
    )
    assert decode(view.html())[0]["label"] == "typed"


def _bad(**change):
    s = synthetic_sentence(np.random.default_rng(1), 6, 5, 2, 4, label="val 3")
    s.update(change)
    return s


@pytest.mark.parametrize(
    ("sentences", "message"),
    [
        ([], "non-empty list"),
        ([_bad(cross=np.full((2, 4, 6, 5), 0.2))], r"'cross' has shape \(2, 4, 6, 5\)"),
        (
            [_bad(encoder=np.full((2, 4, 6), 1 / 6))],
            r"'encoder' has shape .*\(N, h, 6, 6\)",
        ),
        ([_bad(decoder=np.full((2, 3, 5, 5), 0.2))], "'decoder' has h=3 heads"),
        ([_bad(cross=np.full((3, 4, 5, 6), 1 / 6))], "'cross' has N=3 layers"),
        ([_bad(encoder=np.full((2, 4, 6, 6), 0.5))], "rows must sum to 1"),
        ([_bad(cross=np.full((2, 4, 5, 6), np.nan))], "outside"),
        ([_bad(src_tokens="zwei junge")], "must be a list of strings"),
        ([_bad(tgt_tokens=["<s>", 3, "a", "b", "c"])], "non-strings"),
        ([{"src_tokens": ["a"], "tgt_tokens": ["<s>"]}], r"missing \['encoder'"),
    ],
)
def test_bad_input_is_refused(sentences, message):
    with pytest.raises(ValueError, match=message) as info:
        AttentionView(sentences)
    if sentences and "label" in sentences[0]:
        assert "sentence 0 ('val 3')" in str(info.value)  # which sentence is wrong


def test_start_is_checked_and_embedded():
    rng = np.random.default_rng(7)
    sents = [synthetic_sentence(rng, 6, 5, 3, 4)]
    assert AttentionView(sents).spec()["start"] == {
        "kind": "cross",
        "layer": 2,
        "head": 0,
    }
    view = AttentionView(sents, kind="encoder", layer=1, head="average")
    assert view.spec()["start"] == {"kind": "encoder", "layer": 0, "head": "avg"}
    for bad, message in [
        ({"kind": "self"}, "kind='self'"),
        ({"layer": 0}, r"layer=0: must be in 1\.\.3"),
        ({"layer": 4}, r"layer=4: must be in 1\.\.3"),
        ({"head": 0}, r"head=0: must be in 1\.\.4"),
        ({"head": "all"}, "or 'average'"),
    ]:
        with pytest.raises(ValueError, match=message):
            AttentionView(sents, **bad)


def test_html_is_offline_and_unique():
    rng = np.random.default_rng(2)
    view = AttentionView([synthetic_sentence(rng, 5, 4, 1, 2)])
    first, second = view.html(), view._repr_html_()
    ids = [re.search(r'id="(atv-[0-9a-f]+)"', h).group(1) for h in (first, second)]
    assert ids[0] != ids[1], "two outputs of one view would share an element id"
    for h in (first, second, attention_view.assets()):
        assert not render_page._REMOTE_TAG_RE.search(h)
        assert not render_page._REMOTE_CSS_RE.search(h)
        assert not re.search(r"\b(src|href)\s*=|@import|require\(|\bimport\s*\(", h)
        # The only URL is the SVG namespace, a name and not a request.
        assert set(re.findall(r"https?://[^\s\"'<>]+", h)) == {
            "http://www.w3.org/2000/svg"
        }


def test_view_size(capsys):
    """Bytes of one view's HTML: the page's budget is 1 MB for everything it adds."""
    rows = []
    for name, N, h, lengths, temperature in [
        ("6 sentences, 10-25 tokens, N=3 h=4", 3, 4, (10, 13, 16, 19, 22, 25), 3.0),
        ("6 sentences, 10-25 tokens, N=6 h=8", 6, 8, (10, 13, 16, 19, 22, 25), 3.0),
        ("6 sentences of 25 tokens, N=6 h=8", 6, 8, (25,) * 6, 3.0),
        ("same, flat attention (worst case)", 6, 8, (25,) * 6, 1.0),
    ]:
        rng = np.random.default_rng(3)
        sents = [
            synthetic_sentence(rng, n, n, N, h, temperature=temperature)
            for n in lengths
        ]
        size = len(AttentionView(sents).html().encode())
        rows.append((name, size))
    with capsys.disabled():
        print()
        for name, size in rows:
            print(f"attention view size: {size / 1024:7.1f} KB  {name}")
    sizes = dict(rows)
    assert sizes["6 sentences, 10-25 tokens, N=6 h=8"] < 300 * 1024
    assert sizes["6 sentences of 25 tokens, N=6 h=8"] < 500 * 1024
    assert max(sizes.values()) < 1024 * 1024


# --------------------------------------------------------------------------- Chromium

LABELS_JS = """root => [...root.querySelectorAll('.atv-readout .atv-w')].map(t => ({
  weight: Number(t.dataset.weight), head: t.dataset.head,
  query: Number(t.dataset.query), key: Number(t.dataset.key), text: t.textContent}))"""
CELLS_JS = """root => [...root.querySelectorAll('.atv-cell')].map(c => [
  Number(c.dataset.query), Number(c.dataset.key), Number(c.dataset.weight),
  c.getAttribute('fill')])"""
STATE_JS = "root => Object.assign({}, root.dataset)"
# Words and numbers that overlap one another or stick out of the drawing or of the
# view, and the smallest size (px on the screen) a word of the map is drawn at.
LAYOUT_JS = """root => {
  const svg = root.querySelector('svg.atv-svg');
  const frame = svg.getBoundingClientRect();
  const scale = frame.width / svg.viewBox.baseVal.width;
  const boxes = [...svg.querySelectorAll('text')].map(
    t => [t.textContent, t.getBoundingClientRect(),
          parseFloat(getComputedStyle(t).fontSize) * scale]);
  const bad = [];
  for (const [text, b] of boxes) {
    if (b.left < frame.left - 0.5 || b.right > frame.right + 0.5 ||
        b.top < frame.top - 0.5 || b.bottom > frame.bottom + 0.5) {
      bad.push(`${text}: outside`);
    }
  }
  // Glyph boxes of neighbouring words may touch (a font's line box is taller than
  // its letters): one pixel of overlap is allowed.
  boxes.forEach(([t1, a], i) => boxes.slice(i + 1).forEach(([t2, b]) => {
    if (a.left < b.right - 1 && b.left < a.right - 1 &&
        a.top < b.bottom - 1 && b.top < a.bottom - 1) bad.push(`${t1} on ${t2}`);
  }));
  if (root.scrollWidth > root.clientWidth + 1) bad.push(`view wider than its box`);
  return {bad, smallest: Math.min(...boxes.map(b => b[2]))};
}"""


def _heads_of(weights: np.ndarray, head) -> np.ndarray:
    """(q, k) weights of one head, or their average (head "avg"), of one layer."""
    return weights.mean(0) if head == "avg" else weights[int(head)]


def _expected_labels(weights: np.ndarray, head, side: str, index: int) -> list:
    """(query, key, weight) the readout must list for a hovered query or key."""
    w = _heads_of(weights, head)
    vec = w[index, :] if side == "q" else w[:, index]
    out = []
    for o, x in enumerate(vec):
        if x >= 0.005:  # below this the readout lists no number ("0.00")
            out.append(((index, o) if side == "q" else (o, index)) + (float(x),))
    return sorted(out)


def _check_labels(root, weights, head, side, index) -> list[dict]:
    """The readout lists, for the hovered word, every weight of its row or column
    (sorted, largest first), each as on the map."""
    labels = root.evaluate(LABELS_JS)
    got = sorted((x["query"], x["key"], x["weight"]) for x in labels)
    want = _expected_labels(weights, head, side, index)
    assert [g[:2] for g in got] == [w[:2] for w in want], "listed words differ"
    for g, w in zip(got, want, strict=True):
        assert abs(g[2] - w[2]) < 1e-6, f"query {g[0]} key {g[1]}: {g} {w}"
    for x in labels:
        assert x["text"] == f"{x['weight']:.2f}", x
        assert x["head"] == str(head), x
    shown = [x["weight"] for x in labels]
    assert shown == sorted(shown, reverse=True), "the readout is not sorted"
    assert root.evaluate(STATE_JS)["hover"] == f"{side}{index}"
    return labels


def _check_cells(root, weights, head, causal=False) -> None:
    """Every cell of the map: its weight is the embedded one (one head, or the mean of
    the heads), and a darker fill means a larger weight."""
    want = _heads_of(weights, head)
    cells = root.evaluate(CELLS_JS)
    assert len(cells) == want.size, f"{len(cells)} cells for a {want.shape} map"
    for q, k, w, _ in cells:
        assert abs(w - want[q, k]) < 1e-6, f"cell ({q}, {k}): {w} != {want[q, k]}"
    shades = {}
    for q, k, w, fill in cells:
        if causal and k > q:
            assert fill == "#ececec" and w == 0, "a masked cell is not marked"
            continue
        rgb = [int(x) for x in fill[4:-1].split(",")]
        shades[(q, k)] = (w, sum(rgb))
    ranked = sorted(shades.values())
    assert all(a[1] >= b[1] for a, b in zip(ranked, ranked[1:], strict=False)), (
        "a larger weight has a lighter cell"
    )


def _page(tmp_path):
    rng = np.random.default_rng(4)
    a = AttentionView(
        [synthetic_sentence(rng, 12, 10, 3, 4), synthetic_sentence(rng, 15, 14, 3, 4)],
        compress=False,  # the other decoding path
        kind="encoder",
        layer=2,
        head="average",
    )
    b = AttentionView(
        [
            synthetic_sentence(rng, 25, 25, 2, 8, label="long: 25 tokens each side"),
            synthetic_sentence(rng, 9, 8, 2, 8, label="short one"),
        ]
    )
    html_a, html_b = a.html(), b.html()
    page = tmp_path / "views.html"
    page.write_text(
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>Two attention views</title></head>"
        '<body style="margin: 16px; max-width: 1000px; font-family: serif">'
        f"<h1>View A</h1>{html_a}<h1>View B</h1>{html_b}</body></html>",
        encoding="utf-8",
    )
    return page, decode(html_a), decode(html_b)


def _open(browser, path, width=1100, height=1000):
    # Tall enough for a whole view: a screenshot then never scrolls it under the mouse.
    page = browser.new_page(viewport={"width": width, "height": height})
    log = {"errors": [], "requests": []}
    page.on("request", lambda r: log["requests"].append(r.url))
    page.on("pageerror", lambda e: log["errors"].append(str(e)))
    page.on(
        "console",
        lambda m: m.type in ("error", "warning") and log["errors"].append(m.text),
    )
    page.goto(path.resolve().as_uri(), wait_until="load")
    page.wait_for_function(
        "[...document.querySelectorAll('.atv')].every(r => r.dataset.ready === '1')"
    )
    return page, log


def _shot(root, name: str, shots: list, min_font: float = 9.0) -> dict:
    """Screenshot one view; it must still show the state the test just checked, with
    no word on another or outside the view, none smaller than `min_font` px."""
    before = root.evaluate(STATE_JS)
    layout = root.evaluate(LAYOUT_JS)
    assert not layout["bad"], f"{name}: text overlaps or is cut: {layout['bad'][:5]}"
    assert layout["smallest"] >= min_font, (
        f"{name}: a word of the map is drawn at {layout['smallest']:.1f} px"
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"attention-view-{name}.png"
    root.screenshot(path=str(path))
    shots.append(path)
    assert root.evaluate(STATE_JS) == before, "the screenshot moved the hover"
    return layout


def _finish(page, log, shots, capsys) -> None:
    page.close()
    with capsys.disabled():
        print("".join(f"\nscreenshot: {s}" for s in shots))
    assert not log["errors"], f"console errors: {log['errors']}"
    remote = [u for u in log["requests"] if not u.startswith(("file://", "data:"))]
    assert not remote, f"requests left file://: {remote}"


def test_two_views_in_chromium(tmp_path, browser, capsys):
    path, data_a, data_b = _page(tmp_path)
    page, log = _open(browser, path)
    shots: list = []
    try:
        roots = page.locator(".atv")
        assert roots.count() == 2
        a, b = roots.nth(0), roots.nth(1)
        b.scroll_into_view_if_needed()
        ids = [r.get_attribute("id") for r in (a, b)]
        assert ids[0] != ids[1]
        # It opens on one head: head 1 of the last layer's decoder-source attention.
        state = b.evaluate(STATE_JS)
        assert (state["kind"], state["layer"], state["head"]) == ("cross", "1", "0")
        assert b.locator(".atv-head button[aria-pressed='true']").all_inner_texts() == [
            "1"
        ]
        _check_cells(b, data_b[0]["cross"][1], 0)
        legend = b.locator(".atv-legend").inner_text()
        assert "Rows: the decoder's inputs, as queries" in legend, legend
        assert "Columns: the source tokens, as keys" in legend, legend
        assert "Hover or tap a cell" in b.locator(".atv-help").inner_text()
        assert b.locator(".atv-scale .atv-ramp").count() == 1  # the colour scale

        # Layer 1, head 6; hover a query, then a key, then a cell.
        b.locator(".atv-layer button[data-value='0']").click()
        b.locator(".atv-head button[data-value='5']").click()
        state = b.evaluate(STATE_JS)
        assert (state["kind"], state["layer"], state["head"]) == ("cross", "0", "5")
        # Counted from 1, as Part 6's plots and statistics count (tests/test_heads.py).
        assert b.locator(".atv-head button[aria-pressed='true']").inner_text() == "6"
        assert b.locator(".atv-layer button[aria-pressed='true']").inner_text() == "1"
        assert "layer 1, head 6" in b.locator(".atv-caption").inner_text()
        cross = data_b[0]["cross"][0]  # (h, T, S) of layer 1
        _check_cells(b, cross, 5)
        b.locator(".atv-tok[data-side='q'][data-index='7']").hover()
        _check_labels(b, cross, 5, "q", 7)
        _shot(b, "cross-query-hover", shots)
        b.locator(".atv-tok[data-side='k'][data-index='3']").hover()
        _check_labels(b, cross, 5, "k", 3)
        _shot(b, "cross-key-hover", shots)
        b.locator(".atv-cell[data-query='4'][data-key='6']").hover()
        assert b.evaluate(STATE_JS)["cell"] == "4,6"
        _check_labels(b, cross, 5, "q", 4)
        shown = float(b.locator(".atv-cell-weight").get_attribute("data-weight"))
        assert abs(shown - cross[5, 4, 6]) < 1e-6

        # The average of the heads: the map and the readout are the mean of the heads.
        b.locator(".atv-head button[data-value='avg']").click()
        assert b.evaluate(STATE_JS)["head"] == "avg"
        assert "the average of the 8 heads" in b.locator(".atv-caption").inner_text()
        _check_cells(b, cross, "avg")
        b.locator(".atv-tok[data-side='q'][data-index='2']").hover()
        _check_labels(b, cross, "avg", "q", 2)
        _shot(b, "average", shots)

        # Click pins a word: it stays through other hovers and a change of layer.
        b.locator(".atv-tok[data-side='q'][data-index='4']").click()
        a.locator(".atv-tok[data-side='q'][data-index='1']").hover()
        assert b.evaluate(STATE_JS)["hover"] == "q4"
        assert b.evaluate(STATE_JS)["pinned"] == "1"
        b.locator(".atv-layer button[data-value='1']").click()
        _check_labels(b, data_b[0]["cross"][1], "avg", "q", 4)
        b.locator(".atv-tok[data-side='q'][data-index='4']").click()
        assert b.evaluate(STATE_JS)["pinned"] == ""

        # Decoder self-attention is causal: masked cells, and query 3 lists keys 0..3.
        b.locator(".atv-kind button[data-value='decoder']").click()
        b.locator(".atv-head button[data-value='0']").click()
        assert (
            "Cells right of the diagonal are masked"
            in b.locator(".atv-legend").inner_text()
        )
        _check_cells(b, data_b[0]["decoder"][1], 0, causal=True)
        b.locator(".atv-tok[data-side='q'][data-index='3']").hover()
        labels = _check_labels(b, data_b[0]["decoder"][1], 0, "q", 3)
        assert max(x["key"] for x in labels) <= 3

        # The keyboard: focus the map, move the cursor, pin, let go.
        page.mouse.move(0, 0)  # the pointer leaves: no selection
        assert b.evaluate(STATE_JS)["hover"] == ""
        b.locator("svg.atv-svg").focus()
        page.keyboard.press("ArrowDown")  # the first key selects the first cell
        assert b.evaluate(STATE_JS)["cell"] == "0,0"
        for key in ("ArrowDown", "ArrowDown", "ArrowRight", "ArrowUp", "ArrowRight"):
            page.keyboard.press(key)
        assert b.evaluate(STATE_JS)["cell"] == "1,2", b.evaluate(STATE_JS)
        _check_labels(b, data_b[0]["decoder"][1], 0, "q", 1)
        page.keyboard.press("Enter")
        assert b.evaluate(STATE_JS)["pinned"] == "1"
        page.keyboard.press("Escape")
        assert b.evaluate(STATE_JS)["hover"] == ""

        # Another sentence: the short one.
        b.locator("select.atv-sentence").select_option("1")
        assert b.evaluate(STATE_JS)["sentence"] == "1"
        assert b.locator(".atv-tok[data-side='k']").count() == 8  # its 8 target tokens
        b.locator(".atv-tok[data-side='k'][data-index='0']").hover()
        _check_labels(b, data_b[1]["decoder"][1], 0, "k", 0)
        _shot(b, "short-sentence", shots)

        # View A (raw data, N=3, h=4) opened where it was told and was not touched.
        a.scroll_into_view_if_needed()
        state = a.evaluate(STATE_JS)
        assert (state["kind"], state["layer"], state["head"]) == ("encoder", "1", "avg")
        assert (
            "Rows: the source tokens, as queries"
            in a.locator(".atv-legend").inner_text()
        )
        a.locator(".atv-layer button[data-value='2']").click()
        a.locator(".atv-tok[data-side='k'][data-index='5']").hover()
        _check_labels(a, data_a[0]["encoder"][2], "avg", "k", 5)
        _shot(a, "small-model", shots)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shots.append(SCREENSHOTS / "attention-view-page.png")
        page.screenshot(path=str(shots[-1]), full_page=True)
    finally:
        _finish(page, log, shots, capsys)


@pytest.mark.parametrize("width", [1280, 390])
def test_view_inside_the_page(tmp_path, browser, capsys, width):
    """The view inside the blog page's own style, on a wide screen and a phone: it fits
    its column, no word overlaps another, and the words of the map stay readable (a
    25-token sentence on a phone, its longest words cut, at 9 px or more)."""
    if not PAGE.is_file():
        pytest.skip(f"{PAGE} is missing")
    rng = np.random.default_rng(5)
    view = AttentionView(
        [synthetic_sentence(rng, 25, 25, 6, 8), synthetic_sentence(rng, 11, 12, 6, 8)],
        kind="encoder",
        layer=1,
    )
    html = PAGE.read_text(encoding="utf-8")
    assert "</main>" in html
    out = tmp_path / "index.html"
    out.write_text(
        html.replace(
            "</main>", f'<div class="output html">{view.html()}</div></main>', 1
        ),
        encoding="utf-8",
    )
    page, log = _open(browser, out, width=width, height=1400)
    shots: list = []
    try:
        root = page.locator(".atv").last  # the page's own views come first
        root.scroll_into_view_if_needed()
        root.locator(".atv-tok[data-side='q'][data-index='6']").hover()
        _check_labels(root, decode(view.html())[0]["encoder"][0], 0, "q", 6)
        long_layout = _shot(root, f"in-page-{width}", shots, min_font=9.0)
        if width == 1280:  # 25 tokens fit the reading column at full size
            assert long_layout["smallest"] >= 11, long_layout
        root.locator("select.atv-sentence").select_option("1")
        _shot(root, f"in-page-short-{width}", shots, min_font=11)
        overflow = page.evaluate(
            "(e => e.scrollWidth - e.clientWidth)(document.documentElement)"
        )
        assert overflow <= 0, f"the page scrolls sideways by {overflow}px"
    finally:
        _finish(page, log, shots, capsys)


# Runs in the page: insert the view's HTML the ways notebook front ends do.
INSERT_JS = r"""
html => {
  // JupyterLab: innerHTML on an output node (its scripts do not run), then each
  // <script> replaced by a fresh copy so that it runs; here while the node is still
  // detached, so the copies run when it is attached.
  const lab = document.createElement('div');
  lab.id = 'lab';
  lab.innerHTML = html;
  for (const old of [...lab.querySelectorAll('script')]) {
    const s = document.createElement('script');
    for (const a of old.attributes) s.setAttribute(a.name, a.value);
    s.textContent = old.textContent;
    old.replaceWith(s);
  }
  document.body.append(lab);
  // Classic notebook (jQuery): script text evaluated before the output is attached.
  const classic = document.createElement('div');
  classic.id = 'classic';
  classic.innerHTML = html;
  for (const s of classic.querySelectorAll('script:not([type])')) {
    (0, eval)(s.textContent);
  }
  setTimeout(() => document.body.append(classic), 150);
  // Colab: each output in a sandboxed iframe of its own.
  const frame = document.createElement('iframe');
  frame.id = 'colab';
  frame.setAttribute('sandbox', 'allow-scripts');
  frame.style.cssText = 'width: 1000px; height: 900px; border: 0';
  frame.srcdoc = '<!doctype html><meta charset="utf-8"><body>' + html + '</body>';
  document.body.append(frame);
}
"""


def test_notebook_front_ends_in_chromium(tmp_path, browser, capsys):
    """The same HTML set up as JupyterLab, the classic notebook and Colab insert it."""
    rng = np.random.default_rng(6)
    view = AttentionView([synthetic_sentence(rng, 9, 8, 2, 4, label="typed")])
    html = view.html()
    weights = decode(html)[0]["cross"][1]
    blank = tmp_path / "blank.html"
    blank.write_text(
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>front ends'
        "</title></head><body></body></html>",
        encoding="utf-8",
    )
    page, log = _open(browser, blank)
    shots: list = []
    try:
        page.evaluate(INSERT_JS, html)
        colab = page.frame_locator("#colab")
        roots = {
            "lab": page.locator("#lab .atv"),
            "classic": page.locator("#classic .atv"),
            "colab": colab.locator(".atv"),
        }
        for name, root in roots.items():
            root.locator(".atv-svg").wait_for()  # drawn: the script found its root
            assert root.get_attribute("data-ready") == "1", name
            root.scroll_into_view_if_needed()
            root.locator(".atv-head button[data-value='2']").click()
            root.locator(".atv-tok[data-side='q'][data-index='5']").click()  # pinned
            _check_labels(root, weights, 2, "q", 5)
        _shot(roots["colab"], "colab-iframe", shots)
    finally:
        _finish(page, log, shots, capsys)


# Runs in the page: the entry point a page's own JavaScript calls (an in-page
# translator): a sentence as nested arrays, then another in the same element, then
# the byte form that AttentionView.spec() gives.
ENTRY_JS = """async ([nested, again, bytes]) => {
  const el = document.getElementById('mine');
  const first = await atkitAttentionView(el, nested);
  const one = first.state();
  await atkitAttentionView(el, again);
  const other = document.getElementById('other');
  const c = await atkitAttentionView(other, bytes);
  c.set({kind: 'encoder', layer: 0, head: 'avg'});
  return {one, views: document.querySelectorAll('.atv').length,
          tokens: el.querySelectorAll('.atv-tok[data-side="k"]').length};
}"""


def test_js_entry_point_draws_a_new_sentence(tmp_path, browser, capsys):
    """`atkitAttentionView(element, spec)` (with `assets()` on the page) draws weights
    given as nested arrays or as the embedded bytes, and draws a new sentence into the
    same element."""
    rng = np.random.default_rng(8)
    s1, s2 = synthetic_sentence(rng, 7, 6, 2, 4), synthetic_sentence(rng, 10, 9, 2, 4)

    def nested(s):
        spec = {
            "heads": 4,
            "layers": {"encoder": 2, "decoder": 2, "cross": 2},
            "sentences": [
                {
                    "label": "typed in the page",
                    "src": s["src_tokens"],
                    "tgt": s["tgt_tokens"],
                    **{k: s[k].tolist() for k in KINDS},
                }
            ],
        }
        return spec

    bytes_spec = AttentionView([s2], kind="encoder").spec()
    page_path = tmp_path / "entry.html"
    page_path.write_text(
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>entry</title>{attention_view.assets()}</head><body>"
        '<div id="mine"></div><div id="other"></div></body></html>',
        encoding="utf-8",
    )
    page, log = _open(browser, page_path)
    shots: list = []
    try:
        got = page.evaluate(ENTRY_JS, [nested(s1), nested(s2), bytes_spec])
        assert got["one"]["kind"] == "cross" and got["one"]["head"] == 0
        assert got["views"] == 2 and got["tokens"] == len(s2["src_tokens"])
        mine, other = page.locator("#mine"), page.locator("#other")
        _check_cells(mine, s2["cross"][1], 0)  # the floats as given, no quantisation
        _check_cells(other, decode(bytes_spec)[0]["encoder"][0], "avg")
        mine.locator(".atv-tok[data-side='k'][data-index='2']").hover()
        _check_labels(mine, s2["cross"][1], 0, "k", 2)
        _shot(mine, "entry-point", shots)
        bad = page.evaluate(
            """async spec => { try { await atkitAttentionView(
                 document.getElementById('mine'), spec); return 'drawn'; }
               catch (e) { return e.message; } }""",
            {**nested(s1), "heads": 3},
        )
        assert "expected 2x3x" in bad, bad
        log["errors"] = [e for e in log["errors"] if "expected 2x3x" not in e]
    finally:
        _finish(page, log, shots, capsys)


def test_the_committed_page_shows_the_models_attention(browser, capsys):
    """docs/index.html as committed: Part 6's view of the trained model. It opens on
    one head; change kind, layer and head, hover a query and a key, and compare every
    weight the page draws and writes with the numbers the notebook's run committed
    (its output in the .ipynb)."""
    import nbformat
    from test_page import NOTEBOOK

    nb = nbformat.read(NOTEBOOK, as_version=4)
    htmls = [
        o["data"]["text/html"]
        for c in nb.cells
        if c.cell_type == "code" and "attention_view(" in c.source
        for o in c.get("outputs", [])
        if "data-atkit" in o.get("data", {}).get("text/html", "")
    ]
    assert htmls, "the committed notebook shows no attention view"
    committed = decode(htmls[0])
    assert render_page.NOTEBOOK == NOTEBOOK
    page, log = _open(browser, PAGE, width=1280)
    shots: list = []
    try:
        roots = page.locator(".atv")
        assert roots.count() == len(htmls), "every view of the notebook is on the page"
        root = roots.nth(0)
        root.scroll_into_view_if_needed()
        assert root.locator(".atv-head button[aria-pressed='true']").count() == 1
        first = committed[0]
        N, h = first["cross"].shape[:2]
        root.locator(".atv-kind button[data-value='cross']").click()
        root.locator(f".atv-layer button[data-value='{N - 1}']").click()
        root.locator(f".atv-head button[data-value='{h - 1}']").click()
        state = root.evaluate(STATE_JS)
        assert (state["kind"], state["layer"], state["head"]) == (
            "cross",
            str(N - 1),
            str(h - 1),
        )
        _check_cells(root, first["cross"][N - 1], h - 1)
        q = min(2, first["cross"].shape[2] - 1)
        root.locator(f".atv-tok[data-side='q'][data-index='{q}']").hover()
        _check_labels(root, first["cross"][N - 1], h - 1, "q", q)
        _shot(root, "committed-cross", shots, min_font=11)
        root.locator(".atv-kind button[data-value='encoder']").click()
        root.locator(".atv-layer button[data-value='0']").click()
        root.locator(".atv-head button[data-value='avg']").click()
        root.locator(".atv-tok[data-side='k'][data-index='1']").hover()
        _check_labels(root, first["encoder"][0], "avg", "k", 1)
        _shot(root, "committed-encoder-average", shots, min_font=11)
    finally:
        _finish(page, log, shots, capsys)


# --------------------------------------------------------------------------- heatmaps

PAGE_COLUMN = {1280: 900, 390: 366}  # px of the page's column: a laptop, a phone


def _heads_svg(weights, rows, cols, heads):
    """The figure as the notebook shows it: drawn in the page's style (SVG, cropped
    tight); its width on the page in CSS px (figures.PAGE_PX_PER_IN per inch)."""
    import io
    import re

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from atkit.figures import PLOT_STYLE, draw_heads

    with plt.rc_context(PLOT_STYLE):
        fig = draw_heads(weights, rows, cols, "cross attention, layer 2", heads)
        fig.canvas.draw()
        buf = io.BytesIO()
        fig.savefig(buf, format="svg", bbox_inches="tight")
    pt = float(re.search(rb'<svg[^>]*\bwidth="([0-9.]+)pt"', buf.getvalue()).group(1))
    return fig, pt / 72 * figures.PAGE_PX_PER_IN


def _overlaps(labels) -> list[str]:
    boxes = [(t.get_text(), t.get_window_extent()) for t in labels if t.get_text()]
    return [
        f"{a} on {b}"
        for i, (a, p) in enumerate(boxes)
        for b, q in boxes[i + 1 :]
        if p.x0 < q.x1 - 0.5
        and q.x0 < p.x1 - 0.5
        and p.y0 < q.y1 - 0.5
        and q.y0 < p.y1 - 0.5
    ]


@pytest.mark.parametrize(
    ("tokens", "heads", "phone_px"),
    [(13, [2], 9.0), (16, [4], 9.0), (25, [1], None), (14, None, None)],
    ids=["one-head-13", "one-head-16", "one-head-25", "all-4-heads-14"],
)
def test_static_heatmaps_are_readable(tokens, heads, phone_px):
    """Part 6's heatmaps (atkit.figures.plot_heads): labels drawn at 10 pt, which the
    page shows at 11 px in its 900 px column and, for one head of up to 16 tokens, at
    9 px or more in a phone's 366 px; no two labels overlap; one colour bar, 0 to 1,
    named; the cells are the weights given, heads counted from 1."""
    import matplotlib.pyplot as plt

    from atkit import figures

    rng = np.random.default_rng(9)
    w = softmax_maps(rng, (4, tokens, tokens + 1))
    rows = ["<s>", *(f"word{i}" for i in range(tokens - 1))]
    cols = ["<s>", *WORDS[: tokens - 1], "</s>"]
    fig, width = _heads_svg(w, rows, cols, heads)
    try:
        shown = [ax for ax in fig.axes if ax.get_title()]
        assert [ax.get_title() for ax in shown] == [
            f"head {k}" for k in (heads or [1, 2, 3, 4])
        ]
        assert fig._suptitle.get_text() == "cross attention, layer 2"
        for ax, k in zip(shown, heads or [1, 2, 3, 4], strict=True):
            drawn = np.asarray(ax.collections[0].get_array()).reshape(w[k - 1].shape)
            np.testing.assert_allclose(drawn, w[k - 1])
            ticks = [*ax.get_xticklabels(), *ax.get_yticklabels()]
            assert [t.get_text() for t in ax.get_yticklabels()] == rows
            assert [t.get_text() for t in ax.get_xticklabels()] == cols
            assert {t.get_fontsize() for t in ticks} == {figures.LABEL_PT}
            assert not _overlaps(ax.get_xticklabels()), _overlaps(ax.get_xticklabels())
            assert not _overlaps(ax.get_yticklabels()), _overlaps(ax.get_yticklabels())
        bars = [ax for ax in fig.axes if ax.get_ylabel() == figures.COLORBAR_LABEL]
        assert len(bars) == 1, "one colour bar, named"
        cmap = shown[0].collections[0].get_cmap().name
        assert cmap == figures.ATTENTION_CMAP == "Blues", "the interactive view's"
        assert bars[0].get_ylim() == (0.0, 1.0)
        px = figures.LABEL_PT * figures.PAGE_PX_PER_IN / 72
        on_page = {w_: px * min(1.0, col / width) for w_, col in PAGE_COLUMN.items()}
        assert on_page[1280] >= 11.0, (width, on_page)
        if phone_px:
            assert on_page[390] >= phone_px, (width, on_page)
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match=r"expected \(h, 3, 4\)"):
        figures.draw_heads(w, rows[:3], cols[:4], "t")
    with pytest.raises(ValueError, match="heads count from 1"):
        figures.draw_heads(w, rows, cols, "t", heads=[0])


def test_plot_heads_shows_the_figure(monkeypatch):
    """plot_heads draws and calls plt.show(), as the notebook's cell did (tests of the
    notebook capture the figure there: tests/test_heads.py)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from atkit.figures import plot_heads

    shown = []
    monkeypatch.setattr(plt, "show", lambda: shown.append(plt.gcf()))
    torch = pytest.importorskip("torch")
    w = torch.softmax(torch.randn(2, 3, 4), -1)
    assert (
        plot_heads(w, list("abc"), list("wxyz"), "encoder attention, layer 1") is None
    )
    assert len(shown) == 1 and shown[0]._suptitle.get_text().startswith("encoder")
    plt.close("all")


def test_refresh_brings_an_older_views_style_and_script_up_to_date():
    """A notebook saved by an older atkit holds views with its style and script:
    `refresh` puts in this version's, and keeps the weights, the element id and
    everything around the views."""
    rng = np.random.default_rng(3)
    views = [AttentionView([synthetic_sentence(rng, 6, 5, 2, 2)]).html() for _ in "ab"]
    old = [
        v.replace(attention_view.style(), ".atv { color: red }").replace(
            attention_view.script(), "function atkitAttentionView(id) { old(id); }"
        )
        for v in views
    ]
    assert old[0] != views[0]
    page = f"<h1>a</h1>\n{old[0]}\n<p>between</p>\n{old[1]}<footer>b</footer>"
    fresh = attention_view.refresh(page)
    assert (
        fresh == f"<h1>a</h1>\n{views[0]}\n<p>between</p>\n{views[1]}<footer>b</footer>"
    )
    assert attention_view.refresh(fresh) == fresh, "a current view is left as it is"
    assert attention_view.refresh("<p>no view</p>") == "<p>no view</p>"


def test_a_figure_shows_its_svg(monkeypatch, tmp_path):
    """A drawing is shown as the SVG of images/ (sharp on the page and when zoomed),
    with no PNG beside it in the notebook; its caption is its text."""
    fig = figures.show_figure("masks")
    svg = (figures.IMAGES / "masks.svg").read_text(encoding="utf-8")
    assert fig._repr_svg_() == svg and "<svg" in svg
    assert not hasattr(fig, "_repr_png_"), "a PNG would double the notebook's bytes"
    assert repr(fig) == f"[figure: {figures.CAPTIONS['masks']}]"
    for name in figures.CAPTIONS:
        assert figures.Figure(name).caption == figures.CAPTIONS[name]
    with pytest.raises(ValueError, match="no figure 'mask'; there are \\['attention'"):
        figures.Figure("mask")
    monkeypatch.setattr(figures, "IMAGES", tmp_path)
    with pytest.raises(FileNotFoundError, match="masks.svg is missing.*draw_figures"):
        figures.show_figure("masks")


def test_plots_are_svg_in_the_page_style(monkeypatch):
    """atkit.runtime.setup() applies the page's style: in IPython a figure's output
    becomes SVG (words as text, no PNG beside it); outside it only the style."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    with plt.rc_context():
        monkeypatch.setattr("IPython.get_ipython", lambda: shell)
        figures.use_page_style()
        assert {k: matplotlib.rcParams[k] for k in figures.PLOT_STYLE} == (
            figures.PLOT_STYLE
        )
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.set_title("a title in words")
        data, _ = shell.display_formatter.format(fig)
        plt.close(fig)
    assert "image/png" not in data, sorted(data)
    assert (
        "<text" in data["image/svg+xml"] and "a title in words" in data["image/svg+xml"]
    )
    InteractiveShell.clear_instance()
