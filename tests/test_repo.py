"""The notebook pair, the generated module and the committed outputs stay consistent,
and the README's results block is copied from the committed notebook whole or not at
all (tools.readme_results)."""

import os
import re
import subprocess
import sys
import traceback
from datetime import datetime

import jupytext
import nbformat
import pytest

import nbexport
from atkit.runtime import RUN_MIME
from conftest import ROOT, clean_env
from tools import readme_results

MD = ROOT / "annotated_transformer.md"
IPYNB = ROOT / "annotated_transformer.ipynb"
PAIRS = [
    (MD, IPYNB),
    (ROOT / "exercises.md", ROOT / "exercises.ipynb"),
    (ROOT / "since_2017.md", ROOT / "since_2017.ipynb"),
]


def cells(nb):
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


@pytest.mark.parametrize("md_path, ipynb_path", PAIRS, ids=lambda p: p.name)
def test_md_and_ipynb_hold_the_same_cells(md_path, ipynb_path):
    md, ipynb = cells(jupytext.read(md_path)), cells(jupytext.read(ipynb_path))
    if md != ipynb:
        i = next(
            (k for k, (a, b) in enumerate(zip(md, ipynb, strict=False)) if a != b),
            min(len(md), len(ipynb)),
        )
        pytest.fail(
            f"{md_path.name} and {ipynb_path.name} differ ({len(md)} vs "
            f"{len(ipynb)} cells; first difference at cell {i}): run `make sync`, "
            "then `make run`"
        )


@pytest.mark.parametrize(
    "ipynb_path", [ipynb for _, ipynb in PAIRS], ids=lambda p: p.name
)
def test_committed_notebook_was_executed_in_one_run_without_errors(ipynb_path):
    nb = nbformat.read(ipynb_path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.get("execution_count") for c in code]
    assert None not in counts, "some code cells were never executed: run `make run`"
    assert counts == sorted(counts), "cells were executed out of order: run `make run`"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"the committed notebook holds errors: {errors[0].ename}"


def test_demo_cells_are_tagged_and_library_cells_define_things():
    """Library (untagged) cells must not print or plot: that is what demo cells do."""
    nb = jupytext.read(MD)
    for cell in nb.cells:
        if cell.cell_type != "code" or "demo" in cell.metadata.get("tags", []):
            continue
        for line in cell.source.splitlines():
            assert not line.startswith(("print(", "plt.show(")), (
                f"library cell prints or plots at top level: {line!r}; tag it demo"
            )


@pytest.mark.process
def test_exported_module_is_importable_by_other_processes(tmp_path):
    nbexport.export(out=tmp_path / "lib.py")
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import lib; "
        "print(lib.make_model(11, 11, 'tiny').config.d_model)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    import annotated_transformer_lib

    tiny = annotated_transformer_lib.MODEL_SIZES["tiny"]
    assert r.stdout.strip() == str(tiny["d_model"])


def test_library_lines_keep_their_notebook_line_numbers(lib):
    """The generated module holds each library line on the line it has in the .md:
    a traceback from the library names annotated_transformer_lib.py and a line
    number that is the notebook's, and shows the notebook's line."""
    md = MD.read_text(encoding="utf-8").splitlines()
    generated = nbexport.module_source().splitlines()
    code = [
        (number, line)
        for number, line in enumerate(generated, start=1)
        if line.strip() and number > 1 and not line.startswith("# --- ")
    ]
    assert len(code) > 500  # the library is here, not a few stray lines
    moved = [(n, line) for n, line in code if md[n - 1] != line]
    assert not moved, f"lines not on their .md line: {moved[:3]}"
    with pytest.raises(TypeError) as err:
        lib.average_checkpoints("one.pt")  # a list is needed
    frames = [f for f in traceback.extract_tb(err.tb) if f.filename == lib.__file__]
    assert [f.name for f in frames] == ["average_checkpoints"], frames
    assert "states_to_average" in md[frames[0].lineno - 1]
    for frame in frames:
        assert md[frame.lineno - 1].strip() == generated[frame.lineno - 1].strip()
        assert frame.line and frame.line in md[frame.lineno - 1]


