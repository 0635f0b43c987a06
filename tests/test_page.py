"""The blog page: render an executed notebook and check it in headless Chromium.

Each page is rendered into a temporary folder by tools/render_page.py and opened from
file:// in Debian's Chromium (driven by Playwright, which never downloads a browser
here). A page passes when every formula is typeset (no KaTeX error, one rendered
formula per math span of the notebook), every <img> has loaded, no request leaves
file:// (data: URIs are fine), every heading of the notebook is in the page's text and
the table of contents links to it. A screenshot of each page is saved under
build/screenshots/ and its path printed.

Setup, done by tests/conftest.py when missing: Chromium via `apt-get install -y
chromium` (needs root), and the Python `playwright` package at the version pinned in
requirements.txt.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

import nbformat
import pytest

from tools import render_page

ROOT = Path(__file__).resolve().parents[1]

NOTEBOOK = ROOT / "annotated_transformer.ipynb"
PAGE = ROOT / "docs" / "index.html"
SCREENSHOTS = ROOT / "build" / "screenshots"

# Runs in the page: everything the checks need, in one round trip.
INSPECT_JS = r"""
() => {
  // The page minus its table of contents (which repeats the headings' math).
  const outsideToc = e => !e.closest('nav.toc');
  const imgs = [...document.images].map(img => ({
    src: img.src.slice(0, 60), ok: img.complete && img.naturalWidth > 0}));
  // Prose text outside code, outputs and typeset math: TeX delimiters left there
  // mean a formula the renderer did not recognise as math.
  const skip = 'pre, code, .katex, .katex-error, .outputs, nav.toc';
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {
    acceptNode: n => n.parentElement.closest(skip)
      ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
  const stray = [];
  const texLeft = /\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\$[^$]*\\[A-Za-z]+[^$]*\$/;
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (texLeft.test(n.textContent)) stray.push(n.textContent.trim().slice(0, 80));
  }
  const anchors = [...document.querySelectorAll('nav.toc a')].map(a => a.hash.slice(1));
  return {
    title: document.title,
    text: document.body.innerText,
    katex: [...document.querySelectorAll('.katex')].filter(outsideToc).length,
    katexErrors: [...document.querySelectorAll('.katex-error')].map(e => e.textContent),
    mathjaxErrors: document.querySelectorAll('merror, mjx-merror').length,
    images: imgs,
    tocTargetsMissing: anchors.filter(id => !document.getElementById(id)),
    tocCount: anchors.length,
    stray,
    katexFontsLoaded: [...document.fonts].filter(
      f => f.family.startsWith('KaTeX') && f.status === 'loaded').length,
  };
}
"""


# --------------------------------------------------------------------------- helpers


def _png_figure() -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3), dpi=100)
    ax.plot(range(10), [x * x for x in range(10)], marker="o")
    ax.set_title("a synthetic figure")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def synthetic_notebook(
    folder: Path, formula: str = r"\frac{QK^\top}{\sqrt{d_k}}"
) -> Path:
    """A small executed notebook: headings, every math form, a PNG output, an image."""
    from nbformat.v4 import (
        new_code_cell,
        new_markdown_cell,
        new_notebook,
        new_output,
    )

    (folder / "images").mkdir(parents=True, exist_ok=True)
    (folder / "images" / "dot.png").write_bytes(base64.b64decode(_png_figure()))
    nb = new_notebook(metadata={"language_info": {"name": "python"}})
    nb.cells = [
        new_markdown_cell(
            "# A Synthetic Transformer\n\nIntro with $x_1 + x_2$ inline."
        ),
        new_markdown_cell(
            "## Part 1: Model Architecture\n\n"
            f"Attention scales by ${formula}$ and reads\n"
            "$$\n\\mathrm{Attention}(Q, K, V) = \\mathrm{softmax}\\left("
            "\\frac{QK^T}{\\sqrt{d_k}}\\right)V\n$$\n"
            "Also \\(a^2 + b^2\\) and\n\\[ \\sum_{i=1}^n i = \\frac{n(n+1)}{2} \\]\n\n"
            "`$not math$` in code stays code, and so does \\$5.\n\n"
            "![local image](images/dot.png)"
        ),
        new_markdown_cell(
            "### Positional encoding with $\\sin$\n\n"
            "\\begin{align}\nPE_{(pos,2i)} &= \\sin(pos/10000^{2i/d})\n\\end{align}"
        ),
        new_code_cell(
            "import matplotlib.pyplot as plt\nplt.plot(range(10))",
            execution_count=1,
            outputs=[
                new_output("stream", name="stdout", text="training... loss 1.23\n"),
                new_output("display_data", data={"image/png": _png_figure()}),
                new_output(
                    "execute_result", data={"text/plain": "42"}, execution_count=1
                ),
            ],
        ),
        new_markdown_cell("## Part 2: Training\n\nA loss $L = -\\sum_t \\log p_t$."),
        new_code_cell("print('ok')", execution_count=2, outputs=[]),
    ]
    path = folder / "synthetic.ipynb"
    nbformat.write(nb, path)
    return path


def inspect_page(browser, page_path: Path, shot_name: str) -> dict:
    """Open the page from file://, record requests, return what the page reports."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(page_path.resolve().as_uri(), wait_until="load")
    page.evaluate("document.fonts.ready.then(() => true)")
    info = page.evaluate(INSPECT_JS)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / f"{shot_name}.png"
    page.screenshot(path=str(shot))  # what a reader sees first
    full = SCREENSHOTS / f"{shot_name}-full.png"  # the page from the top, capped
    height = min(page.evaluate("document.documentElement.scrollHeight"), 12000)
    page.screenshot(
        path=str(full),
        full_page=True,
        clip={"x": 0, "y": 0, "width": 1280, "height": height},
    )
    page.close()
    info["requests"] = requests
    info["screenshots"] = [shot, full]
    return info


