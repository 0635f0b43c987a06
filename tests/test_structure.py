"""The shape of the project: the layers point one way, the notebook keeps its length
budget, every deep dive is marked as one, and tracebacks point into the notebook."""

import ast
import json
import re
import subprocess
import symtable
import sys
from pathlib import Path

import jupytext
import pytest

import nbexport
from tools import word_count

ROOT = Path(__file__).resolve().parents[1]
MD = ROOT / "annotated_transformer.md"


UPWARD = ("nbexport", "annotated_transformer_lib", "pipeline", "tools")


def _upward(name: str) -> bool:
    return name.split(".")[0] in UPWARD


def upward_strings(tree) -> list[str]:
    """String literals (docstrings aside) that name a module above atkit, as a bare
    module name ("tools.train") or as code that imports one: a program started
    from a string is an upward call that no import shows."""
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        text = node.value.strip()
        if id(node) in docs or not text:
            continue
        if re.fullmatch(r"[\w.]+", text) and _upward(text):
            found.append(text)
            continue
        try:
            code = ast.parse(text)
        except SyntaxError:
            continue
        found += [n for n in _imported(code) if _upward(n)]
    return found


def _imported(tree) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append(node.module or "")
    return names


def test_atkit_never_imports_the_notebook_or_a_tool():
    """atkit is a library under the notebook: no module of it imports nbexport, the
    generated module or a program of tools/, nor names one in a string to start it
    (the caller passes what to run)."""
    for path in sorted((ROOT / "atkit").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for name in _imported(tree):
            assert not _upward(name), f"{path.name} imports {name}"
        assert not upward_strings(tree), f"{path.name} names {upward_strings(tree)}"


def test_the_layer_check_reads_strings():
    code = (
        '"""Runs tools.train (a docstring may say so)."""\n'
        'W = "import sys; from tools import train; sys.exit(train.main())"\n'
        'M = "tools.export_model"\n'
        'E = "export it again with `python -m tools.export_model`"\n'
        'C = "import sys, importlib; importlib.import_module(sys.argv[1])"\n'
    )
    assert upward_strings(ast.parse(code)) == ["tools", "tools.export_model"]


def test_every_program_ends_through_run_main():
    """Each tools/ program's `__main__` block calls tools.errors.run_main, directly or
    through one function of its own that does, so any exception that reaches its
    top ends in one `error:` line (issue 47)."""
    for path in sorted((ROOT / "tools").glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        blocks = [
            n
            for n in tree.body
            if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)
        ]
        for block in blocks:
            calls = {
                getattr(c.func, "id", getattr(c.func, "attr", ""))
                for c in ast.walk(block)
                if isinstance(c, ast.Call)
            }
            through = calls & {"run_main"} or {
                name
                for name in calls & set(defs)
                if "run_main(" in ast.unparse(defs[name])
            }
            assert through, f"{path.name}: its __main__ block does not call run_main"


def test_compiling_is_announced(lib, monkeypatch):
    """torch.compile is silent for minutes on a CPU: maybe_compile says so first."""
    from atkit import fast

    monkeypatch.setattr(lib.runtime, "compile_works", lambda device: (True, ""))
    monkeypatch.setattr(lib.torch, "compile", lambda model, **kw: model)
    said = []
    fast.maybe_compile(object(), enabled=True, device="cpu", log=said.append)
    assert said and "first steps take a minute or more" in said[0]


def test_the_notebook_keeps_its_length_budget():
    counts = word_count.count(MD)
    assert counts.main_words <= word_count.MAIN_BUDGET, counts
    assert counts.total_words <= word_count.TOTAL_BUDGET, counts
    assert counts.main_code <= word_count.MAIN_CODE_BUDGET, counts  # the paper's code
    assert counts.deep_words > 0, "no deep dive found: the convention changed?"


def test_word_count_counts_deep_dives_apart(tmp_path):
    md = tmp_path / "n.md"
    md.write_text(
        "---\njupyter:\n  jupytext:\n    split_at_heading: true\n---\n\n"
        "## Part\n\none two three\n\n### Deep dive: X\n\n*four five*\n\nsix\n\n"
        "### Main again\n\nseven\n"
    )
    c = word_count.count(md)
    assert (c.main_words, c.deep_words) == (7, 6)


def test_word_count_counts_comments_as_prose(tmp_path):
    """issue 67: a sentence moved from a markdown cell into a code comment still
    counts, on the main path or in its deep dive; a `#` inside a string is no
    comment, and the `# needs training` marker is not prose."""
    md = tmp_path / "n.md"
    md.write_text(
        "---\njupyter:\n  jupytext:\n    split_at_heading: true\n---\n\n"
        "## Part\n\none two\n\n```python\n# needs training\n"
        "x = 1  # three four five\n# six\ny = '# not a comment'\n```\n\n"
        "### Deep dive: X\n\n*seven*\n\n```python\nz = 3  # eight nine\n```\n"
    )
    c = word_count.count(md)
    assert (c.main_words, c.deep_words) == (3 + 4, 4 + 2)  # headings count too
    assert (c.main_code, c.deep_code) == (4, 1)


def test_word_count_names_a_file_it_cannot_read(tmp_path, capsys):
    """issue 56: a file that is not UTF-8 text is one `error:` line naming it."""
    from tools.errors import run_main

    binary = tmp_path / "n.md"
    binary.write_bytes(b"## Part\n\xff\xfe words\n")
    status = run_main(
        lambda: word_count.main(["--notebook", str(binary)]), "word_count"
    )
    err = capsys.readouterr().err
    assert status == 2 and err.count("error:") == 1, err
    assert f"--notebook {binary} is not UTF-8 text" in err and "Traceback" not in err


def test_every_deep_dive_is_collapsed_and_says_what_it_shows():
    """Each 'Deep dive:' heading opens its own cell, collapsed in JupyterLab, and its
    next paragraph is a one-line summary in italics (the page's fold shows it)."""
    nb = jupytext.read(MD)
    dives = [
        c
        for c in nb.cells
        if c.cell_type == "markdown" and c.source.startswith("### Deep dive:")
    ]
    assert len(dives) >= 8
    for cell in dives:
        title = cell.source.splitlines()[0]
        assert cell.metadata.get("jp-MarkdownHeadingCollapsed") is True, title
        paragraphs = cell.source.split("\n\n")
        assert len(paragraphs) > 1, title
        summary = paragraphs[1].strip()
        assert summary.startswith("*") and summary.endswith("*"), title
        assert not summary.startswith("**"), title


def test_no_main_path_text_hides_inside_a_deep_dive():
    """A deep dive runs to the next heading; the exercises' links belong to the main
    path, so they come before a part's last deep dive, never inside it."""
    text = MD.read_text()
    for part in re.split(r"\n## ", text)[1:]:
        dives = [m.start() for m in re.finditer(r"^### Deep dive:", part, re.M)]
        links = [m.start() for m in re.finditer(r"^\*Exercises:\*", part, re.M)]
        for link in links:
            before = [d for d in dives if d < link]
            if before:
                after_dive = part[before[-1] : link]
                assert re.search(r"^### (?!Deep dive:)", after_dive, re.M), (
                    f"an exercises link sits inside a deep dive: {part[:40]!r}"
                )


def _bound_and_used(source: str) -> tuple[set, set]:
    """(names a cell binds at its top level, global names it reads anywhere, inside
    function and class bodies too; a function's own parameters and locals are not
    global). An attribute chain's root is a read name."""
    table = symtable.symtable(source, "cell", "exec")
    bound = {
        s.get_name()
        for s in table.get_symbols()
        if s.is_assigned() or s.is_imported() or s.is_namespace()
    }
    used, tables = set(), [table]
    while tables:
        t = tables.pop()
        for s in t.get_symbols():
            if s.is_referenced() and (t.get_type() == "module" or s.is_global()):
                used.add(s.get_name())
        tables += t.get_children()
    return bound, used


def deep_dive_only_uses(path=MD) -> list[str]:
    """'heading: name' for every name a main-path code cell reads that only deep-dive
    cells define (rule R1 of issue 57: the main path never needs a deep dive)."""
    cells = [
        (deep, heading, *_bound_and_used(cell.source))
        for cell, deep, heading in word_count.classified_cells(jupytext.read(path))
        if cell.cell_type == "code"
    ]
    main = set().union(*(bound for deep, _, bound, _ in cells if not deep))
    deep_only = set().union(*(bound for deep, _, bound, _ in cells if deep)) - main
    found = [
        f"{heading}: {name}"
        for deep, heading, _, used in cells
        if not deep
        for name in sorted(used & deep_only)
    ]
    return list(dict.fromkeys(found))


def test_the_main_path_uses_nothing_defined_only_in_a_deep_dive():
    """R1: a reader who skips every deep dive runs every main-path cell; so no
    main-path cell reads a name (even inside a function body) that only a deep
    dive's cells define. What the main path needs lives on it or in atkit."""
    violations = deep_dive_only_uses()
    assert not violations, "\n".join(violations)


def test_the_deep_dive_check_sees_uses_inside_function_bodies(tmp_path):
    md = tmp_path / "n.md"
    md.write_text(
        "## Part\n\n```python\ndef f(n):\n    return helper.x(n) + n\n```\n\n"
        "### Deep dive: X\n\n*what*\n\n```python\ndef helper(): pass\n"
        "n = 3\n```\n\n### Main again\n\n```python\nprint(n)\n```\n"
    )
    assert deep_dive_only_uses(md) == ["Part: helper", "Main again: n"]


def test_exported_blocks_name_their_section_and_keep_their_lines():
    source = nbexport.module_source().splitlines()
    md = MD.read_text().splitlines()
    headers = [ln for ln in source if ln.startswith("# --- ")]
    assert headers and all("annotated_transformer.md:" in h for h in headers)
    assert any("Part 3" in h and "›" in h for h in headers)
    for block in nbexport.library_blocks():
        for i, line in enumerate(block.source.splitlines()):
            if line:
                assert source[block.line - 1 + i] == md[block.line - 1 + i]


@pytest.mark.process
def test_a_traceback_points_into_the_notebook(tmp_path):
    """An error inside the notebook's code names the module's line, which is the
    notebook's line, in a process that imports it as the tools do."""
    code = "import annotated_transformer_lib as lib\nlib.average_checkpoints('x.pt')\n"
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT
    )
    assert r.returncode != 0
    pattern = r'File ".*annotated_transformer_lib\.py", line (\d+), in (\w+)'
    match = re.search(pattern, r.stderr)
    assert match and match.group(2) == "average_checkpoints", r.stderr[-2000:]
    line = MD.read_text().splitlines()[int(match.group(1)) - 1]
    assert "states_to_average" in line and line.strip() in r.stderr, line


