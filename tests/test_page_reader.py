"""The pages as a reader of today meets them (issue 58), in headless Chromium.

- Accessibility: axe-core (npm, package.json's devDependencies, `npm ci`) finds no
  critical and no serious violation on docs/index.html, docs/exercises.html,
  docs/since_2017.html and docs/translate.html, at 1280 px and at 390 px, light and
  dark.
- Phones: no display formula is cut at 390 px (page.js scales it to fit, or it
  scrolls with a cue and keyboard focus); the contents button stays on screen and
  opens the contents.
- Sources: each "§x.y" of the prose links to ar5iv; the arXiv page, the translation
  page and the exercises are linked on the first screen; the notebook ends with
  References that link every work its prose cites, and credits the 2018 and 2022
  annotated versions.
- Figures: SVG in the page style with words of 11 px or more at 1280 px; every figure
  has alt text that says what it shows (never matplotlib's repr).
- Dark mode, its toggle, copy buttons, a print style; the translator says what the
  model knows and notes input far from it.

Tests marked "after the run" in their docstring check the committed notebook's
outputs: they pass once the notebook is executed again and the page rendered from it.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from tools import render_page

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOTEBOOK = ROOT / "annotated_transformer.ipynb"
SOURCE = ROOT / "annotated_transformer.md"
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
PAGES = ["index.html", "exercises.html", "since_2017.html", "translate.html"]
SCREENSHOTS = ROOT / "build" / "screenshots"


def _tab(browser, path: Path, width: int, scheme: str = "light", **kw):
    context = browser.new_context(
        viewport={"width": width, "height": 900 if width > 400 else 844},
        color_scheme=scheme,
        **kw,
    )
    page = context.new_page()
    page.goto(Path(path).resolve().as_uri(), wait_until="load")
    page.evaluate("document.fonts.ready.then(() => true)")
    return context, page


def axe_findings(browser, path: Path, width: int, scheme: str = "light") -> dict:
    """axe-core's violations on the page, by impact: {impact: [(rule, nodes)]}."""
    if not AXE.is_file():
        pytest.fail(f"{AXE} is missing: run `npm ci` (package.json: axe-core)")
    context, page = _tab(browser, path, width, scheme)
    try:
        page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
        result = page.evaluate("() => axe.run(document, {resultTypes: ['violations']})")
    finally:
        context.close()
    found: dict = {}
    for v in result["violations"]:
        found.setdefault(v["impact"], []).append((v["id"], len(v["nodes"])))
    return found


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("name", PAGES)
def test_axe_finds_nothing_serious(browser, capsys, name, width, scheme):
    """No critical or serious axe-core finding (nested controls in the contents,
    code blocks that scroll without keyboard focus, contrast, names, ...)."""
    found = axe_findings(browser, DOCS / name, width, scheme)
    with capsys.disabled():
        print(f"\naxe {name} {width} px {scheme}: {found or 'no violation'}")
    bad = {k: v for k, v in found.items() if k in ("critical", "serious")}
    assert not bad, f"{name} at {width} px ({scheme}): {bad}"


# Display formulas that a reader cannot see whole: wider than their box, not marked as a
# box that scrolls with a cue and keyboard focus (page.js).
CLIPPED_FORMULAS_JS = r"""
() => {
  document.querySelectorAll('main details').forEach(d => { d.open = true; });
  window.dispatchEvent(new Event('resize'));
  return new Promise(done => requestAnimationFrame(() => setTimeout(() => {
    const out = [];
    for (const box of document.querySelectorAll('.katex-display')) {
      if (!box.getClientRects().length) continue;
      const inner = box.querySelector(':scope > .katex');
      const over = Math.max(box.scrollWidth, inner.getBoundingClientRect().width)
        - box.clientWidth;
      const cued = box.matches('.scrolls[tabindex="0"]')
        && getComputedStyle(box).overflowX === 'auto';
      const scale = parseFloat(getComputedStyle(inner).fontSize)
        / parseFloat(getComputedStyle(box).fontSize);
      if (over > 1 && !cued) {
        out.push({tex: box.querySelector('annotation')?.textContent.slice(0, 60),
                  over: Math.round(over), scale});
      }
      if (scale < 0.6) out.push({tex: 'too small', over: 0, scale});
    }
    done(out);
  }, 50)));
}
"""