def check_page(info: dict, draft: render_page.Draft) -> None:
    """Assert everything the page must satisfy; each message says what went wrong."""
    assert not info["katexErrors"], f"math KaTeX rejected: {info['katexErrors']}"
    assert info["mathjaxErrors"] == 0, "MathJax errors on the page"
    assert info["katex"] == len(draft.math), (
        f"math: {info['katex']} typeset formulas on the page, "
        f"{len(draft.math)} math spans in the notebook"
    )
    assert not info["stray"], f"math delimiters left untypeset: {info['stray']}"
    if draft.math:
        assert info["katexFontsLoaded"] > 0, "no KaTeX font loaded"
    broken = [i["src"] for i in info["images"] if not i["ok"]]
    assert not broken, f"images not loaded: {broken}"
    remote = [u for u in info["requests"] if not u.startswith(("file://", "data:"))]
    assert not remote, f"requests left file://: {remote}"
    text = " ".join(info["text"].split())
    for h in draft.headings:
        for fragment in h.fragments:
            assert fragment in text, f"heading {h.text!r} not in the page text"
    assert not info["tocTargetsMissing"], f"TOC links to {info['tocTargetsMissing']}"
    assert info["tocCount"] == sum(h.level in (2, 3) for h in draft.headings)


def _render(notebook: Path, out: Path) -> render_page.Draft:
    return render_page.render_file(notebook, out)


def _announce(capsys, info: dict) -> None:
    with capsys.disabled():
        print("".join(f"\nscreenshot: {shot}" for shot in info["screenshots"]))


# --------------------------------------------------------------------------- tests


def test_synthetic_page(tmp_path, browser, capsys):
    nb_path = synthetic_notebook(tmp_path)
    out = tmp_path / "page" / "index.html"
    draft = _render(nb_path, out)
    assert draft.title == "A Synthetic Transformer"
    assert len(draft.math) == 8, [m.tex for m in draft.math]
    assert [h.text for h in draft.headings if h.text.startswith("Part")] == [
        "Part 1: Model Architecture",
        "Part 2: Training",
    ]
    info = inspect_page(browser, out, "synthetic")
    _announce(capsys, info)
    check_page(info, draft)
    assert info["title"] == "A Synthetic Transformer"
    assert len(info["images"]) == 2
    assert "$not math$" in info["text"]


