"""The blog page: render an executed notebook and check it in headless Chromium.

Each page is rendered into a temporary folder by tools/render_page.py (nbconvert with
the template atkit/page/templates/atpage) and opened from file:// in Debian's Chromium
(driven by Playwright, which never downloads a browser here). A page passes when every
formula is typeset (no KaTeX error, one rendered formula per math span of the
notebook), every <img> has loaded, no request leaves file:// (data: URIs are fine), no
script fails, every heading of the notebook is in the page's text and the table of
contents links to it, and no two stream blocks of a cell stand apart. A screenshot of
each page is saved under build/screenshots/ and its path printed.

Layout, at 1280 px and at 390 px (a phone): no output is clipped or scrolled (an
element of an output whose content is taller or wider than its box, where the box
hides or scrolls the rest), none spills past its column, the page never scrolls
sideways, and at 1280 px no line the notebook printed wraps. The contents list every
part and stay whole on a sidebar 800 px tall wherever the reader is. Deep dives
(``### Deep dive: ...`` and a summary line in italics) are closed <details> that a
link to them opens, and the keyboard too. The output path is refused before any work.

Setup, done by tests/conftest.py when missing: Chromium via `apt-get install -y
chromium` (needs root), and the Python `playwright` package at the version pinned in
requirements.txt.
"""

from __future__ import annotations

import base64
import io
import subprocess
import sys
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
  // Per code cell, the text of each of its stream blocks.
  const streams = [...document.querySelectorAll('.outputs')].map(o =>
    [...o.querySelectorAll('.output.stream')].map(s => s.textContent));
  return {
    title: document.title,
    text: document.body.innerText,
    allText: document.body.textContent,
    katex: [...document.querySelectorAll('.katex')].filter(outsideToc).length,
    katexErrors: [...document.querySelectorAll('.katex-error')].map(e => e.textContent),
    mathjaxErrors: document.querySelectorAll('merror, mjx-merror').length,
    images: imgs,
    tocTargetsMissing: anchors.filter(id => !document.getElementById(id)),
    tocCount: anchors.length,
    stray,
    streams,
    streamsApart: document.querySelectorAll('.output.stream + .output.stream').length,
    scriptView: document.getElementById('attn-demo')?.textContent ?? null,
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


# An HTML output as the interactive attention view will be: markup, inline JSON data and
# inline vanilla JavaScript that builds the view; nothing loaded from elsewhere.
SCRIPT_VIEW = """<div class="attn-view" id="attn-demo">the script has not run</div>
<script type="application/json" id="attn-demo-data">
{"tokens": ["the", "cat"], "weights": [[0.9, 0.1], [0.3, 0.7]]}
</script>
<script>
(function () {
  const data = JSON.parse(document.getElementById("attn-demo-data").textContent);
  const view = document.getElementById("attn-demo");
  view.textContent = `script ran: ${data.tokens.join(" ")} / ${data.weights[1][1]}`;
})();
</script>"""

# What a training loop prints: tqdm bars on stderr (refreshed with '\r', cleared at the
# end of each epoch), epoch lines on stdout, each write its own output.
TRAINING_LOG = [
    ("stderr", "\rdownload   0%"),
    ("stderr", "\rdownload  50%"),
    ("stderr", "\rdownload 100%\n"),
    *[
        item
        for epoch in (1, 2)
        for item in [
            ("stderr", f"\repoch {epoch}/2:   0%|          | 0/4"),
            ("stderr", f"\repoch {epoch}/2:  50%|#####     | 2/4"),
            ("stderr", "\r                               \r"),
            ("stdout", f"epoch {epoch}: train loss {3 - epoch}.000\n"),
        ]
    ],
]


def synthetic_notebook(
    folder: Path, formula: str = r"\frac{QK^\top}{\sqrt{d_k}}"
) -> Path:
    """A small executed notebook: headings, every math form the notebook uses, a PNG
    output, an image, a training log of interleaved streams, a scripted HTML output."""
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
            "Also $a_*^2 + b_*^2$ and, markdown's * and _ left alone,\n\n"
            "$$ \\sum_{i=1}^n i_* = \\frac{n(n+1)}{2} \\quad\\text{*not bold*} $$\n\n"
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
        new_code_cell(
            "train()",
            execution_count=2,
            outputs=[new_output("stream", name=n, text=t) for n, t in TRAINING_LOG],
        ),
        new_code_cell(
            "attention_view()",
            execution_count=3,
            outputs=[
                new_output(
                    "display_data",
                    data={"text/html": SCRIPT_VIEW, "text/plain": "<AttentionView>"},
                )
            ],
        ),
        new_code_cell(
            "# hidden code",
            execution_count=4,
            metadata={"tags": ["hide-input"]},
            outputs=[new_output("stream", name="stdout", text="folded input\n")],
        ),
        new_code_cell(
            "# removed code",
            execution_count=5,
            metadata={"tags": ["remove-input"]},
            outputs=[new_output("stream", name="stdout", text="output only\n")],
        ),
        new_code_cell("print('ok')", execution_count=6, outputs=[]),
    ]
    path = folder / "synthetic.ipynb"
    nbformat.write(nb, path)
    return path


