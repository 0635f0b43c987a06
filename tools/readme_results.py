"""Copy the outputs of the notebook's `results` cells into README.md.

    python -m tools.readme_results           # rewrite the block between the markers
    python -m tools.readme_results --check   # exit 1 if the README's block is stale

The README never states a figure of its own: the block between the markers below is the
printed output of the cells tagged `results` in the executed `.ipynb`, so the README,
the notebook and the page (rendered from the same `.ipynb`) show the same run.

It also writes how long the long cells took in that run (the cells that print
`expected_time(PRESET, "<cell>")`), from the notebook's own timestamps, into
runs/cell-minutes.json: the one record that `atkit.config.expected_time` prints from in
the next run, and that the README's time table quotes.

Both files are checked before any work: neither may be the notebook (or a link to it)
or the other, and a README.md that is a symbolic link stays one: the file it points to
is rewritten (atkit.files.check_outputs).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from atkit.files import check_outputs, check_writable, input_file
from tools.errors import UsageError, run_main

PROG = "python -m tools.readme_results"
ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- results:start -->", "<!-- results:end -->"


def terminal_text(text: str) -> str:
    """What a terminal would show: for each line, the part after the last '\\r'."""
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


WHAT = {
    "--readme": "README.md",
    "--notebook": "the executed annotated_transformer.ipynb",
}


def read_text(path: Path, flag: str) -> str:
    """The text of `path`, or a refusal naming it (and the option that gave it) if
    it is not UTF-8 text."""
    from atkit import records

    return records.read_text(path, f"{flag} {path}", f"give {WHAT[flag]}")


def read_notebook(notebook: Path):
    """The notebook at `notebook`, or a refusal naming it and what is wrong
    (atkit.records: not JSON, cut short, `[]`, a cell without its source)."""
    from atkit import records

    return records.read_notebook(
        notebook, name=f"--notebook {notebook}", fix=f"give {WHAT['--notebook']}"
    )


def results_block(notebook: Path) -> str:
    nb = read_notebook(notebook)
    heading, lead, parts = None, None, []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            found = re.findall(r"^#{2,3} (.+)$", cell.source, flags=re.M)
            heading = found[-1] if found else heading
            # a paragraph that opens in bold names what the next cell shows
            bold = re.match(r"\*\*(.+?)\.?\*\*", cell.source.strip())
            lead = bold[1] if bold and not found else None
            continue
        if "results" not in cell.metadata.get("tags", []):
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors:
            raise UsageError(
                f"the `results` cell under {heading!r} ended in an error "
                f"({errors[0].get('ename')}): run the notebook again; README.md was "
                "left as it was"
            )
        text = "".join(
            o.get("text", "")
            for o in cell.get("outputs", [])
            if o.get("name") == "stdout"
        )
        text = terminal_text(text).strip()
        if not text:
            raise UsageError(
                f"a `results` cell under {heading!r} has no output: run it"
            )
        title = f"{heading}: {lead}" if lead else heading
        parts.append(f"**{title}**\n\n```text\n{text}\n```\n")
    if not parts:
        raise UsageError(f"{notebook} has no cells tagged `results`")
    preset = run_preset(nb, f"--notebook {notebook}")
    head = f"From the committed run of the notebook (preset `{preset}`):\n\n"
    return head + "\n".join(parts)


# what this program reads of the facts the Setup cell displays (atkit.runtime)
RUN_FACTS = {
    "type": "object",
    "required": ["preset"],
    "properties": {
        key: {"type": "string"} for key in ("preset", "machine", "cpu", "precision")
    },
}


def run_facts(nb, name: str = "the notebook") -> dict:
    """The facts of the run that the Setup cell displays beside its line
    (atkit.runtime.RUN_MIME), or a refusal naming the notebook (`name`)."""
    from atkit.records import schema_problem
    from atkit.runtime import RUN_MIME

    for cell in nb.cells:
        for o in cell.get("outputs", []):
            facts = o.get("data", {}).get(RUN_MIME)
            if not facts:
                continue
            problem = schema_problem(facts, RUN_FACTS)
            if problem:
                raise UsageError(
                    f"{name}: the Setup cell's output {RUN_MIME} {problem}; run the "
                    "notebook again"
                )
            return facts
    raise UsageError(
        f"{name}: the Setup cell shows no run facts (its output lacks "
        f"{RUN_MIME}): run the notebook again"
    )


def run_preset(nb, name: str = "the notebook") -> str:
    """The preset of the run, from the facts the Setup cell displays."""
    return run_facts(nb, name)["preset"]


EXPECTED_CELL = re.compile(r"expected_time\(PRESET, \"(\w+)\"\)")


STAMPS = ("iopub.execute_input", "shell.execute_reply")


def cell_minutes(cell, name: str = "the notebook") -> float | None:
    """How long the run spent on `cell`, from nbconvert's timestamps (None: not
    recorded); a stamp that is no time is a refusal naming the notebook (`name`)."""
    from datetime import datetime

    stamps = cell.get("metadata", {}).get("execution", {})
    if not isinstance(stamps, dict) or not all(k in stamps for k in STAMPS):
        return None
    try:
        start, end = (
            datetime.fromisoformat(stamps[k].replace("Z", "+00:00")) for k in STAMPS
        )
        return (end - start).total_seconds() / 60
    except (AttributeError, TypeError, ValueError):
        shown = {k: stamps[k] for k in STAMPS}
        raise UsageError(
            f"{name}: a cell's execution timestamps {shown} are not ISO times "
            f"(cell {cell.get('id', '')!r}); run the notebook again"
        ) from None


def run_machine(nb, name: str = "the notebook") -> str:
    """The machine of the run, in words, from the facts the Setup shows."""
    facts = run_facts(nb, name)
    extra = [facts[k] for k in ("cpu", "precision") if facts.get(k)]
    machine = facts.get("machine", "an unnamed machine")
    return machine + (f" ({', '.join(extra)})" if extra else "")


def measured_minutes(nb, name: str = "the notebook") -> dict:
    """{"machine": ..., "minutes": {cell: minutes}} of the executed notebook `nb`,
    for the cells that print their expected time."""
    minutes = {}
    for cell in nb.cells:
        match = EXPECTED_CELL.search(cell.source) if cell.cell_type == "code" else None
        took = cell_minutes(cell, name) if match else None
        if took is not None:
            minutes[match.group(1)] = round(took, 1)
    return {"machine": run_machine(nb, name), "minutes": minutes}


def minutes_record(nb, old: dict, name: str = "the notebook") -> dict:
    """The record `old` (runs/cell-minutes.json) with the run of `nb`'s preset in it."""
    return {**old, run_preset(nb, name): measured_minutes(nb, name)}


