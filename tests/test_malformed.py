"""issue 69, point 4: every malformed file named. The project's JSON records
(runs/cell-minutes.json, runs/seed-spread-<preset>.json, a seed run's results), the
notebooks the tools read (`[]`, `{"cells": 5}`, cut short, a cell without its
source) and the notebook's library cells (a syntax error) end in one message that
names the file, what is wrong and where, and what to do: never a raw
JSONDecodeError, KeyError or TypeError, nor "unexpected; report it"; nbexport.py
exits 2 naming the `.md` line. Every case damages a temporary copy, never a
committed file."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nbexport
from atkit import config, records, seeds
from tools import errors, readme_results, render_page, word_count

ROOT = Path(__file__).resolve().parents[1]
MINUTES = ROOT / "runs" / "cell-minutes.json"
SPREAD = ROOT / "runs" / "seed-spread-cpu.json"
IPYNB = ROOT / "exercises.ipynb"  # a small executed notebook
MD = ROOT / "annotated_transformer.md"


def refused(err: BaseException) -> str:
    """The `error:` text a tool prints for `err`; it must be a refusal (status 2)
    and not the "unexpected" of a bug."""
    message, status = errors.advice(err)
    assert status == 2 and "report it" not in message, message
    return message


# ------------------------------------------------------------ damaged JSON text


def damaged(text: str) -> dict[str, tuple[bytes, str]]:
    """Ways a JSON record gets damaged: name -> (the file's bytes, words that the
    message must hold)."""
    lines = text.splitlines(keepends=True)
    middle = len(lines) // 2

    def number(word: str) -> bytes:  # the first number with a fraction, as `word`
        return re.sub(r": \d+\.\d+", f": {word}", text, count=1).encode()

    conflict = [*lines[:middle], "<<<<<<< HEAD\n", lines[middle], "=======\n"]
    conflict += [lines[middle], ">>>>>>> theirs\n", *lines[middle + 1 :]]
    return {
        "empty": (b"", "is empty"),
        "blank": (b"  \n\n", "is empty"),
        "conflict": (
            "".join(conflict).encode(),
            f"git conflict marker at line {middle + 1}",
        ),
        "cut short": (text[: len(text) // 2].encode(), "is cut short"),
        "not utf-8": (text.encode() + b"\xff\n", "is not UTF-8 text"),
        "trailing text": ((text + "xyz\n").encode(), "is not valid JSON (line"),
        "a second object": ((text + text).encode(), "is not valid JSON (line"),
        "NaN": (number("NaN"), "NaN is no JSON number"),
        "Infinity": (number("-Infinity"), "-Infinity is no JSON number"),
        "1e999": (number("1e999"), "1e999 is too large for a number"),
        "a list": (b"[]", "is wrong at its top level: [] is not of type 'object'"),
        "null": (b"null", "is wrong at its top level"),
        "a number": (b"5\n", "is wrong at its top level"),
    }


JSON_DAMAGE = list(damaged("{}\n"))


def check_named(err: BaseException, name: str, words: str, fix: str) -> None:
    message = refused(err)
    assert message.startswith(name), message
    assert words in message, (words, message)
    assert fix in message, (fix, message)
    assert "Traceback" not in message and "JSONDecodeError" not in message


@pytest.mark.parametrize("damage", JSON_DAMAGE)
def test_a_damaged_cell_minutes_record_is_named(tmp_path, monkeypatch, damage):
    """runs/cell-minutes.json, which every long cell of the notebook reads
    (expected_time) and `make readme` rewrites."""
    path = tmp_path / "runs" / "cell-minutes.json"
    path.parent.mkdir()
    data, words = damaged(MINUTES.read_text(encoding="utf-8"))[damage]
    path.write_bytes(data)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(records.MalformedFileError) as err:
        config.expected_time("cpu", "part3", path)
    check_named(err.value, "runs/cell-minutes.json ", words, "make readme")


@pytest.mark.parametrize("damage", JSON_DAMAGE)
def test_a_damaged_seed_spread_is_named(tmp_path, monkeypatch, damage):
    """runs/seed-spread-<preset>.json, which Part 4's table reads."""
    monkeypatch.setattr(seeds, "RUNS", tmp_path)
    data, words = damaged(SPREAD.read_text(encoding="utf-8"))[damage]
    (tmp_path / "seed-spread-cpu.json").write_bytes(data)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(records.MalformedFileError) as err:
        seeds.load_spread("cpu", {}, object, "fp32")
    fix = "python -m tools.seed_spread --preset cpu"
    check_named(err.value, "seed-spread-cpu.json ", words, fix)


