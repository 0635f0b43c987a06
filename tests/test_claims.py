"""The sentences the committed run printed are true of the numbers it printed.

Part 4's sentences and the Conclusion are written by atkit.report from the run's
numbers; this test reads the committed notebook's outputs back and checks each claim
against the tables printed beside it: every gain is the difference of the two BLEU
scores it names, "within seed noise" is said exactly when the gain is no larger than
the seed range, the averaging sentences quote the averaging table, the alpha sentences
quote the sweeps, and the Conclusion names the best rows. A tampered output fails
(the last test)."""

import copy
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
IPYNB = ROOT / "annotated_transformer.ipynb"
NUM = r"-?\d+\.\d+"


def cell_output(nb, marker: str) -> str:
    """The stdout of the code cell whose source contains `marker`."""
    found = [c for c in nb.cells if c.cell_type == "code" and marker in c.source]
    assert len(found) == 1, f"{len(found)} cells contain {marker!r}"
    outputs = found[0].outputs
    return "".join(o.get("text", "") for o in outputs if o.get("name") == "stdout")


def parse_table(text: str) -> tuple[dict, float | None]:
    """{row number: (label, bleu, ratio, vs, gain, marked, direction)} and the seed
    noise of the printed table."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^(\d+) (.+?)\s+(de-en|en-de)\s+\d+\s+\S+\s+(.*)$", line)
        if not m:
            continue
        no, label, rest = int(m.group(1)), m.group(2).strip(), m.group(4).split()
        direction = m.group(3)
        if rest[0] == "diverged:":
            rows[no] = (label, None, None, None, None, False, direction)
            continue
        bleu, ratio = float(rest[0]), float(rest[1])
        vs = gain = None
        marked = False
        if len(rest) == 5:
            vs, gain = int(rest[2]), rest[3]
            marked = gain.endswith("*")
            gain = float(gain.rstrip("*"))
        rows[no] = (label, bleu, ratio, vs, gain, marked, direction)
    noise = re.search(r"seed-to-seed range of (" + NUM + ")", text)
    return rows, float(noise.group(1)) if noise else None


def decoding_row(label: str) -> bool:
    return label.startswith(("+ averag", "+ beam"))  # average of n, averaging (none)


def claims_problems(nb) -> list[str]:
    """What in the printed sentences the printed tables contradict."""
    problems = []
    rows, noise = parse_table(cell_output(nb, "report.table(summary)"))
    if not rows:
        return ["no table found"]
    for no, (label, bleu, _, vs, gain, marked, _) in rows.items():
        if vs is None or bleu is None:
            continue
        if abs((bleu - rows[vs][1]) - gain) > 0.005:
            problems.append(f"row {no}: gain {gain} is not {bleu} - {rows[vs][1]}")
        should = noise is not None and not decoding_row(label) and abs(gain) <= noise
        if marked != should:
            problems.append(f"row {no}: marked {marked}, gain {gain}, noise {noise}")
    said = " ".join(cell_output(nb, "report.what_the_table_says").split())
    pattern = (
        r"\(row (\d+) vs (\d+)\): BLEU ("
        + NUM
        + r") -> ("
        + NUM
        + r") \(([+-]?"
        + NUM
        + r"|0\.00)(, within seed noise)?\)"
    )
    for a, b, x, y, g, within in re.findall(pattern, said):
        a, b = int(a), int(b)
        if (float(x), float(y)) != (rows[b][1], rows[a][1]):
            problems.append(f"sentence on row {a} vs {b}: BLEU {x} -> {y}")
        if abs(float(g) - rows[a][4]) > 0.005:
            problems.append(f"sentence on row {a}: gain {g}, table {rows[a][4]}")
        if bool(within) != rows[a][5]:
            problems.append(f"sentence on row {a}: 'within seed noise' {bool(within)}")
    choices = " ".join(cell_output(nb, "report.choices(finals)").split())
    for direction, alpha in re.findall(r"Alpha, (\S+): .*? alpha (\S+) \(", said):
        chosen = re.search(
            rf"{direction} on val, the average of \d+( \(\S+\))?:.*?"
            rf"alpha (\S+): BLEU ({NUM}), length ratio ({NUM}) <- chosen",
            choices,
        )
        if chosen is None or float(chosen.group(2)) != float(alpha):
            problems.append(f"alpha sentence {direction}: {alpha} is not chosen")
    avg_rows = {}
    for label, one, avg in re.findall(
        r"^(eq\. 3 alone|eq\. 3, cool-down)\s+\S+\s+(" + NUM + r")\s+(" + NUM + r")",
        cell_output(nb, "report.averaging_table"),
        flags=re.M,
    ):
        avg_rows[label] = (float(one), float(avg))
    says = " ".join(cell_output(nb, "report.averaging_says").split())
    best = re.search(rf"({NUM}) with eq\. 3 alone, ({NUM}) with the cool-down", says)
    if avg_rows and best:
        if (float(best.group(1)), float(best.group(2))) != (
            avg_rows["eq. 3 alone"][0],
            avg_rows["eq. 3, cool-down"][0],
        ):
            problems.append("averaging sentence: best snapshots differ from the table")
    conclusion = " ".join(cell_output(nb, "report.conclusion(summary").split())
    named = re.findall(
        rf"best (German→English|English→German) row (?:of Part 4 )?is row (\d+) "
        rf"\(({NUM})\)",
        conclusion,
    )
    for direction, no, score in named:
        d = "de-en" if direction.startswith("German") else "en-de"
        top = max(r[1] for r in rows.values() if r[6] == d and r[1] is not None)
        if rows[int(no)][1] != float(score) or float(score) != top:
            problems.append(f"conclusion: best {d} row {no} ({score}), top {top}")
    return problems


@pytest.fixture(scope="module")
def committed():
    return nbformat.read(IPYNB, as_version=4)


def test_the_committed_sentences_are_true_of_the_committed_numbers(committed):
    problems = claims_problems(committed)
    assert not problems, "\n".join(problems)


def test_a_tampered_sentence_is_caught(committed):
    """The check can fail: change one gain in the printed sentences."""
    nb = copy.deepcopy(committed)
    cell = next(
        c for c in nb.cells if "report.what_the_table_says" in c.source and c.outputs
    )
    out = next(o for o in cell.outputs if o.get("name") == "stdout")
    first = re.search(r"\(([+-]\d+\.\d+|0\.00)", out["text"]).group(1)
    out["text"] = out["text"].replace(f"({first}", "(+9.99", 1)
    assert any("gain" in p for p in claims_problems(nb))


# The paragraphs written for the reader after Part 4's table, after "When averaging
# pays", after Part 6's head counts and after "How our numbers compare" hold no
# number a cell prints; each claim they make is a phrase of the committed markdown
# and a check of the committed outputs below.


def payoff_figures(nb) -> dict:
    """The committed numbers the reader's paragraphs rest on."""
    rows, noise = parse_table(cell_output(nb, "report.table(summary)"))
    by_label = {
        label: (bleu, marked, d) for label, bleu, _, _, _, marked, d in rows.values()
    }
    scored = " ".join(cell_output(nb, "split into < unk >").split())
    split = re.search(rf"split into < unk >: BLEU ({NUM})", scored)
    spread = {
        name: (float(mean), float(top))
        for name, mean, top in re.findall(
            rf"^\s+(part3|full recipe)\s+test_2016 BLEU over seeds \[0, 1, 2\]: "
            rf"mean ({NUM}), min {NUM}, max ({NUM})",
            cell_output(nb, "report.spread(spread"),
            flags=re.M,
        )
    }
    averaging = {
        label: (float(one), float(avg))
        for label, one, avg in re.findall(
            r"^(eq\. 3 alone|eq\. 3, cool-down)\s+\S+\s+(" + NUM + r")\s+(" + NUM + ")",
            cell_output(nb, "report.averaging_table"),
            flags=re.M,
        )
    }
    heads = {
        what: tuple(int(x) / 100 for x in shares)
        for what, *shares in re.findall(
            r"\* (.+?): strongest in layer \d+, head \d+ \((\d+)% of positions; "
            r"median head (\d+)%, chance (\d+)%\)",
            " ".join(cell_output(nb, "describe_heads(stats)").split()),
        )
    }
    compare = cell_output(nb, "report.compare(summary)")
    opus = dict(
        re.findall(r"OPUS-MT tc-big gmw-gmw, (DE-EN|EN-DE)\s+(\d+\.\d)", compare)
    )
    best = {
        d: max(r[1] for r in rows.values() if r[6] == d and r[1] is not None)
        for d in ("de-en", "en-de")
    }
    return {
        "noise": noise,
        "words": next(v for k, v in by_label.items() if k.startswith("words")),
        "bpe": next(v for k, v in by_label.items() if k.startswith("shared BPE")),
        "split": float(split.group(1)) if split else None,
        "spread": spread,
        "averaging": averaging,
        "heads": heads,
        "opus": {k: float(v) for k, v in opus.items()},
        "best": best,
    }


