"""Printed sentences that fit the page: `say` wraps what a cell writes in words.

The blog page shows a cell's output in a box about 110 characters of monospace wide
(at 1280 px); a longer line can only be read by scrolling sideways. `say` prints
text wrapped to `WIDTH` characters, each line of it on its own: a bullet ("* ...")
continues under its first word, and an indented line under its indent, so lists
stay lists. Tables are not prose: print them as they are, narrower than the box.
"""

from __future__ import annotations

import textwrap

WIDTH = 88  # ruff's line length: the notebook's code and its sentences alike


def wrap(text: str, width: int = WIDTH, indent: int | None = None) -> str:
    """`text` wrapped line by line; continuation lines start at `indent` spaces
    (default: the line's own indent, two more after a bullet)."""
    out = []
    for line in str(text).split("\n"):
        body = line.lstrip(" ")
        hang = len(line) - len(body) + (2 if body.startswith(("* ", "- ")) else 0)
        hang = hang if indent is None else indent
        out.append(
            textwrap.fill(
                line,
                width,
                subsequent_indent=" " * hang,
                break_long_words=False,
                break_on_hyphens=False,
            )
            if body
            else ""
        )
    return "\n".join(out)


def say(*parts, width: int = WIDTH, indent: int | None = None, sep=" ") -> None:
    """print(*parts), wrapped to `width` characters (see `wrap`)."""
    print(wrap(sep.join(str(p) for p in parts), width, indent))


def show_source(obj) -> None:
    """Print the source of a function or class of atkit under its full name (a deep
    dive shows the code that the main path calls, rather than a copy of it)."""
    import inspect

    print(f"# {obj.__module__}.{obj.__qualname__}")
    print(inspect.getsource(obj), end="")