def inspect_page(browser, page_path: Path, shot_name: str) -> dict:
    """Open the page from file://, record requests, return what the page reports."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    script_errors: list[str] = []
    page.on("pageerror", lambda e: script_errors.append(str(e)))
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
    info["scriptErrors"] = script_errors
    info["screenshots"] = [shot, full]
    return info


# Lines of output that wrap (taller than one line of their block): at 1280 px a line the
# notebook printed must fit its box. With the first line of its cell's code.
WIDE_OUTPUTS_JS = r"""
() => [...document.querySelectorAll('.cell.code')].flatMap(cell => {
  const code = (cell.querySelector('.input')?.textContent ?? '').trim();
  return [...cell.querySelectorAll('.output pre')].flatMap(pre => {
    const cs = getComputedStyle(pre);
    const line = parseFloat(cs.lineHeight);
    const box = pre.clientWidth - parseFloat(cs.paddingLeft)
      - parseFloat(cs.paddingRight);
    return [...pre.querySelectorAll('.ln')]
      .filter(ln => ln.getBoundingClientRect().height > 1.5 * line)
      .map(ln => ({code: code.split('\n')[0].slice(0, 80), fullCode: code,
                   box: Math.round(box), line: ln.textContent}));
  });
})
"""

# What of the outputs a reader cannot see without scrolling, or at all: an element
# whose content is taller (vertical) or wider (horizontal) than its box where the box
# hides or scrolls the rest (an overflow other than visible), an element that spills
# past the right edge of its output area, and a page that scrolls sideways. Closed
# deep dives are opened first, so that their outputs are checked too. One exception:
# a printed table too wide for a phone at 11 px scrolls sideways on purpose (page.js
# marks it "scrolls", gives it keyboard focus and a cue), rather than wrap its rows.
CLIPPED_JS = r"""
() => {
  document.querySelectorAll('main details').forEach(d => { d.open = true; });
  window.dispatchEvent(new Event('resize'));
  const scroller = 'pre.table.scrolls[tabindex="0"][role="region"]';
  const found = [];
  const what = e => (e.closest('.cell')?.querySelector('.input')?.textContent ?? '')
    .trim().split('\n')[0].slice(0, 70) || e.textContent.trim().slice(0, 70);
  for (const area of document.querySelectorAll('.outputs')) {
    const edge = area.getBoundingClientRect().right;
    for (const e of [area, ...area.querySelectorAll('*')]) {
      if (!e.getClientRects().length) continue;
      if (e.closest(scroller)) {
        if (e.matches(scroller) && e.scrollHeight > e.clientHeight + 1
            && getComputedStyle(e).overflowY !== 'visible') {
          found.push({kind: 'vertical', tag: 'pre.table.scrolls', code: what(e),
                      content: e.scrollHeight, box: e.clientHeight});
        }
        continue;
      }
      const cs = getComputedStyle(e);
      const tag = `${e.tagName.toLowerCase()}.${[...e.classList].join('.')}`;
      if (cs.overflowY !== 'visible' && e.scrollHeight > e.clientHeight + 1) {
        found.push({kind: 'vertical', tag, code: what(e),
                    content: e.scrollHeight, box: e.clientHeight});
      }
      if (cs.overflowX !== 'visible' && e.scrollWidth > e.clientWidth + 1) {
        found.push({kind: 'horizontal', tag, code: what(e),
                    content: e.scrollWidth, box: e.clientWidth});
      }
      const right = e.getBoundingClientRect().right;
      if (right > edge + 1) {
        found.push({kind: 'spills', tag, code: what(e),
                    content: Math.round(right), box: Math.round(edge)});
      }
    }
  }
  const page = document.documentElement;
  if (page.scrollWidth > page.clientWidth + 1) {
    found.push({kind: 'page', tag: 'html', code: '', content: page.scrollWidth,
                box: page.clientWidth});
  }
  return found;
}
"""

# Cells whose lines the notebook does not write: Part 5's torchrun workers print the
# command line's summary, which names the results file by its full path (long in a
# temporary folder; the committed run's is relative and short).
NOT_WRITTEN_BY_THE_NOTEBOOK = ("launch_torchrun(",)
WIDTHS = (1280, 390)  # a laptop, a phone


def _open(browser, page_path: Path, width: int, height: int = 900):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(page_path.resolve().as_uri(), wait_until="load")
    page.evaluate("document.fonts.ready.then(() => true)")
    return page


def wide_outputs(browser, page_path: Path) -> list[dict]:
    """The lines of output of the page that do not fit their box at 1280 px."""
    page = _open(browser, page_path, 1280)
    found = page.evaluate(WIDE_OUTPUTS_JS)
    page.close()
    return found


def clipped_outputs(browser, page_path: Path, width: int) -> list[dict]:
    """What of the outputs is hidden, scrolled or spilling at this width."""
    page = _open(browser, page_path, width)
    page.evaluate(CLIPPED_JS)  # opens the deep dives; page.js fits what they hold
    page.evaluate("new Promise(r => requestAnimationFrame(() => setTimeout(r, 50)))")
    found = page.evaluate(CLIPPED_JS)
    page.close()
    return found


def _report(found: list[dict]) -> str:
    return "\n".join(
        f"{w.get('kind', 'wraps')}: {w['code']!r} {w.get('tag', '')}: "
        f"{w.get('content', '')} in a {w['box']} px box"
        + (f"; e.g. {w['line']!r}" if "line" in w else "")
        for w in found
    )


def check_page(info: dict, rendered: render_page.Page) -> None:
    """Assert everything the page must satisfy; each message says what went wrong."""
    assert not info["katexErrors"], f"math KaTeX rejected: {info['katexErrors']}"
    assert info["mathjaxErrors"] == 0, "MathJax errors on the page"
    assert info["katex"] == len(rendered.math), (
        f"math: {info['katex']} typeset formulas on the page, "
        f"{len(rendered.math)} math spans in the notebook"
    )
    assert not info["stray"], f"math delimiters left untypeset: {info['stray']}"
    if rendered.math:
        assert info["katexFontsLoaded"] > 0, "no KaTeX font loaded"
    broken = [i["src"] for i in info["images"] if not i["ok"]]
    assert not broken, f"images not loaded: {broken}"
    remote = [u for u in info["requests"] if not u.startswith(("file://", "data:"))]
    assert not remote, f"requests left file://: {remote}"
    assert not info["scriptErrors"], f"scripts failed: {info['scriptErrors']}"
    assert info["streamsApart"] == 0, "a cell's stream outputs are in separate blocks"
    text = " ".join(info["allText"].split())  # closed deep dives included
    for h in rendered.headings:
        for fragment in h.fragments:
            assert fragment in text, f"heading {h.text!r} not in the page text"
    assert not info["tocTargetsMissing"], f"TOC links to {info['tocTargetsMissing']}"
    assert info["tocCount"] == sum(h.level in (2, 3) for h in rendered.headings)


def _render(notebook: Path, out: Path) -> render_page.Page:
    return render_page.render_file(notebook, out)


def _announce(capsys, info: dict) -> None:
    with capsys.disabled():
        print("".join(f"\nscreenshot: {shot}" for shot in info["screenshots"]))


# --------------------------------------------------------------------------- tests


def test_synthetic_page(tmp_path, browser, capsys):
    nb_path = synthetic_notebook(tmp_path)
    out = tmp_path / "page" / "index.html"
    rendered = _render(nb_path, out)
    assert rendered.title == "A Synthetic Transformer"
    assert len(rendered.math) == 8, [m.tex for m in rendered.math]
    assert [h.text for h in rendered.headings if h.text.startswith("Part")] == [
        "Part 1: Model Architecture",
        "Part 2: Training",
    ]
    info = inspect_page(browser, out, "synthetic")
    _announce(capsys, info)
    check_page(info, rendered)
    assert info["title"] == "A Synthetic Transformer"
    assert len(info["images"]) == 2
    assert "$not math$" in info["text"]
    html = out.read_text(encoding="utf-8")
    assert r"i_* = \frac{n(n+1)}{2} \quad\text{*not bold*}</annotation>" in html
    assert "<em>" not in html  # markdown left the TeX's * and _ alone
    assert "<script src" not in html and "mathjax" not in html.lower()
    # remove-input: the output without its code; hide-input: the code folded away.
    assert "output only" in info["text"] and "# removed code" not in html
    assert "<details><summary>Show code</summary>" in html
    assert "# hidden code" not in info["text"]  # innerText skips closed <details>


def test_stream_outputs_are_one_block(tmp_path, browser, capsys):
    """A training log (stderr progress bars between stdout epoch lines, one output per
    write) is one block showing each line's final state, as in a terminal."""
    out = tmp_path / "index.html"
    rendered = _render(synthetic_notebook(tmp_path), out)
    info = inspect_page(browser, out, "synthetic-streams")
    _announce(capsys, info)
    check_page(info, rendered)
    log = [blocks for blocks in info["streams"] if any("epoch" in b for b in blocks)]
    assert len(log) == 1 and len(log[0]) == 1, f"not one block: {log}"
    assert log[0][0].split("\n") == [
        "download 100%",
        "epoch 1: train loss 2.000",
        "epoch 2: train loss 1.000",
        "",
    ], log[0][0]