def _far_above_chance(share, chance):
    return share >= 4 * chance


PAYOFF = [
    (
        "within the seed noise when each `<unk>` counts as one token",
        lambda f: f["bpe"][1],
    ),
    (
        "larger than the seed range under plain sacreBLEU",
        lambda f: f["bpe"][0] - f["split"] > f["noise"],
    ),
    (
        "seed 0 scored highest of three for both models, so rows stand above their "
        "seeds' mean",
        lambda f: (
            f["words"][0] == f["spread"]["part3"][1] > f["spread"]["part3"][0]
            and f["bpe"][0]
            == f["spread"]["full recipe"][1]
            > f["spread"]["full recipe"][0]
        ),
    ),
    (
        "it pays where the rate is still high at the end, and adds little once a "
        "cool-down has settled them",
        lambda f: (
            (
                f["averaging"]["eq. 3 alone"][1] - f["averaging"]["eq. 3 alone"][0]
                > abs(
                    f["averaging"]["eq. 3, cool-down"][1]
                    - f["averaging"]["eq. 3, cool-down"][0]
                )
            )
            and abs(
                f["averaging"]["eq. 3, cool-down"][1]
                - f["averaging"]["eq. 3, cool-down"][0]
            )
            <= f["noise"]
        ),
    ),
    (
        "Two patterns stand far above chance, though nothing labelled them: a head "
        "reading the previous token",
        lambda f: (
            _far_above_chance(
                f["heads"]["the previous source token"][0],
                f["heads"]["the previous source token"][2],
            )
            and _far_above_chance(
                f["heads"]["the source word it is about to write"][0],
                f["heads"]["the source word it is about to write"][2],
            )
        ),
    ),
    (
        "For the token itself and the next one, even the strongest head stays near the "
        "median",
        lambda f: all(
            f["heads"][w][0] <= 2 * f["heads"][w][1]
            for w in ("the token itself", "the next source token")
        ),
    ),
    (
        "Our best rows pass OPUS-MT's in both directions",
        lambda f: (
            f["best"]["de-en"] > f["opus"]["DE-EN"]
            and f["best"]["en-de"] > f["opus"]["EN-DE"]
        ),
    ),
    (
        "(German→English by less than the seed noise)",
        lambda f: f["best"]["de-en"] - f["opus"]["DE-EN"] <= f["noise"],
    ),
]