# --------------------------------------------------- wrong types, missing keys


def edited(path: Path, change) -> str:
    record = json.loads(path.read_text(encoding="utf-8"))
    change(record)
    return json.dumps(record, indent=2)


def _set(keys, value):
    def change(record):
        for key in keys[:-1]:
            record = record[key]
        record[keys[-1]] = value

    return change


def _drop(keys):
    def change(record):
        for key in keys[:-1]:
            record = record[key]
        del record[keys[-1]]

    return change


MINUTES_WRONG = {
    "a string for minutes": (
        _set(["cpu", "minutes", "part3"], "23.3"),
        "at cpu.minutes.part3: '23.3' is not of type 'number'",
    ),
    "true for minutes": (_set(["cpu", "minutes", "part3"], True), "cpu.minutes.part3"),
    "negative minutes": (
        _set(["cpu", "minutes", "part4"], -1),
        "at cpu.minutes.part4: -1 is less than the minimum of 0",
    ),
    "minutes a list": (_set(["cpu", "minutes"], [23.3]), "at cpu.minutes"),
    "a preset a number": (_set(["cpu"], 5), "at cpu: 5 is not of type 'object'"),
    "no machine": (
        _drop(["cpu", "machine"]),
        "at cpu: 'machine' is a required property",
    ),
    "no minutes": (_drop(["cpu", "minutes"]), "'minutes' is a required property"),
    "machine a number": (_set(["cpu", "machine"], 2), "at cpu.machine"),
}


@pytest.mark.parametrize("case", list(MINUTES_WRONG))
def test_wrong_types_in_the_cell_minutes_record_are_named(tmp_path, case):
    change, words = MINUTES_WRONG[case]
    path = tmp_path / "cell-minutes.json"
    path.write_text(edited(MINUTES, change))
    with pytest.raises(records.MalformedFileError) as err:
        config.expected_time("cpu", "part3", path)
    check_named(err.value, f"{path} is wrong", words, "make readme")


SPREAD_WRONG = {
    "a range that is a string": (
        _set(["models", "part3", "bleu_test_2016_flickr", "range"], "0.64"),
        "at models.part3.bleu_test_2016_flickr.range: '0.64' is not of type",
    ),
    "values not a list": (
        _set(["models", "part3", "bleu_val", "values"], 37.9),
        "at models.part3.bleu_val.values",
    ),
    "a value that is null": (
        _set(["models", "part3", "bleu_val", "values"], [37.9, None, 37.1]),
        "at models.part3.bleu_val.values[1]: None is not of type 'number'",
    ),
    "no models": (_drop(["models"]), "'models' is a required property"),
    "models a list": (_set(["models"], []), "at models"),
    "no config": (
        _drop(["models", "full recipe", "config"]),
        "at models[\"full recipe\"]: 'config' is a required property",
    ),
    "a config without its model": (
        _drop(["models", "part3", "config", "model"]),
        "at models.part3.config: 'model' is a required property",
    ),
    "one seed": (_set(["models", "part3", "seeds"], [0]), "at models.part3.seeds"),
    "no precision": (_drop(["precision"]), "'precision' is a required property"),
    "the command a number": (_set(["command"], 5), "at command"),
    "no test score": (
        _drop(["models", "part3", "bleu_test_2016_flickr"]),
        "at models.part3: 'bleu_test_2016_flickr' is a required property",
    ),
    "no torch": (_drop(["torch"]), "'torch' is a required property"),
    "a validation score that is a string": (
        _set(["models", "part3", "bleu_val"], "37.9"),
        "at models.part3.bleu_val: '37.9' is not of type 'object'",
    ),
}


@pytest.mark.parametrize("case", list(SPREAD_WRONG))
def test_wrong_types_in_the_seed_spread_are_named(tmp_path, monkeypatch, case):
    """Part 4's table reads `models[...]["bleu_test_2016_flickr"]["range"]` and
    the configs: a file with anything else there is named, not a KeyError."""
    change, words = SPREAD_WRONG[case]
    monkeypatch.setattr(seeds, "RUNS", tmp_path)
    path = tmp_path / "seed-spread-cpu.json"
    path.write_text(edited(SPREAD, change))
    with pytest.raises(records.MalformedFileError) as err:
        seeds.load_spread("cpu", {}, object, "fp32")
    check_named(err.value, f"{path} is wrong", words, "tools.seed_spread")


