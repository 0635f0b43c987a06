"""Reading the project's own files: its JSON records (`runs/cell-minutes.json`,
`runs/seed-spread-<preset>.json`), its notebooks (`.ipynb`) and, for nbexport.py,
the notebook's library cells.

A file that cannot be read as what it should be ends in one `MalformedFileError`
whose message names the file, says what is wrong and where (not UTF-8 text, empty,
cut short, a git conflict marker, not JSON, NaN, a value of the wrong type, a key
that is missing) and what to do: restore the committed file with `git checkout`
where git tracks it, and what the caller adds (`fix`). Never a raw JSONDecodeError,
KeyError or TypeError from deeper down.

    minutes = read_json(path, MINUTES_SCHEMA, fix="write it again with `make readme`")
    nb = read_notebook(path, name=f"--notebook {path}", fix="give the executed one")

A record's shape is a JSON Schema, checked by the jsonschema package; a notebook's is
the schema nbformat ships for its format version. Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from atkit.processes import end_with_parent

# A line that git writes into a file it could not merge.
CONFLICT = re.compile(r"^(<{7}|={7}|>{7})(?: |$)", re.M)
# Long values in a message (a whole cell where a string belongs) are cut to this.
SHOWN = 160
CONFLICT_WORDS = "git conflict marker"


class MalformedFileError(ValueError):
    """A file of the project that cannot be read as what it should be; the message
    names the file, what is wrong and what to do."""


# ------------------------------------------------------------------ the advice


def shown(path: Path) -> str:
    """`path` as a person would type it here: relative to the current folder when it
    lies below it."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(
            ["git", *args],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            preexec_fn=end_with_parent(),  # a git that outlives us is an orphan
        )
    except (OSError, subprocess.SubprocessError):
        return None


def restore_hint(path: Path) -> str | None:
    """'restore the committed one with `git checkout HEAD -- <path>`' when git
    tracks `path` and it differs from the commit (None otherwise: a file git does not
    track, one as committed, no git). `HEAD` makes it work in a merge too; from
    outside the repository the command says where to run it (`git -C <root>`)."""
    path = Path(path).resolve()
    status = _git(path.parent, "status", "--porcelain", "--", path.name)
    state = status.stdout[:2] if status and status.returncode == 0 else ""
    if not state.strip() or state in ("??", "!!", "A "):
        return None
    top = _git(path.parent, "rev-parse", "--show-toplevel")
    if not top or top.returncode != 0:
        return None
    root, here = Path(top.stdout.strip()).resolve(), Path.cwd().resolve()
    if here == root or root in here.parents:
        command = f"git checkout HEAD -- {os.path.relpath(path, here)}"
    else:
        command = f"git -C {root} checkout HEAD -- {path.relative_to(root)}"
    return f"restore the committed one with `{command}`"


def refuse(path: Path, name: str | None, problem: str, fix: str | None = None):
    """The MalformedFileError for `path` (shown as `name`): '<name> <problem>;
    <restore it with git, or `fix`>'."""
    advice = [a for a in (restore_hint(path), fix) if a]
    if CONFLICT_WORDS in problem:
        advice.insert(0, "resolve the conflict")
    what = ", or ".join(advice) if advice else "replace it with a good copy"
    return MalformedFileError(f"{name or shown(path)} {problem}; {what}")


def _cut(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


# ----------------------------------------------------------------- text, JSON


def read_text(path: Path, name: str | None = None, fix: str | None = None) -> str:
    """The file's text (UTF-8, a byte-order mark allowed); a file that is not UTF-8
    text is refused naming the first byte that is not. A missing file raises the
    system's FileNotFoundError, which every caller names itself."""
    path = Path(path)
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise refuse(
            path, name, f"is not UTF-8 text (byte {err.start} cannot be decoded)", fix
        ) from None


class _NotJson(ValueError):
    def __init__(self, text: str, token: str, why: str):
        at = text.find(token)
        line = text.count("\n", 0, at) + 1 if at >= 0 else None
        where = f"line {line}: " if line else ""
        super().__init__(f"{where}{token} {why}")


def json_problem(text: str) -> tuple[Any, str | None]:
    """(the JSON value of `text`, None) or (None, what is wrong with it, in words)."""
    if not text.strip():
        return None, "is empty"
    marker = CONFLICT.search(text)
    if marker:
        line = text.count("\n", 0, marker.start()) + 1
        return None, (
            f"holds a {CONFLICT_WORDS} at line {line} ({marker.group(1)}: a merge "
            "left unfinished)"
        )

    def constant(word):
        raise _NotJson(text, word, "is no JSON number")

    def number(digits):
        value = float(digits)
        if not math.isfinite(value):
            raise _NotJson(text, digits, "is too large for a number")
        return value

    try:
        return json.loads(text, parse_constant=constant, parse_float=number), None
    except _NotJson as err:
        return None, f"is not valid JSON ({err})"
    except json.JSONDecodeError as err:
        if err.pos >= len(text.rstrip()) or err.msg.startswith("Unterminated"):
            return None, (
                f"is cut short (its JSON ends at line {err.lineno}: {err.msg})"
            )
        return None, (
            f"is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})"
        )
    except RecursionError:
        return None, "is not valid JSON (nested too deeply to read)"


def where(path_parts) -> str:
    """A place in a JSON value as a path: `cpu.minutes.part3`, `cells[3].source`."""
    out = ""
    for part in path_parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][\w-]*", part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out