def payoff_problems(nb) -> list[str]:
    """Each paragraph's claim: still in the markdown, and true of the outputs."""
    prose = " ".join(
        " ".join(c.source.split()) for c in nb.cells if c.cell_type == "markdown"
    )
    try:
        figures = payoff_figures(nb)
    except (StopIteration, KeyError, ValueError, AttributeError) as err:
        return [f"the committed outputs lack a figure: {err!r}"]
    problems = []
    for phrase, holds in PAYOFF:
        if phrase not in prose:
            problems.append(f"no longer in the prose: {phrase!r}")
        try:
            true = holds(figures)
        except (KeyError, TypeError) as err:
            true = False
            phrase += f" (missing {err!r})"
        if not true:
            problems.append(f"the committed outputs contradict: {phrase!r}")
    return problems


def test_the_readers_paragraphs_are_true_of_the_committed_numbers(committed):
    problems = payoff_problems(committed)
    assert not problems, "\n".join(problems)


def test_a_contradicted_paragraph_is_caught(committed):
    """The check can fail: OPUS-MT's German→English figure set above ours."""
    nb = copy.deepcopy(committed)
    cell = next(c for c in nb.cells if "report.compare(summary)" in c.source)
    out = next(o for o in cell.outputs if o.get("name") == "stdout")
    out["text"] = re.sub(
        r"(OPUS-MT tc-big gmw-gmw, DE-EN\s+)\d+\.\d", r"\g<1>45.0", out["text"]
    )
    assert any("OPUS-MT" in p for p in payoff_problems(nb))
