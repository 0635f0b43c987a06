"""How long a program takes before it does any work: each tool's --help, torch, and
the notebook's library, each timed in a fresh interpreter.

    python -m tools.startup            # a table: seconds, and what each one loaded
    python -m tools.startup --json f   # also the figures as JSON

A --help answers without loading torch or the notebook (tests/test_structure.py holds
every tool to that with this program); the figures are for a person to read, never
a test's assertion: they depend on the machine and on what else it is doing.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from atkit import files, processes
from tools.errors import run_main

PROG = "python -m tools.startup"
ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "annotated_transformer_lib", "spacy", "matplotlib")
# what each case runs in its fresh interpreter; a tool's --help runs its main
PROBE = """
import contextlib, io, runpy, sys, time
start = time.perf_counter()
name = sys.argv[1]
if name.startswith("tools."):
    sys.argv = [name, "--help"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        runpy.run_module(name, run_name="__main__")
elif name == "torch":
    import torch
else:
    import annotated_transformer_lib
seconds = time.perf_counter() - start
print(seconds, *[m for m in {heavy!r} if m in sys.modules])
"""


def tools() -> list[str]:
    """Every program in tools/ (a module with a main)."""
    names = []
    for path in sorted((ROOT / "tools").glob("*.py")):
        if "def main(" in path.read_text(encoding="utf-8"):
            names.append(f"tools.{path.stem}")
    return names


def sources() -> list[tuple[str, Path]]:
    """What the timed cases read, as (what, path): the tools, nbexport.py and the
    notebook; --json may be none of them."""
    found = [("a tool", p) for p in sorted((ROOT / "tools").glob("*.py"))]
    found.append(("nbexport.py", ROOT / "nbexport.py"))
    return [*found, ("the notebook", ROOT / "annotated_transformer.md")]


def probe(name: str) -> dict:
    """One case in a fresh interpreter: its seconds and the heavy modules loaded."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), name],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=processes.end_with_parent(signal.SIGKILL),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: {proc.stderr.strip()[-500:]}")
    seconds, *loaded = proc.stdout.split()
    return {"case": name, "seconds": float(seconds), "loaded": loaded}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument(
        "--only-tools", action="store_true", help="time the tools' --help alone"
    )
    p.add_argument("--json", type=Path, default=None, help="also write JSON here")
    args = p.parse_args(argv)
    if args.json:  # checked before the work, as any program's output
        (args.json,) = files.check_outputs(
            [("--json", args.json)], sources(), writes="the figures"
        )
        args.json = files.output_file("--json", args.json, "startup.json")
    cases = tools() + ([] if args.only_tools else ["torch", "notebook library"])
    rows = []
    for name in cases:
        start = time.perf_counter()
        row = probe(name)
        row["wall_s"] = time.perf_counter() - start
        rows.append(row)
        loaded = ", ".join(row["loaded"]) or "-"
        print(f"{name:28} {row['seconds']:6.2f} s   loaded: {loaded}", flush=True)
    if args.json:
        files.write_text_atomic(args.json, json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
