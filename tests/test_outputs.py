"""Issue 69, point 1: no program writes over its own input or through a link, and the
minor causes of point 5 that name the wrong thing.

Every program that writes checks its outputs against its inputs before any work
(atkit.files.check_outputs: the same path, the same inode through a hard or symbolic
link, a notebook where a page belongs) and refuses in one `error:` line; a write
through a symbolic link replaces the file the link points to, and the link stays a
link (atkit.files.write_target, in the one atomic writer). A test per program that
writes: render_page, readme_results, export_model, seed_spread, train, startup,
js_golden, bench and nbexport (precision_check writes through tools.train only, to
paths of its own choosing). Each refused case also checks that its victim is
byte-for-byte as it was.
"""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from atkit import files, runtime
from atkit.files import PathError
from atkit.settings import ConfigError
from conftest import (
    CLI_TINY,
    MULTI30K,
    NO_DATA,
    ROOT,
    copy_args,
    forbid,
    lazy,
    refused,
)
from tools import errors

render_page = lazy("tools.render_page")
readme_results = lazy("tools.readme_results")
export_model = lazy("tools.export_model")
seed_spread = lazy("tools.seed_spread")
startup = lazy("tools.startup")
js_golden = lazy("tools.js_golden")
bench = lazy("tools.bench")
word_count = lazy("tools.word_count")


def must_not_run(*args, **kwargs):
    pytest.fail("the work started before the refusal")


def guarded(main, prog, argv) -> int:
    """A program's main as its command line runs it: errors as one line."""
    return errors.run_main(lambda: main(argv), prog)


def one_line(capsys, prog: str) -> str:
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "Traceback" not in err, err
    assert err.startswith(f"{prog}: error: "), err
    return err.strip()


def fifo(folder: Path) -> Path:
    path = folder / "fifo"
    os.mkfifo(path)
    return path


def snapshot(*paths) -> dict:
    """Each path's bytes (None for none), and whether it is a link."""
    return {p: (p.read_bytes() if p.is_file() else None, p.is_symlink()) for p in paths}


# ------------------------------------------------------------ the shared helpers


def test_a_write_through_a_link_replaces_its_target_and_keeps_the_link(tmp_path):
    """The readme_results bug's cause: atomic_open renamed its temporary file over
    the link. Now a link (or a chain of them) stays, and the file it points to
    takes the text, with the temporary file beside the target, not the link."""
    target = tmp_path / "real" / "README.md"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "README.md"
    link.symlink_to(target)
    chain = tmp_path / "chain.md"
    chain.symlink_to(link)
    files.write_text_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    with files.atomic_open(chain, "w") as f:
        f.write("newer")
    assert chain.is_symlink() and link.is_symlink() and target.read_text() == "newer"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "README.md",
        "chain.md",
        "real",
    ]


def test_a_write_through_a_loop_of_links_is_refused(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(OSError, match="leads back to itself") as err:
        files.write_text_atomic(loop, "x")
    assert err.value.errno == errno.ELOOP and loop.is_symlink()


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda t, nb: nb, ["is the same file as --notebook", "such as nb.html"]),
        (lambda t, nb: t / "." / "nb.txt", ["is the same file as --notebook"]),
        (lambda t, nb: _hard(t / "hard.txt", nb), ["(a hard link to it)"]),
        (lambda t, nb: _soft(t / "soft.txt", nb), ["(through a symbolic link)"]),
        (
            lambda t, nb: _soft(t / "dir", t, folder=True) / "nb.txt",
            ["(through a symbolic link)"],
        ),
        (lambda t, nb: _soft(t / "gone", t / "nowhere"), ["which does not exist"]),
        (lambda t, nb: _soft(t / "loop", t / "loop"), ["leads back to itself"]),
        (lambda t, nb: t / "page.ipynb", ["is a notebook", "page.html"]),
        (lambda t, nb: t / "later.json", ["the same file as --later", "an input"]),
    ],
    ids=[
        "same-path",
        "same-path-spelt-otherwise",
        "hard-link",
        "symbolic-link",
        "through-a-linked-folder",
        "dangling-link",
        "link-loop",
        "a-notebook",
        "an-input-not-written-yet",
    ],
)
def test_check_outputs_refuses_an_output_that_is_an_input(tmp_path, make, words):
    nb = tmp_path / "nb.txt"
    nb.write_text("precious")
    out = make(tmp_path, nb)
    inputs = [("--notebook", nb), ("--later", tmp_path / "later.json")]
    with pytest.raises(PathError) as err:
        files.check_outputs([("--out", out)], inputs, writes="the page", suffix=".html")
    message = str(err.value)
    assert message.startswith(f"--out {out}"), message
    for word in words:
        assert word in message, message
    assert nb.read_text() == "precious"


