"""Render the executed notebook into one self-contained HTML page.

    python tools/render_page.py        # annotated_transformer.ipynb -> docs/index.html
    python tools/render_page.py --notebook X.ipynb --out page.html
    python tools/render_page.py --check    # exit 1 if docs/index.html is stale

The page needs no network: figures are embedded as base64, code is highlighted with
Pygments, math is typeset at build time by KaTeX (run with node) and KaTeX's CSS and
fonts are inlined. KaTeX comes from the npm registry: when ``build/node_modules/katex``
is missing or not the pinned version, this script installs it with
``npm install --prefix build katex@KATEX_VERSION``.

Cell tags: ``remove-cell``, ``remove-input``, ``remove-output`` drop that part of a
cell;
``hide-input`` / ``hide-output`` fold it into a closed ``<details>``.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import mimetypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
PAGE_DIR = Path(__file__).resolve().parent / "page"
NOTEBOOK = ROOT / "annotated_transformer.ipynb"
OUT = ROOT / "docs" / "index.html"
KATEX_VERSION = "0.19.1"
NODE_PREFIX = ROOT / "build"
KATEX_DIR = NODE_PREFIX / "node_modules" / "katex"
PYGMENTS_STYLE = "default"

REMOVE_CELL = {"remove-cell", "remove_cell"}
REMOVE_INPUT = {"remove-input", "remove_input"}
REMOVE_OUTPUT = {"remove-output", "remove_output"}
HIDE_INPUT = {"hide-input", "hide_input"}
HIDE_OUTPUT = {"hide-output", "hide_output"}

_PLACEHOLDER = "\ue000MATH{}\ue001"
_PLACEHOLDER_RE = re.compile("\ue000MATH(\\d+)\ue001")
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_SRC_RE = re.compile(
    r"""(<img\b[^>]*?\bsrc\s*=\s*)(?:"([^"]*)"|'([^']*)'|([^\s>]+))""", re.IGNORECASE
)
_REMOTE_TAG_RE = re.compile(
    r"""<(script|link|img|iframe|source|video|audio|embed|object|track|input)\b"""
    r"""[^>]*?\b(?:src|href|data|poster)\s*=\s*["']?\s*(?:https?:)?//[^>]*>""",
    re.IGNORECASE,
)
_REMOTE_CSS_RE = re.compile(r"""url\(\s*["']?\s*(?:https?:)?//""", re.IGNORECASE)
_IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")


class PageError(Exception):
    """The page cannot be rendered; the message says what to do."""


@dataclass
class Math:
    tex: str
    display: bool
    where: str  # e.g. "cell 12", for error messages


@dataclass
class Heading:
    level: int
    text: str  # plain text, math as its TeX source
    fragments: list[str]  # the text pieces between math spans (what a reader sees)
    anchor: str
    html: str  # inner HTML, math still as placeholders


@dataclass
class Draft:
    """The page before typesetting: HTML with a placeholder for every formula."""

    title: str
    body: str
    headings: list[Heading] = field(default_factory=list)
    math: list[Math] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # error outputs of the notebook
    header: str = ""  # the notebook's opening H1, shown above the contents


# --------------------------------------------------------------------------- markdown


def _slug(text: str, taken: set[str]) -> str:
    base = re.sub(r"[^\w\s-]", "", text.lower(), flags=re.UNICODE)
    base = re.sub(r"[\s_-]+", "-", base).strip("-") or "section"
    slug, n = base, 1
    while slug in taken:
        n += 1
        slug = f"{base}-{n}"
    taken.add(slug)
    return slug


def _paren_math(state, silent: bool) -> bool:
    r"""Inline rule for ``\(...\)`` (inline) and ``\[...\]`` (display) math."""
    src, pos = state.src, state.pos
    if src.startswith("\\(", pos):
        close, kind = "\\)", "math_inline"
    elif src.startswith("\\[", pos):
        close, kind = "\\]", "math_inline_double"
    else:
        return False
    end = src.find(close, pos + 2)
    if end < 0 or not src[pos + 2 : end].strip():
        return False
    if not silent:
        token = state.push(kind, "math", 0)
        token.content = src[pos + 2 : end]
        token.markup = src[pos : pos + 2]
    state.pos = end + 2
    return True


