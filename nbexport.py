"""Turn the notebook's library cells into an importable Python module.

`annotated_transformer.md` is the only place the code lives. A code cell is part of
the library unless it carries the jupytext tag ``demo``; demo cells (plots, printed
checks, training runs) execute in Jupyter but never on import. That tag is the one
gate that decides.

    python nbexport.py            # writes build/annotated_transformer_lib.py
    python nbexport.py --check    # exits 1 if that file is stale

Tools and tests call :func:`load`, which rewrites the file when the notebook changed
and imports it as the module ``annotated_transformer_lib``. Worker processes (torchrun,
DataLoader workers) import that same file by name, with its folder on PYTHONPATH; it is
rewritten from the notebook, never edited by hand.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
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


def export(path: Path = NOTEBOOK, out: Path = EXPORT) -> Path:
    """Write the module if it is missing or stale; returns its path. Several
    processes may do this at once: each writes the same text through a rename."""
    source = module_source(path)
    if not out.exists() or out.read_text() != source:
        from atkit.files import write_text_atomic

        write_text_atomic(out, source, fsync=False)
    return out


def load(path: Path = NOTEBOOK) -> types.ModuleType:
    """The notebook's library as the module ``annotated_transformer_lib``, imported
    from its generated file (exported first if stale; imported once per process)."""
    out = export(path)
    module = sys.modules.get(MODULE_NAME)
    if module is not None and getattr(module, "__file__", None) == str(out):
        return module
    spec = importlib.util.spec_from_file_location(MODULE_NAME, out)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module  # dataclasses and pickling look it up by name
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if stale")
    args = parser.parse_args()
    if args.check:
        if not EXPORT.exists() or EXPORT.read_text() != module_source():
            print(f"{EXPORT} is stale: run `python nbexport.py`", file=sys.stderr)
            return 1
        return 0
    print(export())
    return 0


if __name__ == "__main__":
    sys.exit(main())