def _hard(link: Path, target: Path) -> Path:
    os.link(target, link)
    return link


def _soft(link: Path, target: Path, folder: bool = False) -> Path:
    link.symlink_to(target, target_is_directory=folder)
    return link


def test_check_outputs_refuses_two_outputs_into_one_file_and_follows_links(tmp_path):
    real = tmp_path / "real.json"
    link = _soft(tmp_path / "link.json", real)
    real.write_text("{}")
    with pytest.raises(PathError, match="same file as --a .*an output too"):
        files.check_outputs([("--a", real), ("--b", link)])
    assert files.check_outputs([("--a", link), ("--b", tmp_path / "b")]) == [
        real,
        tmp_path / "b",
    ]


def _devnull(t: Path) -> Path:
    return Path("/dev/null")


def _under_a_file(t: Path) -> Path:
    (t / "file").write_text("x")
    return t / "file" / "x.md"


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda t: t, "is a folder, not a file"),
        (fifo, "is a named pipe (FIFO), not a file"),
        (_devnull, "is a character device (such as /dev/null), not a file"),
        (lambda t: _soft(t / "l", t / "gone"), "which does not exist; give X (or fix"),
        (lambda t: t / "missing.md", ": no such file; give X"),
        (_under_a_file, "no such file ("),
    ],
    ids=["folder", "fifo", "dev-null", "dangling-link", "missing", "under-a-file"],
)
def test_an_input_is_said_as_what_it_is(tmp_path, make, said):
    """'no such file' was said of a folder, a FIFO and /dev/null."""
    path = make(tmp_path)
    with pytest.raises(PathError) as err:
        files.input_file("--readme", path, "X")
    assert str(err.value).startswith(f"--readme {path}"), err.value
    assert said in str(err.value), err.value


# ------------------------------------------------------------------ render_page


def executed_notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(1)", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    nb.cells = [nbformat.v4.new_markdown_cell("# A page\n\nText."), cell]
    nbformat.write(nb, path)
    return path


RENDER = "python -m tools.render_page"


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda t, nb: nb, ["same file as --notebook", "a .html file such as ex"]),
        (lambda t, nb: t / "other.ipynb", ["is a notebook", "give --out a .html"]),
        (lambda t, nb: _hard(t / "page.html", nb), ["same file as --notebook"]),
        (lambda t, nb: _soft(t / "page.html", nb), ["same file as --notebook"]),
        (lambda t, nb: nb.with_suffix(".md"), ["the notebook's source"]),
        (
            lambda t, nb: _soft(t / "page.html", ROOT / "atkit/page/style.css"),
            ["the page's own", "style.css"],
        ),
    ],
    ids=["itself", "another-notebook", "hard-link", "link", "its-md", "page-file"],
)
def test_render_page_never_writes_over_the_notebook(
    tmp_path, monkeypatch, capsys, make, words
):
    """The issue's case: --notebook exercises.ipynb --out exercises.ipynb exited 0
    and left HTML where the executed notebook was."""
    nb = executed_notebook(tmp_path / "exercises.ipynb")
    md = nb.with_suffix(".md")
    md.write_text("# the source\n")
    out = make(tmp_path, nb)
    before = snapshot(nb, md, ROOT / "atkit/page/style.css")
    monkeypatch.setattr("tools.render_page.render_html", must_not_run)
    argv = ["--notebook", str(nb), "--out", str(out)]
    assert guarded(render_page.main, RENDER, argv) == 2
    line = one_line(capsys, RENDER)
    assert f"--out {out}" in line, line
    for word in words:
        assert word in line, line
    assert snapshot(nb, md, ROOT / "atkit/page/style.css") == before