class _Markdown:
    """markdown-it with math rules whose output is a placeholder per formula."""

    def __init__(self, math: list[Math]):
        from markdown_it import MarkdownIt
        from mdit_py_plugins.amsmath import amsmath_plugin
        from mdit_py_plugins.dollarmath import dollarmath_plugin

        self.math = math
        self.where = ""
        self.taken: set[str] = set()  # heading anchors, unique over the page
        md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
        dollarmath_plugin(
            md,
            double_inline=True,
            allow_digits=False,  # "$5 and $10" is money, not math
            allow_labels=False,
            renderer=lambda tex, opts: self._formula(tex, opts["display_mode"]),
        )
        amsmath_plugin(md, renderer=lambda tex: self._formula(tex, True))
        # $$...$$ inside a paragraph: a span (KaTeX's display span is a block), as a
        # <div> would break the paragraph in two.
        md.add_render_rule(
            "math_inline_double",
            lambda _self, tokens, idx, _opts, _env: (
                '<span class="math display">'
                f"{self._formula(tokens[idx].content, True)}</span>"
            ),
        )
        md.inline.ruler.before("escape", "paren_math", _paren_math)
        self.md = md

    def _formula(self, tex: str, display: bool) -> str:
        self.math.append(Math(tex.strip(), display, self.where))
        return _PLACEHOLDER.format(len(self.math) - 1)

    def render(self, text: str) -> tuple[str, list[Heading]]:
        env: dict = {}
        tokens = self.md.parse(text, env)
        headings = []
        for i, tok in enumerate(tokens):
            if tok.type != "heading_open":
                continue
            inline = tokens[i + 1]
            plain, fragments, current = [], [], []
            for child in inline.children or []:
                if child.type in ("text", "code_inline"):
                    plain.append(child.content)
                    current.append(child.content)
                elif child.type.startswith("math"):
                    plain.append(child.content)
                    fragments.append("".join(current))
                    current = []
                elif child.type in ("softbreak", "hardbreak"):
                    plain.append(" ")
                    current.append(" ")
            fragments.append("".join(current))
            text_plain = " ".join("".join(plain).split())
            anchor = _slug(text_plain, self.taken)
            tok.attrSet("id", anchor)
            headings.append(
                Heading(
                    level=int(tok.tag[1]),
                    text=text_plain,
                    fragments=[
                        f for f in (" ".join(x.split()) for x in fragments) if f
                    ],
                    anchor=anchor,
                    html="",  # filled below, once the math placeholders exist
                )
            )
        out = self.md.renderer.render(tokens, self.md.options, env)
        # The inline HTML of each heading (math as placeholders), for the contents.
        for h in headings:
            found = re.search(
                rf'<h{h.level} id="{h.anchor}">(.*?)</h{h.level}>', out, re.DOTALL
            )
            inner = found.group(1) if found else html.escape(h.text)
            h.html = re.sub(r"</?a\b[^>]*>", "", inner)  # no links inside TOC links
        return out, headings


