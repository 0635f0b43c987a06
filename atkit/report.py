"""Part 4's table, its choices on `val` and its comparisons, from its numbers.

The notebook measures; this module only formats. Every function takes the plain
record that the notebook's `run_recipe` returns (numbers, labels, lists: no models),
so each line can be tested against made-up numbers, including the cases a run
may hit one day: a row whose training diverged, a gain exactly as large as the seed
spread, no average that beats the best snapshot, a seed spread that was not measured.
The paragraphs that read the table are the notebook's own, written by hand and checked
against the printed numbers by tests/test_claims.py (issue 67: no template sentences).

The record (a dict):

* ``rows``: one dict per table row, in order: ``no`` (1, 2, ...), ``key``, ``label``,
  ``dir`` ("de-en"/"en-de"), ``warmup``, ``peak`` (the highest rate its schedule
  reached), ``vs`` (the ``no`` of the row it is compared with, or None), ``trained``
  (True when it is another training run than its reference row), ``bleu``,
  ``ratio`` (output/reference length), ``unk`` (outputs holding ``<unk>``),
  ``seconds`` (decoding), and ``diverged`` (None, or the message of the run that
  diverged, which then has no scores); optional (a record of an older run lacks
  them): ``change`` (what differs from the reference row, in words), ``n_avg`` (the
  snapshots its weights average, or None) and ``interval`` (None, or the 95 %
  interval of its gain over the reference row by sacreBLEU's paired bootstrap:
  ``low``, ``high``, ``verdict``, ``p``, ``resamples``, ``seed``);
* ``noise``: the seed-to-seed range of test BLEU (the larger of the two models'), or
  None when it was not measured for this run;
* ``seeds`` (optional): row key -> the seeds' test BLEU of the model that row is
  (``seeds``, ``values``, ``mean``, ``min``, ``max``, ``range``), or None;
* ``steps``, ``preset``, ``sentences`` (test sentences);
* ``choices``: per direction, ``run`` (the folder whose snapshots it averages: the
  cool-down run or its eq. 3 branch) and ``branch`` (whether the branch's),
  ``candidates`` (per run: its ``n_avg``, ``sweep``, ``alpha``, ``alpha_sweep`` and
  ``capped``), ``n_avg`` and ``avg_sweep``
  (rows of ``n``, ``steps``, ``bleu``, ``ratio`` on val) of the chosen run, ``alpha``,
  ``alpha_sweep`` (``alpha``, ``bleu``, ``ratio`` on val), ``capped`` and
  ``alpha_cap``;
* ``averaging``: per schedule ("eq. 3 alone", "eq. 3, cool-down"): ``n``, ``one``
  and ``avg`` (test BLEU of the best snapshot and of the average, greedy), ``val_one``
  and ``val_avg`` (the same on val), ``steps`` (of the averaged snapshots), ``rates``
  (at those steps), ``end_rate``, ``peak``; and ``shared`` (the steps the two runs
  share).
"""

from __future__ import annotations

from atkit import prose, scoring


def signed(x: float, digits: int = 2) -> str:
    """A difference for people: +0.14, -1.07, and 0.00 (never -0.00)."""
    x = round(x, digits)
    return f"{x:+.{digits}f}" if x else f"{0:.{digits}f}"


def within_noise(gain: float, noise: float | None) -> bool:
    """A gain between two training runs no larger than the seed-to-seed range."""
    return noise is not None and abs(round(gain, 2)) <= noise


