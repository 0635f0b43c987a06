"""Render the executed notebook into one self-contained HTML page, with nbconvert.

    python -m tools.render_page          # the notebook -> docs/index.html
    python -m tools.render_page --notebook exercises.ipynb --out docs/exercises.html
    python -m tools.render_page --notebook X.ipynb --out page.html [--strict]
    python -m tools.render_page --check  # exit 1 if docs/index.html is stale

(`python tools/render_page.py ...` works too.) nbconvert's HTMLExporter does the cells
with the template atkit/page/templates/atpage: tags (``remove-cell``, ``remove-input``,
``remove-output``; ``hide-input`` folds the code into a closed ``<details>``), markdown
with its images embedded, stream outputs coalesced (a carriage return keeps a line's
last state), ANSI colours, Pygments highlighting. This script adds what nbconvert has
not: math typeset at build time by KaTeX run with node (the page runs no math
JavaScript; KaTeX's CSS and fonts are inlined), a table of contents, folded deep dives,
outputs laid out to be read whole at any width, and the checks.

Outputs: every text output is shown whole (no height cap, no scroll box). Each line is
its own block, so a line longer than the box wraps with a hanging indent instead of
running off the side (at 1280 px the notebook's lines fit without wrapping: the tests
check it); a block of aligned columns (a table) first shrinks its type, down to 11 px,
to keep its columns in line on a phone, and past that its rows wrap between columns,
never inside one.

Table of contents: every ``##`` heading, each with its ``###`` headings in a fold
that opens for the part being read (a small script of the page, atkit/page/page.js).
Below the width of the sidebar the contents are a box under the title, and a button
that stays at the bottom of the screen opens them over the text.

For the reader of today (atkit/page/page.js and style.css): light and dark following
the system, with a button to choose; a copy button on each code cell; a print style
(contents and buttons hidden, deep dives opened); a display formula wider than a phone
scaled down to fit, and past a floor a box that scrolls with a visible cue. Under the
title, links to the paper, the translation page and the exercises (PAGE_LEADS); each
"§3.2.1" of the prose links to that section of the paper on ar5iv (AR5IV). Figures:
an SVG output (plots are SVG, atkit.figures) is shown at atkit.figures.PAGE_PX_PER_IN
px per inch, at most the column, with ``role="img"`` and its alt text as its name; the
alt text is the ``alt`` of the cell's metadata (in the jupytext source, ``alt="..."``
on the cell's fence line) or a drawing's caption, and a figure with neither is noted.
Code blocks that may scroll sideways take keyboard focus (``tabindex="0"``).

Deep dives: a ``### Deep dive: <title>`` heading whose next paragraph is a summary in
italics (``*What this shows: ...*``) starts a section that runs to the next heading of
level 3 or higher; on the page it is a ``<details class="deep-dive">``, closed, whose
``<summary>`` holds the heading and that line. A link to it, or into it, opens it.
(In Jupyter the lead marks the heading cell ``jp-MarkdownHeadingCollapsed: true``;
a deep dive without the summary line fails ``--strict``.)
A link to one of the repository's notebooks (``exercises.ipynb#part-1-the-model``)
becomes a link to its page beside this one (``exercises.html#part-1-the-model``).
KaTeX comes from the npm registry: when ``build/node_modules/katex`` is missing or not
the pinned version, it is installed with ``npm install --prefix build katex@VERSION``.

The page must work offline: a remote script, style sheet, image or frame, or an image
that cannot be embedded, is an error. ``--strict`` (``make page``) also fails on error
outputs, formulas KaTeX rejects, TeX left untypeset in the prose and a deep dive
without its summary line. The output path is checked before any work: a folder, or a
place that cannot be written, is refused at once with one ``error:`` line; so is the
notebook itself (or a hard or symbolic link to it), its ``.md`` source, a file of the
page's own (atkit/page/) or any other ``.ipynb`` (atkit.files.check_outputs). A
symbolic link given as ``--out`` stays a link: the page replaces the file it points to.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unicodedata
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from jinja2 import pass_context
from nbconvert import HTMLExporter
from nbconvert.filters.ansi import ansi2html
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors import CoalesceStreamsPreprocessor
from pygments.formatters import HtmlFormatter
from traitlets.config import Config

try:
    from atkit import attention_view, figures, processes, records
    from atkit.files import check_outputs, path_kind, write_text_atomic
    from tools import errors
except ModuleNotFoundError:  # run as a file: tools/ is importable, the root is not
    if __name__ != "__main__" or __package__:
        raise
    _path = [str(Path(__file__).resolve().parents[1]), os.getenv("PYTHONPATH", "")]
    _env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, _path))}
    _cmd = [sys.executable, "-m", "tools.render_page", *sys.argv[1:]]
    os.execve(sys.executable, _cmd, _env)  # this process becomes it: no child

PROG = "python -m tools.render_page"

ROOT = Path(__file__).resolve().parents[1]
PAGE_DIR = ROOT / "atkit" / "page"  # the pages' code, in one folder
NOTEBOOK = ROOT / "annotated_transformer.ipynb"
OUT = ROOT / "docs" / "index.html"
KATEX_VERSION = "0.19.1"
KATEX_DIR = ROOT / "build" / "node_modules" / "katex"
# Each notebook with a page, and the page's file name in docs/.
PAGES = {
    "annotated_transformer.ipynb": "index.html",
    "exercises.ipynb": "exercises.html",
    "since_2017.ipynb": "since_2017.html",
}
# The links under the title of each page: (class, href, text).
PAPER_URL = "https://arxiv.org/abs/1706.03762"
PAGE_LEADS = {
    "annotated_transformer.ipynb": [
        ("lead-try", "translate.html", "Try the trained model: German → English"),
        ("lead-exercises", "exercises.html", "Exercises"),
        ("lead-paper", PAPER_URL, "The paper (arXiv)"),
    ],
    "exercises.ipynb": [
        ("lead-post", "index.html", "The post"),
        ("lead-try", "translate.html", "Try the trained model"),
        ("lead-paper", PAPER_URL, "The paper (arXiv)"),
    ],
    "since_2017.ipynb": [
        ("lead-post", "index.html", "The post"),
        ("lead-paper", PAPER_URL, "The paper (arXiv)"),
    ],
}
# "§3.2.1" in the prose links to that section of the paper on ar5iv (#S3.SS2.SSS1).
AR5IV = "https://ar5iv.labs.arxiv.org/html/1706.03762"
_SECTION_SIGN_RE = re.compile(r"§(\d+)(?:\.(\d+))?(?:\.(\d+))?")
_NOTEBOOK_LINK_RE = re.compile(
    r'href="(' + "|".join(map(re.escape, PAGES)) + r')(#[^"]*)?"'
)

_MATH = "\ue000MATH{}\ue001"  # a formula's place in the HTML until KaTeX has run
_MATH_RE = re.compile("\ue000MATH(\\d+)\ue001")
# TeX delimiters left in the prose (the browser test looks for the same).
_TEX_LEFT_RE = re.compile(
    r"\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\$[^$]*\\[A-Za-z]+[^$]*\$"
)
_REMOTE_TAG_RE = re.compile(
    r"""<(script|link|img|iframe|source|video|audio|embed|object|track|input)\b"""
    r"""[^>]*?\b(?:src|href|data|poster)\s*=\s*["']?\s*(?:https?:)?//[^>]*>""",
    re.IGNORECASE,
)
_REMOTE_CSS_RE = re.compile(r"""url\(\s*["']?\s*(?:https?:)?//""", re.IGNORECASE)
_LOCAL_IMG_RE = re.compile(r"""<img\b[^>]*?\bsrc=["']?(?!["']|data:)([^"'\s>]+)""")
# Headings that split the notebook into sections (level 1 to 3), outside code fences.
_SECTION_RE = re.compile(r"^ {0,3}(#{1,3})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_DEEP_DIVE_RE = re.compile(r"deep dive:\s*(.+)", re.IGNORECASE)
# A summary line: one paragraph wholly in single *...* or _..._ (not bold).
_SUMMARY_RE = re.compile(r"\A(\*(?!\*)|_(?!_))(\S.*?\S|\S)\1\Z", re.DOTALL)
# An aligned column in a line of text: two spaces or more between two words.
_COLUMN_GAP_RE = re.compile(r"\S {2,}\S")
_SGR_RE = re.compile(r"\x1b\[[0-9;]*m")


class PageError(Exception):
    """The page cannot be rendered; the message says what to do."""


@dataclass
class Math:
    tex: str
    display: bool
    where: str  # the cell it is in, for messages


@dataclass
class Heading:
    level: int
    text: str  # plain text, math as its TeX source
    fragments: list[str]  # the text between math spans (what a reader sees)
    anchor: str
    html: str  # inner HTML, math as placeholders
    deep_dive: bool = False  # a "### Deep dive: ..." heading


@dataclass
class Page:
    """What the template needs beyond the notebook, and what the render found."""

    source: str  # the notebook's file name
    css: str = ""
    title_markdown: str = ""  # the notebook's opening "# ..." line, shown above all
    headings: list[Heading] = field(default_factory=list)
    math: list[Math] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # error outputs of the notebook
    stray_math: list[str] = field(default_factory=list)  # TeX the markdown left as text
    deep_dives: list[str] = field(default_factory=list)  # their titles, in order
    deep_dive_problems: list[str] = field(default_factory=list)  # fail --strict
    broken_links: list[str] = field(default_factory=list)  # fail --strict
    notes: list[str] = field(default_factory=list)  # warnings that do not fail --strict
    script: str = ""  # the page's own script (atkit/page/page.js)
    description: str = ""  # <meta name="description">: the first paragraph
    lead_links: list[tuple[str, str, str]] = field(default_factory=list)
    figures: list[dict] = field(default_factory=list)  # {"where", "alt"} per figure

    @property
    def title(self) -> str:
        h1 = next((h for h in self.headings if h.level == 1), None)
        return h1.text if h1 else Path(self.source).stem

    def toc(self) -> str:
        """The ## headings, each with its ### headings in a fold (a <details> that the
        page's script opens for the part being read); a ### before any ## stays on
        top."""
        groups: list[tuple[Heading, list[Heading]]] = []
        for h in self.headings:
            if h.level == 3 and groups:
                groups[-1][1].append(h)
            elif h.level in (2, 3):
                groups.append((h, []))

        def link(h: Heading) -> str:
            cls = ' class="toc-deep-dive"' if h.deep_dive else ""
            return f'<a href="#{h.anchor}"{cls}>{h.html}</a>'

        # A part's fold opens with its own button (the <summary>, beside the link:
        # a link inside a <summary> would be one control inside another).
        items = []
        for top, subs in groups:
            if not subs:
                items.append(f'<li class="toc-part">{link(top)}</li>')
                continue
            inner = "".join(f"<li>{link(s)}</li>" for s in subs)
            name = html.escape(f"sections of {top.text}", quote=True)
            items.append(
                f'<li class="toc-part">{link(top)}<details class="toc-fold">'
                f'<summary aria-label="{name}"></summary><ol>{inner}</ol>'
                "</details></li>"
            )
        return '<ol class="toc-parts">\n' + "\n".join(items) + "\n</ol>"


# --------------------------------------------------------------------------- nbconvert


class PagePreprocessor(CoalesceStreamsPreprocessor):
    """nbconvert's stream coalescing, plus what a reader of the page wants.

    nbconvert joins consecutive outputs of one stream and keeps the text after a line's
    last carriage return. Then a stream left blank (a progress bar that cleared itself)
    goes, and the streams that meet, stdout and stderr alike, become one block: a
    training loop's epoch lines, printed between its progress bars, read as one log.
    The opening "# Title" line goes above the table of contents; error outputs are
    noted for --strict; an attention view (atkit.attention_view) gets this version's
    script and style, its data kept, so the page shows the current view even when the
    notebook was saved by an older atkit. Markdown cells are cut at their headings of
    level 1 to 3 (a section can end in the middle of a cell), and the deep dives are
    marked for the template: the head cell (heading and summary line) gets
    ``atpage.deep_dive``, the last cell of the section ``atpage.close``.
    """

    page: Page  # the Page being rendered, set by _exporter

    def preprocess(self, nb, resources):
        first = nb.cells[0] if nb.cells else None
        lead = first and re.match(r"\s*(# [^\n]*)\n?", first.source)
        if lead and first.cell_type == "markdown":
            self.page.title_markdown = lead.group(1)
            first.source = first.source[lead.end() :]
        nb.cells = self._sections(nb.cells)
        return super().preprocess(nb, resources)

    def _sections(self, cells: list) -> list:
        out: list = []
        open_dive = False
        for whole in cells:
            pieces = (
                split_sections(whole.source)
                if whole.cell_type == "markdown"
                else [None]
            )
            for k, piece in enumerate(pieces):
                cell = whole
                if piece is not None:
                    cell = _with_source(whole, piece, keep_metadata=k == 0)
                heading = section_heading(cell)
                if heading and open_dive:
                    _mark(out[-1])["close"] = _mark(out[-1]).get("close", 0) + 1
                    open_dive = False
                dive = heading and heading[0] == 3 and _DEEP_DIVE_RE.match(heading[1])
                if not dive:
                    out.append(cell)
                    continue
                title = dive.group(1).strip()
                self.page.deep_dives.append(title)
                head, rest, summarised = split_summary(cell.source)
                if not summarised:
                    self.page.deep_dive_problems.append(
                        f"deep dive {title!r}: the paragraph after its heading must be "
                        "a one-line summary in italics, e.g. `*What this shows: ...*`"
                    )
                if k > 0:
                    self.page.notes.append(
                        f"deep dive {title!r}: its heading is not the first line of "
                        "its markdown cell, so JupyterLab cannot fold it; start a cell "
                        "with it"
                    )
                elif not cell.metadata.get("jp-MarkdownHeadingCollapsed"):
                    self.page.notes.append(
                        f"deep dive {title!r}: its cell lacks the metadata "
                        "jp-MarkdownHeadingCollapsed: true, so JupyterLab shows it open"
                    )
                cell.source = head
                _mark(cell)["deep_dive"] = True
                out.append(cell)
                if rest.strip():
                    out.append(_with_source(cell, rest, keep_metadata=False))
                open_dive = True
        if open_dive:
            _mark(out[-1])["close"] = _mark(out[-1]).get("close", 0) + 1
        return out

    def preprocess_cell(self, cell, resources, index):
        cell, resources = super().preprocess_cell(cell, resources, index)
        outputs = []
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                self.page.errors.append(f"{_where(cell)}: {out.ename}: {out.evalue}")
            if out.output_type != "stream":
                view = out.get("data", {}).get("text/html", "")
                if 'data-atkit="attention-view"' in view:  # today's script and style
                    out.data["text/html"] = attention_view.refresh(view)
                self._figure(cell, out)
                outputs.append(out)
                continue
            # An unfinished last line left blank is a cleared progress bar: the next
            # text is written over it.
            head, newline, last = out.text.rpartition("\n")
            text = out.text if last.strip() else head + newline
            if not text.strip():
                continue
            if outputs and outputs[-1].output_type == "stream":
                prev = outputs[-1]
                kept = prev.text.rstrip("\r")
                prev.text = kept + ("" if kept.endswith("\n") else "\n") + text
                prev.name = "stdout" if "stdout" in (prev.name, out.name) else prev.name
            else:
                out.text = text
                outputs.append(out)
        cell.outputs = outputs
        return cell, resources

    def _figure(self, cell, out) -> None:
        """An image output's alt text (and a drawing's caption) into its metadata
        for the template; an SVG sized for the page and named by its alt text."""
        data = out.get("data", {})
        kinds = [k for k in ("image/svg+xml", "image/png", "image/jpeg") if k in data]
        if not kinds or "text/html" in data or "text/markdown" in data:
            return
        plain = data.get("text/plain", "")
        plain = plain if isinstance(plain, str) else "".join(plain)
        caption = plain[len("[figure: ") : -1] if plain.startswith("[figure: ") else ""
        alt = " ".join(str(cell.metadata.get("alt", "")).split()) or caption
        mark = out.setdefault("metadata", {}).setdefault("atpage", {})
        mark.update(alt=alt, caption=caption)
        self.page.figures.append({"where": _where(cell), "alt": alt})
        if not alt:
            self.page.notes.append(
                f"{_where(cell)}: a figure without alt text; say what it shows in a "
                'sentence: alt="..." on the cell\'s fence line in the .md'
            )
        if kinds[0] == "image/svg+xml":
            data["image/svg+xml"] = page_svg(data["image/svg+xml"], alt)


def page_svg(svg: str, alt: str) -> str:
    """An SVG output as the page shows it inline: without the XML prolog a document
    may not hold; PAGE_PX_PER_IN px wide per inch of its size (its height follows,
    its width at most the column's, style.css); ``role="img"`` named by `alt`."""
    svg = re.sub(r"\A\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?", "", svg)
    root = re.match(r"<svg\b[^>]*>", svg)
    if not root:
        return svg
    tag = root.group(0)
    width = re.search(r'\swidth="([0-9.]+)pt"', tag)
    if width:
        px = float(width.group(1)) / 72 * figures.PAGE_PX_PER_IN
        tag = re.sub(r'\sheight="[0-9.]+pt"', "", tag)
        tag = tag.replace(width.group(0), f' width="{px:.0f}"')
    tag = re.sub(r'\s(role|aria-label)="[^"]*"', "", tag)
    label = f' aria-label="{html.escape(alt, quote=True)}"' if alt else ""
    tag = tag[:-1] + f' role="img"{label}>'
    return tag + svg[root.end() :]


def link_sections(fragment: str) -> str:
    """Each "§x.y.z" in the text of an HTML fragment (not inside a link, code or a
    preformatted block) as a link to that section of the paper on ar5iv."""

    def anchor(m: re.Match) -> str:
        parts = [p for p in m.groups() if p]
        target = "S" + ".".join(
            [parts[0], *(("SS", "SSS")[i] + p for i, p in enumerate(parts[1:]))]
        )
        return f'<a class="paper-ref" href="{AR5IV}#{target}">{m.group(0)}</a>'

    out, inside = [], 0
    for piece in re.split(r"(<[^>]+>)", fragment):
        tag = re.match(r"<(/?)(a|code|pre)\b", piece, re.IGNORECASE)
        if tag:
            inside += -1 if tag.group(1) else 1
        elif not piece.startswith("<") and not inside:
            piece = _SECTION_SIGN_RE.sub(anchor, piece)
        out.append(piece)
    return "".join(out)


def description(nb) -> str:
    """The page's description: the first paragraph of prose (of 60 characters or
    more, not a heading) of the notebook's markdown, as plain text, at most about
    300 characters."""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for para in re.split(r"\n\s*\n", cell.source):
            para = para.strip()
            if not para or para.startswith(("#", "```", "|", "<", "!")):
                continue
            text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", para)
            text = " ".join(re.sub(r"[*_`$\\]", "", text).split())
            if len(text) < 60:
                continue
            if len(text) > 300:
                text = text[:300].rsplit(" ", 1)[0] + "…"
            return text
    return ""


def split_sections(source: str) -> list[str]:
    """A markdown cell's text cut before each heading of level 1 to 3 (headings in a
    fenced code block do not count); the pieces join back into the text."""
    pieces, current, fence = [], [], None
    for line in source.split("\n"):
        opener = _FENCE_RE.match(line)
        if fence and opener and opener.group(1)[0] == fence[0]:
            fence = None if len(opener.group(1)) >= len(fence) else fence
        elif opener and not fence:
            fence = opener.group(1)
        elif not fence and _SECTION_RE.match(line) and any(x.strip() for x in current):
            pieces.append("\n".join(current))
            current = []
        current.append(line)
    pieces.append("\n".join(current))
    return [p + "\n" * (i < len(pieces) - 1) for i, p in enumerate(pieces)]


def section_heading(cell) -> tuple[int, str] | None:
    """(level, text) of the heading that opens a markdown cell, if one does."""
    if cell.cell_type != "markdown":
        return None
    first = next((line for line in cell.source.split("\n") if line.strip()), "")
    m = _SECTION_RE.match(first)
    return (len(m.group(1)), m.group(2).strip()) if m else None


def split_summary(source: str) -> tuple[str, str, bool]:
    """(heading and summary line, the rest, whether there is a summary line) of the
    text of a deep dive's first cell."""
    lines = source.split("\n")
    at = next(i for i, line in enumerate(lines) if line.strip()) + 1  # the heading
    start = at
    while start < len(lines) and not lines[start].strip():
        start += 1
    end = start
    while end < len(lines) and lines[end].strip():
        end += 1
    paragraph = " ".join(line.strip() for line in lines[start:end])
    if end > start and _SUMMARY_RE.match(paragraph):
        at = end
    head, rest = "\n".join(lines[:at]), "\n".join(lines[at:])
    return head, rest.lstrip("\n"), at == end and end > start


def _with_source(cell, source: str, keep_metadata: bool):
    """A copy of a markdown cell with another text (the same cell if it has it)."""
    if keep_metadata and cell.source == source:
        return cell
    new = nbformat.v4.new_markdown_cell(source)
    if "attachments" in cell:
        new.attachments = cell.attachments
    if keep_metadata:
        new.metadata = cell.metadata
    return new


def _mark(cell) -> dict:
    return cell.metadata.setdefault("atpage", {})


def output_lines(text: str) -> str:
    """A text output as a <pre> of one block per line (a long line wraps with a
    hanging indent); the number of columns of its longest line and whether it is a
    table (aligned columns) go to the style sheet, which sizes the type."""
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    if any("\x1b" in line for line in lines):  # carry colours across lines
        state, coloured = "", []
        for line in lines:
            coloured.append(state + line)
            state += "".join(_SGR_RE.findall(line))
        lines = coloured
    plain = [_SGR_RE.sub("", line) for line in lines]
    cols = max((_columns(line) for line in plain), default=0)
    table = sum(bool(_COLUMN_GAP_RE.search(line.strip())) for line in plain) >= 2
    if table and plain == lines:  # a row that wraps breaks between its columns
        rows = [_cells(line) for line in lines]
    else:
        rows = [ansi2html(line) for line in lines]
    body = "".join(f'<span class="ln">{row}</span>\n' for row in rows)
    cls = "lines table" if table else "lines"
    return f'<pre class="{cls}" style="--cols: {max(cols, 1)}">{body}</pre>'


def _cells(line: str) -> str:
    """A line of a table with each cell (text between gaps of two spaces or more) in a
    span that the style sheet keeps whole when the line wraps."""
    parts = re.split(r"( {2,})", line)
    return "".join(
        part
        if not part.strip()
        else f'<span class="c">{html.escape(part, quote=False)}</span>'
        for part in parts
    )


def _columns(line: str) -> int:
    """Columns a line takes in a monospaced font (wide East Asian characters: 2)."""
    line = line.expandtabs(8)
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def _where(cell) -> str:
    first = cell.source.strip().split("\n", 1)[0]
    return f"{cell.cell_type} cell {first[:60]!r}"


def _plain(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


def _slug(text: str, taken: set[str]) -> str:
    base = re.sub(r"[^\w\s-]", "", text.lower(), flags=re.UNICODE)
    base = re.sub(r"[\s_-]+", "-", base).strip("-") or "section"
    slug, n = base, 1
    while slug in taken:
        n += 1
        slug = f"{base}-{n}"
    taken.add(slug)
    return slug


class _Renderer(IPythonRenderer):
    """nbconvert's markdown renderer with math as placeholders and headings noted."""

    def __init__(self, page: Page, where: str, taken: set[str], **kwargs):
        super().__init__(**kwargs)
        self.page, self.where, self.taken = page, where, taken

    def _formula(self, tex: str, display: bool) -> str:
        self.page.math.append(Math(tex.strip(), display, self.where))
        return _MATH.format(len(self.page.math) - 1)

    def inline_math(self, body: str) -> str:
        return self._formula(body, False)

    def block_math(self, body: str) -> str:
        return self._formula(body, True)

    def latex_environment(self, name: str, body: str) -> str:
        return self._formula(f"\\begin{{{name}}}{body}\\end{{{name}}}", True)

    def heading(self, text: str, level: int, **attrs) -> str:
        tex = lambda m: self.page.math[int(m.group(1))].tex
        plain = _plain(_MATH_RE.sub(tex, text))
        anchor = _slug(plain, self.taken)
        fragments = [f for f in map(_plain, _MATH_RE.split(text)[::2]) if f]
        dive = level == 3 and bool(_DEEP_DIVE_RE.match(plain))
        if dive:  # "Deep dive:" as a tag; the colon stays in the text, unseen
            text = re.sub(
                r"\A(\s*)(deep dive)(\s*):",
                r'\1<span class="dd-tag">\2<span class="dd-colon">:</span></span>',
                text,
                flags=re.IGNORECASE,
            )
        inner = re.sub(r"</?a\b[^>]*>", "", text)  # no links inside the TOC's links
        self.page.headings.append(Heading(level, plain, fragments, anchor, inner, dive))
        link = f'<a class="anchor-link" href="#{anchor}" aria-hidden="true">¶</a>'
        return f'<h{level} id="{anchor}">{text}{link}</h{level}>\n'


class PageExporter(HTMLExporter):
    """HTMLExporter with the page's template and math-aware markdown."""

    page: Page
    taken: set[str]

    @pass_context
    def markdown2html(self, context, source):
        cell = context.get("cell") or {}
        where = _where(cell) if cell else "the title"
        renderer = _Renderer(
            self.page,
            where,
            self.taken,
            escape=False,
            attachments=cell.get("attachments", {}),
            embed_images=True,
            path=context["resources"]["metadata"]["path"],
        )
        out = MarkdownWithMath(renderer=renderer).render(source)
        if not cell.get("metadata", {}).get("atpage", {}).get("deep_dive"):
            out = link_sections(out)  # not in a <summary>: a link there is nested
        prose = re.sub(r"<(pre|code)\b.*?</\1>", " ", out, flags=re.DOTALL)
        for text in re.split(r"<[^>]+>", prose):
            if _TEX_LEFT_RE.search(html.unescape(text)):
                shown = _MATH_RE.sub("<math>", text.strip())[:80]
                self.page.stray_math.append(f"{where}: {shown!r}")
        return out


def _exporter(page: Page) -> PageExporter:
    c = Config()
    c.TagRemovePreprocessor.enabled = True
    c.TagRemovePreprocessor.remove_cell_tags = {"remove-cell"}
    c.TagRemovePreprocessor.remove_input_tags = {"remove-input"}
    c.TagRemovePreprocessor.remove_all_outputs_tags = {"remove-output"}
    c.CSSHTMLHeaderPreprocessor.enabled = False  # the template has its own CSS
    c.HTMLExporter.exclude_input_prompt = True
    c.HTMLExporter.exclude_output_prompt = True
    # The kinds of output the template shows, best first.
    c.NbConvertBase.display_data_priority = [
        "text/html",
        "text/markdown",
        "image/svg+xml",
        "image/png",
        "image/jpeg",
        "text/plain",
    ]
    exporter = PageExporter(
        config=c,
        template_name="atpage",
        extra_template_basedirs=[str(PAGE_DIR / "templates")],
    )
    streams = PagePreprocessor(enabled=True)
    streams.page = page
    exporter.register_preprocessor(streams, enabled=True)
    exporter.register_filter("output_lines", output_lines)
    exporter.page, exporter.taken = page, set()
    # Jinja sees this Page itself (nbconvert deep-copies `resources`).
    exporter.environment.globals["atpage"] = page
    return exporter


# --------------------------------------------------------------------------- KaTeX


def katex_version(katex_dir: Path) -> str | None:
    """The version of the KaTeX in `katex_dir` (None: none there, or a package.json
    that cannot be read, as an install cut short leaves it: installed again)."""
    try:
        version = json.loads((katex_dir / "package.json").read_text()).get("version")
    except (OSError, ValueError, AttributeError):
        return None
    return version if isinstance(version, str) else None


def ensure_katex(katex_dir: Path = KATEX_DIR) -> Path:
    """Install the pinned KaTeX from npm into build/ if it is not there yet, under a
    lock: of processes that render at once (the tests' two workers in a fresh clone)
    the first installs it and the others wait for it, instead of running npm into
    the same folder at the same time."""
    from atkit.files import FolderLock

    if katex_version(katex_dir) == KATEX_VERSION:
        return katex_dir
    npm = shutil.which("npm")
    if npm is None:
        raise PageError(
            "npm is needed once to fetch KaTeX; install Node.js and npm "
            "(Debian: apt-get install -y nodejs npm) and run this again"
        )
    prefix = katex_dir.parents[1]
    with FolderLock(prefix / ".katex-install", "KaTeX installation").acquire(300):
        if katex_version(katex_dir) != KATEX_VERSION:
            if katex_dir.is_dir():  # a damaged install, which npm would leave as it is
                shutil.rmtree(katex_dir)
            install_katex(npm, prefix, katex_dir)
    return katex_dir


def install_katex(npm: str, prefix: Path, katex_dir: Path) -> None:
    """`npm install` of the pinned KaTeX into `prefix`/node_modules."""
    prefix.mkdir(parents=True, exist_ok=True)
    cmd = [
        npm,
        "install",
        "--prefix",
        str(prefix),
        "--no-save",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
        f"katex@{KATEX_VERSION}",
    ]
    print(f"installing KaTeX {KATEX_VERSION}: {' '.join(cmd)}", file=sys.stderr)
    proc = subprocess.run(
        cmd,
        check=False,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        preexec_fn=processes.end_with_parent(),
    )
    if proc.returncode != 0 or katex_version(katex_dir) != KATEX_VERSION:
        raise PageError(f"`{' '.join(cmd)}` failed:\n{proc.stderr.strip()}")


def typeset(math: list[Math], katex_dir: Path) -> list[str]:
    """KaTeX HTML for every formula; a formula KaTeX rejects becomes a .katex-error."""
    if not math:
        return []
    node = shutil.which("node")
    if node is None:
        raise PageError("node is needed to typeset the math; install Node.js")
    request = {
        "katex": str(katex_dir),
        "items": [{"tex": m.tex, "display": m.display} for m in math],
    }
    proc = subprocess.run(
        [node, str(PAGE_DIR / "katex_render.cjs")],
        check=False,
        input=json.dumps(request),
        capture_output=True,
        text=True,
        preexec_fn=processes.end_with_parent(),
    )
    if proc.returncode != 0:
        raise PageError(f"KaTeX (node) failed:\n{proc.stderr.strip()}")
    out = []
    for m, res in zip(math, json.loads(proc.stdout), strict=True):
        if "html" in res:
            out.append(res["html"])
            continue
        print(
            f"warning: {m.where}: bad math {m.tex!r}: {res['error']}",
            file=sys.stderr,
        )
        out.append(
            f'<span class="katex-error" title="{html.escape(res["error"])}">'
            f"{html.escape(m.tex)}</span>"
        )
    return out


DARK_CODE_STYLE = "github-dark"


def dark_code_css() -> str:
    """Pygments' colours of DARK_CODE_STYLE for the dark page: when the system is dark
    and the reader chose nothing, or the reader chose dark (page.js sets
    ``data-theme`` on <html>)."""
    formatter = HtmlFormatter(style=DARK_CODE_STYLE)

    def rules(prefix: str) -> str:  # the .highlight rules (not its line numbers')
        defs = formatter.get_style_defs(prefix).split("\n")
        return "\n".join(line for line in defs if line.startswith(prefix))

    chosen = rules(':root[data-theme="dark"] .highlight')
    system = rules(':root:not([data-theme="light"]) .highlight')
    return f"{chosen}\n@media (prefers-color-scheme: dark) {{\n{system}\n}}"


def katex_css(katex_dir: Path) -> str:
    """katex.min.css with each font as an inlined woff2 data URI."""
    css = (katex_dir / "dist" / "katex.min.css").read_text()

    def font(m: re.Match) -> str:
        data = base64.b64encode((katex_dir / "dist" / m.group(1)).read_bytes())
        return f'src:url(data:font/woff2;base64,{data.decode()}) format("woff2")'

    css = re.sub(r'src:url\((fonts/[^)]+\.woff2)\) format\("woff2"\)[^;}]*', font, css)
    if "url(fonts/" in css:
        raise PageError("could not inline KaTeX fonts: katex.min.css has a new layout")
    return css


# --------------------------------------------------------------------------- page


def load_notebook(path: Path):
    """Read an executed notebook, or raise PageError saying what to do."""
    path = Path(path)
    kind = path_kind(path)
    if kind is not None and kind.startswith("no such file"):
        raise PageError(
            f"{path} not found. Execute the notebook first (`make run`), then render "
            "again."
        )
    if kind is not None:
        raise PageError(
            f"--notebook {path} is {kind}, not a notebook file; give an executed "
            "notebook (.ipynb), e.g. --notebook annotated_transformer.ipynb"
        )
    try:  # not JSON, cut short, `[]`, a cell without its source: named, with where
        nb = records.read_notebook(
            path, name=str(path), fix="give an executed .ipynb (`make run` writes one)"
        )
    except records.MalformedFileError as exc:
        raise PageError(str(exc)) from None
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    if code and not any(c.get("execution_count") or c.get("outputs") for c in code):
        raise PageError(
            f"{path} has not been executed (no code cell has outputs). Run it first, "
            f"e.g. `jupyter nbconvert --to notebook --execute --inplace {path.name}`."
        )
    return nb


def render_html(notebook: Path, katex_dir: Path | None = None) -> tuple[str, Page]:
    """Return (html, page) for a notebook file; PageError if it cannot work offline."""
    notebook = Path(notebook)
    nb = load_notebook(notebook)
    katex_dir = ensure_katex(katex_dir or KATEX_DIR)
    page = Page(source=notebook.name)
    page.css = "\n".join(
        [
            katex_css(katex_dir),
            HtmlFormatter(style="default").get_style_defs(".highlight"),
            dark_code_css(),
            (PAGE_DIR / "style.css").read_text(),
        ]
    )
    page.script = (PAGE_DIR / "page.js").read_text()
    page.description = description(nb)
    page.lead_links = PAGE_LEADS.get(notebook.name, [])
    resources = {
        "metadata": {"name": notebook.stem, "path": str(notebook.resolve().parent)},
    }
    body, _ = _exporter(page).from_notebook_node(nb, resources=resources)
    rendered = typeset(page.math, katex_dir)
    body = _MATH_RE.sub(lambda m: rendered[int(m.group(1))], body)
    body = _NOTEBOOK_LINK_RE.sub(
        lambda m: f'href="{PAGES[m.group(1)]}{m.group(2) or ""}"', body
    )  # a link to a notebook leads to its page
    body = _in_page_links(body, page)
    # A code block may scroll sideways: it takes keyboard focus, to scroll by keys.
    body = re.sub(r'(<div class="highlight[^"]*"><pre)>', r'\1 tabindex="0">', body)
    body = re.sub(r"<pre><code\b", '<pre tabindex="0"><code', body)
    remote = _REMOTE_TAG_RE.search(body) or _REMOTE_CSS_RE.search(body)
    if remote:
        raise PageError(
            f"the page would load {remote.group(0)[:120]!r} from the network, and "
            "must work offline: save the file beside the notebook (an image under "
            "images/, by a relative path) or inline it"
        )
    local = _LOCAL_IMG_RE.search(body)
    if local:
        raise PageError(
            f"image {local.group(1)!r} cannot be embedded: no such file (paths are "
            f"relative to the notebook's folder, {notebook.resolve().parent})"
        )
    return body, page


def _in_page_links(body: str, page: Page) -> str:
    """Links to a heading of the notebook, written as Jupyter and Colab name it (the
    heading's text with its spaces as dashes: `#What-a-BLEU-score-counts`), lead to
    that heading on the page; a link to no heading is noted (fails --strict)."""
    slugs = {h.anchor for h in page.headings}
    jupyter = {h.text.replace(" ", "-"): h.anchor for h in page.headings}

    def fix(m):
        target = html.unescape(urllib.parse.unquote(m.group(1)))
        if target in slugs:
            return m.group(0)
        if target in jupyter:
            return f'href="#{jupyter[target]}"'
        page.broken_links.append(target)
        return m.group(0)

    return re.sub(r'(?<![\w:-])href="#([^"]*)"', fix, body)  # not an SVG's xlink:href


def check_out(out: Path, write: bool = True) -> None:
    """Refuse at once an output path the page could not be written to (before the
    minutes of rendering): a folder, something that is no file, a folder that cannot
    be made or written."""
    out = Path(out)
    if out.is_dir():
        raise PageError(
            f"--out {out} is a folder; give the page's file name, e.g. "
            f"--out {out / 'index.html'}"
        )
    if out.exists() and not out.is_file():
        raise PageError(f"--out {out} is not a regular file; give a file name")
    if not write:
        return
    folder = out.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise PageError(
            f"--out {out}: {folder} is a file, so the folder {out.parent} cannot be "
            "made; give another path"
        )
    try:  # the one sure test: make a file (or, for a folder to come, a folder) there
        if folder == out.parent:
            fd, probe = tempfile.mkstemp(
                dir=folder, prefix=f".{out.name}.", suffix=".tmp"
            )
            os.close(fd)
            os.remove(probe)
        else:
            os.rmdir(tempfile.mkdtemp(dir=folder, prefix=".render_page."))
    except OSError as exc:
        raise PageError(
            f"--out {out}: cannot write in {folder} ({exc.strerror or exc}); give "
            "a path in a folder you may write, e.g. --out docs/index.html"
        ) from exc


def page_inputs(notebook: Path) -> list[tuple[str, Path]]:
    """What a render reads, as (what, path): the notebook, its jupytext source
    beside it, and the page's own files (atkit/page/)."""
    notebook = Path(notebook)
    found = [("--notebook", notebook)]
    if notebook.suffix != ".md":
        found.append(("the notebook's source", notebook.with_suffix(".md")))
    found += [("the page's own", p) for p in sorted(PAGE_DIR.rglob("*")) if p.is_file()]
    return found


def render_file(notebook: Path, out: Path, strict: bool = False) -> Page:
    """Render ``notebook`` to ``out`` (atomically; through a symbolic link, into the
    file it points to); return the Page for inspection."""
    (out,) = check_outputs(
        [("--out", out)], page_inputs(notebook), writes="the page", suffix=".html"
    )
    check_out(out)
    body, page = render_html(notebook)
    bad_math = body.count('class="katex-error"')
    problems = [
        *(f"error output: {e}" for e in page.errors),
        *(f"untypeset math: {s}" for s in page.stray_math),
        *page.deep_dive_problems,
        *(f"a link to no heading: #{t}" for t in page.broken_links),
    ]
    for problem in [*problems, *page.notes]:
        print(f"warning: {problem}", file=sys.stderr)
    if strict and (problems or bad_math):
        raise PageError(
            f"--strict: {bad_math} formula(s) KaTeX rejects, {len(page.errors)} error "
            f"output(s), {len(page.stray_math)} piece(s) of TeX left untypeset in "
            f"the prose, {len(page.deep_dive_problems)} deep dive(s) without their "
            f"summary line, {len(page.broken_links)} link(s) to no heading; see the "
            "warnings above"
        )
    write_text_atomic(out, body)
    return page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", type=Path, default=NOTEBOOK)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--strict",
        action="store_true",
        help="fail on bad math, error outputs or a deep dive without its summary",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if --out differs from a render"
    )
    args = parser.parse_args(argv)
    try:
        if args.check:
            check_out(args.out, write=False)
            body, _ = render_html(args.notebook)
            if not args.out.is_file() or args.out.read_text(encoding="utf-8") != body:
                state = "is stale" if args.out.is_file() else "is missing"
                print(
                    f"{args.out} {state}: run `python -m tools.render_page "
                    f"--notebook {args.notebook} --out {args.out}`",
                    file=sys.stderr,
                )
                return 1
            return 0
        page = render_file(args.notebook, args.out, strict=args.strict)
    except PageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB, {len(page.headings)} "
        f"headings, {len(page.math)} formulas, {len(page.deep_dives)} deep dives, "
        f"title {page.title!r}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(errors.run_main(main, PROG))
