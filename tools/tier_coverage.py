"""Which functions the fast tests never run: `make test-fast` under coverage.py, then
every function and method of the notebook's library (annotated_transformer_lib.py),
of atkit/, pipeline/, tools/, nbexport.py and exercise_checks.py that no fast test
entered, by module.

    python -m tools.tier_coverage                  # the fast tier (make test-fast)
    python -m tools.tier_coverage --tier training  # or any marker expression

A function that no test of the tier runs is one whose change that tier cannot see;
the list says where the inner loop is blind. The notebook's library keeps every line
on its .md line (nbexport.py), so a line named here is the notebook's line too.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from atkit.processes import end_with_parent
from tools.errors import run_main

PROG = "python -m tools.tier_coverage"
ROOT = Path(__file__).resolve().parents[1]


def tiers() -> list[str]:
    """The markers of pytest.ini, each what a test needs beyond the notebook's code
    (tests/conftest.py adds them)."""
    import configparser

    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "pytest.ini", encoding="utf-8")
    lines = ini["pytest"]["markers"].splitlines()
    return [line.split(":")[0].strip() for line in lines if line.strip()]


FAST = f"not ({' or '.join(tiers())})"  # make test-fast: the tests with none of them


def sources() -> dict[str, Path]:
    """{the file name coverage records: the Python source to read functions from}."""
    out = {}
    for name in ("annotated_transformer_lib.py", "nbexport.py", "exercise_checks.py"):
        out[str(ROOT / name)] = ROOT / name
    for folder in ("atkit", "atkit/page", "pipeline", "tools"):
        for path in sorted((ROOT / folder).glob("*.py")):
            out[str(path)] = path
    return out


def functions(path: Path) -> list[tuple[str, set[int]]]:
    """(qualified name, the lines of its body) of every function in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = child.body
                if isinstance(body[0], ast.Expr) and isinstance(
                    getattr(body[0], "value", None), ast.Constant
                ):
                    body = body[1:] or body  # the docstring alone never "runs"
                lines = set(range(body[0].lineno, body[-1].end_lineno + 1))
                found.append((prefix + child.name, lines))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")

    visit(tree, "")
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--tier", default=FAST, help=f"a marker expression ({FAST!r})")
    args = p.parse_args(argv)
    import coverage

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / ".coverage"
        env = {**os.environ, "AT_PRESET": "ci", "COVERAGE_FILE": str(data)}
        cmd = [sys.executable, "-m", "coverage", "run", "--branch", "-m", "pytest"]
        cmd += ["tests", "-q", "-p", "no:cacheprovider", "-m", args.tier]
        subprocess.run(
            cmd, cwd=ROOT, env=env, check=False, preexec_fn=end_with_parent()
        )
        cov = coverage.Coverage(data_file=str(data))
        cov.load()
        measured = cov.get_data()
        missing_total = 0
        for recorded, source in sources().items():
            ran = set(measured.lines(recorded) or ())
            missing = [name for name, lines in functions(source) if not lines & ran]
            missing_total += len(missing)
            short = Path(recorded).relative_to(ROOT)
            if missing:
                print(f"{short}: {len(missing)} never run: {', '.join(missing)}")
            else:
                print(f"{short}: every function runs")
    print(f"{missing_total} function(s) that no test of {args.tier!r} runs")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