def test_the_committed_records_pass_their_own_checks():
    """The schemas describe the committed files (and the notebook reads them)."""
    assert config.committed_minutes()["cpu"]["minutes"]["part3"] > 0
    spread = seeds.read_spread(SPREAD, "cpu")
    assert set(spread["models"]) == {"part3", "full recipe"}
    assert records.read_notebook(ROOT / "annotated_transformer.ipynb").cells


def test_readme_results_names_a_damaged_cell_minutes_record(tmp_path, capsys):
    """`make readme` reads the record before it merges the run into it: a damaged
    one is one `error:` line (exit 2), and neither file is written."""
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    minutes = tmp_path / "cell-minutes.json"
    data, _ = damaged(MINUTES.read_text(encoding="utf-8"))["conflict"]
    minutes.write_bytes(data)
    argv = ["--notebook", str(ROOT / "annotated_transformer.ipynb")]
    argv += ["--readme", str(readme), "--minutes", str(minutes)]
    assert readme_results.main_guarded(argv) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "Traceback" not in err, err
    assert f"{minutes} holds a git conflict marker" in err, err
    assert "resolve the conflict" in err and "make readme" in err, err
    assert minutes.read_bytes() == data
    assert readme.read_bytes() == (ROOT / "README.md").read_bytes()


# ------------------------------------------------------------- git's advice


def git(folder: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=folder,
        check=True,
        capture_output=True,
    )