def test_render_page_writes_through_a_link_into_its_target(tmp_path):
    nb = executed_notebook(tmp_path / "nb.ipynb")
    target = tmp_path / "site" / "index.html"
    target.parent.mkdir()
    target.write_text("old page")
    link = _soft(tmp_path / "index.html", target)
    render_page.render_file(nb, link)
    assert link.is_symlink() and "A page" in target.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda t: t, "is a folder, not a notebook file"),
        (fifo, "is a named pipe (FIFO), not a notebook file"),
        (_devnull, "is a character device (such as /dev/null), not a notebook"),
    ],
    ids=["folder", "fifo", "dev-null"],
)
def test_render_page_says_what_a_notebook_that_is_no_file_is(
    tmp_path, capsys, make, said
):
    path = make(tmp_path)
    argv = ["--notebook", str(path), "--out", str(tmp_path / "page.html")]
    assert guarded(render_page.main, RENDER, argv) == 2
    line = one_line(capsys, RENDER)
    assert said in line and "not found" not in line, line


def test_render_page_check_says_missing_not_stale(tmp_path, monkeypatch, capsys):
    nb = executed_notebook(tmp_path / "nb.ipynb")
    monkeypatch.setattr(
        "tools.render_page.render_html", lambda nb, *a: ("<html>", None)
    )
    out = tmp_path / "none.html"
    assert render_page.main(["--check", "--notebook", str(nb), "--out", str(out)]) == 1
    assert f"{out} is missing: run" in capsys.readouterr().err
    out.write_text("<html> ")
    assert render_page.main(["--check", "--notebook", str(nb), "--out", str(out)]) == 1
    assert f"{out} is stale: run" in capsys.readouterr().err


# --------------------------------------------------------------- readme_results

README = "python -m tools.readme_results"


def results_notebook(path: Path) -> Path:
    from atkit.runtime import RUN_MIME

    nb = nbformat.v4.new_notebook()
    setup = nbformat.v4.new_code_cell("RUNTIME")
    setup.outputs = [
        nbformat.v4.new_output(
            "execute_result",
            data={"text/plain": "preset ci", RUN_MIME: {"preset": "ci"}},
            execution_count=1,
        )
    ]
    cell = nbformat.v4.new_code_cell("print(r)", metadata={"tags": ["results"]})
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="BLEU 9\n")]
    nb.cells = [nbformat.v4.new_markdown_cell("## Part 3"), setup, cell]
    nbformat.write(nb, path)
    return path


def readme(path: Path) -> Path:
    start, end = readme_results.START, readme_results.END
    path.write_text(f"# T\n\n{start}\nold\n{end}\n")
    return path


def test_readme_results_writes_through_a_linked_readme(tmp_path):
    """The issue's case: a symbolic link README.md was replaced by a file and its
    target left as it was."""
    nb = results_notebook(tmp_path / "nb.ipynb")
    (tmp_path / "docs").mkdir()
    target = readme(tmp_path / "docs" / "README.md")
    link = _soft(tmp_path / "README.md", target)
    argv = ["--notebook", str(nb), "--readme", str(link)]
    assert readme_results.main([*argv, "--minutes", str(tmp_path / "m.json")]) == 0
    assert link.is_symlink(), "the link was replaced by a file"
    assert "BLEU 9" in target.read_text()


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda t, nb, r: ["--readme", str(nb)], ["--readme", "same file as --note"]),
        (
            lambda t, nb, r: ["--readme", str(_soft(t / "R.md", nb))],
            ["--readme", "same file as --notebook", "(through a symbolic link)"],
        ),
        (
            lambda t, nb, r: ["--readme", str(r), "--minutes", str(r)],
            ["--minutes", "same file as --readme", "an output too"],
        ),
        (
            lambda t, nb, r: ["--readme", str(r), "--minutes", str(nb)],
            ["--minutes", "same file as --notebook"],
        ),
        (lambda t, nb, r: ["--readme", str(t)], ["--readme", "is a folder, not a"]),
        (lambda t, nb, r: ["--readme", str(fifo(t))], ["named pipe (FIFO)"]),
        (lambda t, nb, r: ["--readme", "/dev/null"], ["a character device"]),
        (lambda t, nb, r: ["--notebook", str(t)], ["--notebook", "is a folder"]),
    ],
    ids=[
        "readme-is-the-notebook",
        "readme-links-to-the-notebook",
        "minutes-is-the-readme",
        "minutes-is-the-notebook",
        "readme-folder",
        "readme-fifo",
        "readme-dev-null",
        "notebook-folder",
    ],
)
def test_readme_results_refuses_before_any_work(tmp_path, capsys, make, words):
    nb = results_notebook(tmp_path / "nb.ipynb")
    r = readme(tmp_path / "README.md")
    before = snapshot(nb, r)
    argv = ["--notebook", str(nb), "--readme", str(r), *make(tmp_path, nb, r)]
    assert readme_results.main_guarded(argv) == 2
    line = one_line(capsys, README)
    for word in words:
        assert word in line, line
    assert "no such file" not in line, line
    assert snapshot(nb, r) == before


