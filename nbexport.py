"""Turn the notebook's library cells into an importable Python module.

`annotated_transformer.md` is the only place the code lives. A code cell is part of
the library unless it carries the jupytext tag ``demo``; demo cells (plots, printed
checks, training runs) execute in Jupyter but never on import. That tag is the one
gate that decides.

    python nbexport.py            # writes build/annotated_transformer_lib.py
    python nbexport.py --check    # exits 1 if that file is stale

Tests call :func:`load`; DistributedDataParallel workers and DataLoader workers import
the generated file, which is rewritten from the notebook, never edited by hand.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent
NOTEBOOK = ROOT / "annotated_transformer.md"
EXPORT = ROOT / "build" / "annotated_transformer_lib.py"
MODULE_NAME = "annotated_transformer_lib"
DEMO_TAG = "demo"


def library_cells(path: Path = NOTEBOOK) -> list[str]:
    """Sources of the code cells that are not tagged ``demo``, in notebook order."""
    import jupytext

    nb = jupytext.read(str(path))
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if DEMO_TAG in cell.metadata.get("tags", []):
            continue
        lines = [
            ln
            for ln in cell.source.splitlines()
            if not ln.lstrip().startswith(("%", "!"))
        ]
        cells.append("\n".join(lines))
    return cells


def module_source(path: Path = NOTEBOOK) -> str:
    header = (
        f"# Generated from {path.name} by nbexport.py; edit the notebook instead.\n"
    )
    parts = [header]
    for i, src in enumerate(library_cells(path)):
        parts.append(f"\n# --- library cell {i} ---\n{src}\n")
    return "".join(parts)


def _write_atomic(out: Path, text: str) -> None:
    """Write via a temporary file and a rename: readers never see half a file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, out)


def export(path: Path = NOTEBOOK, out: Path = EXPORT) -> Path:
    """Write the module (workers may be importing the old one meanwhile)."""
    _write_atomic(out, module_source(path))
    return out


def load(path: Path = NOTEBOOK, name: str = MODULE_NAME) -> types.ModuleType:
    """Execute the library cells into a fresh module registered as ``name``.

    The source is also written to build/<name>.py (if it changed) so that tracebacks
    point at real lines of the generated code.
    """
    src = module_source(path)
    where = EXPORT.parent / f"{name}.py"
    if not where.exists() or where.read_text() != src:
        _write_atomic(where, src)
    module = types.ModuleType(name)
    module.__file__ = str(where)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    exec(compile(src, str(where), "exec"), module.__dict__)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", type=Path, default=NOTEBOOK)
    parser.add_argument("--out", type=Path, default=EXPORT)
    parser.add_argument("--check", action="store_true", help="fail if out is stale")
    args = parser.parse_args()
    if args.check:
        fresh = module_source(args.notebook)
        if not args.out.exists() or args.out.read_text() != fresh:
            print(f"{args.out} is stale: run `python nbexport.py`", file=sys.stderr)
            return 1
        return 0
    print(export(args.notebook, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