def test_html_output_scripts_run(tmp_path, browser, capsys):
    """An HTML output's inline script and JSON data reach the page unsanitised, pass
    --strict (only remote scripts are refused), and run in the browser."""
    nb_path = synthetic_notebook(tmp_path)
    out = tmp_path / "index.html"
    rendered = render_page.render_file(nb_path, out, strict=True)
    info = inspect_page(browser, out, "synthetic-script")
    _announce(capsys, info)
    check_page(info, rendered)
    assert info["scriptView"] == "script ran: the cat / 0.7", info["scriptView"]


def test_broken_formula_is_caught(tmp_path, browser, capsys):
    nb_path = synthetic_notebook(tmp_path, formula=r"\frac{QK^\top}{\sqrt{d_k}")
    out = tmp_path / "index.html"
    rendered = _render(nb_path, out)
    info = inspect_page(browser, out, "synthetic-broken-math")
    _announce(capsys, info)
    with pytest.raises(AssertionError, match="math KaTeX rejected"):
        check_page(info, rendered)
    with pytest.raises(render_page.PageError, match="strict"):
        render_page.render_file(nb_path, tmp_path / "strict.html", strict=True)


def test_network_request_and_broken_image_are_caught(tmp_path, browser, capsys):
    nb_path = synthetic_notebook(tmp_path)
    out = tmp_path / "index.html"
    rendered = _render(nb_path, out)
    # Smuggle in what the renderer refuses to write, to see the browser checks fire.
    html = out.read_text(encoding="utf-8").replace(
        "</main>", '<img src="http://127.0.0.1:9/x.png" alt="remote"></main>'
    )
    out.write_text(html, encoding="utf-8")
    info = inspect_page(browser, out, "synthetic-remote")
    _announce(capsys, info)
    assert any(u.startswith("http://127.0.0.1:9/") for u in info["requests"])
    with pytest.raises(AssertionError, match="images not loaded"):
        check_page(info, rendered)
    info["images"] = [i for i in info["images"] if i["ok"]]
    with pytest.raises(AssertionError, match="requests left file://"):
        check_page(info, rendered)


def test_untypeset_math_is_caught(tmp_path, browser, capsys):
    nb_path = synthetic_notebook(tmp_path)
    out = tmp_path / "index.html"
    rendered = _render(nb_path, out)
    html = out.read_text(encoding="utf-8").replace(
        "</main>", r"<p>left over: \(\alpha + \beta\)</p></main>"
    )
    out.write_text(html, encoding="utf-8")
    info = inspect_page(browser, out, "synthetic-stray-math")
    _announce(capsys, info)
    with pytest.raises(AssertionError, match="left untypeset"):
        check_page(info, rendered)


def _one_cell_notebook(path: Path, cell) -> Path:
    from nbformat.v4 import new_notebook

    nbformat.write(new_notebook(cells=[cell]), path)
    return path


def test_renderer_refuses_remote_and_unexecuted(tmp_path):
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    for name, cell in [
        ("remote", new_markdown_cell("![x](https://example.org/x.png)")),
        ("remote-css", new_markdown_cell("<p style='background:url(//x.org/a)'>")),
        (
            "remote-script",
            new_code_cell(
                "view()",
                execution_count=1,
                outputs=[
                    new_output(
                        "display_data",
                        data={
                            "text/html": '<script src="https://x.org/v.js"></script>'
                        },
                    )
                ],
            ),
        ),
    ]:
        nb_path = _one_cell_notebook(tmp_path / f"{name}.ipynb", cell)
        with pytest.raises(render_page.PageError, match="offline"):
            _render(nb_path, tmp_path / f"{name}.html")
    # A plain link to a paper is no resource: fine, even in strict mode.
    link = new_markdown_cell("[the paper](https://arxiv.org/abs/1706.03762)")
    nb_path = _one_cell_notebook(tmp_path / "link.ipynb", link)
    render_page.render_file(nb_path, tmp_path / "link" / "index.html", strict=True)
    missing = new_markdown_cell("![x](images/missing.png)")
    nb_path = _one_cell_notebook(tmp_path / "missing-image.ipynb", missing)
    with pytest.raises(render_page.PageError, match="cannot be embedded"):
        _render(nb_path, tmp_path / "missing-image.html")
    nb = new_notebook(cells=[new_code_cell("1 + 1")])
    nbformat.write(nb, tmp_path / "fresh.ipynb")
    with pytest.raises(render_page.PageError, match="not been executed"):
        _render(tmp_path / "fresh.ipynb", tmp_path / "fresh.html")
    with pytest.raises(render_page.PageError, match="not found"):
        _render(tmp_path / "missing.ipynb", tmp_path / "missing.html")
    assert not list(tmp_path.glob("*.html"))