def test_a_committed_record_that_was_damaged_is_restored_with_git(
    tmp_path, monkeypatch
):
    """Where git tracks the file and it differs from the commit, the message says
    the `git checkout` that restores it (with HEAD: it works in a merge too); a
    file as committed, or one git does not track, gets only the caller's advice."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    (repo / "runs").mkdir(parents=True)
    shutil.copy(MINUTES, repo / "runs" / "cell-minutes.json")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "record")
    path = repo / "runs" / "cell-minutes.json"
    path.write_text(edited(MINUTES, _set(["cpu", "minutes", "part3"], "x")))
    monkeypatch.chdir(repo)
    with pytest.raises(records.MalformedFileError) as err:
        config.committed_minutes(path)
    restore = "git checkout HEAD -- runs/cell-minutes.json"
    assert f"restore the committed one with `{restore}`, or write it again" in str(
        err.value
    )
    monkeypatch.chdir(tmp_path)  # elsewhere: the command says where to run it
    with pytest.raises(records.MalformedFileError) as err:
        config.committed_minutes(path)
    restore = f"git -C {repo} checkout HEAD -- runs/cell-minutes.json"
    assert restore in str(err.value)
    monkeypatch.chdir(repo / "runs")  # below the root: a path from here
    with pytest.raises(records.MalformedFileError) as err:
        config.committed_minutes(path)
    assert "`git checkout HEAD -- cell-minutes.json`" in str(err.value)
    subprocess.run(["git", "checkout", "HEAD", "--", "runs"], cwd=repo, check=True)
    assert config.committed_minutes(path) == config.committed_minutes()  # restored
    git(repo, "commit", "-q", "--allow-empty", "-m", "x")
    (repo / "other.json").write_text("[")  # untracked: no git advice
    with pytest.raises(records.MalformedFileError) as err:
        records.read_json(repo / "other.json", {}, fix="give another")
    assert "git" not in str(err.value) and str(err.value).endswith("; give another")


# ------------------------------------------------------------------ notebooks


def _nb(cells, **top) -> str:
    return json.dumps(
        {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5, **top}
    )


def _code(**fields) -> dict:
    cell = {"cell_type": "code", "metadata": {}, "source": "x = 1"}
    cell |= {"execution_count": 1, "outputs": []}
    return {**cell, **fields}


NOTEBOOK_TEXT = IPYNB.read_text(encoding="utf-8")
NOTEBOOKS = {  # name -> (the .ipynb's text, words the message must hold)
    "a list": ("[]", "it holds a list where a notebook is an object"),
    "null": ("null", "it holds null"),
    "a string": ('"cells"', "it holds a string"),
    "cells a number": ('{"cells": 5}', "it is wrong at its top level"),
    "an empty object": ("{}", "it is wrong at its top level"),
    "empty": ("", "it is empty"),
    "cut short": (NOTEBOOK_TEXT[: len(NOTEBOOK_TEXT) // 3], "it is cut short"),
    "conflict": (
        "<<<<<<< HEAD\n" + NOTEBOOK_TEXT + "=======\n>>>>>>> b\n",
        "git conflict marker at line 1",
    ),
    "format 3": ('{"nbformat": 3, "worksheets": []}', "format version 3"),
    "format '4'": (
        '{"nbformat": "4", "cells": []}',
        "format version '4', and this project reads version 4",
    ),
    "a cell that is a number": (_nb([5]), "at cells[0]: 5 is not of type 'object'"),
    "a cell without its source": (
        _nb([{"cell_type": "markdown", "metadata": {}}]),
        "at cells[0]: 'source' is a required property",
    ),
    "a source that is a number": (
        _nb([_code(source=5)]),
        "at cells[0].source: 5 is not of type 'string' or 'array'",
    ),
    "tags that are a number": (
        _nb([_code(metadata={"tags": 5})]),
        "at cells[0].metadata.tags: 5 is not of type 'array'",
    ),
    "outputs that are a number": (
        _nb([_code(outputs=5)]),
        "at cells[0].outputs: 5 is not of type 'array'",
    ),
    "a stream whose text is a number": (
        _nb([_code(outputs=[{"output_type": "stream", "name": "stdout", "text": 5}])]),
        "at cells[0].outputs[0].text: 5 is not of type 'string' or 'array'",
    ),
    "an unknown cell type": (
        _nb([{"cell_type": "slide", "metadata": {}, "source": ""}]),
        "at cells[0]: cell_type 'slide' is none of 'raw', 'markdown', 'code'",
    ),
    "an unknown output type": (
        _nb([_code(outputs=[{"output_type": "picture"}])]),
        "at cells[0].outputs[0]: output_type 'picture' is none of",
    ),
    "metadata a number": (_nb([], metadata=5), "at metadata: 5 is not of type"),
}


@pytest.mark.parametrize("case", list(NOTEBOOKS))
def test_render_page_names_a_malformed_notebook(tmp_path, case):
    text, words = NOTEBOOKS[case]
    path = tmp_path / "nb.ipynb"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(render_page.PageError) as err:
        render_page.load_notebook(path)
    message = str(err.value)
    assert message.startswith(f"{path} cannot be read as a notebook: "), message
    assert words in message and "give an executed .ipynb" in message, message


@pytest.mark.parametrize("case", list(NOTEBOOKS))
def test_readme_results_names_a_malformed_notebook(tmp_path, capsys, case):
    text, words = NOTEBOOKS[case]
    path = tmp_path / "nb.ipynb"
    path.write_text(text, encoding="utf-8")
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    argv = ["--notebook", str(path), "--readme", str(readme), "--check"]
    assert readme_results.main_guarded(argv) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "report it" not in err, err
    assert f"--notebook {path} cannot be read as a notebook: " in err, err
    assert words in err and "give the executed annotated_transformer.ipynb" in err


@pytest.mark.parametrize("case", list(NOTEBOOKS))
def test_word_count_names_a_malformed_notebook(tmp_path, capsys, case):
    text, words = NOTEBOOKS[case]
    path = tmp_path / "nb.ipynb"
    path.write_text(text, encoding="utf-8")
    run = lambda: word_count.main(["--notebook", str(path)])  # noqa: E731
    assert errors.run_main(run, "word_count") == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "report it" not in err, err
    assert f"--notebook {path} cannot be read as a notebook: " in err and words in err


def test_the_notebooks_read_as_before():
    """The checked reader gives what nbformat gave: every cell, sources joined."""
    import nbformat

    for path in (IPYNB, ROOT / "annotated_transformer.ipynb"):
        assert records.read_notebook(path) == nbformat.read(path, as_version=4)
    assert word_count.count(IPYNB).main_words > 0


def _facts_notebook(path: Path, facts, stamps=None) -> Path:
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from atkit.runtime import RUN_MIME

    shown = new_output("display_data", data={"text/plain": "rt", RUN_MIME: facts})
    cells = [new_code_cell("rt", outputs=[shown])]
    timed = new_code_cell('print(expected_time(PRESET, "part3"))')
    nb = new_notebook(cells=[*cells, timed])  # checked here: the stamps come after
    nb.cells[1].metadata["execution"] = stamps or {}
    path.write_text(json.dumps(nb))
    return path


@pytest.mark.parametrize(
    "facts, stamps, words",
    [
        ({"preset": 5}, None, "run+json is wrong at preset: 5 is not of type"),
        ({"machine": "m"}, None, "'preset' is a required property"),
        (["ci"], None, "is wrong at its top level"),
        (
            {"preset": "ci"},
            {"iopub.execute_input": "noon", "shell.execute_reply": "later"},
            "execution timestamps",
        ),
        (
            {"preset": "ci"},
            {"iopub.execute_input": "2024-01-01T00:00:00Z", "shell.execute_reply": 5},
            'metadata.execution["shell.execute_reply"]: 5 is not of type',
        ),
    ],
)
def test_wrong_run_facts_in_a_notebook_are_named(tmp_path, facts, stamps, words):
    """What `make readme` reads inside an executed notebook: the Setup cell's run
    facts and nbconvert's timestamps; another type there names the notebook (the
    schema names a timestamp that is no string, the tool one that is no time)."""
    path = _facts_notebook(tmp_path / "nb.ipynb", facts, stamps)
    with pytest.raises((readme_results.UsageError, records.MalformedFileError)) as err:
        nb = readme_results.read_notebook(path)
        readme_results.minutes_record(nb, {}, f"--notebook {path}")
    message = refused(err.value)
    assert message.startswith(f"--notebook {path}") and words in message, message
    assert re.search(r"(run the notebook again|give the executed .*)$", message)


# -------------------------------------------------------- the library cells


def _library_line() -> int:
    """A line inside the first library cell of the notebook (an .md line)."""
    return nbexport.library_blocks(MD)[0].line + 1


def _broken_notebook(tmp_path: Path, insert: str, at: int) -> Path:
    lines = MD.read_text(encoding="utf-8").splitlines(keepends=True)
    md = tmp_path / "annotated_transformer.md"
    md.write_text("".join([*lines[: at - 1], insert, *lines[at - 1 :]]))
    return md


LIBRARY_DAMAGE = {
    "a syntax error": ("def broken(:\n", "invalid syntax", "`def broken(:`"),
    "an indented line": ("      y = 1\n", "unexpected indent", "`y = 1`"),
    "an unclosed bracket": ("z = (1,\n", "'(' was never closed", "`z = (1,`"),
    "a return outside a function": ("return 5\n", "'return' outside function", ""),
    "a conflict marker": (
        "<<<<<<< HEAD\n",
        "invalid syntax",
        "`<<<<<<< HEAD` (a git conflict marker: resolve the conflict)",
    ),
}


@pytest.mark.parametrize("case", list(LIBRARY_DAMAGE))
def test_nbexport_refuses_a_library_cell_that_does_not_compile(
    tmp_path, monkeypatch, capsys, case
):
    """nbexport.py exits 2 naming the .md line (it exited 0 and wrote the broken
    module); every reader of the library cells (export, registry_names) says the
    same, and the tools print it as a refusal."""
    insert, why, shown = LIBRARY_DAMAGE[case]
    at = _library_line()
    block = nbexport.library_blocks(MD)[0]
    insert = " " * (len(block.source) - len(block.source.lstrip())) + insert
    md = _broken_notebook(tmp_path, insert, at)
    out = tmp_path / "build" / "lib.py"
    monkeypatch.setattr(nbexport, "NOTEBOOK", md)
    monkeypatch.setattr(nbexport, "EXPORT", out)
    for argv in ([], ["--check"]):
        assert nbexport.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"nbexport.py: error: annotated_transformer.md:{at}: ")
        assert f"does not compile ({why}" in err and shown in err, err
        assert "fix that line" in err
    assert not out.exists()
    export = lambda p: nbexport.export(p, out)  # noqa: E731
    for read in (export, lambda p: nbexport.registry_names("SEARCHES", p)):
        with pytest.raises(records.MalformedFileError) as err:
            read(md)
        assert refused(err.value).startswith(f"annotated_transformer.md:{at}: ")


def test_nbexport_names_a_notebook_it_cannot_split_into_cells(
    tmp_path, monkeypatch, capsys
):
    """A fence left open, a file that is not UTF-8: named, exit 2 (a RuntimeError
    and a UnicodeDecodeError before)."""
    monkeypatch.setattr(nbexport, "EXPORT", tmp_path / "lib.py")
    md = _broken_notebook(tmp_path, "```\n", _library_line())
    monkeypatch.setattr(nbexport, "NOTEBOOK", md)
    assert nbexport.main([]) == 2
    err = capsys.readouterr().err
    assert "annotated_transformer.md: " in err and "```python fences" in err, err
    md.write_bytes(MD.read_bytes() + b"\n\xe9\n")
    assert nbexport.main([]) == 2
    err = capsys.readouterr().err
    assert f"{md} is not UTF-8 text (byte" in err and "save the notebook" in err, err


def test_a_registry_key_that_is_not_written_out_is_named(tmp_path):
    text = MD.read_text(encoding="utf-8")
    assert 'SEARCHES["beam"] = ' in text
    md = tmp_path / "annotated_transformer.md"
    md.write_text(text.replace('SEARCHES["beam"] = ', "SEARCHES[BEAM] = ", 1))
    line = text[: text.index('SEARCHES["beam"] = ')].count("\n") + 1
    with pytest.raises(records.MalformedFileError) as err:
        nbexport.registry_names("SEARCHES", md)
    message = refused(err.value)
    assert message.startswith(f"annotated_transformer.md:{line}: "), message
    assert "`BEAM`" in message and "as a string" in message


def test_a_demo_cell_is_not_compiled(tmp_path):
    """A cell tagged demo is not library code: nbexport leaves it to Jupyter."""
    text = MD.read_text(encoding="utf-8")
    md = tmp_path / "annotated_transformer.md"
    md.write_text(
        text.replace('```python tags=["demo"]\n', '```python tags=["demo"]\nx = (\n', 1)
    )
    assert nbexport.library_cells(md) == nbexport.library_cells(MD)


def test_nbexport_exits_2_as_a_program(tmp_path):
    """`python nbexport.py` itself, on a notebook with a syntax error."""
    at = _library_line()
    _broken_notebook(tmp_path, "def broken(:\n", at)
    shutil.copy(ROOT / "nbexport.py", tmp_path / "nbexport.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "nbexport.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc
    assert proc.stderr.startswith(f"nbexport.py: error: annotated_transformer.md:{at}:")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "build" / "annotated_transformer_lib.py").exists()


# ------------------------------------------------- the files the tools keep


def test_a_damaged_katex_install_is_installed_again(tmp_path, monkeypatch):
    """build/node_modules/katex/package.json cut short (an install stopped): the
    page renderer removes that folder and installs again (a JSONDecodeError
    before, and npm alone leaves such a folder as it is)."""
    katex = tmp_path / "node_modules" / "katex"
    katex.mkdir(parents=True)
    (katex / "package.json").write_text('{"name": "katex", "vers')
    (katex / "stale.js").write_text("")
    monkeypatch.setattr(render_page.shutil, "which", lambda name: None)
    with pytest.raises(render_page.PageError, match="npm is needed"):
        render_page.ensure_katex(katex)

    def npm(cmd, **kwargs):
        assert not katex.exists(), "the damaged install is removed first"
        katex.mkdir()
        version = {"version": render_page.KATEX_VERSION}
        (katex / "package.json").write_text(json.dumps(version))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(render_page.shutil, "which", lambda name: "/usr/bin/npm")
    monkeypatch.setattr(render_page.subprocess, "run", npm)
    assert render_page.ensure_katex(katex) == katex
    assert not (katex / "stale.js").exists()


@pytest.mark.parametrize(
    "text", ["[]", '{"preset": "ci"}', '{"preset": "ci", "history": 5}', "{", ""]
)
def test_a_seed_runs_damaged_results_file_is_trained_again(tmp_path, text):
    """tools.seed_spread reuses a seed's finished run from its results file; one
    that is no such record is not reused (it crashed on `[]` before)."""
    from tools import seed_spread

    res = tmp_path / "ci-seed-part3-0.json"
    res.write_text(text)
    assert seed_spread.finished(res, "ci", 0, []) is None


@pytest.mark.parametrize("damage", ["conflict", "a list", "NaN"])
def test_seed_spread_refuses_a_damaged_summary_before_training(
    lib, tmp_path, monkeypatch, capsys, damage
):
    """The summary it would extend is read first: a damaged one is named, with
    --rerun as the way to measure anew, before anything trains."""
    from conftest import NO_DATA, forbid
    from tools import seed_spread

    forbid(lib, monkeypatch, *NO_DATA)
    out = tmp_path / "seed-spread-ci.json"
    data, words = damaged(SPREAD.read_text(encoding="utf-8"))[damage]
    out.write_bytes(data)
    argv = ["--preset", "ci", "--seeds", "0", "1", "--out", str(out)]
    status = errors.run_main(lambda: seed_spread.main(argv), "seeds")
    err = capsys.readouterr().err
    assert status == 2 and err.count("error:") == 1, err
    assert f"{out} " in err and words in err and "give --rerun" in err, err
    assert out.read_bytes() == data