# ----------------------------------------------------------------- export_model

EXPORT = "python -m tools.export_model"


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda t: t / "nonexistent", "no such folder"),
        (lambda t: _touch(t / "file"), "is a file, not a folder"),
        (_devnull, "is a character device (such as /dev/null), not a folder"),
    ],
    ids=["missing", "file", "dev-null"],
)
def test_export_page_only_needs_a_folder(tmp_path, capsys, make, said):
    """--page-only --out /nonexistent exited 0 ("no model file ...")."""
    out = make(tmp_path)
    assert guarded(export_model.main, EXPORT, ["--page-only", "--out", str(out)]) == 2
    line = one_line(capsys, EXPORT)
    assert f"--out {out}" in line and said in line, line
    assert "translate/" in line, line


def _touch(path: Path) -> Path:
    path.write_text("x")
    return path


def test_export_page_only_never_writes_the_page_over_a_model_file(tmp_path, capsys):
    folder = tmp_path / "translate"
    folder.mkdir()
    model = _touch(folder / "de-en.js")
    _soft(tmp_path / "translate.html", model)
    argv = ["--page-only", "--out", str(tmp_path)]
    assert guarded(export_model.main, EXPORT, argv) == 2
    assert "same file as the model file" in one_line(capsys, EXPORT)
    assert model.read_text() == "x"


@pytest.mark.parametrize("what", [Path("/etc/hostname"), Path("/dev/null")])
def test_export_names_a_ckpt_dir_that_is_no_folder(tmp_path, capsys, what):
    if not what.exists():
        pytest.skip(f"no {what} here")
    argv = ["--ckpt-dir", str(what), "--out", str(tmp_path)]
    assert guarded(export_model.main, EXPORT, argv) == 2
    line = one_line(capsys, EXPORT)
    assert f"--ckpt-dir {what} is a" in line and "not a folder" in line, line


def test_export_records_the_runs_own_preset(lib, pl):
    """--preset cpu on a ci run wrote "preset": "cpu" into the manifest: the
    run's model shape names its preset; another is refused, none is taken."""
    cfg = pl.run_config("ci", vocab="bpe", tie="all", eval_every=20)
    assert export_model.run_preset(lib, cfg) == "ci"
    assert export_model.check_preset(lib, cfg, "run", None) == "ci"
    assert export_model.check_preset(lib, cfg, "run", "ci") == "ci"
    with pytest.raises(export_model.UsageError) as err:
        export_model.check_preset(lib, cfg, "run", "cpu")
    assert "--preset cpu: the run in run trained the ci preset's model" in str(
        err.value
    ) and "give --preset ci" in str(err.value)
    odd = pl.run_config("ci", d_model=16, d_ff=32, h=2)
    assert export_model.check_preset(lib, odd, "run", "cpu") == "cpu"
    with pytest.raises(export_model.UsageError, match="no preset's shape"):
        export_model.check_preset(lib, odd, "run", None)