def test_the_library_holds_no_repository_glue():
    """The exported module knows nothing of this repository's layout: no tools/
    paths, no nbexport, no search for the repository root, no sys.path edits."""
    source = nbexport.module_source()
    source = source[source.index("\n# --- ") :]  # after the generated header
    for glue in ("tools/", "nbexport", "repo_root", "sys.path", "__file__"):
        assert glue not in source, f"library code mentions {glue!r}"


def test_tools_and_tests_edit_no_sys_path():
    for path in [*ROOT.glob("tools/*.py"), *ROOT.glob("tests/*.py")]:
        if path.name == "test_repo.py":
            continue
        assert "sys.path.insert" not in path.read_text(), path


def test_readme_results_are_those_of_the_committed_notebook():
    r = subprocess.run(
        [sys.executable, "-m", "tools.readme_results", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr + r.stdout


@pytest.mark.process
def test_wait_policy_is_set_before_any_cell_imports_torch():
    """OMP_WAIT_POLICY only works if it is set before torch loads: the Setup cell and
    the library's imports start with atkit.runtime, which sets it (in Jupyter, and in
    the generated module for tools and DDP workers)."""
    lines = [
        ln
        for c in jupytext.read(MD).cells
        if c.cell_type == "code"
        for ln in c.source.splitlines()
        if ln.startswith(("import ", "from "))
    ]
    runtime = next(i for i, ln in enumerate(lines) if ln.startswith("from atkit "))
    first_torch = next(
        i for i, ln in enumerate(lines) if ln.startswith(("import torch", "from torch"))
    )
    assert "runtime" in lines[runtime] and runtime < first_torch
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    probe = (
        "import annotated_transformer_lib, os, sys; "
        "print(os.environ['OMP_WAIT_POLICY'], 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["PASSIVE", "True"]


def test_colab_links_and_the_setup_cell_name_one_repository():
    """The README's badge, the notebook's link and the Setup cell's clone all point at
    the same GitHub repository (change all three together if it moves)."""
    import re

    pattern = re.compile(r"github(?:\.com)?/([\w.-]+/[\w.-]+?)(?:/blob/|\"|\)|$)")
    readme = pattern.findall((ROOT / "README.md").read_text())
    md = MD.read_text() + (ROOT / "exercises.md").read_text()
    colab = re.compile(r"colab\.research\.google\.com/github/([\w.-]+/[\w.-]+?)/blob/")
    link = colab.findall(md)  # the notebooks' Colab links (References name others)
    cells = [c for c in jupytext.read(MD).cells if c.cell_type == "code"]
    setup = pattern.findall(cells[0].source)
    assert setup and "AT_REPO_URL" in cells[0].source and "git" in cells[0].source
    assert set(readme) == set(link) == set(setup), (readme, link, setup)


# An absolute path of the machine that made the run: a slash-separated path that
# starts at the root after a space, a quote, a bracket, '=' or the line's start.
MACHINE_PATH = re.compile(r"(?:^|[\s'\"(\[=])(/(?:[\w.+-]+/)+[\w.+-]*)", re.M)
NOISE = {
    "a traceback": re.compile(r"Traceback \(most recent call last\)"),
    "a warning": re.compile(r"\w*Warning\b"),
    "a launcher banner": re.compile(r"^\*{5,}$", re.M),
}


def output_texts(nb):
    """(cell index, what the reader sees as text) for every output of the notebook."""
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                yield i, out.get("name", "stdout"), out.text
            elif out.output_type == "error":
                yield i, "error", "\n".join(out.get("traceback", []))
            else:
                yield i, out.output_type, out.get("data", {}).get("text/plain", "")


def noise_in(nb) -> list[str]:
    found = []
    for i, kind, text in output_texts(nb):
        where = f"cell {i}"
        if kind in ("stderr", "error"):
            found.append(f"{where}: {kind} output {text.strip()[:120]!r}")
        for name, pattern in NOISE.items():
            if m := pattern.search(text):
                found.append(f"{where}: {name}: {m.group(0)!r}")
        found += [f"{where}: a machine path {p!r}" for p in MACHINE_PATH.findall(text)]
    return found


def test_committed_outputs_hold_no_tool_noise():
    """No stderr, warning, traceback, launcher banner or absolute path of the machine
    that made the run in what the reader sees (the page shows the same outputs)."""
    found = noise_in(nbformat.read(IPYNB, as_version=4))
    assert not found, "the committed notebook shows tool noise:\n" + "\n".join(found)


def test_the_noise_check_finds_each_kind():
    nb = nbformat.v4.new_notebook()
    texts = [
        ("stdout", "/work/x/build/lib.py:18: FutureWarning: old"),
        ("stdout", "*****************************************\nSetting OMP..."),
        ("stderr", "progress 10%"),
        ("stdout", "wrote '/home/ann/run/last.pt'"),
        ("stdout", "fine: 1/510 of a step, checkpoints/cpu/part3, https://a.b/c"),
    ]
    nb.cells = [
        nbformat.v4.new_code_cell(
            outputs=[nbformat.v4.new_output("stream", name=n, text=t)]
        )
        for n, t in texts
    ]
    found = noise_in(nb)
    for i in range(4):
        assert any(f.startswith(f"cell {i}:") for f in found), (i, found)
    assert not any(f.startswith("cell 4:") for f in found), found


EXPECTED = re.compile(r"expected: about (\d+) min")


def cell_minutes(cell) -> float | None:
    """How long the committed run spent on the cell, from nbconvert's timestamps."""
    stamps = cell.get("metadata", {}).get("execution", {})
    if "iopub.execute_input" not in stamps or "shell.execute_reply" not in stamps:
        return None
    start, end = (
        datetime.fromisoformat(stamps[k])
        for k in ("iopub.execute_input", "shell.execute_reply")
    )
    return (end - start).total_seconds() / 60


# How much the same two cores' time for the same cell varies from one day to the next
# (runs/README.md: the run of 067c2a1 took up to 1.36 times its record). A record that
# is out of date by more, as after a change that makes a cell several times faster,
# still fails.
SPREAD = 1.6


def expectations_missed(nb) -> list[str]:
    """Cells whose printed 'expected: about N min' is further from what the run that
    printed it took than a factor of SPREAD and more than a minute (the preset's
    `minutes` are out of date, or were measured on another machine)."""
    texts = {}
    for i, _, text in output_texts(nb):
        texts[i] = texts.get(i, "") + text
    missed = []
    for i, cell in enumerate(nb.cells):
        m = EXPECTED.search(texts.get(i, ""))
        took = cell_minutes(cell)
        if m is None or took is None:
            continue
        said = int(m.group(1))
        off = max(took, 0.5) / max(said, 0.5)
        if abs(took - said) > 1 and not 1 / SPREAD <= off <= SPREAD:
            missed.append(f"cell {i}: prints about {said} min, took {took:.1f} min")
    return missed


def test_printed_cell_times_are_those_of_the_committed_run():
    """Each 'expected: about N min' a cell prints is the time that cell took in the
    committed run, within the machine's day-to-day spread: set the preset's `minutes`
    from the run you commit."""
    missed = expectations_missed(nbformat.read(IPYNB, as_version=4))
    assert not missed, (
        "the committed run took longer or shorter than the record it printed "
        "(runs/cell-minutes.json, from the run before): run the notebook again:\n"
        + "\n".join(missed)
    )


def test_the_cell_times_are_one_record_of_the_committed_run():
    """runs/cell-minutes.json holds what the committed run's long cells took (its
    own timestamps; `make readme` writes it), expected_time prints from it, and the
    README's time table quotes it: one source for every such figure."""
    from atkit import config

    nb = nbformat.read(IPYNB, as_version=4)
    record = config.committed_minutes()
    preset = readme_results.run_preset(nb)
    assert record[preset] == readme_results.measured_minutes(nb), "make readme"
    minutes = record[preset]["minutes"]
    assert config.expected_time(preset, "part4", config.MINUTES_FILE).startswith(
        f"expected: about {round(minutes['part4'])} min with preset {preset} on "
    )
    minutes = record[config.publisher()]["minutes"]  # the run the README quotes
    said = re.search(
        r"Part 3's training took (\d+) minutes, Part 4's (\d+) and the alpha sweep "
        r"(\d+) \(`runs/cell-minutes.json`\)",
        (ROOT / "README.md").read_text(encoding="utf-8"),
    )
    assert said, "the README's time table no longer quotes the record"
    quoted = [int(n) for n in said.groups()]
    assert quoted == [round(minutes[c]) for c in ("part3", "part4", "alpha")]


def test_the_cell_time_check_finds_a_stale_figure():
    def timed(text, minutes):
        cell = nbformat.v4.new_code_cell(
            outputs=[nbformat.v4.new_output("stream", name="stdout", text=text)]
        )
        cell.metadata["execution"] = {
            "iopub.execute_input": "2026-01-01T10:00:00.000000Z",
            "shell.execute_reply": f"2026-01-01T10:{minutes:02d}:30.000000Z",
        }
        return cell

    nb = nbformat.v4.new_notebook()
    line = "expected: about {} min with preset cpu on 2 CPU cores\n"
    nb.cells = [
        timed(line.format(11), 10),  # 10.5 min: close enough
        timed(line.format(33), 55),  # another machine's run (1.68 times as long)
        timed(line.format(30), 18),  # a cell made faster (0.62 times)
        timed(line.format(30), 47),  # a busier day (1.58 times)
        timed(line.format(1), 0),  # 0.5 min of "about 1 min"
        timed("no expectation printed\n", 40),
    ]
    missed = expectations_missed(nb)
    assert [m.split(":")[0] for m in missed] == ["cell 1", "cell 2"], missed


# ------------------------------------------ the README's results: whole or not at all


def results_notebook(path, text: str, error: bool = False):
    nb = nbformat.v4.new_notebook()
    setup = nbformat.v4.new_code_cell("RUNTIME")
    setup.outputs = [  # the Setup cell's line, and the same facts as data
        nbformat.v4.new_output(
            "execute_result",
            data={"text/plain": "preset ci", RUN_MIME: {"preset": "ci"}},
            execution_count=1,
        )
    ]
    cell = nbformat.v4.new_code_cell("print(results)", metadata={"tags": ["results"]})
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    if error:
        failure = nbformat.v4.new_output(
            "error",
            ename="RuntimeError",
            evalue="training diverged",
            traceback=["RuntimeError: training diverged"],
        )
        cell.outputs.append(failure)
    nb.cells = [nbformat.v4.new_markdown_cell("## Part 3"), setup, cell]
    nbformat.write(nb, path)
    return path


def readme_with_markers(path, filler: int = 0) -> bytes:
    text = (
        "# Title\n\n" + "x" * filler + "\n"
        f"{readme_results.START}\nold results\n{readme_results.END}\nend\n"
    )
    path.write_text(text)
    return path.read_bytes()


def test_readme_results_copies_the_block(tmp_path):
    nb = results_notebook(tmp_path / "nb.ipynb", "BLEU 30.0\n")
    readme = tmp_path / "README.md"
    readme_with_markers(readme)
    assert readme_results.main(["--notebook", str(nb), "--readme", str(readme)]) == 0
    assert "BLEU 30.0" in readme.read_text() and "old results" not in readme.read_text()


def test_results_blocks_under_one_heading_are_told_apart(tmp_path):
    nb = nbformat.read(results_notebook(tmp_path / "nb.ipynb", "BLEU 30.0\n"), 4)
    more = nbformat.v4.new_code_cell("print(spread)", metadata={"tags": ["results"]})
    more.outputs = [nbformat.v4.new_output("stream", name="stdout", text="range 1\n")]
    lead = nbformat.v4.new_markdown_cell("**How much a score moves.** A paragraph.")
    nb.cells += [lead, more]
    nbformat.write(nb, tmp_path / "nb.ipynb")
    block = readme_results.results_block(tmp_path / "nb.ipynb")
    assert "**Part 3**\n\n```text\nBLEU 30.0" in block
    assert "**Part 3: How much a score moves**\n\n```text\nrange 1" in block


@pytest.mark.parametrize("check", [False, True])
def test_an_errored_results_cell_is_never_copied(tmp_path, check):
    nb = results_notebook(tmp_path / "nb.ipynb", "BLEU 0.0 (partial)\n", error=True)
    readme = tmp_path / "README.md"
    before = readme_with_markers(readme)
    argv = ["--notebook", str(nb), "--readme", str(readme)] + ["--check"] * check
    with pytest.raises(readme_results.UsageError, match="ended in an error") as err:
        readme_results.main(argv)
    assert "RuntimeError" in str(err.value) and "Part 3" in str(err.value)
    assert readme.read_bytes() == before


def test_readme_results_refusals_are_one_error_line(tmp_path, capsys):
    """issue 56: every refusal is one `error:` line, exit 2 (a stale README under
    --check: an `error:` line, exit 1); a file that is not UTF-8 text, or not a
    notebook, is named."""
    nb = results_notebook(tmp_path / "nb.ipynb", "BLEU 0.0\n", error=True)
    readme = tmp_path / "README.md"
    readme_with_markers(readme)
    binary = tmp_path / "binary.bin"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    cases = [
        (["--notebook", str(nb)], 2, "ended in an error"),
        (["--notebook", str(IPYNB), "--readme", str(binary)], 2, f"{binary}"),
        (["--notebook", str(binary)], 2, f"--notebook {binary} is not UTF-8"),
        (["--notebook", str(ROOT / "annotated_transformer.md")], 2, "as a notebook"),
    ]
    for argv, status, words in cases:
        argv = [*argv, "--readme", str(readme)] if "--readme" not in argv else argv
        assert readme_results.main_guarded(argv) == status, argv
        err = capsys.readouterr().err
        assert err.count("error:") == 1 and words in err, (argv, err)
        assert err.startswith("python -m tools.readme_results: error: "), err
        assert "Traceback" not in err
    stale = ["--notebook", str(IPYNB), "--readme", str(readme), "--check"]
    assert readme_results.main_guarded(stale) == 1
    err = capsys.readouterr().err
    assert err.startswith("python -m tools.readme_results: error: README.md's"), err


@pytest.mark.parametrize("markers", ["reversed", "doubled", "missing"])
def test_results_markers_out_of_order_are_a_clear_error(markers):
    start, end = readme_results.START, readme_results.END
    text = {
        "reversed": f"a\n{end}\nold\n{start}\nb\n",
        "doubled": f"{start}\n{end}\n{start}\n{end}\n",
        "missing": f"a\n{start}\nold\n",
    }[markers]
    with pytest.raises(readme_results.UsageError, match="marker"):
        readme_results.replace_block(text, "new\n")


def test_a_full_disk_leaves_readme_as_it_was(small_disk, tmp_path):
    readme = small_disk / "README.md"
    before = readme_with_markers(readme, filler=30_000)
    nb = results_notebook(tmp_path / "nb.ipynb", "BLEU 30.0\n" * 4_000)  # 40 kB
    with pytest.raises(OSError) as err:
        readme_results.main(["--notebook", str(nb), "--readme", str(readme)])
    assert err.value.errno == 28  # ENOSPC: the write did not fit
    assert readme.read_bytes() == before
    assert [p.name for p in small_disk.iterdir()] == ["README.md"], "temp file left"


def test_readme_results_refuses_a_missing_file_before_any_work(tmp_path, capsys):
    """issue 47: a missing --readme is one error line, not a traceback."""
    status = readme_results.main_guarded(
        ["--readme", str(tmp_path / "nope.md"), "--notebook", str(IPYNB)]
    )
    err = capsys.readouterr().err
    assert status == 2 and err.count("error:") == 1 and "no such file" in err
    assert "Traceback" not in err


def test_the_packages_colab_installs_are_pinned_as_in_requirements():
    """The Setup cell installs on Colab what it lacks (atkit.colab.WANTED), in the
    versions that requirements.txt pins."""
    from atkit import colab

    lines = (ROOT / "requirements.txt").read_text().splitlines()
    reqs = [line.split("#")[0].strip() for line in lines]
    pins = dict(req.split("==", 1) for req in reqs if "==" in req)
    for name, version in colab.WANTED.items():
        assert pins.get(name) == version, (name, version, pins.get(name))


def test_library_cells_leave_out_demo_cells_and_magics(tmp_path):
    md = tmp_path / "n.md"
    md.write_text(
        "---\njupyter:\n  jupytext:\n    text_representation:\n      extension: .md\n"
        "      format_name: markdown\n---\n\n# T\n\n"
        "```python\nimport os\n%matplotlib inline\n```\n\n"
        '```python tags=["demo"]\nprint(1)\n```\n\n'
        "## Part\n\n```python\ndef f():\n    return 2\n```\n"
    )
    assert nbexport.library_cells(md) == ["import os\n", "def f():\n    return 2"]
    blocks = nbexport.library_blocks(md)
    assert [(b.line, b.section) for b in blocks] == [(12, ""), (23, "Part")]


def test_nbexport_command_line_writes_and_checks_the_module(
    lib, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(sys, "argv", ["nbexport.py", "--check"])
    assert nbexport.main() == 0  # the tests' `lib` exported it: current
    stale = tmp_path / "lib.py"
    stale.write_text("# an older notebook's module\n")
    monkeypatch.setattr(nbexport, "EXPORT", stale)
    assert nbexport.main() == 1
    assert capsys.readouterr().err == (
        f"{stale.name} is stale: run `python nbexport.py` (make export)\n"
    )
    monkeypatch.setattr(sys, "argv", ["nbexport.py"])
    assert nbexport.main() == 0
    assert capsys.readouterr().out == f"{nbexport.export()}\n"


def test_a_clone_prepared_before_is_kept_and_updated(tmp_path, monkeypatch, capsys):
    """colab.prepare, as runtime.setup(clone=...) calls it: a fresh clone is only
    entered (nothing said); the next session's (Colab restarted, the disk kept)
    finds the mark the first left in .git and updates it, saying so in one line.
    setup() prepares only the clone this package was imported from."""
    from pathlib import Path

    from atkit import colab, runtime

    clone = tmp_path / "at-repo"
    (clone / ".git").mkdir(parents=True)
    updated = []
    monkeypatch.setattr(colab, "update", lambda c: updated.append(c) or "updated")
    monkeypatch.setattr(colab, "WANTED", {})
    monkeypatch.chdir(tmp_path)
    colab.prepare("at-repo")
    assert updated == [] and Path.cwd() == clone and capsys.readouterr().out == ""
    monkeypatch.chdir(tmp_path)
    colab.prepare("at-repo")
    assert updated == ["at-repo"] and capsys.readouterr().out == "updated\n"

    def forbidden(clone):
        raise AssertionError("prepared a folder atkit was not imported from")

    monkeypatch.setattr(colab, "prepare", forbidden)
    monkeypatch.setenv("AT_PRESET", "ci")
    assert runtime.setup(clone="at-repo").preset == "ci"


def test_make_readme_writes_the_time_tables_quote():
    """`make readme` quotes the publishing preset's cell times in the README's time
    table, and leaves the quote alone while that preset has no run in the record."""
    from atkit import config

    text = (
        "took 1:00, of which Part 3's training took 29 minutes, Part 4's 91 and the "
        "alpha sweep 7 (`runs/cell-minutes.json`); a second run"
    )
    run = {"minutes": {"part3": 30.4, "part4": 88.6, "alpha": 6.5, "table": 2.0}}
    quoted = readme_results.quote_times(text, {config.publisher(): run})
    assert "Part 3's training took 30 minutes, Part 4's 89 and the alpha sweep 6 " in (
        quoted
    )
    assert quoted.endswith("(`runs/cell-minutes.json`); a second run")
    assert readme_results.quote_times(text, {"ci": run}) == text
