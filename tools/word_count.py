"""How long the notebook is to read: prose words on the main path and in all, and code
lines on the main path.

    python -m tools.word_count                 # annotated_transformer.md
    python -m tools.word_count --notebook exercises.md
    python -m tools.word_count --notebook since_2017.md    # its budget: 3,500 in all

Prose is every markdown cell, counted as whitespace-separated words, LaTeX and inline
code included (the way the older annotated versions' length was counted for
comparison), and every comment of a code cell: a sentence moved into a comment is
still read, so it still counts (the first line `# needs training`, a marker for
atkit.runtime, is not prose). A deep dive is a section whose heading starts with "Deep
dive:" (see the notebook's own convention: folded on the page, collapsible in
Jupyter); it runs to the next heading of its level or above. The closing
"## References" section (a list of the works cited, with their links) is not prose to
read and counts nowhere. Everything else is the main path. The budgets are the ones
the project set itself (`BUDGETS`): for the main notebook (issue 67) at most 5,000
words on the main path, 9,000 in all, and at most 850 code lines on the main path
(non-blank lines of its code cells); for since_2017 (issue 70) 3,500 words in all.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

from atkit.files import input_file
from tools.errors import UsageError, run_main

ROOT = Path(__file__).resolve().parents[1]
MAIN_BUDGET, TOTAL_BUDGET = 5000, 9000
# (main path, in all) of a notebook with budgets of its own; any other: the main one's
BUDGETS = {"since_2017.md": (3500, 3500)}  # issue 70: at most 3,500 prose words
MAIN_CODE_BUDGET = 850  # code lines on the main path
MARKER = "# needs training"  # atkit.runtime.NEEDS_TRAINING: a marker, not prose
HEADING = re.compile(r"^(#{1,6}) +(.*)$")
DEEP = "Deep dive:"
REFERENCES = "References"  # the bibliography: counted nowhere


@dataclass
class Counts:
    main_words: int = 0
    deep_words: int = 0
    main_code: int = 0
    deep_code: int = 0

    @property
    def total_words(self) -> int:
        return self.main_words + self.deep_words


def read_notebook(path: Path):
    """The notebook at `path`: an `.ipynb` checked as atkit.records reads one, any
    other file read by jupytext as its extension says (markdown by default); a file
    that is not one is refused naming it."""
    import jupytext

    from atkit import records

    name, fix = f"--notebook {path}", "give the notebook's .md file"
    if path.suffix == ".ipynb":
        return records.read_notebook(path, name=name, fix=fix)
    text = records.read_text(path, name, fix)
    ext = path.suffix if path.suffix == ".py" else ".md"
    try:
        return jupytext.reads(text, fmt=ext.lstrip("."))
    except (ValueError, TypeError, KeyError) as err:
        raise UsageError(
            f"{name} cannot be read as a notebook ({type(err).__name__}: "
            f"{str(err)[:200]}); {fix}"
        ) from None


def classified_cells(notebook):
    """(cell, in a deep dive?, the heading it sits under) for every cell: a deep dive
    runs from its heading to the next heading of its level or above."""
    deep_level, heading = None, ""
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                match = HEADING.match(line)
                if not match:
                    continue
                level, heading = len(match.group(1)), match.group(2)
                if deep_level is not None and level <= deep_level:
                    deep_level = None
                if heading.startswith(DEEP):
                    deep_level = level
        yield cell, deep_level is not None, heading


def comment_words(source: str) -> int:
    """Words in the comments of one code cell (`#` and what follows it, on any line;
    a `#` inside a string is not a comment)."""
    lines = source.splitlines()
    if lines and lines[0].strip() == MARKER:
        lines = lines[1:]
    text = "\n".join(lines) + "\n"
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        comments = [t.string for t in tokens if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError, IndentationError):  # not Python
        comments = [line[line.index("#") :] for line in lines if "#" in line]
    return sum(1 for c in comments for w in c.lstrip("#").split())


def count(path: Path) -> Counts:
    """Words of prose and lines of code, on the main path and in deep dives."""
    counts, references = Counts(), False
    for cell, deep, _ in classified_cells(read_notebook(path)):
        text = cell.source
        if cell.cell_type == "markdown":
            text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
            for line in text.splitlines():
                match = HEADING.match(line)
                if match and len(match.group(1)) <= 2:  # the closing list of links
                    references = match.group(2).strip() == REFERENCES
                if references:
                    continue
                words = sum(1 for w in line.split() if w.strip("#"))  # no hashes
                if deep:
                    counts.deep_words += words
                else:
                    counts.main_words += words
        elif cell.cell_type == "code":
            lines = sum(1 for ln in text.splitlines() if ln.strip())
            words = comment_words(text)
            if deep:
                counts.deep_code += lines
                counts.deep_words += words
            else:
                counts.main_code += lines
                counts.main_words += words
    return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.word_count", description=__doc__)
    p.add_argument("--notebook", type=Path, default=ROOT / "annotated_transformer.md")
    args = p.parse_args(argv)
    input_file("--notebook", args.notebook, "the notebook's .md")
    c = count(args.notebook)
    main, total = BUDGETS.get(args.notebook.name, (MAIN_BUDGET, TOTAL_BUDGET))
    print(f"prose words, main path: {c.main_words:,} (budget {main:,})")
    print(f"prose words, deep dives: {c.deep_words:,}")
    print(f"prose words, in all:     {c.total_words:,} (budget {total:,})")
    print(f"code lines, main path:   {c.main_code:,}; in deep dives {c.deep_code:,}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, "python -m tools.word_count"))
