"""Part 4's table and the sentences that read it, written from its numbers.

The notebook measures; this module only formats. Every function takes the plain
record that the notebook's `run_recipe` returns (numbers, labels, lists: no models),
so each sentence can be tested against made-up numbers, including the cases a run
may hit one day: a row whose training diverged, a gain exactly as large as the seed
spread, no average that beats the best snapshot, a seed spread that was not measured.

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

import math

from atkit import scoring


def signed(x: float, digits: int = 2) -> str:
    """A difference for people: +0.14, -1.07, and 0.00 (never -0.00)."""
    x = round(x, digits)
    return f"{x:+.{digits}f}" if x else f"{0:.{digits}f}"


def brevity(ratio: float) -> float:
    """BLEU's brevity penalty for an output/reference length ratio."""
    if ratio >= 1:
        return 1.0
    return math.exp(1 - 1 / ratio) if ratio > 0 else 0.0  # no output at all: 0


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
    if "why_not" in summary:
        return [f"seed spread: {summary['why_not']}"]
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


def change(summary, no: int) -> str:
    """'(row 2 vs 1): BLEU 36.82 -> 37.27 (+0.45, within seed noise), length
    ratio 1.028 -> 0.966', or what stands in the way of a comparison."""
    rows = _rows(summary)
    b = rows[no]
    a = rows[b["vs"]]
    for r in (a, b):
        if r["diverged"]:
            return f"(row {no} vs {a['no']}): row {r['no']}'s run diverged"
    g = gain(summary, b)
    noisy = b["trained"] and within_noise(g, summary["noise"])
    return (
        f"(row {no} vs {a['no']}): BLEU {a['bleu']:.2f} -> {b['bleu']:.2f} "
        f"({signed(g)}{', within seed noise' if noisy else ''}), length ratio "
        f"{a['ratio']:.3f} -> {b['ratio']:.3f}"
    )


def alpha_sentence(summary, direction: str) -> str:
    """What the length-penalty sweep on val showed, for one direction."""
    c = summary["choices"][direction]
    sweep = {a: (b, r) for a, b, r in c["alpha_sweep"]}
    chosen = c["alpha"]
    greedy = c["avg_sweep"][c["n_avg"] - 1][3]
    text = (
        f"Alpha, {direction}: on val the averaged weights decoded greedily write "
        f"{greedy:.3f} times the references' length"
    )
    if 0.0 in sweep:
        r0 = sweep[0.0][1]
        text += (
            f", and beam search without a length penalty {r0:.3f} (brevity penalty "
            f"{brevity(r0):.3f})"
        )
    text += (
        f". The best validation BLEU is at alpha {chosen:g} ({sweep[chosen][0]:.2f}, "
        f"length ratio {sweep[chosen][1]:.3f})"
    )
    if 0.6 in sweep and chosen != 0.6:
        text += f"; the paper's 0.6 gives {sweep[0.6][0]:.2f}"
    if 0.0 in sweep and sweep[0.0][1] < min(1.0, greedy) and chosen > 0:
        text += (
            ". Beam search favours short hypotheses (each token lowers the "
            "log-probability), and the penalty gives back the length that greedy "
            "decoding did not lose"
        )
    if c.get("capped"):
        text += (
            f". The best alpha is the largest tried: the search stopped at its cap, "
            f"{c['alpha_cap']:g}"
        )
    return text + "."


def what_the_table_says(summary) -> list[str]:
    """The table in sentences, each with its numbers."""
    rows = {r["key"]: r for r in summary["rows"]}
    no = {key: r["no"] for key, r in rows.items()}
    out = [
        f"Shared BPE with three-way tying against words {change(summary, no['bpe'])}."
    ]
    c = summary["choices"]["de-en"]
    avg = rows["avg"]
    n = avg.get("n_avg", c["n_avg"])  # a record of an older run: the final's
    if n is not None and n > 1:
        out.append(
            f"Averaging the last {n} snapshots, greedy {change(summary, avg['no'])}."
        )
    else:
        out.append(
            f"No average of snapshots beat the best snapshot on val, so row "
            f"{avg['no']} decodes that snapshot alone."
        )
    if "branch" in rows:
        out.append(
            f"The eq. 3 branch's average instead of the cool-down run's, greedy "
            f"{change(summary, rows['branch']['no'])}."
        )
    if "beam paper" in rows:
        out.append(
            f"Beam search at the paper's alpha on the same weights "
            f"{change(summary, rows['beam paper']['no'])}."
        )
    beam = rows["beam"]
    if not beam["diverged"]:
        ref = _rows(summary)[beam["vs"]]
        out.append(
            f"Beam search on the same weights {change(summary, beam['no'])}; its "
            f"brevity penalty is {brevity(beam['ratio']):.3f} against "
            f"{brevity(ref['ratio']):.3f} for greedy decoding."
        )
    for direction in summary["choices"]:
        out.append(alpha_sentence(summary, direction))
    post = change(summary, no["post"])
    out.append(f"Post-norm at the pre-norm model's schedule {post}.")
    if "post own" in rows:
        own = change(summary, no["post own"])
        out.append(f"Post-norm with a schedule of its own {own}.")
    branch = ""
    if "en-de branch" in rows:
        branch = (
            f"; the eq. 3 branch's average instead "
            f"{change(summary, no['en-de branch'])}"
        )
    out.append(
        "English→German, scored against German references and so not comparable "
        f"with the de-en rows: averaging {change(summary, no['en-de avg'])}{branch}; "
        f"beam search on those weights {change(summary, no['en-de beam'])}."
    )
    return out


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