COLLECT = """
import sys, pytest
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests"])
heavy = [m for m in ("torch", "annotated_transformer_lib") if m in sys.modules]
print("LOADED:", *heavy)
sys.exit(code)
"""


@pytest.mark.process
def test_collecting_the_tests_loads_neither_torch_nor_the_notebook():
    """Collection answers in seconds: test files import torch, the notebook and the
    modules that load them lazily (conftest.lazy), and registries' names are read
    without running the notebook (nbexport.registry_names)."""
    r = subprocess.run(
        [sys.executable, "-c", COLLECT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.splitlines()[-1] == "LOADED:", r.stdout.splitlines()[-1]


@pytest.mark.process
def test_every_tools_help_loads_no_torch():
    from tools import startup

    for name in startup.tools():
        row = startup.probe(name)
        assert "torch" not in row["loaded"], f"{name} --help loads {row['loaded']}"


def test_registry_names_are_read_without_running_the_notebook(lib):
    for registry in ("SEARCHES", "MODEL_SIZES"):
        assert nbexport.registry_names(registry) == tuple(getattr(lib, registry))


def test_word_count_prints_the_counts_and_refuses_a_missing_file(tmp_path, capsys):
    md = tmp_path / "n.md"
    md.write_text(
        "---\njupyter:\n  jupytext:\n    split_at_heading: true\n---\n\n"
        "## Part\n\none two three\n\n```python\nx = 1\n\ny = 2\n```\n\n"
        "### Deep dive: X\n\n*four five*\n\n```python\nz = 3\n```\n\n"
        "### Main again\n\nseven\n"
    )
    assert word_count.main(["--notebook", str(md)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "prose words, main path: 7 (budget 5,000)",
        "prose words, deep dives: 5",
        "prose words, in all:     12 (budget 9,000)",
        "code lines, main path:   2; in deep dives 1",
    ]
    from atkit.files import PathError  # issue 69: said as what it is, with advice

    with pytest.raises(PathError, match="--notebook .*missing.md: no such file"):
        word_count.main(["--notebook", str(tmp_path / "missing.md")])


FUNCTIONS = '''def a():
    """A docstring, not a line that runs."""
    return 1


class B:
    def m(self):
        def inner():
            pass

        return inner


async def c():
    """Only a docstring."""
'''


def test_tier_coverage_names_the_functions_a_tier_never_enters(
    tmp_path, monkeypatch, capsys
):
    """The program's reading of coverage.py's data, on data made up here: only
    word_count's `count` ran, and one line of its `main` (a function entered), so
    its other function, and every function of the other files, are listed; the
    tier asked for goes to pytest's -m."""
    import coverage

    from tools import tier_coverage

    path = tmp_path / "f.py"
    path.write_text(FUNCTIONS)
    assert tier_coverage.functions(path) == [
        ("a", {3}),
        ("B.m", {8, 9, 10, 11}),
        ("B.m.inner", {9}),
        ("c", {15}),
    ]
    sources = tier_coverage.sources()
    assert sources[str(nbexport.EXPORT)] == nbexport.EXPORT
    for folder in ("atkit", "atkit/page", "pipeline", "tools"):
        for py in (ROOT / folder).glob("*.py"):
            assert sources[str(py)] == py
    counted = ROOT / "tools" / "word_count.py"
    found = dict(tier_coverage.functions(counted))
    lines = found["count"] | found["read_notebook"] | found["classified_cells"]
    lines |= found["comment_words"]
    lines |= {min(found["main"])}  # count and what it calls, and main's first line
    ran = []

    def run(cmd, cwd, env, check, **popen):
        ran.append((cmd, env))
        data = coverage.CoverageData(basename=env["COVERAGE_FILE"])
        data.add_lines({str(counted): sorted(lines)})
        data.write()

    monkeypatch.setattr(tier_coverage.subprocess, "run", run)
    assert tier_coverage.main(["--tier", "training"]) == 0
    ((cmd, env),) = ran
    assert cmd[1:8] == ["-m", "coverage", "run", "--branch", "-m", "pytest", "tests"]
    assert cmd[-2:] == ["-m", "training"] and env["AT_PRESET"] == "ci"
    out = capsys.readouterr().out.splitlines()
    assert "tools/word_count.py: 1 never run: Counts.total_words" in out
    assert "tools/__init__.py: every function runs" in out
    listed = [int(line.split(": ")[1].split()[0]) for line in out if "never" in line]
    assert out[-1] == f"{sum(listed)} function(s) that no test of 'training' runs"
    assert len(out) == len(sources) + 1, "a line for each file, and the total"


def test_startup_times_each_program_in_a_fresh_interpreter(tmp_path, monkeypatch):
    """tools.startup: the programs it times (each module of tools/ with a main), a
    probe of one light program in a fresh interpreter (no torch: only --help), and
    its table and JSON, with the probes faked."""
    from tools import startup

    names = startup.tools()
    assert {"tools.train", "tools.startup", "tools.word_count"} <= set(names)
    assert "tools.errors" not in names and "tools.__init__" not in names
    assert names == sorted(names)
    row = startup.probe("tools.word_count")
    assert row["case"] == "tools.word_count" and row["loaded"] == []
    assert row["seconds"] > 0
    probed = []

    def probe(name):
        probed.append(name)
        return {"case": name, "seconds": 0.25, "loaded": ["torch"] * (name == "torch")}

    monkeypatch.setattr(startup, "probe", probe)
    out = tmp_path / "startup.json"
    assert startup.main(["--json", str(out)]) == 0
    assert probed == [*names, "torch", "notebook library"]
    rows = json.loads(out.read_text())
    assert [r["case"] for r in rows] == probed
    assert all(r["wall_s"] >= 0 and r["seconds"] == 0.25 for r in rows)
    probed.clear()
    assert startup.main(["--only-tools"]) == 0 and probed == names
    from atkit.files import PathError  # issue 69: atkit.files checks every output

    with pytest.raises(PathError, match="is a folder; give a file name"):
        startup.main(["--json", str(tmp_path)])