def choices(finals: dict) -> list[str]:
    """The sweeps on val behind each direction's final system: per candidate run
    (the cool-down run and its eq. 3 branch) the averages tried, greedy, then alpha
    with beam search over its best average; the run better with beam is chosen."""
    out = []
    for direction, c in finals.items():
        chosen_run = c.get("run")
        mine = dict(n_avg=c["n_avg"], sweep=c["avg_sweep"], **_alpha_of(c))
        candidates = c.get("candidates") or {chosen_run: mine}
        for run, cand in candidates.items():
            cand = {**mine, **cand} if run == chosen_run else cand
            chosen = run == chosen_run
            its = "  <- chosen" if chosen else "  <- its best"
            out.append(f"{direction} on val, greedy{', ' + run if run else ''}:")
            for n, steps, bleu, _ in cand["sweep"]:
                mark = its if n == cand["n_avg"] else ""
                out.append(
                    f"  the average of the snapshots of steps {steps}: "
                    f"BLEU {bleu:5.2f}{mark}"
                )
            ratio = cand["sweep"][cand["n_avg"] - 1][3]
            out.append(
                f"{direction} on val, the average of {cand['n_avg']}"
                f"{' (' + run + ')' if run else ''}: greedy length ratio "
                f"{ratio:.3f}; beam search:"
            )
            its = "  <- chosen" if chosen else "  <- its best, not chosen"
            for a, bleu, r in cand["alpha_sweep"]:
                mark = its if a == cand["alpha"] else ""
                out.append(
                    f"  alpha {a:3.1f}: BLEU {bleu:5.2f}, length ratio {r:.3f}{mark}"
                )
            if cand["capped"]:
                out.append(
                    f"  (the best is the largest tried: the search stops at the cap, "
                    f"alpha {c['alpha_cap']:g})"
                )
    return out


def _alpha_of(c: dict) -> dict:
    return {k: c[k] for k in ("alpha", "alpha_sweep", "capped")}


def spread(summary: dict, noise: float | None) -> list[str]:
    """The committed seed spread, or why it does not apply to this run."""
    if "why_not" in summary:  # a sentence: wrapped to the page's width
        return prose.wrap(f"seed spread: {summary['why_not']}").split("\n")
    out = [
        f"{summary['command']} ({summary['machine']}, {summary['precision']}, torch "
        f"{summary['torch']}):"
    ]
    for name, m in summary["models"].items():
        t = m["bleu_test_2016_flickr"]
        out.append(
            f"  {name:<12} test_2016 BLEU over seeds {m['seeds']}: mean "
            f"{t['mean']:.2f}, min {t['min']:.2f}, max {t['max']:.2f}"
        )
    out.append(f"the larger range, {noise:.2f} BLEU, is the table's seed noise")
    return out


def _rows(summary) -> dict:
    return {r["no"]: r for r in summary["rows"]}


def gain(summary, row) -> float | None:
    """Row's BLEU minus its reference row's, or None (no reference, or a diverged
    run on either side)."""
    ref = _rows(summary).get(row["vs"]) if row["vs"] is not None else None
    if ref is None or row["diverged"] or ref["diverged"]:
        return None
    return round(row["bleu"], 2) - round(ref["bleu"], 2)


def table(summary) -> list[str]:
    """The table's lines: one row per line, a gain marked * when it lies within
    seed noise, a diverged run said as such."""
    head = (
        f"preset {summary['preset']}: every trained row {summary['steps']} steps; "
        f"sacreBLEU on test_2016 ({summary['sentences']} sentences)"
    )
    cols = (
        f"{'row':<32} {'dir':>5} {'warmup':>6} {'peak lr':>8} {'BLEU':>6} "
        f"{'ratio':>6} {'vs':>3} {'gain':>7} {'decode s':>8}"
    )
    lines, marked = [head, cols], False
    for r in summary["rows"]:
        name = f"{r['no']} {r['label']}"
        left = f"{name:<32} {r['dir']:>5} {r['warmup']:>6} {r['peak']:>8.1e}"
        if r["diverged"]:
            lines.append(f"{left}  diverged: {r['diverged']}")
            continue
        g = gain(summary, r)
        mark = ""
        if g is not None and r["trained"] and within_noise(g, summary["noise"]):
            mark, marked = "*", True
        text = "" if g is None else signed(g) + mark
        vs = "" if r["vs"] is None else r["vs"]
        lines.append(
            f"{left} {r['bleu']:>6.2f} {r['ratio']:>6.3f} {vs:>3} {text:>7} "
            f"{r['seconds']:>8.0f}"
        )
    if marked:
        lines.append(
            f"* within seed noise: no larger than the seed-to-seed range of "
            f"{summary['noise']:.2f} BLEU"
        )
    return lines + intervals(summary) + beside_seeds(summary)