def averaging_says(summary) -> list[str]:
    """When averaging paid, in sentences: against the cool-down, on test and val."""
    a = summary["averaging"]
    if a is None:
        return []
    e, c = a["eq. 3 alone"], a["eq. 3, cool-down"]
    noise = summary["noise"]
    bought = c["one"] - e["one"]
    rates = ", ".join(f"{x:.1e}" for x in e["rates"])
    out = [
        f"Eq. 3 alone ends at a rate of {e['end_rate']:.1e}, "
        f"{e['end_rate'] / e['peak']:.0%} of its peak; the cool-down takes it to "
        f"{c['end_rate']:.1e}. Best snapshots on test: {e['one']:.2f} with eq. 3 "
        f"alone, {c['one']:.2f} with the cool-down ({signed(bought)}"
        f"{', within seed noise' if within_noise(bought, noise) else ''})."
    ]
    if e["n"] > 1:
        out.append(
            f"Averaging eq. 3's snapshots of steps {e['steps']} (rates {rates}) "
            f"changes test BLEU by {signed(e['avg'] - e['one'])}; after the "
            f"cool-down, averaging {c['n']} snapshot{'s' * (c['n'] > 1)} changes it "
            f"by {signed(c['avg'] - c['one'])}."
        )
    else:
        out.append("For eq. 3 alone no average beat the best snapshot on val.")
    test_first = e["avg"] > c["avg"]  # eq. 3 alone's final system wins on test
    val_first = e["val_avg"] > c["val_avg"]
    if (
        e["avg"] != c["avg"]
        and e["val_avg"] != c["val_avg"]
        and test_first != val_first
    ):
        win, lose = ("eq. 3 alone", "the cool-down")
        if not test_first:
            win, lose = lose, win
        gap = abs(e["avg"] - c["avg"])
        size = ""
        if noise is not None:
            size = (
                f"; the gap on test, {gap:.2f}, is "
                + ("no larger than" if within_noise(gap, noise) else "larger than")
                + f" the seed-to-seed range ({noise:.2f})"
            )
        out.append(
            f"The two schedules' chosen averages (greedy) disagree between "
            f"the splits: on test {win} wins ({max(e['avg'], c['avg']):.2f} "
            f"against {min(e['avg'], c['avg']):.2f}), on val {lose} wins "
            f"({max(e['val_avg'], c['val_avg']):.2f} against "
            f"{min(e['val_avg'], c['val_avg']):.2f}){size}."
        )
    if e["n"] > 1 and e["avg"] - e["one"] > max(c["avg"] - c["one"], 0):
        out.append(
            "Averaging paid more where the rate was still high at the end, as in "
            "the paper's runs; a cool-down does part of the same work."
        )
    return out


def conclusion(summary, part3_bleu: float) -> list[str]:
    """What the run measured, in four sentences."""
    rows = summary["rows"]
    best = {}
    for direction in ("de-en", "en-de"):
        scored = [r for r in rows if r["dir"] == direction and not r["diverged"]]
        best[direction] = max(scored, key=lambda r: r["bleu"]) if scored else None
    out = [
        f"Part 3's model, words and greedy decoding: BLEU {part3_bleu:.2f} on "
        f"test_2016 after {summary['steps']} steps of preset {summary['preset']}."
    ]
    if best["de-en"] and best["en-de"]:
        de, en = best["de-en"], best["en-de"]
        out.append(
            f"The best German→English row of Part 4 is row {de['no']} "
            f"({de['bleu']:.2f}); the best English→German row is row {en['no']} "
            f"({en['bleu']:.2f})."
        )
    keyed = {r["key"]: r for r in rows}
    keys = ("beam", "en-de beam", "avg", "en-de avg")
    gains = {k: gain(summary, keyed[k]) for k in keys}
    if None not in gains.values() and summary.get("averaging"):
        e = summary["averaging"]["eq. 3 alone"]
        out.append(
            f"Beam search changed BLEU by {signed(gains['beam'])} (de-en) and "
            f"{signed(gains['en-de beam'])} (en-de) on the same weights. Averaging "
            f"snapshots changed greedy BLEU by {signed(e['avg'] - e['one'])} at the "
            f"end of eq. 3 alone, and after a cool-down by {signed(gains['avg'])} "
            f"(de-en) and {signed(gains['en-de avg'])} (en-de)."
        )
    if summary["noise"] is None:
        out.append("How far another seed moves these scores was not measured here.")
    else:
        out.append(
            f"The seeds measured spread one model's test BLEU over "
            f"{summary['noise']:.2f} (the larger of two models' ranges): a range over "
            "a few seeds, not a bound."
        )
    return out


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