def clipped_formulas(browser, path: Path, width: int = 390) -> list[dict]:
    context, page = _tab(browser, path, width)
    try:
        return page.evaluate(CLIPPED_FORMULAS_JS)
    finally:
        context.close()


@pytest.mark.parametrize("name", ["index.html", "exercises.html", "since_2017.html"])
def test_no_formula_is_cut_on_a_phone(browser, name):
    """At 390 px every display formula (deep dives opened) fits its column, scaled
    down to 0.62 at most, or scrolls in a box with a visible cue and keyboard focus."""
    found = clipped_formulas(browser, DOCS / name)
    assert not found, f"formulas cut at 390 px on {name}: {found}"


def test_a_cut_formula_is_caught(tmp_path, browser):
    """The check fires on a page whose formulas are not fitted (no page.js)."""
    page = (DOCS / "index.html").read_text(encoding="utf-8")
    broken = tmp_path / "index.html"
    broken.write_text(
        page.replace("fitFormulas();\n", "", 1).replace(
            "</head>", "<style>.katex-display{overflow:hidden}</style></head>"
        ),
        encoding="utf-8",
    )
    assert clipped_formulas(browser, broken)


def test_contents_button_stays_in_reach_on_a_phone(browser):
    """At 390 px, far down the page, the contents button is on screen; it opens the
    contents over the text, and a part's link closes them and leads there."""
    context, page = _tab(browser, DOCS / "index.html", 390)
    try:
        page.evaluate("window.scrollTo(0, document.body.scrollHeight / 2)")
        button = page.locator(".toc-button")
        box = button.bounding_box()
        assert box and 0 <= box["y"] and box["y"] + box["height"] <= 844, box
        button.click()
        nav = page.locator("nav.toc")
        assert nav.bounding_box()["y"] >= 0 and nav.is_visible()
        assert button.get_attribute("aria-expanded") == "true"
        link = page.locator("nav.toc li.toc-part > a").nth(3)
        target = link.get_attribute("href")[1:]
        link.click()
        assert button.get_attribute("aria-expanded") == "false"
        where = f"document.getElementById({target!r}).getBoundingClientRect().top"
        page.wait_for_function(f"Math.abs({where}) < 200", timeout=10_000)
    finally:
        context.close()


# --------------------------------------------------------------------------- sources

SECTION_LINKS_JS = r"""
() => {
  const walker = document.createTreeWalker(document.querySelector('main'),
    NodeFilter.SHOW_TEXT);
  const bare = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const e = n.parentElement;
    if (!/§\d/.test(n.textContent)) continue;
    if (e.closest('pre, code, .outputs, summary, .katex')) continue;
    const paper = 'a[href^="https://ar5iv.labs.arxiv.org/html/1706.03762#S"]';
    if (e.closest(paper)) continue;
    bare.push(n.textContent.trim().slice(0, 60));
  }
  const links = [...document.querySelectorAll('a.paper-ref')].map(a => a.hash);
  return {bare, links};
}
"""


@pytest.mark.parametrize("name", ["index.html", "exercises.html", "since_2017.html"])
def test_section_signs_link_to_the_paper(browser, name):
    """Each "§x.y" of the prose (not in code, outputs or a deep dive's summary line)
    is a link to that section on ar5iv (§3.2.1 -> #S3.SS2.SSS1)."""
    context, page = _tab(browser, DOCS / name, 1280)
    try:
        found = page.evaluate(SECTION_LINKS_JS)
    finally:
        context.close()
    assert not found["bare"], f"§ references not linked: {found['bare'][:10]}"
    if name == "index.html":
        assert "#S3.SS2.SSS1" in found["links"] and "#S6.SS1" in found["links"]
    assert render_page.link_sections("<p>§3.2.1 and <code>§5</code></p>") == (
        '<p><a class="paper-ref" href="https://ar5iv.labs.arxiv.org/html/1706.03762'
        '#S3.SS2.SSS1">§3.2.1</a> and <code>§5</code></p>'
    )