def interval_text(r: dict) -> str:
    """'[-0.21, +1.12]': a row's 95 % interval as printed."""
    i = r["interval"]
    return f"[{signed(i['low'])}, {signed(i['high'])}]"


def intervals(summary) -> list[str]:
    """Each compared row's gain with its 95 % interval (sacreBLEU's paired bootstrap
    over the test sentences) and the verdict it gives, and what differs from the
    row it is compared with; nothing for a record without intervals."""
    rows = [r for r in summary["rows"] if r.get("interval")]
    if not rows:
        return []
    first = rows[0]["interval"]
    lines = [
        f"each gain's 95% interval: sacreBLEU's paired bootstrap over the "
        f"{summary['sentences']} test sentences",
        f"({first['resamples']} resamples, seed {first['seed']}); within noise: the "
        "interval covers 0",
        f"{'row':>4} {'vs':>3} {'gain':>7}  {'95% interval':<16} {'verdict':<12}  "
        "what differs",
    ]
    for r in rows:
        lines.append(
            f"{r['no']:>4} {r['vs']:>3} {signed(gain(summary, r)):>7}  "
            f"{interval_text(r):<16} {verdict(r['interval']):<12}  "
            f"{r.get('change') or ''}".rstrip()
        )
    return lines


def verdict(interval: dict) -> str:
    """What a row's interval says, from its bounds as printed."""
    return scoring.verdict(interval["low"], interval["high"])


def beside_seeds(summary) -> list[str]:
    """The rows the seed spread measured: this run's score beside its seeds'."""
    seeds = summary.get("seeds")
    if not seeds:
        return []
    lines = [
        "this run beside its seeds (tools.seed_spread: the same model, greedy, "
        "best snapshot):"
    ]
    for r in summary["rows"]:
        s = seeds.get(r["key"])
        if s is None or r["diverged"]:
            continue
        lines.append(
            f"  row {r['no']}: {r['bleu']:.2f} here; over seeds {s['seeds']} mean "
            f"{s['mean']:.2f}, min {s['min']:.2f}, max {s['max']:.2f}"
        )
    return lines


def averaging_table(summary) -> list[str]:
    """Eq. 3 alone against eq. 3 with a cool-down: best snapshot and average."""
    a = summary["averaging"]
    if a is None:
        return ["not measured: one of the two runs diverged"]
    lines = [
        f"greedy, de-en, test_2016; the runs share their first {a['shared']} steps "
        f"and end at step {summary['steps']}",
        f"{'schedule':<17} {'last rate':>9} {'best':>6} {'average':>7} {'of':>3} "
        f"{'gain':>6} {'val best':>8} {'val avg':>7}",
    ]
    for label in ("eq. 3 alone", "eq. 3, cool-down"):
        s = a[label]
        lines.append(
            f"{label:<17} {s['end_rate']:>9.1e} {s['one']:>6.2f} {s['avg']:>7.2f} "
            f"{s['n']:>3} {signed(s['avg'] - s['one']):>6} {s['val_one']:>8.2f} "
            f"{s['val_avg']:>7.2f}"
        )
    return lines


PAPER_TABLE2 = [  # Vaswani et al. (2017), Table 2, BLEU on newstest2014
    ("Transformer (base), EN-DE", 27.3),
    ("Transformer (big), EN-DE", 28.4),
    ("Transformer (base), EN-FR", 38.1),
    ("Transformer (big), EN-FR", 41.8),
]
MULTI30K_PUBLISHED = [  # test_2016_flickr; the sources: "How our numbers compare"
    ("Wu et al. 2021, text-only, EN-DE", 41.02),
    ("OPUS-MT tc-big gmw-gmw, DE-EN", 39.9),
    ("OPUS-MT tc-big gmw-gmw, EN-DE", 35.4),
]


SHORT_NAMES = {"Wu": "Wu et al.", "OPUS-MT": "OPUS-MT"}


