"""Turn the notebook's library cells into the module `annotated_transformer_lib`.

`annotated_transformer.md` is the only place the code lives. A code cell is part of
the library unless it carries the jupytext tag ``demo``; demo cells (plots, printed
checks, training runs) execute in Jupyter but never on import. That tag is the one
gate that decides.

    python nbexport.py            # writes annotated_transformer_lib.py (make export)
    python nbexport.py --check    # exits 1 if that file is stale (make lint)

The module is committed beside the notebook, as d2l commits `d2l/torch.py`: programs,
the pipeline and the tests import it by name (`import annotated_transformer_lib`), and
editors, grep and import-graph tools follow it like any module. It keeps every library
line on the line it has in the notebook's `.md` (the lines between cells are blank),
so a traceback's `annotated_transformer_lib.py", line N` is line N of the notebook;
each block opens with a comment that names its section and place, like d2l's
"Defined in" notes:

    # --- Part 3 › The training loop (annotated_transformer.md:2391) ---

It is rewritten from the notebook, never edited by hand; a test and `make lint` fail
while it differs from what the notebook's cells give.

A library cell that does not compile (a syntax error, a stray indent, a conflict
marker) is refused before anything is written: `nbexport.py: error:
annotated_transformer.md:<line>: ...`, exit status 2; `export` and `registry_names`
raise the same error (atkit.records.MalformedFileError), which every tool prints as
one `error:` line.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent
NOTEBOOK = ROOT / "annotated_transformer.md"
EXPORT = ROOT / "annotated_transformer_lib.py"
MODULE_NAME = "annotated_transformer_lib"
DEMO_TAG = "demo"
FENCE = re.compile(r"^```python\b")
HEADING = re.compile(r"^(#{2,4}) +(.+?) *$")


@dataclass
class Block:
    """One library cell: its code, the .md line of its first code line, and the
    section it sits in ("Part 3 › The training loop")."""

    source: str
    line: int
    section: str


def library_blocks(path: Path = NOTEBOOK) -> list[Block]:
    """The code cells that are not tagged ``demo``, in notebook order, each with
    its place in the .md file. Magic lines (%, !) become blank lines. Read once per
    process for each version of the file."""
    stat = Path(path).stat()
    return list(_library_blocks(Path(path), stat.st_mtime_ns, stat.st_size))


def _malformed(path: Path, line: int | None, problem: str):
    """The error for a notebook whose library cannot be read: `<file>:<line>: ...`."""
    from atkit.records import MalformedFileError

    where = f"{path.name}:{line}" if line else path.name
    return MalformedFileError(f"{where}: {problem}")


@functools.lru_cache(maxsize=4)
def _library_blocks(path: Path, mtime_ns: int, size: int) -> tuple[Block, ...]:
    import jupytext

    from atkit.records import read_text

    whole = read_text(path, fix="save the notebook as UTF-8 text")
    cells = [c for c in jupytext.reads(whole, fmt="md").cells if c.cell_type == "code"]
    lines = whole.splitlines()
    starts, sections, heads, fenced = [], [], {}, False
    for number, text in enumerate(lines, start=1):
        if text.startswith("```"):
            if FENCE.match(text) and not fenced:
                starts.append(number + 1)
                sections.append(" › ".join(heads[k] for k in sorted(heads)))
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(text)
        if match:
            level = len(match.group(1))
            heads = {k: v for k, v in heads.items() if k < level}
            heads[level] = match.group(2)
    if len(starts) != len(cells):
        raise _malformed(
            path,
            None,
            f"{len(cells)} code cells but {len(starts)} ```python fences; write "
            "every code cell as a ```python block, each closed by its own ```",
        )
    blocks = []
    for cell, start, section in zip(cells, starts, sections, strict=True):
        if DEMO_TAG in cell.metadata.get("tags", []):
            continue
        code = [
            "" if ln.lstrip().startswith(("%", "!")) else ln
            for ln in cell.source.splitlines()
        ]
        blocks.append(Block("\n".join(code), start, section))
        check_compiles(path, blocks[-1])
    return tuple(blocks)


def check_compiles(path: Path, block: Block) -> None:
    """A library cell that is not Python (a syntax error, a stray indent) is refused
    naming the `.md` line, before anything imports or exports it."""
    padded = "\n" * (block.line - 1) + block.source  # each line on its .md line
    try:
        compile(padded, str(path), "exec", dont_inherit=True)
    except SyntaxError as err:  # IndentationError and TabError are SyntaxErrors
        text = (err.text or "").strip()
        shown = f": `{text[:80]}`" if text else ""
        if re.match(r"(<{7}|={7}|>{7})( |$)", text):
            shown += " (a git conflict marker: resolve the conflict)"
        raise _malformed(
            path,
            err.lineno,
            f"a library cell ({block.section or 'before the first heading'}) does "
            f"not compile ({err.msg}){shown}; fix that line, or tag the cell "
            f"`{DEMO_TAG}` if it is not library code",
        ) from None


def library_cells(path: Path = NOTEBOOK) -> list[str]:
    """Sources of the library cells, in notebook order."""
    return [b.source for b in library_blocks(path)]


HEADER = (  # one line: the notebook's first code cell may start early
    "# Generated from {name} by nbexport.py (make export): edit the notebook, not this "
    "file. Line N here is line N of {name}, so a traceback's line number is the "
    "notebook's. `python nbexport.py --check` fails while this file is stale."
)


def module_source(path: Path = NOTEBOOK) -> str:
    """The module's text: each library line on its .md line number."""
    out = [HEADER.format(name=Path(path).name)]
    for block in library_blocks(path):
        header = f"# --- {block.section} ({Path(path).name}:{block.line}) ---"
        out += [""] * (block.line - 2 - len(out))  # blank up to the fence's line
        out.append(header)
        out += block.source.splitlines()
    return "\n".join(out) + "\n"