def test_first_screen_links_the_paper_the_model_and_the_exercises(browser):
    """On the first screen, at 1280 and 390 px: the paper's arXiv page, the
    translation page and the exercises; a description for search engines."""
    for width in (1280, 390):
        context, page = _tab(browser, DOCS / "index.html", width)
        try:
            seen = page.evaluate(
                """() => [...document.querySelectorAll('a')].filter(a => {
                  const r = a.getBoundingClientRect();
                  return r.height > 0 && r.bottom <= innerHeight;
                }).map(a => a.getAttribute('href'))"""
            )
            described = page.evaluate(
                "document.querySelector('meta[name=description]')?.content ?? ''"
            )
        finally:
            context.close()
        for href in (render_page.PAPER_URL, "translate.html", "exercises.html"):
            assert href in seen, (width, href, seen)
        assert len(described) > 60, described


def _cited(prose: str) -> set[str]:
    """First authors the prose cites: "Name et al. (2019" or "(Name et al., 2016"."""
    names = re.findall(r"([A-Z][a-z]+) et al\.,? \(?\d{4}", prose)
    names += re.findall(r"\(([A-Z][a-z]+),? [A-Za-z ,]*?\d{4}\)", prose)
    names += re.findall(r"([A-Z][a-z]+) and [A-Z][a-z]+,? \(?\d{4}", prose)
    return set(names) - {"Table", "Figure"}


def test_references_link_every_cited_work():
    """The notebook ends with "## References": one linked entry per work its prose
    cites (each first author named in the text has an entry with a link), sacreBLEU
    (Post) included; the opening credits the 2018 and 2022 annotated versions with
    links."""
    text = SOURCE.read_text(encoding="utf-8")
    body, sep, refs = text.rpartition("\n## References\n")
    assert sep, "no '## References' section"
    assert "\n## " not in refs, "References is not the last section"
    entries = [e for e in re.split(r"\n\* ", refs)[1:]]
    cited = _cited(re.sub(r"```.*?```", "", body, flags=re.DOTALL))
    assert {"Bahdanau", "Ba", "Xiong", "Sennrich", "Papineni", "Szegedy"} <= cited
    missing = [
        name
        for name in sorted(cited | {"Post", "Vaswani", "Wu", "Elliott"})
        if not any(e.startswith(name) and "](http" in e for e in entries)
    ]
    assert not missing, f"cited but not in References with a link: {missing}"
    head = body.split("\n## Setup", 1)[0]
    assert "](https://arxiv.org/abs/1706.03762)" in head
    for url in (
        "https://nlp.seas.harvard.edu/2018/04/03/attention.html",
        "https://nlp.seas.harvard.edu/annotated-transformer/",
    ):
        assert f"]({url})" in head, url


# --------------------------------------------------------------------------- figures


def figure_cells(nb) -> list:
    """Code cells with an image output."""
    kinds = ("image/svg+xml", "image/png", "image/jpeg")
    return [
        c
        for c in nb.cells
        if c.cell_type == "code"
        and any(k in o.get("data", {}) for o in c.get("outputs", []) for k in kinds)
    ]


def alt_problems(nb) -> list[str]:
    """Figures without alt text that says what they show: the cell's `alt` (or a
    drawing's caption) must be a sentence, never a repr such as "<Figure size ...>"."""
    problems = []
    for cell in figure_cells(nb):
        alt = str(cell.metadata.get("alt", ""))
        captions = [
            o.data.get("text/plain", "")
            for o in cell.outputs
            if str(o.get("data", {}).get("text/plain", "")).startswith("[figure: ")
        ]
        alt = alt or (captions[0][9:-1] if captions else "")
        first = cell.source.strip().split("\n")[0][:50]
        if re.search(r"<\w*Figure|<matplotlib", alt) or len(alt.split()) < 6:
            problems.append(f"{first!r}: alt {alt!r}")
        elif not alt.rstrip().endswith("."):
            problems.append(f"{first!r}: alt text is not a sentence: {alt!r}")
    return problems