def test_strict_refuses_error_outputs_and_untypeset_math(tmp_path):
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_output

    error = new_output("error", ename="ValueError", evalue="bad", traceback=["bad"])
    for name, cell, what in [
        ("error", new_code_cell("f()", execution_count=1, outputs=[error]), "error"),
        ("stray", new_markdown_cell("an unclosed $$x + y"), "untypeset"),
    ]:
        nb_path = _one_cell_notebook(tmp_path / f"{name}.ipynb", cell)
        _render(nb_path, tmp_path / f"{name}.html")  # a warning without --strict
        with pytest.raises(render_page.PageError, match=f"strict.*{what}"):
            render_page.render_file(nb_path, tmp_path / "strict.html", strict=True)
    assert not (tmp_path / "strict.html").exists()


@pytest.mark.process
def test_command_line(tmp_path):
    """`python tools/render_page.py` (as `make page` ran it) and `python -m`, --check,
    and --strict's exit status."""
    nb_path = synthetic_notebook(tmp_path)
    out = tmp_path / "index.html"
    run = lambda *args, cwd=tmp_path: subprocess.run(
        [sys.executable, *args, "--notebook", str(nb_path), "--out", str(out)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    done = run(str(ROOT / "tools" / "render_page.py"), "--strict")
    assert done.returncode == 0, done.stderr
    assert "8 formulas" in done.stdout
    assert run("-m", "tools.render_page", "--check", cwd=ROOT).returncode == 0
    out.write_text(out.read_text(encoding="utf-8") + " ", encoding="utf-8")
    stale = run(str(ROOT / "tools" / "render_page.py"), "--check")
    assert stale.returncode == 1 and "is stale" in stale.stderr


@pytest.mark.parametrize(
    "notebook, page",
    [
        (NOTEBOOK, PAGE),
        (ROOT / "exercises.ipynb", ROOT / "docs" / "exercises.html"),
        (ROOT / "since_2017.ipynb", ROOT / "docs" / "since_2017.html"),
    ],
    ids=["notebook", "exercises", "since_2017"],
)
def test_notebook_page(tmp_path, browser, capsys, notebook, page):
    out = tmp_path / page.name
    rendered = _render(notebook, out)
    parts = [
        h.text for h in rendered.headings if h.level == 2 and h.text.startswith("Part")
    ]
    assert parts, "the notebook has no '## Part ...' heading"
    info = inspect_page(browser, out, notebook.stem)
    _announce(capsys, info)
    check_page(info, rendered)
    assert page.is_file(), f"{page.relative_to(ROOT)} is missing: run `make run`"
    assert page.read_bytes() == out.read_bytes(), (
        f"{page.relative_to(ROOT)} is not the render of {notebook.name}: "
        "run `make page`"
    )


def test_the_pages_link_to_each_other():
    """The notebooks' links to each other lead, on the pages, to the other page and
    to a heading that is there (the translation page counts as one); the main page
    links to each Part's exercises."""
    import re

    pages = {name: ROOT / "docs" / name for name in render_page.PAGES.values()}
    if (ROOT / "docs" / "translate.html").is_file():  # tools/export_model.py's page
        pages["translate.html"] = ROOT / "docs" / "translate.html"
    ids = {
        name: set(re.findall(r'\bid="([^"]+)"', p.read_text(encoding="utf-8")))
        for name, p in pages.items()
    }
    links = {
        name: re.findall(
            r'href="([\w.-]+\.(?:html|ipynb))(?:#([^"]*))?"',
            p.read_text(encoding="utf-8"),
        )
        for name, p in pages.items()
    }
    for name, found in links.items():
        assert found, f"{name} links to no other page"
        for target, anchor in found:
            assert target in ids, f"{name} links to {target}, which is no page"
            assert not anchor or anchor in ids[target], f"{name}: {target}#{anchor}"
    parts = {a for t, a in links["index.html"] if t == "exercises.html" and a}
    assert len(parts) == 4 and all(a.startswith("part-") for a in parts), parts


def test_wide_output_is_caught_and_wrapped_text_fits(tmp_path, browser):
    """The width check flags a long printed line (it wraps at 1280 px), and text
    wrapped by atkit.prose (the notebook's `say`) fits the box at 1280 px."""
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from atkit.prose import wrap

    sentence = "* a conclusion the prose points to, " + "with many more words " * 12
    cells = [
        new_code_cell(
            f"print({sentence!r})",
            execution_count=1,
            outputs=[new_output("stream", name="stdout", text=sentence + "\n")],
        ),
        new_code_cell(
            f"say({sentence!r})",
            execution_count=2,
            outputs=[new_output("stream", name="stdout", text=wrap(sentence) + "\n")],
        ),
    ]
    nb_path = tmp_path / "wide.ipynb"
    nbformat.write(new_notebook(cells=cells), nb_path)
    out = tmp_path / "wide.html"
    _render(nb_path, out)
    wide = wide_outputs(browser, out)
    assert [w["code"] for w in wide] == [f"print({sentence!r})"[:80]], wide
    assert wide[0]["line"] == sentence
    assert len(wrap(sentence).split("\n")) > 2
    for width in WIDTHS:  # wrapped, the long line is whole and in its box
        assert not clipped_outputs(browser, out, width), width


# Outputs as the notebook prints them: a long log, a table wider than a phone, a
# narrow table, a line longer than a laptop's column, a figure, an HTML table.
LONG_LOG = "".join(
    f"step {80 * i:5d}: train loss {7 - i / 30:.3f}, val loss {6 - i / 40:.3f}, "
    f"{25 + i % 7:3d} s (best so far); wrote 80.0 MB\n"
    for i in range(1, 121)
)
WIDE_TABLE = "\n".join(
    [
        "k  dir    what changed                              BLEU   ratio  vs   gain",
        *(
            f"{k}  de-en  {'a shared vocabulary and tied weights, run ' + str(k):<40}"
            f"  3{k}.82  1.028   {k - 1}  +0.{k}4"
            for k in range(1, 9)
        ),
    ]
)
NARROW_TABLE = "\n".join(
    ["           h1    h2    h3    h4"]
    + [f"  layer {n}:  {10 * n}%   {12 + n}%    {n}%   {50 - n}%" for n in (1, 2)]
)
HTML_TABLE = (
    "<table><tr>" + "".join(f"<th>column {i}</th>" for i in range(12)) + "</tr>"
    "<tr>" + "".join(f"<td>{i * 1.5:.1f}</td>" for i in range(12)) + "</tr></table>"
)


def layout_notebook(folder: Path) -> Path:
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    def cell(code, *outputs):
        return new_code_cell(code, execution_count=1, outputs=list(outputs))

    nb = new_notebook(
        cells=[
            new_markdown_cell("# Layout\n\n## Part 1: Outputs"),
            cell("train()", new_output("stream", name="stdout", text=LONG_LOG)),
            cell("table()", new_output("stream", name="stdout", text=WIDE_TABLE)),
            cell("heads()", new_output("stream", name="stdout", text=NARROW_TABLE)),
            cell(
                "long()",
                new_output("stream", name="stderr", text="a warning, " * 20 + "\n"),
            ),
            cell(
                "plot()",
                new_output(
                    "display_data",
                    data={"image/png": _png_figure(), "text/plain": "<Figure>"},
                ),
            ),
            cell(
                "frame()",
                new_output(
                    "execute_result",
                    data={"text/html": HTML_TABLE, "text/plain": "frame"},
                    execution_count=1,
                ),
            ),
        ]
    )
    path = folder / "layout.ipynb"
    nbformat.write(nb, path)
    return path


# Per output block at this width: its type size, its lines, and how many wrap.
BLOCKS_JS = r"""
() => [...document.querySelectorAll('.output pre')].map(pre => {
  const cs = getComputedStyle(pre);
  const line = parseFloat(cs.lineHeight);
  const lines = [...pre.querySelectorAll('.ln')];
  return {text: pre.textContent.slice(0, 30), table: pre.classList.contains('table'),
          font: parseFloat(cs.fontSize), lines: lines.length,
          wrapped: lines.filter(
            l => l.getBoundingClientRect().height > 1.5 * line).length,
          brokenCells: [...pre.querySelectorAll('.c')].filter(
            c => c.getBoundingClientRect().height > 1.5 * line).length,
          scrolls: pre.matches('.scrolls[tabindex="0"]'),
          height: pre.getBoundingClientRect().height};
})
"""


@pytest.mark.parametrize("width", WIDTHS)
def test_outputs_are_whole_at_any_width(tmp_path, browser, capsys, width):
    """A 120-line log is shown whole (no height cap), a table keeps its columns on a
    phone while it can (type down to 11 px, then its rows stay lines in a box that
    scrolls sideways, with a cue and keyboard focus: no row wraps into broken
    columns), a long line wraps in its box, and nothing else of any output is
    clipped, scrolled or spilling."""
    out = tmp_path / "layout.html"
    _render(layout_notebook(tmp_path), out)
    found = clipped_outputs(browser, out, width)
    assert not found, f"outputs cut or scrolled at {width} px:\n{_report(found)}"
    page = _open(browser, out, width)
    blocks = page.evaluate(BLOCKS_JS)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / f"layout-{width}.png"
    page.screenshot(path=str(shot), full_page=True)
    page.close()
    with capsys.disabled():
        print(f"\nscreenshot: {shot}")
    log, wide, narrow, long = blocks
    assert log["lines"] == 120 and log["height"] > 120 * 13, log  # all of it
    assert wide["table"] and narrow["table"] and not long["table"], blocks
    for block in blocks:
        assert block["font"] >= 11, f"{block['text']!r}: type of {block['font']} px"
    assert narrow["wrapped"] == 0, narrow  # its 32 columns fit a phone
    if width == 1280:
        assert all(b["font"] == 13 for b in blocks), blocks
        assert [b["wrapped"] for b in blocks] == [0, 0, 0, 1], blocks
        assert not any(b["scrolls"] for b in blocks), blocks
    else:
        assert wide["font"] == 11 and wide["wrapped"] == 0, wide  # no smaller
        assert wide["scrolls"] and not narrow["scrolls"] and not long["scrolls"]
        assert wide["brokenCells"] == 0, wide


def test_clipping_is_caught(tmp_path, browser):
    """The checks fire: an output capped in height (as the page once was), one that
    scrolls sideways, and a picture wider than its column."""
    out = tmp_path / "layout.html"
    _render(layout_notebook(tmp_path), out)
    html = out.read_text(encoding="utf-8")
    for css, kinds in [
        (".output pre { max-height: 32em; overflow: auto; }", {"vertical"}),
        (
            ".output pre, .output pre .ln { white-space: pre; overflow-x: auto; }",
            {"horizontal"},
        ),
        (".output.image img { max-width: none; width: 1400px; }", {"spills", "page"}),
    ]:
        broken = tmp_path / "broken.html"
        broken.write_text(html.replace("</head>", f"<style>{css}</style></head>"))
        found = clipped_outputs(browser, broken, 390 if "pre" in css else 1280)
        assert kinds <= {f["kind"] for f in found}, (css, found)


def _markdown_headings(notebook: Path, level: int) -> list[str]:
    """The headings of one level in a notebook's markdown, read from its source."""
    import re

    found, fence = [], False
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.split("\n"):
            if re.match(r" {0,3}(```|~~~)", line):
                fence = not fence
            m = not fence and re.match(r" {0,3}(#+)\s+(.*?)\s*#*\s*$", line)
            if m and len(m.group(1)) == level:
                found.append(m.group(2))
    return found


# The contents' link of each part.
PART_LINKS = "nav.toc li.toc-part > a, nav.toc li.toc-part > details > summary > a"
# Per part of the contents: its text, whether a reader sees it whole (inside the
# viewport and the contents' own box, not folded away), and whether it is marked as
# the part being read.
TOC_JS = r"""
() => {
  const nav = document.querySelector('nav.toc');
  const box = nav.querySelector(':scope > details').getBoundingClientRect();
  const view = {top: 0, bottom: window.innerHeight};
  return [...nav.querySelectorAll('li.toc-part')].map(li => {
    const a = li.querySelector(':scope > a, :scope > details > summary > a');
    const r = a.getBoundingClientRect();
    const shown = a.getClientRects().length > 0 && r.height > 0 &&
      r.top >= Math.max(box.top, view.top) - 1 &&
      r.bottom <= Math.min(box.bottom, view.bottom) + 1;
    return {text: a.textContent.trim(), shown, current: li.classList.contains(
      'toc-current'), subs: [...li.querySelectorAll(':scope details > ol a')].map(
      s => s.textContent.trim()), open: !!li.querySelector('details[open]')};
  });
}
"""


@pytest.mark.parametrize(
    "notebook, page",
    [
        (NOTEBOOK, PAGE),
        (ROOT / "exercises.ipynb", ROOT / "docs" / "exercises.html"),
        (ROOT / "since_2017.ipynb", ROOT / "docs" / "since_2017.html"),
    ],
    ids=["notebook", "exercises", "since_2017"],
)
def test_contents_list_every_part(browser, capsys, notebook, page):
    """The contents name every ## heading of the notebook (read from its markdown),
    with its ### headings under it; on a laptop (the sticky sidebar, 1280 x 800) every
    part stays in sight, from the top of the page and from each part, whose fold opens
    and is marked; on a phone the contents box shows every part."""
    import re

    plain = lambda t: " ".join(re.sub(r"[`*_$\\]", "", t).split())
    parts = [plain(t) for t in _markdown_headings(notebook, 2)]
    assert "Conclusion" in parts or notebook.name != NOTEBOOK.name, parts
    tab = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        tab.goto(page.resolve().as_uri(), wait_until="load")
        toc = tab.evaluate(TOC_JS)
        assert [plain(p["text"]) for p in toc] == parts
        sections = [plain(t) for t in _markdown_headings(notebook, 3)]
        assert [plain(s) for p in toc for s in p["subs"]] == sections
        hidden = [p["text"] for p in toc if not p["shown"]]
        assert not hidden, f"parts out of sight at the top: {hidden}"
        for k, part in enumerate(toc):
            tab.evaluate(  # the reader arrives at part k
                f"i => {{ const a = document.querySelectorAll({PART_LINKS!r})[i]; "
                "document.getElementById(decodeURIComponent(a.hash.slice(1)))"
                ".scrollIntoView({behavior: 'instant'}); }",
                k,
            )
            tab.evaluate(
                "new Promise(r => requestAnimationFrame(() => "
                "requestAnimationFrame(r)))"
            )
            now = tab.evaluate(TOC_JS)
            hidden = [p["text"] for p in now if not p["shown"]]
            assert not hidden, f"at {part['text']!r}, out of sight: {hidden}"
            assert [p["current"] for p in now] == [i == k for i in range(len(now))]
            assert now[k]["open"] == bool(now[k]["subs"]), now[k]
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shot = SCREENSHOTS / f"contents-{page.stem}-1280.png"
        tab.screenshot(path=str(shot))
    finally:
        tab.close()
    phone = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        phone.goto(page.resolve().as_uri(), wait_until="load")
        phone.evaluate("document.querySelector('nav.toc').scrollIntoView()")
        toc = phone.evaluate(
            f"() => [...document.querySelectorAll({PART_LINKS!r})].map(a => "
            "a.getClientRects().length > 0 && a.getBoundingClientRect().width > 0)"
        )
        assert toc == [True] * len(parts)
    finally:
        phone.close()
    with capsys.disabled():
        print(f"\nscreenshot: {shot}")


def _dive(title: str, summary: str | None, body: str = "", collapsed: bool = True):
    from nbformat.v4 import new_markdown_cell

    text = f"### Deep dive: {title}\n\n" + (f"*{summary}*\n\n" if summary else "")
    meta = {"jp-MarkdownHeadingCollapsed": True} if collapsed else {}
    return new_markdown_cell(text + body, metadata=meta)


def deep_dive_notebook(folder: Path) -> Path:
    """Two deep dives: one ended by a ### heading, with code, outputs, math and a
    #### heading inside; one ended by a ## heading in the middle of a markdown cell."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    nb = new_notebook(
        cells=[
            new_markdown_cell("# Deep dives\n\n## Part 1: The model\n\nThe main line."),
            new_code_cell(
                "main()",
                execution_count=1,
                outputs=[new_output("stream", name="stdout", text="main output\n")],
            ),
            _dive(
                "Why scale by $\\sqrt{d_k}$",
                "What this shows: without the scale the softmax saturates.",
                "The variance of $q \\cdot k$ grows with $d_k$.",
            ),
            new_code_cell(
                "saturate()",
                execution_count=2,
                outputs=[
                    new_output("stream", name="stdout", text="inside the dive\n" * 3)
                ],
            ),
            new_markdown_cell("#### A smaller heading\n\nStill inside."),
            new_code_cell("more()", execution_count=3, outputs=[]),
            new_markdown_cell("### Back on the main line\n\nOutside again."),
            _dive("Timing the step", "What this shows: where the time goes."),
            new_markdown_cell(
                "Inside the second dive.\n\n```\n## not a heading (code)\n```\n\n"
                "## Part 2: Training\n\nAfter the dive, in the same cell."
            ),
            new_markdown_cell(
                "[to the first dive](#deep-dive-why-scale-by-sqrtd-k) "
                "and [into it](#a-smaller-heading)"
            ),
        ]
    )
    path = folder / "dives.ipynb"
    nbformat.write(nb, path)
    return path


# The page's deep dives: open or not, what their summary shows, what they hold.
DIVES_JS = r"""
() => [...document.querySelectorAll('details.deep-dive')].map(d => {
  const s = d.querySelector(':scope > summary');
  return {open: d.open, id: s.querySelector('h3')?.id,
          tag: s.querySelector('.dd-tag').innerText,
          title: s.querySelector('h3').innerText.replace('¶', '').trim(),
          line: s.querySelector('p')?.innerText,
          holds: [...d.querySelectorAll('h3, h4, .input, .output')].map(
            e => e.id || e.textContent.trim().slice(0, 20)),
          bodyShown: d.querySelector('.deep-dive-body').checkVisibility()};
})
"""


def test_deep_dives_fold(tmp_path, browser, capsys):
    """A deep dive is a closed <details>: its summary shows the "Deep dive" tag, the
    title and the summary line; it holds the rest of its section (code, outputs and
    smaller headings) up to the next heading of level 3 or above, even one in the
    middle of a markdown cell; the contents list it; a click, the keyboard, a link to
    it or into it open it."""
    out = tmp_path / "dives.html"
    rendered = render_page.render_file(deep_dive_notebook(tmp_path), out, strict=True)
    assert rendered.deep_dives == ["Why scale by $\\sqrt{d_k}$", "Timing the step"]
    info = inspect_page(browser, out, "deep-dives")
    _announce(capsys, info)
    check_page(info, rendered)
    assert "main output" in info["text"] and "inside the dive" not in info["text"]
    assert "After the dive, in the same cell." in info["text"]
    assert "## not a heading (code)" not in info["text"]  # inside the second dive
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(out.resolve().as_uri(), wait_until="load")
        first, second = page.evaluate(DIVES_JS)
        assert not first["open"] and not second["open"]
        assert not first["bodyShown"]
        assert first["id"] == "deep-dive-why-scale-by-sqrtd-k"
        assert (
            first["tag"] == "DEEP DIVE:"
        )  # the colon unseen, there for copy and search
        assert first["title"].startswith("DEEP DIVE: Why scale by"), first
        assert (
            first["line"] == "What this shows: without the scale the softmax saturates."
        )
        assert second["line"] == "What this shows: where the time goes."
        assert first["holds"][:2] == ["deep-dive-why-scale-by-sqrtd-k", "saturate()"]
        assert "a-smaller-heading" in first["holds"] and "more()" in first["holds"]
        assert "back-on-the-main-line" not in first["holds"]
        assert second["holds"] == ["deep-dive-timing-the-step"], second
        assert page.locator("details.deep-dive h2").count() == 0
        toc = page.locator("nav.toc a.toc-deep-dive")
        assert toc.count() == 2
        # The contents' link opens the dive; closed again, the same link (the address
        # does not change) opens it again.
        toc.nth(1).click()
        assert [d["open"] for d in page.evaluate(DIVES_JS)] == [False, True]
        page.locator("details.deep-dive > summary").nth(1).click()
        assert [d["open"] for d in page.evaluate(DIVES_JS)] == [False, False]
        toc.nth(1).click()
        assert [d["open"] for d in page.evaluate(DIVES_JS)] == [False, True]
        # The keyboard: Tab reaches the summary, Enter opens, Space closes.
        summary = page.locator("details.deep-dive > summary").first
        summary.focus()
        page.keyboard.press("Enter")
        assert page.evaluate(DIVES_JS)[0]["open"]
        assert page.evaluate(DIVES_JS)[0]["bodyShown"]
        page.keyboard.press(" ")
        assert not page.evaluate(DIVES_JS)[0]["open"]
        outline = summary.evaluate(
            "s => getComputedStyle(s).outlineStyle + ' ' + getComputedStyle(s).cursor"
        )
        assert outline == "solid pointer", outline  # focus is visible
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shot = SCREENSHOTS / "deep-dives-closed.png"
        page.screenshot(path=str(shot))
        # A link into a closed dive, in the page, opens it.
        page.get_by_role("link", name="into it").click()
        assert page.evaluate(DIVES_JS)[0]["open"]
        page.screenshot(path=str(SCREENSHOTS / "deep-dives-open.png"))
    finally:
        page.close()
    # Opened at a dive's address: it is open.
    for fragment in ("#deep-dive-timing-the-step", "#a-smaller-heading"):
        page = browser.new_page(viewport={"width": 390, "height": 844})
        try:
            page.goto(out.resolve().as_uri() + fragment, wait_until="load")
            opened = [d["open"] for d in page.evaluate(DIVES_JS)]
            assert opened == [
                fragment == "#a-smaller-heading",
                fragment == "#deep-dive-timing-the-step",
            ]
            page.screenshot(path=str(SCREENSHOTS / "deep-dives-390.png"))
        finally:
            page.close()
    with capsys.disabled():
        print(f"\nscreenshot: {shot}")


def test_deep_dive_without_summary_fails_strict(tmp_path, capsys):
    from nbformat.v4 import new_markdown_cell, new_notebook

    nb = new_notebook(
        cells=[
            new_markdown_cell("# T\n\n## Part 1"),
            _dive("No summary", None, "Just text, not in italics."),
            _dive("Bold is no summary", None, "**What this shows: bold.**"),
            _dive("Not folded in Jupyter", "What this shows: a note.", collapsed=False),
        ]
    )
    path = tmp_path / "bad.ipynb"
    nbformat.write(nb, path)
    page = render_page.render_file(path, tmp_path / "bad.html")  # warnings only
    assert len(page.deep_dive_problems) == 2, page.deep_dive_problems
    assert "jp-MarkdownHeadingCollapsed" in " ".join(page.notes)
    err = capsys.readouterr().err
    assert "'No summary': the paragraph after its heading must be" in err
    with pytest.raises(render_page.PageError, match="2 deep dive"):
        render_page.render_file(path, tmp_path / "strict.html", strict=True)
    assert not (tmp_path / "strict.html").exists()


FAKE_NPM = """#!/bin/sh
# npm install --prefix PREFIX ...: one line per run, then (slowly) KaTeX's package.json
echo run >> "$3/runs"
sleep 1
mkdir -p "$3/node_modules/katex"
echo '{"version": "%s"}' > "$3/node_modules/katex/package.json"
"""


def test_katex_is_installed_once_when_two_render_at_once(tmp_path, monkeypatch):
    """Two renderers that find no KaTeX at the same time (the two test workers in a
    fresh clone): one runs npm, the other waits for it and finds KaTeX there."""
    import threading

    npm = tmp_path / "npm"
    npm.write_text(FAKE_NPM % render_page.KATEX_VERSION)
    npm.chmod(0o755)
    monkeypatch.setattr("shutil.which", lambda name: str(npm))
    katex_dir = tmp_path / "build" / "node_modules" / "katex"
    found = []
    threads = [
        threading.Thread(
            target=lambda: found.append(render_page.ensure_katex(katex_dir))
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == [katex_dir, katex_dir]
    assert (tmp_path / "build" / "runs").read_text() == "run\n"


def test_split_sections_keeps_the_text():
    source = (
        "intro\n\n## Part\n\ntext\n```python\n## a comment\n```\n"
        "### Sub\n\n#### small\n\nend\n~~~\n# x\n~~~"
    )
    pieces = render_page.split_sections(source)
    assert "".join(pieces) == source
    assert [p.split("\n")[0] for p in pieces] == ["intro", "## Part", "### Sub"]


@pytest.mark.parametrize("kind", ["folder", "proc", "file-as-folder"])
def test_out_is_refused_before_any_work(tmp_path, monkeypatch, kind):
    """--out a folder, a place that cannot be written, or under a file: one error line
    at once (render_html is never called), exit status 2."""
    out = {
        "folder": tmp_path,
        "proc": Path("/proc/page.html"),
        "file-as-folder": tmp_path / "a-file" / "index.html",
    }[kind]
    (tmp_path / "a-file").write_text("x")

    def never(*args, **kwargs):
        raise AssertionError("rendered before the output path was checked")

    monkeypatch.setattr(render_page, "render_html", never)
    with pytest.raises(render_page.PageError) as info:
        render_page.render_file(synthetic_notebook(tmp_path), out)
    message = str(info.value)
    assert str(out) in message and ("give" in message), message


@pytest.mark.process
def test_out_refused_on_the_command_line(tmp_path):
    """The command line refuses a folder in one line, fast, exit status 2; any other
    error reaching the top is one `error:` line too (tools/errors.py)."""
    nb_path = synthetic_notebook(tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.render_page",
            "--notebook",
            str(nb_path),
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done
    lines = done.stderr.strip().split("\n")
    assert len(lines) == 1 and lines[0].startswith(
        "python -m tools.render_page: error: --out "
    ), done.stderr
    assert "is a folder; give the page's file name" in lines[0]
    code = (
        "import sys; from tools import errors, render_page as r\n"
        "def boom(*a, **k): raise RuntimeError('disk on fire')\n"
        "r.render_file = boom\n"
        f"sys.exit(errors.run_main(lambda: r.main(['--notebook', {str(nb_path)!r}, "
        f"'--out', {str(tmp_path / 'x.html')!r}]), r.PROG))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr.strip().split("\n") == [
        "python -m tools.render_page: error: RuntimeError: disk on fire (unexpected; "
        "rerun with AT_TRACEBACK=1 to see where, and report it)"
    ], done.stderr


def test_fresh_page_outputs_fit_their_boxes(colab_run, tmp_path, browser, capsys):
    """The notebook executed now (ci preset, as on Colab) and rendered: at 1280 px no
    line of output wraps, so the conclusions the cells write (Part 4's table, Part 5's
    benchmark, Part 6's heads, ...) read as printed; at 1280 and 390 px nothing of an
    output is clipped or scrolled."""
    executed = colab_run.folder / "at-repo" / NOTEBOOK.name  # beside images/
    nbformat.write(colab_run.nb, executed)
    out = tmp_path / "index.html"
    rendered = _render(executed, out)
    info = inspect_page(browser, out, "fresh-ci")
    _announce(capsys, info)
    check_page(info, rendered)
    wide = [
        w
        for w in wide_outputs(browser, out)
        if not any(mark in w["fullCode"] for mark in NOT_WRITTEN_BY_THE_NOTEBOOK)
    ]
    assert not wide, f"lines of output that wrap at 1280 px:\n{_report(wide)}"
    for width in WIDTHS:
        found = clipped_outputs(browser, out, width)
        assert not found, f"outputs cut or scrolled at {width} px:\n{_report(found)}"


@pytest.mark.parametrize("width", WIDTHS)
def test_committed_page_outputs_are_whole(browser, width):
    """The committed page: nothing of any output is clipped, scrolled or spilling at
    1280 or 390 px, and at 1280 px no line of output wraps (the table's sentences,
    the benchmark, the heads, the conclusion, ...; the Part 5 torchrun cell too: the
    committed run writes the results file by a short relative path)."""
    found = clipped_outputs(browser, PAGE, width)
    assert not found, f"outputs cut or scrolled at {width} px:\n{_report(found)}"
    if width == 1280:
        wide = wide_outputs(browser, PAGE)
        assert not wide, f"lines of output that wrap at 1280 px:\n{_report(wide)}"


def test_formulas_and_text_outputs_on_a_rendered_page(tmp_path, monkeypatch, capsys):
    """The program on a small notebook: inline, display and environment math go to
    KaTeX as such; a printed table keeps its cells whole, a wide character takes two
    columns, and a colour set on one line carries to the next."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    text = "Inline $a^2$, then\n\n$$\n\\sum_i x_i\n$$\n\n"
    text += "and \\begin{align}a &= b\\end{align}"
    table = "name    value\nalpha beta   1.00\n東京東京東京  2.50\n"  # wide: 18
    coloured = "\x1b[31mred\nstill\x1b[0m"
    nb = new_notebook(
        cells=[
            new_markdown_cell(f"# Title\n\n{text}\n"),
            new_code_cell(
                "show()",
                execution_count=1,
                outputs=[new_output("stream", name="stdout", text=table)],
            ),
            new_code_cell(
                "say()",
                execution_count=2,
                outputs=[
                    new_output(
                        "execute_result",
                        data={"text/plain": coloured},
                        execution_count=2,
                    )
                ],
            ),
        ]
    )
    path, out = tmp_path / "n.ipynb", tmp_path / "n.html"
    nbformat.write(nb, path)
    typeset, sent = render_page.typeset, []

    def spy(math, katex_dir):
        sent.extend((m.tex, m.display) for m in math)
        return typeset(math, katex_dir)

    monkeypatch.setattr(render_page, "typeset", spy)
    assert render_page.main(["--notebook", str(path), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert said.endswith("1 headings, 3 formulas, 0 deep dives, title 'Title'\n")
    assert sent == [
        ("a^2", False),
        ("\\sum_i x_i", True),
        ("\\begin{align}a &= b\\end{align}", True),
    ]
    page = out.read_text(encoding="utf-8")
    assert page.count('class="katex-display"') == 2
    assert 'class="katex-error"' not in page
    cells = lambda *c: "".join(f'<span class="c">{x}</span>' for x in c)  # noqa: E731
    assert (
        '<pre class="lines table" style="--cols: 18">'
        f'<span class="ln">{cells("name")}    {cells("value")}</span>\n'
        f'<span class="ln">{cells("alpha beta")}   {cells("1.00")}</span>\n'
        f'<span class="ln">{cells("東京東京東京")}  {cells("2.50")}</span>\n</pre>'
    ) in page
    assert (
        '<pre class="lines" style="--cols: 5">'
        '<span class="ln"><span class="ansi-red-fg">red</span></span>\n'
        '<span class="ln"><span class="ansi-red-fg">still</span></span>\n</pre>'
    ) in page
    assert render_page.output_lines("\tx\n") == (
        '<pre class="lines" style="--cols: 9"><span class="ln">\tx</span>\n</pre>'
    )