def test_export_refuses_another_preset_and_its_checkpoints_as_output(
    lib, trained, tmp_path, monkeypatch, capsys
):
    """On a trained ci run (training tier): --preset cpu is refused before any
    snapshot is read; a model file linked to the run's last.pt is never written."""
    run = trained(vocab="bpe", tie="all", eval_every=20).folder
    capsys.readouterr()  # the training's progress
    monkeypatch.setattr("tools.export_model.snapshots_to_average", must_not_run)
    argv = ["--ckpt-dir", str(run), "--preset", "cpu", "--out", str(tmp_path)]
    assert guarded(export_model.main, EXPORT, argv) == 2
    assert "trained the ci preset's model" in one_line(capsys, EXPORT)
    (tmp_path / "translate").mkdir()
    _soft(tmp_path / "translate" / "de-en.js", run / "last.pt")
    before = (run / "last.pt").read_bytes()
    argv = ["--ckpt-dir", str(run), "--out", str(tmp_path)]
    assert guarded(export_model.main, EXPORT, argv) == 2
    line = one_line(capsys, EXPORT)
    assert "same file as --ckpt-dir" in line and "last.pt" in line, line
    assert (run / "last.pt").read_bytes() == before


# ------------------------------------------------------------------ seed_spread


@pytest.mark.parametrize(
    "make, words",
    [
        (
            lambda t: Path("results") / "ci-seed-part3-0.json",
            ["same file as seed 0's results"],
        ),
        (
            lambda t: t / "ckpt" / "ci" / "seeds" / "full-recipe-1" / "last.pt",
            ["same file as seed 1's checkpoint"],
        ),
        (lambda t: t / "spread.ipynb", ["is a notebook"]),
    ],
    ids=["a-seeds-results", "a-seeds-checkpoint", "a-notebook"],
)
def test_seed_spread_never_writes_its_summary_over_a_run(
    lib, tmp_path, monkeypatch, capsys, make, words
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AT_CHECKPOINTS", str(tmp_path / "ckpt"))
    monkeypatch.setattr("tools.train.train_cli", must_not_run)
    out = make(tmp_path)
    argv = ["--preset", "ci", "--seeds", "0", "1", "--out", str(out)]
    assert guarded(seed_spread.main, "python -m tools.seed_spread", argv) == 2
    line = one_line(capsys, "python -m tools.seed_spread")
    for word in words:
        assert word in line, line


# ------------------------------------------------------------------------ train


def _data_link(t: Path) -> Path:
    return _soft(t / "r.json", MULTI30K / "train.de.gz")


def _ckpt_hard_link(t: Path) -> Path:
    (t / "run").mkdir()
    (t / "run" / "last.pt").write_bytes(b"a checkpoint")
    return _hard(t / "r.json", t / "run" / "last.pt")


@pytest.mark.parametrize(
    "make_args, words",
    [
        (lambda t: ["--out", str(t / "r.ipynb")], ["--out", "is a notebook"]),
        (lambda t: ["--out", str(_ckpt_hard_link(t))], ["same file as --ckpt-dir"]),
        pytest.param(
            lambda t: ["--out", str(_data_link(t))],
            ["same file as the Multi30k file", "train.de.gz"],
            marks=[
                pytest.mark.data,
                pytest.mark.skipif(
                    not (MULTI30K / "train.de.gz").is_file(), reason="no Multi30k here"
                ),
            ],
        ),
        (
            lambda t: ["--out", str(_soft(t / "r.json", t / "gone.json"))],
            ["--out", "which does not exist"],
        ),
    ],
    ids=["notebook", "hard-link-to-last.pt", "link-to-the-data", "dangling-link"],
)
def test_train_never_writes_its_results_over_an_input(
    lib, tmp_path, monkeypatch, capsys, make_args, words
):
    forbid(lib, monkeypatch, *NO_DATA)
    extra = make_args(tmp_path)
    args = copy_args(tmp_path / "run", {})
    message = refused([*args, *extra], capsys)
    for word in words:
        assert word in message, (word, message)
    if (MULTI30K / "train.de.gz").is_file():
        assert (MULTI30K / "train.de.gz").stat().st_size > 0


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda t: _touch(t / "hostname"), "is a file; give a folder"),
        (_devnull, "is a character device (such as /dev/null); give a folder"),
        (lambda t: _touch(t / "hostname") / "run", "is a file, not a folder"),
    ],
    ids=["a-file", "dev-null", "under-a-file"],
)
def test_train_blames_a_ckpt_dir_that_is_no_folder_on_itself(
    lib, tmp_path, monkeypatch, capsys, make, said
):
    """--ckpt-dir /etc/hostname was blamed on --out (whose default lies in it)."""
    forbid(lib, monkeypatch, *NO_DATA)
    ckpt = make(tmp_path)
    message = refused([*CLI_TINY, "--ckpt-dir", str(ckpt)], capsys)
    assert message.startswith(f"--ckpt-dir {ckpt}"), message
    assert "--out" not in message and said in message, message