def replace_block(readme: str, block: str) -> str:
    counts = {m: readme.count(m) for m in (START, END)}
    if counts != {START: 1, END: 1}:
        raise UsageError(
            f"README.md needs each of the markers {START} and {END} once, in that "
            f"order; it has {counts[START]} and {counts[END]} of them"
        )
    if readme.index(END) < readme.index(START):
        raise UsageError(
            f"README.md has the marker {END} before {START}: put the start marker first"
        )
    before, rest = readme.split(START, 1)
    _, after = rest.split(END, 1)
    return f"{before}{START}\n{block}{END}{after}"


TIMES = re.compile(
    r"(Part 3's training took )\d+( minutes, Part 4's )\d+( and the alpha sweep )\d+"
    r"( \(`runs/cell-minutes.json`\))"
)


def quote_times(readme: str, record: dict) -> str:
    """README.md with its time table quoting the minutes of `record` (the cell-times
    record) for the preset whose run the page and README publish; unchanged while
    that preset has no such run in the record."""
    from atkit.config import publisher

    minutes = record.get(publisher(), {}).get("minutes", {})
    if not all(cell in minutes for cell in ("part3", "part4", "alpha")):
        return readme
    part3, part4, alpha = (round(minutes[c]) for c in ("part3", "part4", "alpha"))
    return TIMES.sub(lambda m: f"{m[1]}{part3}{m[2]}{part4}{m[3]}{alpha}{m[4]}", readme)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--notebook", type=Path, default=ROOT / "annotated_transformer.ipynb"
    )
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument(
        "--minutes",
        type=Path,
        default=None,
        help="the record of cell times (default: runs/cell-minutes.json beside the "
        "notebook)",
    )
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    for flag, path in (("--readme", args.readme), ("--notebook", args.notebook)):
        input_file(flag, path, f"the path of {WHAT[flag]}")
    if args.minutes is None:
        args.minutes = args.notebook.parent / "runs" / "cell-minutes.json"
    if not args.check:
        args.readme, args.minutes = check_outputs(
            [("--readme", args.readme), ("--minutes", args.minutes)],
            [("--notebook", args.notebook)],
            writes="the results",
        )
        check_writable(args.readme.parent, "--readme")
        check_writable(args.minutes.parent, "--minutes")
    import json

    from atkit.config import committed_minutes
    from atkit.files import write_text_atomic

    old = read_text(args.readme, "--readme")
    times = committed_minutes(args.minutes)
    new_times = minutes_record(
        read_notebook(args.notebook), times, f"--notebook {args.notebook}"
    )
    new = quote_times(replace_block(old, results_block(args.notebook)), new_times)
    if args.check:
        stale = [
            n
            for n, a, b in (
                ("README.md's results", old, new),
                (f"{args.minutes.name}", times, new_times),
            )
            if a != b
        ]
        if stale:
            print(
                f"{PROG}: error: {' and '.join(stale)} are not those of the notebook: "
                "run `python -m tools.readme_results`",
                file=sys.stderr,
            )
            return 1
        return 0
    if new != old:
        write_text_atomic(args.readme, new)
    if new_times != times:
        args.minutes.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(new_times, indent=2, ensure_ascii=False) + "\n"
        write_text_atomic(args.minutes, text)
    return 0


def main_guarded(argv=None) -> int:
    """The program: main, with any error as one line (tools/errors.py)."""
    return run_main(lambda: main(argv), PROG)


if __name__ == "__main__":
    sys.exit(main_guarded())