def compare(summary) -> list[str]:
    """The paper's Table 2, the published Multi30k figures, and this run's rows."""
    out = ["the paper (Table 2, WMT 2014 newstest2014):"]
    out += [f"  {name:<34} {value:5.1f}" for name, value in PAPER_TABLE2]
    out.append("published on Multi30k test_2016 (other tokenisation and data):")
    out += [f"  {name:<34} {value:5.1f}" for name, value in MULTI30K_PUBLISHED]
    out.append(
        f"this notebook (preset {summary['preset']}, Multi30k test_2016, sacreBLEU):"
    )
    for row in summary["rows"]:
        score = "diverged" if row["diverged"] else f"{row['bleu']:5.2f}"
        out.append(f"  {row['label']:<34} {score}  ({row['dir']})")
    return out + against_published(summary)


def published(direction: str) -> list[tuple[str, float]]:
    """The published Multi30k figures of one direction: (short name, BLEU)."""
    return [
        (SHORT_NAMES.get(name.split()[0], name), value)
        for name, value in MULTI30K_PUBLISHED
        if name.endswith(direction.upper())
    ]


def at_the_mean(summary) -> tuple[float, int] | None:
    """(the shift from this run to its seeds' mean, the row it is measured on) for
    the rows trained as the full recipe (de-en): the seeds' mean of the full
    recipe's model minus this run's score of that model; None without a spread."""
    seeds = summary.get("seeds") or {}
    row = next((r for r in summary["rows"] if r["key"] == "bpe"), None)
    if "bpe" not in seeds or row is None or row["diverged"]:
        return None
    return seeds["bpe"]["mean"] - row["bleu"], row["no"]


def against_published(summary) -> list[str]:
    """Each direction's final system against the published figures: as this run
    scored it and, where the seed spread was measured, at the seeds' mean."""
    rows = {r["key"]: r for r in summary["rows"]}
    shift = at_the_mean(summary)
    out = ["this run's final systems against them:"]
    for direction, key in (("de-en", "beam"), ("en-de", "en-de beam")):
        r = rows.get(key)
        if r is None or r["diverged"]:
            out.append(f"  {direction}: no final system (its run diverged)")
            continue
        gaps = ", ".join(
            f"{name} {value:g} {signed(r['bleu'] - value)}"
            for name, value in published(direction)
        )
        text = f"  {direction} row {r['no']}, {r['bleu']:.2f}: {gaps}"
        if direction == "de-en" and shift is not None:
            mean = r["bleu"] + shift[0]
            gaps = ", ".join(
                f"{signed(mean - value)}" for _, value in published(direction)
            )
            text += f"; at the seeds' mean about {mean:.2f}: {gaps}"
        else:
            text += "; no seed spread for it"
        out.append(text)
    if shift is not None:
        out.append(
            f"  (at the seeds' mean: the row shifted by {signed(shift[0])}, the full "
            f"recipe's seeds' mean minus row {shift[1]})"
        )
    return out


def bench(figures: dict) -> str:
    """tools/bench.py's figures (its --json) in one sentence."""
    paths = {p: figures[p] for p in ("didactic", "fast") if p in figures}
    if len(paths) < 2:
        return "The bench measured only one path; nothing to compare."
    did, fast = paths["didactic"]["tokens_per_s"], paths["fast"]["tokens_per_s"]
    ratio = fast / did
    return (
        f"On this machine the fast step trained {ratio:.2f} times as many label "
        f"tokens per second as the didactic one, on the same model and batches "
        f"({fast:,.0f} against {did:,.0f})."
    )


def committed_model(manifest: dict) -> str:
    """What the committed model is, from its manifest, in one sentence."""
    b = manifest["bleu"]["exported"]
    return (
        f"the committed model: {manifest['what']}, preset {manifest['preset']} on "
        f"{manifest['machine']}, steps {manifest['averaged_steps']}; test_2016 BLEU "
        f"{b['greedy']['bleu']:.2f} greedy, {b['beam']['bleu']:.2f} with beam search. "
        "A model you train is another model, with other attention."
    )
