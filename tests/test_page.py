"""The blog page: render an executed notebook and check it in headless Chromium.

Each page is rendered into a temporary folder by tools/render_page.py (nbconvert with
the template tools/page/templates/atpage) and opened from file:// in Debian's Chromium
(driven by Playwright, which never downloads a browser here). A page passes when every
formula is typeset (no KaTeX error, one rendered formula per math span of the
notebook), every <img> has loaded, no request leaves file:// (data: URIs are fine), no
script fails, every heading of the notebook is in the page's text and the table of
contents links to it, and no two stream blocks of a cell stand apart. A screenshot of
each page is saved under build/screenshots/ and its path printed.

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


# Output blocks wider than their box (a reader must scroll sideways to read them), with
# the first line of their cell's code and the longest line of the block.
WIDE_OUTPUTS_JS = r"""
() => [...document.querySelectorAll('.cell.code')].flatMap(cell => {
  const code = (cell.querySelector('.input')?.textContent ?? '').trim();
  return [...cell.querySelectorAll('.output pre')]
    .filter(pre => pre.scrollWidth > pre.clientWidth)
    .map(pre => ({
      code: code.split('\n')[0].slice(0, 80), fullCode: code,
      scroll: pre.scrollWidth, box: pre.clientWidth,
      line: pre.textContent.split('\n').reduce((a, b) => b.length > a.length ? b : a),
    }));
})
"""

# Cells whose lines the notebook does not write: Part 5's torchrun workers print the
# command line's summary, which names the results file by its full path (long in a
# temporary folder; the committed run's is relative and short).
NOT_WRITTEN_BY_THE_NOTEBOOK = ("launch_torchrun(",)


def wide_outputs(browser, page_path: Path) -> list[dict]:
    """The output blocks of the page, at 1280 px, that are wider than their box."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(page_path.resolve().as_uri(), wait_until="load")
    page.evaluate("document.fonts.ready.then(() => true)")
    found = page.evaluate(WIDE_OUTPUTS_JS)
    page.close()
    return found


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
    text = " ".join(info["text"].split())
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


def test_command_line(tmp_path):
    """`python tools/render_page.py` (as `make page` ran it) and `python -m`, --check,
    and --strict's exit status."""
    nb_path = synthetic_notebook(tmp_path)
    out = tmp_path / "index.html"
    run = lambda *args, cwd=tmp_path: subprocess.run(
        [sys.executable, *args, "--notebook", str(nb_path), "--out", str(out)],
        cwd=cwd, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    done = run(str(ROOT / "tools" / "render_page.py"), "--strict")
    assert done.returncode == 0, done.stderr
    assert "8 formulas" in done.stdout
    assert run("-m", "tools.render_page", "--check", cwd=ROOT).returncode == 0
    out.write_text(out.read_text(encoding="utf-8") + " ", encoding="utf-8")
    stale = run(str(ROOT / "tools" / "render_page.py"), "--check")
    assert stale.returncode == 1 and "is stale" in stale.stderr


@pytest.mark.parametrize(
    "notebook, page",
    [(NOTEBOOK, PAGE), (ROOT / "exercises.ipynb", ROOT / "docs" / "exercises.html")],
    ids=["notebook", "exercises"],
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
        name: re.findall(r'href="([\w.-]+\.(?:html|ipynb))(?:#([^"]*))?"',
                         p.read_text(encoding="utf-8"))
        for name, p in pages.items()
    }  # fmt: skip
    for name, found in links.items():
        assert found, f"{name} links to no other page"
        for target, anchor in found:
            assert target in ids, f"{name} links to {target}, which is no page"
            assert not anchor or anchor in ids[target], f"{name}: {target}#{anchor}"
    parts = {a for t, a in links["index.html"] if t == "exercises.html" and a}
    assert len(parts) == 4 and all(a.startswith("part-") for a in parts), parts


def test_wide_output_is_caught_and_wrapped_text_fits(tmp_path, browser):
    """The width check flags a long printed line, and text wrapped by atkit.prose
    (the notebook's `say`) fits the box at 1280 px."""
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from atkit.prose import wrap

    sentence = "* a conclusion the prose points to, " + "with many more words " * 12
    cells = [
        new_code_cell(f"print({sentence!r})", execution_count=1, outputs=[
            new_output("stream", name="stdout", text=sentence + "\n")]),
        new_code_cell(f"say({sentence!r})", execution_count=2, outputs=[
            new_output("stream", name="stdout", text=wrap(sentence) + "\n")]),
    ]  # fmt: skip
    nb_path = tmp_path / "wide.ipynb"
    nbformat.write(new_notebook(cells=cells), nb_path)
    out = tmp_path / "wide.html"
    _render(nb_path, out)
    wide = wide_outputs(browser, out)
    assert [w["code"] for w in wide] == [f"print({sentence!r})"[:80]], wide
    assert len(wrap(sentence).split("\n")) > 2


def test_fresh_page_outputs_fit_their_boxes(colab_run, tmp_path, browser, capsys):
    """The notebook executed now (ci preset, as on Colab) and rendered: at 1280 px no
    output block is wider than its box, so the conclusions the cells write (Part 4's
    table, Part 5's benchmark, Part 6's heads, ...) read without scrolling sideways."""
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
    report = "\n".join(
        f"{w['code']!r}: {w['scroll']} px in a {w['box']} px box; e.g. {w['line']!r}"
        for w in wide
    )
    assert not wide, f"outputs wider than their box at 1280 px:\n{report}"


def test_committed_page_outputs_fit_their_boxes(browser):
    """The committed page, at 1280 px: no output block the text points to (the table's
    sentences, the benchmark, the heads, the conclusion, ...) needs sideways
    scrolling. The Part 5 torchrun cell is checked too: the committed run writes the
    results file by a short relative path."""
    wide = wide_outputs(browser, PAGE)
    report = "\n".join(
        f"{w['code']!r}: {w['scroll']} px in a {w['box']} px box; e.g. {w['line']!r}"
        for w in wide
    )
    assert not wide, f"outputs wider than their box at 1280 px:\n{report}"