def is_current(path: Path | None = None, out: Path | None = None) -> bool:
    """Whether `out` (the module) holds exactly what the notebook's cells give."""
    source = module_source(NOTEBOOK if path is None else path)  # refuses a bad cell
    out = EXPORT if out is None else out
    return out.exists() and out.read_text(encoding="utf-8") == source


def export(path: Path = NOTEBOOK, out: Path = EXPORT) -> Path:
    """Write the module if it is missing or stale; returns its path. Several
    processes may do this at once: each writes the same text through a rename. The
    module is never written over the notebook (atkit.files.check_outputs); a
    symbolic link stays one (the file it points to is rewritten)."""
    source = module_source(path)
    if not out.exists() or out.read_text(encoding="utf-8") != source:
        from atkit.files import check_outputs, write_text_atomic

        check_outputs(
            [("the module", out)], [("the notebook", path)], writes="the module"
        )
        write_text_atomic(out, source, fsync=False)
    return out


def registry_names(name: str, path: Path = NOTEBOOK) -> tuple[str, ...]:
    """The names a registry of the notebook holds, read from its library cells
    without running them (so neither torch nor the notebook loads): the string keys
    of `NAME = {...}` and of every later `NAME["key"] = ...`, or the strings of
    `NAME = (...)`, in the order the notebook adds them. A command line's --help
    and the tests' collection read choices this way; the module gives the objects."""
    import ast

    def literal(node, block: Block):
        try:
            return ast.literal_eval(node)
        except ValueError:  # a name or a call where the registry's key belongs
            raise _malformed(
                path,
                block.line + node.lineno - 1,
                f"a key of the registry {name} is not written out "
                f"(`{ast.unparse(node)[:60]}`); write its name as a string, which "
                "--help and the tests read without running the notebook",
            ) from None

    names: list[str] = []
    for block in library_blocks(path):
        for node in ast.parse(block.source).body:
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name) and target.id == name:
                items = value.keys if isinstance(value, ast.Dict) else []
                if isinstance(value, (ast.Tuple, ast.List)):
                    items = value.elts
                names = [literal(k, block) for k in items if k is not None]
            elif (
                isinstance(target, ast.Subscript)
                and isinstance(target.value, ast.Name)
                and target.value.id == name
            ):
                key = literal(target.slice, block)
                names += [] if key in names else [key]
    if not names:
        raise LookupError(f"{path.name} defines no registry {name} with names")
    return tuple(names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if stale")
    args = parser.parse_args(argv)
    from atkit.records import MalformedFileError

    try:
        if args.check:
            if not is_current():
                state = "is stale" if EXPORT.exists() else "is missing"
                print(
                    f"{EXPORT.name} {state}: run `python nbexport.py` (make export)",
                    file=sys.stderr,
                )
                return 1
            return 0
        print(export(NOTEBOOK))
    except MalformedFileError as err:  # a cell that does not compile, with its line
        print(f"nbexport.py: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
