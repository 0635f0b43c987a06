"""How long the notebook is to read: prose words on the main path and in all, and code
lines on the main path.

    python -m tools.word_count                 # annotated_transformer.md
    python -m tools.word_count --notebook exercises.md

Prose is every markdown cell, counted as whitespace-separated words, LaTeX and inline
code included (the way the older annotated versions' length was counted for
comparison). A deep dive is a section whose heading starts with "Deep dive:" (see the
notebook's own convention: folded on the page, collapsible in Jupyter); it runs to the
next heading of its level or above. The closing "## References" section (a list of
the works cited, with their links) is not prose to read and counts nowhere. Everything
else is the main path. The budgets are the ones the project set itself: at most 7,000
words on the main path, 10,000 in all.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tools.errors import UsageError, run_main

ROOT = Path(__file__).resolve().parents[1]
MAIN_BUDGET, TOTAL_BUDGET = 7000, 10000
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


def count(path: Path) -> Counts:
    """Words of prose and lines of code, on the main path and in deep dives."""
    import jupytext

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise UsageError(
            f"--notebook {path} is not UTF-8 text (byte {err.start} cannot be "
            "decoded); give the notebook's .md file"
        ) from None
    ext = path.suffix if path.suffix in (".md", ".ipynb", ".py") else ".md"
    try:
        notebook = jupytext.reads(text, fmt=ext.lstrip("."))
    except (ValueError, TypeError, KeyError) as err:
        raise UsageError(
            f"--notebook {path} cannot be read as a notebook ({type(err).__name__}: "
            f"{str(err)[:200]}); give the notebook's .md file"
        ) from None
    counts, deep_level, references = Counts(), None, False
    for cell in notebook.cells:
        text = cell.source
        if cell.cell_type == "markdown":
            text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
            for line in text.splitlines():
                match = HEADING.match(line)
                if match:
                    level = len(match.group(1))
                    if deep_level is not None and level <= deep_level:
                        deep_level = None
                    if level <= 2:
                        references = match.group(2).strip() == REFERENCES
                    if match.group(2).startswith(DEEP):
                        deep_level = level
                words = sum(1 for w in line.split() if w.strip("#"))  # no hashes
                if references:
                    continue
                if deep_level is None:
                    counts.main_words += words
                else:
                    counts.deep_words += words
        elif cell.cell_type == "code":
            lines = sum(1 for ln in text.splitlines() if ln.strip())
            if deep_level is None:
                counts.main_code += lines
            else:
                counts.deep_code += lines
    return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.word_count", description=__doc__)
    p.add_argument("--notebook", type=Path, default=ROOT / "annotated_transformer.md")
    args = p.parse_args(argv)
    if not args.notebook.is_file():
        raise UsageError(f"--notebook {args.notebook}: no such file")
    c = count(args.notebook)
    print(f"prose words, main path: {c.main_words:,} (budget {MAIN_BUDGET:,})")
    print(f"prose words, deep dives: {c.deep_words:,}")
    print(f"prose words, in all:     {c.total_words:,} (budget {TOTAL_BUDGET:,})")
    print(f"code lines, main path:   {c.main_code:,}; in deep dives {c.deep_code:,}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, "python -m tools.word_count"))