def _worst(errors):
    """The one schema error to report: jsonschema's best match, and inside a
    `oneOf` (a notebook's cell or output is one of several kinds) the error of the
    kind the value says it is (the branch that does not fail on its `cell_type` or
    `output_type`)."""
    from jsonschema.exceptions import best_match

    err = best_match(errors)
    while err is not None and err.validator in ("oneOf", "anyOf") and err.context:
        branches: dict[int, list] = {}
        for sub in err.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        fitting = [
            subs
            for subs in branches.values()
            if not any(
                s.validator in ("enum", "const") and len(s.relative_path) == 1
                for s in subs
            )
        ]
        if all(s.validator == "type" and not s.relative_path for s in err.context):
            kinds = " or ".join(repr(s.validator_value) for s in err.context)
            err.message = f"{err.instance!r} is not of type {kinds}"
            break
        if not fitting:  # a kind none of the branches has: say which are known
            kinds = [s for s in err.context if s.validator in ("enum", "const")]
            field = kinds[0].relative_path[0] if kinds else None
            if field and all(list(s.relative_path) == [field] for s in kinds):
                known = [v for s in kinds for v in _listed(s.validator_value)]
                err.message = (
                    f"{field} {kinds[0].instance!r} is none of "
                    f"{', '.join(map(repr, known))}"
                )
            break
        if len(fitting) != 1:
            break
        err = best_match(fitting[0])
    return err


def _listed(value) -> list:
    return list(value) if isinstance(value, list) else [value]


def schema_problem(value, schema: dict) -> str | None:
    """What is wrong with `value` by `schema` (a JSON Schema), in words, or None."""
    from jsonschema.validators import validator_for

    cls = validator_for(schema)
    err = _worst(cls(schema).iter_errors(value))
    if err is None:
        return None
    place = where(err.absolute_path)
    return f"is wrong at {place or 'its top level'}: {_cut(err.message)}"


def read_json(
    path: Path, schema: dict, *, name: str | None = None, fix: str | None = None
) -> Any:
    """The JSON value of the file at `path`, checked against `schema`; anything else
    is a MalformedFileError naming the file (as `name`) and what to do (`fix`, after
    the `git checkout` that restores a tracked file)."""
    path = Path(path)
    value, problem = json_problem(read_text(path, name, fix))
    problem = problem or schema_problem(value, schema)
    if problem:
        raise refuse(path, name, problem, fix)
    return value


# ------------------------------------------------------------------ notebooks


def _notebook_schema(minor) -> dict:
    """nbformat's schema for version 4.`minor` (its newest for a minor it does not
    know), without the cell `id`s that 4.5 requires: nbformat itself still reads
    a notebook without them (and adds them)."""
    from importlib.resources import files

    folder = files("nbformat") / "v4"
    name = f"nbformat.v4.{minor}.schema.json"
    known = isinstance(minor, int) and (folder / name).is_file()
    chosen = folder / (name if known else "nbformat.v4.schema.json")
    schema = json.loads(chosen.read_text(encoding="utf-8"))
    for definition in schema.get("definitions", {}).values():
        if isinstance(definition, dict) and "id" in definition.get("required", []):
            definition["required"] = [r for r in definition["required"] if r != "id"]
    return schema


def read_notebook(path: Path, *, name: str | None = None, fix: str | None = None):
    """The `.ipynb` at `path` as nbformat reads it (format 4), after checking it
    against nbformat's schema: a file that is not a notebook (not JSON, `[]`,
    `{"cells": 5}`, a cell without its source, cut short) is a MalformedFileError
    '<name> cannot be read as a notebook: <what and where>; <what to do>'."""
    import warnings

    import nbformat

    path = Path(path)
    text = read_text(path, name, fix)
    value, problem = json_problem(text)
    if problem is None and not isinstance(value, dict):
        kind = {list: "a list", str: "a string", type(None): "null"}.get(
            type(value), f"a {type(value).__name__}"
        )
        problem = f"holds {kind} where a notebook is an object with its cells"
    elif problem is None and "nbformat" in value and value["nbformat"] != 4:
        problem = (
            f"is of format version {_cut(repr(value['nbformat']))}, and this "
            "project reads version 4 (open it in Jupyter and save it again)"
        )
    elif problem is None:
        problem = schema_problem(value, _notebook_schema(value.get("nbformat_minor")))
    if problem is not None:
        raise refuse(path, name, f"cannot be read as a notebook: it {problem}", fix)
    with warnings.catch_warnings():  # a missing cell id, nbformat's own note
        warnings.simplefilter("ignore")
        return nbformat.reads(text, as_version=4, capture_validation_error={})