def test_every_figure_has_alt_text():
    """After the run: every figure of the committed notebook has alt text that
    says what it shows (the `alt` on its cell's fence line)."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert figure_cells(nb), "no figure in the notebook"
    problems = alt_problems(nb)
    assert not problems, "\n".join(problems)


def test_missing_alt_text_is_caught():
    """The check fires on a matplotlib repr and on a missing alt."""
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    def cell(alt, plain):
        c = new_code_cell(
            "plot()",
            outputs=[
                new_output(
                    "display_data", data={"image/png": "iVBO", "text/plain": plain}
                )
            ],
        )
        if alt is not None:
            c.metadata["alt"] = alt
        return c

    nb = new_notebook(
        cells=[
            cell(None, "<Figure size 400x256 with 1 Axes>"),
            cell("", "[figure: ]"),
            cell("A line of loss falling over the steps of a run.", "<Figure>"),
        ]
    )
    assert len(alt_problems(nb)) == 2


PLOT_TEXT_JS = r"""
() => [...document.querySelectorAll('figure.output.svg svg')].map(svg => {
  const k = svg.getScreenCTM().a;  // CSS px per unit of the SVG
  const sizes = [...svg.querySelectorAll('text')].map(
    t => parseFloat(getComputedStyle(t).fontSize) * k);
  return {label: svg.getAttribute('aria-label') || '', role: svg.getAttribute('role'),
          smallest: sizes.length ? Math.min(...sizes) : null, texts: sizes.length,
          width: svg.getBoundingClientRect().width};
})
"""


def _page_figures(browser, path: Path) -> list[dict]:
    context, page = _tab(browser, path, 1280)
    try:
        return page.evaluate(PLOT_TEXT_JS), page.evaluate(
            "[...document.images].map(i => i.alt)"
        )
    finally:
        context.close()


def test_a_plot_in_the_page_style_reads_at_11_px(tmp_path, browser):
    """A plot made as the notebook makes it (atkit.figures.use_page_style, the
    IPython formatter), 4.5 inches wide with 7 pt labels (the smallest the notebook
    draws), and rendered by render_page: SVG with its words as text, each 11 px or
    more at 1280 px, named by the cell's alt."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from IPython.core.interactiveshell import InteractiveShell
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    from atkit import figures

    shell = InteractiveShell.instance()
    try:
        with plt.rc_context():
            import IPython

            get = IPython.get_ipython
            IPython.get_ipython = lambda: shell
            try:
                figures.use_page_style()
            finally:
                IPython.get_ipython = get
            fig, ax = plt.subplots(figsize=(4.5, 3))
            ax.imshow([[0.1, 0.9], [0.5, 0.2]], cmap="viridis")
            ax.text(0, 0, "0.10", fontsize=7, color="w")
            ax.set_title("small type")
            data, _ = shell.display_formatter.format(fig)
            plt.close(fig)
    finally:
        InteractiveShell.clear_instance()
    alt = "A two by two grid of values, the largest top right."
    cell = new_code_cell(
        "plot()",
        execution_count=1,
        outputs=[new_output("display_data", data=data)],
        metadata={"alt": alt},
    )
    nb = new_notebook(cells=[new_markdown_cell("# Figures"), cell])
    path, out = tmp_path / "f.ipynb", tmp_path / "f.html"
    nbformat.write(nb, path)
    render_page.render_file(path, out, strict=True)
    found, imgs = _page_figures(browser, out)
    assert not imgs and len(found) == 1, (found, imgs)
    assert found[0]["role"] == "img" and found[0]["label"] == alt
    assert found[0]["texts"] > 3 and found[0]["smallest"] >= 11, found


def test_committed_figures_are_svg_with_words_of_11_px(browser):
    """After the run: every figure of the page is an inline SVG (no PNG), named by
    its alt text, its words 11 px or more at 1280 px."""
    found, imgs = _page_figures(browser, DOCS / "index.html")
    assert not imgs, f"{len(imgs)} figures as PNG: {imgs[:3]}"
    assert len(found) >= 14, found
    for f in found:
        assert f["role"] == "img" and len(f["label"].split()) >= 6, f
        assert f["smallest"] is None or f["smallest"] >= 11, f


# --------------------------------------------------------------------------- reader