# -------------------------------------------------------------------- startup

STARTUP = "python -m tools.startup"


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda t: t / "missing" / "s.json", ["does not exist", "mkdir -p"]),
        (lambda t: ROOT / "tools" / "bench.py", ["same file as a tool"]),
        (lambda t: ROOT / "annotated_transformer.ipynb", ["is a notebook"]),
        (fifo, ["named pipe (FIFO)", "not a regular file"]),
        (lambda t: _soft(t / "s.json", t / "gone" / "s.json"), ["does not exist"]),
    ],
    ids=["missing-folder", "a-tool", "the-notebook", "fifo", "dangling-link"],
)
def test_startup_checks_json_before_the_work(
    tmp_path, monkeypatch, capsys, make, words
):
    """--json into a missing folder failed after every probe had run."""
    monkeypatch.setattr("tools.startup.probe", must_not_run)
    path = make(tmp_path)
    before = snapshot(ROOT / "tools" / "bench.py")
    assert guarded(startup.main, STARTUP, ["--json", str(path)]) == 2
    line = one_line(capsys, STARTUP)
    assert f"--json {path}" in line, line
    for word in words:
        assert word in line, line
    assert snapshot(ROOT / "tools" / "bench.py") == before


def test_startup_writes_json_through_a_link(tmp_path, monkeypatch):
    monkeypatch.setattr("tools.startup.tools", lambda: ["tools.word_count"])
    monkeypatch.setattr(
        "tools.startup.probe", lambda n: {"case": n, "seconds": 0.1, "loaded": []}
    )
    target = _touch(tmp_path / "real.json")
    link = _soft(tmp_path / "s.json", target)
    assert startup.main(["--only-tools", "--json", str(link)]) == 0
    assert link.is_symlink() and json.loads(target.read_text())[0]["seconds"] == 0.1


# ------------------------------------------------------------------ js_golden

GOLDEN = "python -m tools.js_golden"