# --------------------------------------------------------------------------- cells


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _data_uri(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _inline_images(fragment: str, base_dir: Path, attachments: dict, where: str) -> str:
    """Replace every ``<img src>`` that is a file path or attachment with a data URI."""

    def repl(m: re.Match) -> str:
        src = html.unescape(next(g for g in m.groups()[1:] if g is not None))
        if src.startswith("data:"):
            return m.group(0)
        if re.match(r"(?:https?:)?//", src):
            raise PageError(
                f"{where}: image {src!r} is on the network; "
                "the page must work offline. "
                "Save the image under images/ and reference it by a relative path."
            )
        if src.startswith("attachment:"):
            name = unquote(src[len("attachment:") :])
            bundle = attachments.get(name)
            if not bundle:
                raise PageError(f"{where}: attachment {name!r} is not in the notebook")
            mime = next((k for k in bundle if k.startswith("image/")), None)
            if mime is None:
                raise PageError(f"{where}: attachment {name!r} is not an image")
            data = base64.b64decode(_text(bundle[mime]))
        else:
            path = (base_dir / unquote(src.split("#")[0].split("?")[0])).resolve()
            if not path.is_file():
                raise PageError(
                    f"{where}: image {src!r} not found (looked for {path}); "
                    "paths are relative to the notebook's folder"
                )
            mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            data = path.read_bytes()
        return f'{m.group(1)}"{_data_uri(mime, data)}"'

    return _SRC_RE.sub(repl, fragment)


def _highlighter(nb):
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer, get_lexer_by_name
    from pygments.util import ClassNotFound

    info = nb.metadata.get("language_info", {})
    name = info.get("pygments_lexer") or info.get("name") or "python"
    try:
        lexer = get_lexer_by_name(name)
    except ClassNotFound:
        lexer = PythonLexer()
    formatter = HtmlFormatter(cssclass="highlight", style=PYGMENTS_STYLE)

    def highlight(code: str) -> str:
        from pygments import highlight as _hl

        return _hl(code, lexer, formatter)

    return highlight


def _terminal(text: str) -> str:
    """What a terminal shows: no ANSI codes, a carriage return rewrites its line."""
    lines = _ANSI_RE.sub("", text).replace("\r\n", "\n").split("\n")
    shown = []
    for line in lines:
        row = ""
        for part in line.split("\r"):
            row = part + row[len(part) :]
        shown.append(row.rstrip())
    return "\n".join(shown)


def _pre(text: str) -> str:
    return f"<pre>{html.escape(_terminal(text))}</pre>"


def _fold(summary: str, content: str, hide: bool) -> str:
    if not hide:
        return content
    return f"<details><summary>{summary}</summary>{content}</details>"


def _render_output(out, md: _Markdown, where: str, errors: list[str]) -> str:
    kind = out.get("output_type")
    if kind == "stream":
        name = out.get("name", "stdout")
        if not _terminal(_text(out.get("text", ""))).strip():
            return ""  # e.g. a progress bar that cleared itself
        text = _pre(_text(out.get("text", "")))
        return f'<div class="output stream {name}">{text}</div>'
    if kind == "error":
        errors.append(f"{where}: {out.get('ename')}: {out.get('evalue')}")
        tb = "\n".join(
            out.get("traceback") or [f"{out.get('ename')}: {out.get('evalue')}"]
        )
        return f'<div class="output error">{_pre(tb)}</div>'
    if kind not in ("execute_result", "display_data"):
        return ""
    data, meta = out.get("data", {}), out.get("metadata", {})
    if "application/vnd.jupyter.widget-view+json" in data:
        return ""  # a live widget (e.g. a tqdm bar): nothing to show on a static page
    for mime in _IMAGE_MIMES:
        if mime in data:
            raw = _text(data[mime])
            payload = raw.encode() if mime == "image/svg+xml" else base64.b64decode(raw)
            size = meta.get(mime, {}) if isinstance(meta.get(mime), dict) else {}
            dims = "".join(
                f' {k}="{int(size[k])}"' for k in ("width", "height") if k in size
            )
            return (
                f'<div class="output image"><img src="{_data_uri(mime, payload)}"'
                f' alt="figure"{dims}></div>'
            )
    if "text/html" in data:
        frag = _text(data["text/html"])
        if not re.search(r"<script\b", frag, re.IGNORECASE) or "text/plain" not in data:
            frag = re.sub(
                r"<script\b.*?</script>", "", frag, flags=re.IGNORECASE | re.DOTALL
            )
            return f'<div class="output html">{frag}</div>'
    for mime in ("text/markdown", "text/latex"):
        if mime in data:
            md.where = where
            rendered, _ = md.render(_text(data[mime]))
            return f'<div class="output markdown">{rendered}</div>'
    if "text/plain" in data:
        return f'<div class="output text">{_pre(_text(data["text/plain"]))}</div>'
    return ""


def _merge_streams(outputs: list) -> list:
    """Join consecutive stream outputs of the same name, as Jupyter shows them."""
    merged: list = []
    for out in outputs:
        prev = merged[-1] if merged else None
        if (
            out.get("output_type") == "stream"
            and prev is not None
            and prev.get("output_type") == "stream"
            and prev.get("name") == out.get("name")
        ):
            text = _text(prev.get("text", "")) + _text(out.get("text", ""))
            merged[-1] = {**prev, "text": text}
        else:
            merged.append(out)
    return merged


def build_draft(nb, base_dir: Path, source_name: str = "notebook") -> Draft:
    """Turn the notebook into page HTML with math placeholders (no KaTeX needed)."""
    math: list[Math] = []
    md = _Markdown(math)
    highlight = _highlighter(nb)
    parts: list[str] = []
    header = ""
    headings: list[Heading] = []
    errors: list[str] = []
    for index, cell in enumerate(nb.cells):
        tags = set(cell.get("metadata", {}).get("tags", []))
        if tags & REMOVE_CELL:
            continue
        where = f"{source_name} cell {index}"
        md.where = where
        if cell.cell_type == "markdown":
            rendered, found = md.render(_text(cell.source))
            if not parts and not header:  # the title goes above the contents
                lead = re.match(
                    r"\s*(<h1 id=\"[^\"]*\">.*?</h1>)\s*", rendered, re.DOTALL
                )
                if lead:
                    header, rendered = lead.group(1), rendered[lead.end() :]
            rendered = _inline_images(
                rendered, base_dir, cell.get("attachments", {}), where
            )
            headings.extend(found)
            if rendered.strip():
                parts.append(f'<div class="cell markdown">\n{rendered}</div>')
        elif cell.cell_type == "code":
            chunks = []
            source = _text(cell.source)
            hidden = cell.get("metadata", {}).get("jupyter", {}).get("source_hidden")
            if source.strip() and not tags & REMOVE_INPUT:
                code = highlight(source)
                chunks.append(
                    '<div class="input">'
                    + _fold("Show code", code, bool(tags & HIDE_INPUT or hidden))
                    + "</div>"
                )
            if not tags & REMOVE_OUTPUT:
                outs = "".join(
                    _render_output(o, md, where, errors)
                    for o in _merge_streams(cell.get("outputs", []))
                )
                if outs:
                    outs = _fold("Show output", outs, bool(tags & HIDE_OUTPUT))
                    chunks.append(f'<div class="outputs">{outs}</div>')
            if chunks:
                parts.append('<div class="cell code">' + "".join(chunks) + "</div>")
        # raw cells are not part of the page
    h1 = next((h for h in headings if h.level == 1), None)
    title = h1.text if h1 else Path(source_name).stem
    return Draft(title, "\n".join(parts), headings, math, errors, header)


# --------------------------------------------------------------------------- KaTeX


def ensure_katex(katex_dir: Path = KATEX_DIR) -> Path:
    """Install the pinned KaTeX from npm into build/ if it is not there yet."""
    pkg = katex_dir / "package.json"
    if pkg.is_file() and json.loads(pkg.read_text()).get("version") == KATEX_VERSION:
        return katex_dir
    npm = shutil.which("npm")
    if npm is None:
        raise PageError(
            "npm is needed once to fetch KaTeX; install Node.js and npm "
            "(Debian: apt-get install -y nodejs npm) and run this again"
        )
    prefix = katex_dir.parents[1]
    prefix.mkdir(parents=True, exist_ok=True)
    cmd = [
        npm, "install", "--prefix", str(prefix), "--no-save", "--no-audit",
        "--no-fund", "--loglevel=error", f"katex@{KATEX_VERSION}",
    ]  # fmt: skip
    print(f"installing KaTeX {KATEX_VERSION}: {' '.join(cmd)}", file=sys.stderr)
    proc = subprocess.run(
        cmd, check=False, stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    if proc.returncode != 0 or not pkg.is_file():
        raise PageError(f"`{' '.join(cmd)}` failed:\n{proc.stderr.strip()}")
    return katex_dir


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
    )
    if proc.returncode != 0:
        raise PageError(f"KaTeX (node) failed:\n{proc.stderr.strip()}")
    results = json.loads(proc.stdout)
    out = []
    for m, res in zip(math, results, strict=True):
        if "html" in res:
            out.append(res["html"])
            continue
        print(
            f"warning: {m.where}: bad math {m.tex!r}: {res['error']}", file=sys.stderr
        )
        out.append(
            f'<span class="katex-error" title="{html.escape(res["error"])}">'
            f"{html.escape(m.tex)}</span>"
        )
    return out


def katex_css(katex_dir: Path) -> str:
    """katex.min.css with each font as an inlined woff2 data URI."""
    css = (katex_dir / "dist" / "katex.min.css").read_text()

    def font(m: re.Match) -> str:
        data = (katex_dir / "dist" / m.group(1)).read_bytes()
        return f'src:url({_data_uri("font/woff2", data)}) format("woff2")'

    css = re.sub(r'src:url\((fonts/[^)]+\.woff2)\) format\("woff2"\)[^;}]*', font, css)
    if "url(fonts/" in css:
        raise PageError("could not inline KaTeX fonts: katex.min.css has a new layout")
    return css


# --------------------------------------------------------------------------- page


def _toc(headings: list[Heading]) -> str:
    """Nested list of the ## and ### headings (a ### before any ## stays top level)."""
    groups: list[tuple[Heading, list[Heading]]] = []
    for h in headings:
        if h.level == 3 and groups:
            groups[-1][1].append(h)
        elif h.level in (2, 3):
            groups.append((h, []))

    def link(h: Heading) -> str:
        return f'<a href="#{h.anchor}">{h.html}</a>'

    out = ["<ol>"]
    for top, subs in groups:
        inner = "".join(f"<li>{link(s)}</li>" for s in subs)
        out.append(
            f"<li>{link(top)}" + (f"<ol>{inner}</ol>" if inner else "") + "</li>"
        )
    out.append("</ol>")
    return "\n".join(out)


def load_notebook(path: Path):
    """Read an executed notebook, or raise PageError saying what to do."""
    import nbformat

    path = Path(path)
    if not path.is_file():
        raise PageError(
            f"{path} not found. Execute the notebook first, e.g. "
            f"`jupytext --to ipynb --execute {path.with_suffix('.md').name}` "
            "(or the project's main command), then render again."
        )
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as exc:  # nbformat raises several kinds
        raise PageError(f"{path} is not a readable notebook: {exc}") from exc
    code = [c for c in nb.cells if c.cell_type == "code" and _text(c.source).strip()]
    ran = [c for c in code if c.get("execution_count") or c.get("outputs")]
    if code and not ran:
        raise PageError(
            f"{path} has not been executed (no code cell has outputs). Run it first, "
            f"e.g. `jupyter nbconvert --to notebook --execute --inplace {path.name}`."
        )
    if len(ran) < len(code):
        print(
            f"warning: {path.name}: {len(code) - len(ran)} of {len(code)} code cells "
            "were not executed",
            file=sys.stderr,
        )
    return nb


def render_html(nb, base_dir: Path, source_name: str, katex_dir: Path | None = None):
    """Return (html, draft) for a notebook node."""
    from pygments.formatters import HtmlFormatter

    katex_dir = ensure_katex(katex_dir or KATEX_DIR)
    draft = build_draft(nb, base_dir, source_name)
    rendered = typeset(draft.math, katex_dir)

    def fill(text: str) -> str:
        return _PLACEHOLDER_RE.sub(lambda m: rendered[int(m.group(1))], text)

    toc_headings = [
        Heading(h.level, h.text, h.fragments, h.anchor, fill(h.html))
        for h in draft.headings
    ]
    page = Template((PAGE_DIR / "template.html").read_text()).substitute(
        title=html.escape(draft.title),
        katex_css=katex_css(katex_dir),
        pygments_css=HtmlFormatter(style=PYGMENTS_STYLE).get_style_defs(".highlight"),
        page_css=(PAGE_DIR / "style.css").read_text(),
        toc=fill(_toc(toc_headings)),
        header=fill(draft.header),
        body=fill(draft.body),
        source=html.escape(source_name),
    )
    remote = _REMOTE_TAG_RE.search(page) or _REMOTE_CSS_RE.search(page)
    if remote:
        raise PageError(
            f"the page would load {remote.group(0)[:120]!r} from the network; "
            "remove that from the notebook's HTML"
        )
    return page, draft


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def render_file(notebook: Path, out: Path, strict: bool = False) -> Draft:
    """Render ``notebook`` to ``out`` (atomically); return the draft for inspection."""
    notebook = Path(notebook)
    nb = load_notebook(notebook)
    page, draft = render_html(nb, notebook.resolve().parent, notebook.name)
    for err in draft.errors:
        print(f"warning: {err}", file=sys.stderr)
    bad_math = page.count('class="katex-error"')
    if strict and (draft.errors or bad_math):
        raise PageError(
            f"--strict: {bad_math} formula(s) KaTeX rejects and "
            f"{len(draft.errors)} cell error(s); see the warnings above"
        )
    write_atomic(Path(out), page)
    return draft


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", type=Path, default=NOTEBOOK)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--strict", action="store_true", help="fail on bad math or error outputs"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if --out differs from a fresh render",
    )
    args = parser.parse_args(argv)
    try:
        if args.check:
            nb = load_notebook(args.notebook)
            page, _ = render_html(
                nb, args.notebook.resolve().parent, args.notebook.name
            )
            if not args.out.is_file() or args.out.read_text(encoding="utf-8") != page:
                print(
                    f"{args.out} is stale: run `python tools/render_page.py "
                    f"--notebook {args.notebook} --out {args.out}`",
                    file=sys.stderr,
                )
                return 1
            return 0
        draft = render_file(args.notebook, args.out, strict=args.strict)
    except PageError as exc:
        print(f"render_page: error: {exc}", file=sys.stderr)
        return 2
    size = args.out.stat().st_size / 1e6
    print(
        f"{args.out}: {size:.1f} MB, {len(draft.headings)} headings, "
        f"{len(draft.math)} formulas, title {draft.title!r}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