def test_dark_mode_toggle_copy_and_print(browser):
    """Dark with the system, the theme button switches and remembers; a code cell's
    copy button copies its code; printed, the contents and buttons are gone."""
    context, page = _tab(
        browser,
        DOCS / "index.html",
        1280,
        scheme="dark",
        permissions=["clipboard-read", "clipboard-write"],
    )
    try:
        background = "getComputedStyle(document.body).backgroundColor"
        assert page.evaluate(background) == "rgb(15, 20, 25)"
        page.click(".theme-button")
        assert page.evaluate(background) == "rgb(255, 255, 255)"
        page.reload(wait_until="load")
        assert page.evaluate(background) == "rgb(255, 255, 255)", "not remembered"
        cell = page.locator(".input .highlight:visible").first  # not in a folded dive
        cell.hover()
        cell.locator(".copy-button").click()
        code = cell.locator("pre").text_content().rstrip("\n")
        assert page.evaluate("navigator.clipboard.readText()") == code
        page.emulate_media(media="print")
        hidden = page.evaluate(
            "['nav.toc', '.copy-button', '.theme-button'].map(s => "
            "getComputedStyle(document.querySelector(s)).display)"
        )
        assert hidden == ["none"] * 3, hidden
    finally:
        context.close()


def _translate(page, text: str) -> dict:
    page.fill("#tr-input", text)
    page.evaluate("document.body.dataset.state = 'submitted'")
    page.click("#tr-go")
    page.wait_for_function(
        "['done', 'error'].includes(document.body.dataset.state)", timeout=60_000
    )
    return page.evaluate(
        "() => ({translation: document.getElementById('tr-translation').textContent,"
        " domain: document.getElementById('tr-domain').textContent})"
    )


def test_translator_says_what_it_knows(browser, capsys):
    """The translation page names the training data (Multi30k captions) and offers
    captions to try; everyday German gets a one-line note beside its translation, a
    caption none (the committed model and its manifest's domain)."""
    context, page = _tab(browser, DOCS / "translate.html", 390)
    try:
        page.wait_for_function(
            "document.body.dataset.state !== 'loading'", timeout=120_000
        )
        knows = page.text_content("#tr-knows")
        assert "Multi30k" in knows and "29,000" in knows
        examples = page.locator("#tr-examples button").all_text_contents()
        assert len(examples) >= 4
        far = _translate(page, "Ich habe heute keine Zeit, weil ich arbeiten muss.")
        assert far["domain"].startswith("Far from what this model knows"), far
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shot = SCREENSHOTS / "translate-far-390.png"
        page.screenshot(path=str(shot), full_page=True)
        for text in examples:
            near = _translate(page, text)
            assert near["domain"] == "", (text, near)
    finally:
        context.close()
    with capsys.disabled():
        print(f"\nscreenshot: {shot}\n{far}")


def test_references_are_not_prose_to_read(tmp_path):
    """tools.word_count leaves the closing "## References" out of every count (a
    list of links, not reading); the section before it still counts."""
    from tools import word_count

    note = tmp_path / "n.md"
    note.write_text("# T\n\n## Part 1\n\none two three\n", encoding="utf-8")
    before = word_count.count(note)
    note.write_text(
        note.read_text() + "\n## References\n\n* A (2020). Title. [x](https://x).\n"
    )
    assert word_count.count(note) == before
    assert before.main_words == 6  # "T", "Part 1" and three words


@pytest.mark.process
def test_a_kernel_draws_plots_as_svg():
    """In a Jupyter kernel, after atkit.figures.use_page_style() (runtime.setup()
    calls it), the first figure (which makes pyplot load its inline backend, which
    chooses the formats again) comes out as SVG alone."""
    import nbclient
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(
        cells=[
            new_code_cell(
                "import matplotlib.pyplot as plt\n"
                "from atkit import figures\n"
                "figures.use_page_style()"
            ),
            new_code_cell(
                "fig, ax = plt.subplots(figsize=(3, 2))\nax.plot([1, 2])\nplt.show()"
            ),
        ]
    )
    client = nbclient.NotebookClient(
        nb, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()
    kinds = [sorted(o.get("data", {})) for o in nb.cells[1].outputs]
    assert kinds == [["image/svg+xml", "text/plain"]], kinds