def test_broken_formula_is_caught(tmp_path, browser, capsys):
    nb_path = synthetic_notebook(tmp_path, formula=r"\frac{QK^\top}{\sqrt{d_k}")
    out = tmp_path / "index.html"
    draft = _render(nb_path, out)
    info = inspect_page(browser, out, "synthetic-broken-math")
    _announce(capsys, info)
    with pytest.raises(AssertionError, match="math KaTeX rejected"):
        check_page(info, draft)
    with pytest.raises(render_page.PageError, match="strict"):
        render_page.render_file(nb_path, tmp_path / "strict.html", strict=True)


def test_network_request_and_broken_image_are_caught(tmp_path, browser, capsys):
    nb_path = synthetic_notebook(tmp_path)
    out = tmp_path / "index.html"
    draft = _render(nb_path, out)
    # Smuggle in what the renderer refuses to write, to see the browser checks fire.
    html = out.read_text(encoding="utf-8").replace(
        "</main>", '<img src="http://127.0.0.1:9/x.png" alt="remote"></main>'
    )
    out.write_text(html, encoding="utf-8")
    info = inspect_page(browser, out, "synthetic-remote")
    _announce(capsys, info)
    assert any(u.startswith("http://127.0.0.1:9/") for u in info["requests"])
    with pytest.raises(AssertionError, match="images not loaded"):
        check_page(info, draft)
    info["images"] = [i for i in info["images"] if i["ok"]]
    with pytest.raises(AssertionError, match="requests left file://"):
        check_page(info, draft)


def test_untypeset_math_is_caught(tmp_path, browser, capsys):
    nb_path = synthetic_notebook(tmp_path)
    out = tmp_path / "index.html"
    draft = _render(nb_path, out)
    html = out.read_text(encoding="utf-8").replace(
        "</main>", r"<p>left over: \(\alpha + \beta\)</p></main>"
    )
    out.write_text(html, encoding="utf-8")
    info = inspect_page(browser, out, "synthetic-stray-math")
    _announce(capsys, info)
    with pytest.raises(AssertionError, match="left untypeset"):
        check_page(info, draft)


def test_renderer_refuses_remote_and_unexecuted(tmp_path):
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    nb = new_notebook(cells=[new_markdown_cell("![x](https://example.org/x.png)")])
    nbformat.write(nb, tmp_path / "remote.ipynb")
    with pytest.raises(render_page.PageError, match="offline"):
        _render(tmp_path / "remote.ipynb", tmp_path / "remote.html")
    nb = new_notebook(cells=[new_code_cell("1 + 1")])
    nbformat.write(nb, tmp_path / "fresh.ipynb")
    with pytest.raises(render_page.PageError, match="not been executed"):
        _render(tmp_path / "fresh.ipynb", tmp_path / "fresh.html")
    with pytest.raises(render_page.PageError, match="not found"):
        _render(tmp_path / "missing.ipynb", tmp_path / "missing.html")
    assert not list(tmp_path.glob("*.html"))


def test_notebook_page(tmp_path, browser, capsys):
    out = tmp_path / "index.html"
    draft = _render(NOTEBOOK, out)
    parts = [
        h.text for h in draft.headings if h.level == 2 and h.text.startswith("Part")
    ]
    assert parts, "the notebook has no '## Part ...' heading"
    info = inspect_page(browser, out, "annotated_transformer")
    _announce(capsys, info)
    check_page(info, draft)
    assert PAGE.is_file(), f"{PAGE.relative_to(ROOT)} is missing: run `make run`"
    assert PAGE.read_bytes() == out.read_bytes(), (
        f"{PAGE.relative_to(ROOT)} is not the render of {NOTEBOOK.name}: "
        "run `python tools/render_page.py`"
    )