def test_js_golden_refuses_an_input_or_a_file_as_its_folder(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr("tools.js_golden.golden", must_not_run)
    nb = ROOT / "annotated_transformer.md"
    before = snapshot(nb)
    _soft(tmp_path / "cases.json", nb)
    assert guarded(js_golden.main, GOLDEN, ["--out", str(tmp_path)]) == 2
    line = one_line(capsys, GOLDEN)
    assert "cases.json is the same file as the notebook" in line, line
    assert snapshot(nb) == before
    file = _touch(tmp_path / "file")
    assert guarded(js_golden.main, GOLDEN, ["--out", str(file)]) == 2
    assert "is a file, not a folder" in one_line(capsys, GOLDEN)


# ---------------------------------------------------------------------- bench


@pytest.mark.parametrize(
    "path, words",
    [
        (ROOT / "annotated_transformer.md", ["same file as the notebook"]),
        (ROOT / "annotated_transformer.ipynb", ["is a notebook"]),
    ],
    ids=["the-notebook-source", "the-notebook"],
)
def test_bench_never_writes_its_figures_over_the_notebook(
    lib, monkeypatch, capsys, path, words
):
    monkeypatch.setattr("tools.bench.build", must_not_run)
    before = snapshot(path)
    argv = ["--preset", "ci", "--json", str(path)]
    assert guarded(bench.main, bench.PROG, argv) == 2
    line = one_line(capsys, bench.PROG)
    for word in words:
        assert word in line, line
    assert snapshot(path) == before


# ------------------------------------------------------------------- nbexport


def test_nbexport_never_writes_the_module_over_the_notebook(tmp_path):
    import nbexport

    md = tmp_path / "n.md"
    md.write_text("# T\n\n```python\nx = 1\n```\n")
    before = md.read_bytes()
    with pytest.raises(PathError, match="same file as the notebook"):
        nbexport.export(md, md)
    with pytest.raises(PathError, match="same file as the notebook"):
        nbexport.export(md, _soft(tmp_path / "lib.py", md))
    assert md.read_bytes() == before
    target = _touch(tmp_path / "real.py")
    link = _soft(tmp_path / "module.py", target)
    assert nbexport.export(md, link) == link
    assert link.is_symlink() and "x = 1" in target.read_text()


def test_nbexport_check_says_missing_not_stale(tmp_path, monkeypatch, capsys):
    import nbexport

    missing = tmp_path / "lib.py"
    monkeypatch.setattr(nbexport, "EXPORT", missing)
    monkeypatch.setattr(sys, "argv", ["nbexport.py", "--check"])
    assert nbexport.main() == 1
    assert (
        capsys.readouterr().err
        == f"{missing.name} is missing: run `python nbexport.py` (make export)\n"
    )


# ------------------------------------------------------------------ word_count


@pytest.mark.parametrize(
    "make, said",
    [(lambda t: t, "is a folder"), (fifo, "named pipe"), (_devnull, "device")],
    ids=["folder", "fifo", "dev-null"],
)
def test_word_count_says_what_its_input_is(tmp_path, make, said):
    path = make(tmp_path)
    with pytest.raises(PathError) as err:
        word_count.main(["--notebook", str(path)])
    assert said in str(err.value) and "no such file" not in str(err.value)


# ------------------------------------------------------------- AT_CHECKPOINTS


@pytest.mark.parametrize("value", [" ", "\t", " checkpoints", "drive/ckpt "])
def test_at_checkpoints_with_blanks_is_refused(tmp_path, monkeypatch, value):
    """AT_CHECKPOINTS=' ' made a folder named ' '."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        runtime.checkpoint_root("ci", {"AT_CHECKPOINTS": value})
    assert f"AT_CHECKPOINTS={value!r}" in str(err.value)
    assert list(tmp_path.iterdir()) == []
    assert runtime.checkpoint_root("ci", {"AT_CHECKPOINTS": ""}) == Path(
        "checkpoints/ci"
    )


def test_at_checkpoints_blank_stops_the_training_program(
    lib, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AT_CHECKPOINTS", " ")
    forbid(lib, monkeypatch, *NO_DATA)
    message = refused(["--preset", "ci", "--out", str(tmp_path / "r.json")], capsys)
    assert "AT_CHECKPOINTS=' ' is blank" in message, message
    assert not (tmp_path / " ").exists()


# --------------------------------------------------------------------- Makefile


@pytest.mark.parametrize(
    "preset",
    [
        "a'b",
        'x" ; touch {mark} ; "',
        "$(shell touch {mark})",
        "$$(touch {mark})",
        "`touch {mark}`",
        "x;touch {mark}",
        "tpu",
    ],
    ids=[
        "quote",
        "double-quote",
        "make-shell",
        "dollar-paren",
        "backticks",
        "semi",
        "bogus",
    ],
)
def test_make_refuses_a_preset_that_is_no_preset_and_runs_nothing_in_it(
    tmp_path, preset
):
    """PRESET was pasted into a shell line unquoted: a quote broke the line and a
    $(...) ran. Now it is checked against the preset names before any work and
    reaches the programs only through the environment."""
    mark = tmp_path / "ran"
    value = preset.format(mark=mark)
    done = subprocess.run(
        ["make", "-s", "-o", ".venv/.installed", "check-preset", f"PRESET={value}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0, done
    assert "is not a preset; use one of ['ci', 'cpu', 'gpu']" in done.stderr, done
    assert "syntax error" not in done.stderr and "unexpected EOF" not in done.stderr
    assert not mark.exists(), "a command in PRESET ran"
    plan = subprocess.run(
        ["make", "-n", "-o", ".venv/.installed", "train", f"PRESET={value}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert '-m tools.train --preset "$AT_PRESET"' in plan.stdout, plan
    assert not mark.exists(), "a command in PRESET ran"


def test_make_passes_a_good_preset():
    done = subprocess.run(
        ["make", "-s", "-o", ".venv/.installed", "check-preset", "PRESET=ci"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
