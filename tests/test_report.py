"""atkit.report: Part 4's table and sentences, written from made-up numbers that hit
the cases a real run may hit (a diverged run, a gain exactly the seed range, no average
that helped, no seed spread)."""

import copy

import pytest

from atkit import report


def row(no, key, label, direction, bleu, ratio, vs=None, trained=False, **kw):
    return dict(
        no=no,
        key=key,
        label=label,
        dir=direction,
        warmup=400,
        peak=2.2e-3,
        vs=vs,
        trained=trained,
        bleu=bleu,
        ratio=ratio,
        unk=0,
        seconds=3.0,
        diverged=kw.get("diverged"),
    )


def choice(n_avg=3, alpha=1.5, greedy_ratio=0.97, beam0_ratio=0.93, capped=False):
    return dict(
        n_avg=n_avg,
        avg_sweep=[
            (
                n,
                [1600 - 80 * (n - 1 - i) for i in range(n)],
                38.0 + n / 10,
                greedy_ratio,
            )
            for n in range(1, 5)
        ],
        alpha=alpha,
        alpha_sweep=[
            (0.0, 38.1, beam0_ratio),
            (0.6, 38.6, 0.95),
            (1.5, 39.2, 0.98),
            (2.5, 38.9, 1.01),
        ],
        capped=capped,
        alpha_cap=6.0,
    )


@pytest.fixture
def summary():
    rows = [
        row(1, "words", "words, tie='tgt', greedy", "de-en", 36.82, 1.028),
        row(2, "bpe", "shared BPE + tie='all'", "de-en", 37.78, 0.966, 1, True),
        row(3, "avg", "+ average of 3 snapshots", "de-en", 37.87, 0.985, 2),
        row(4, "beam", "+ beam 4, alpha 1.5", "de-en", 39.00, 0.968, 3),
        row(5, "post", "row 2 with post-norm", "de-en", 36.62, 0.962, 2, True),
        row(6, "en-de", "BPE + tie='all', greedy", "en-de", 34.79, 0.995),
        row(7, "en-de avg", "+ average of 2 snapshots", "en-de", 34.84, 0.992, 6),
        row(8, "en-de beam", "+ beam 4, alpha 2.5", "en-de", 35.97, 0.990, 7),
    ]
    eq3 = dict(
        n=3,
        one=36.31,
        avg=37.72,
        val_one=36.93,
        val_avg=37.90,
        steps=[1440, 1520, 1600],
        rates=[1.2e-3, 1.1e-3, 1.1e-3],
        end_rate=1.1e-3,
        peak=2.2e-3,
    )
    cool = dict(
        n=3,
        one=37.78,
        avg=37.36,
        val_one=37.75,
        val_avg=38.08,
        steps=[1440, 1520, 1600],
        rates=[2.3e-4, 1.1e-4, 0.0],
        end_rate=0.0,
        peak=2.2e-3,
    )
    return dict(
        rows=rows,
        noise=0.96,
        steps=1600,
        preset="cpu",
        sentences=1000,
        choices={"de-en": choice(), "en-de": choice(n_avg=2, alpha=2.5)},
        averaging={"shared": 1120, "eq. 3 alone": eq3, "eq. 3, cool-down": cool},
    )


def test_a_gain_equal_to_the_seed_range_is_within_noise_and_said_so(summary):
    """+0.96 against a range of 0.96 is within noise, and the footnote says 'no
    larger than', never 'less than'."""
    lines = report.table(summary)
    bpe = next(ln for ln in lines if ln.startswith("2 shared BPE"))
    assert bpe.split()[-2] == "+0.96*", bpe
    assert "no larger than the seed-to-seed range of 0.96" in lines[-1]
    assert "less than" not in "\n".join(lines)
    said = " ".join(report.what_the_table_says(summary))
    assert "(+0.96, within seed noise)" in said


def test_a_gain_above_the_range_is_not_marked(summary):
    summary["rows"][1]["bleu"] = 37.79  # +0.97
    bpe = next(ln for ln in report.table(summary) if ln.startswith("2 "))
    assert bpe.split()[-2] == "+0.97"


def test_decoding_rows_are_never_marked(summary):
    summary["rows"][2]["bleu"] = 37.80  # +0.02 on the same trained run
    avg = next(ln for ln in report.table(summary) if ln.startswith("3 "))
    assert avg.split()[-2] == "+0.02"


def test_no_spread_marks_nothing_and_says_so(summary):
    summary["noise"] = None
    lines = report.table(summary)
    assert not any("*" in ln for ln in lines)
    assert report.conclusion(summary, 36.82)[-1].startswith("How far another seed")


def test_a_diverged_run_is_reported_in_its_row_and_the_rest_go_on(summary):
    summary["rows"][4].update(
        diverged="loss not finite at step 312", bleu=None, ratio=None
    )
    lines = report.table(summary)
    post = next(ln for ln in lines if ln.startswith("5 "))
    assert "diverged: loss not finite at step 312" in post
    assert next(ln for ln in lines if ln.startswith("4 ")).split()[-2] == "+1.13"
    said = report.what_the_table_says(summary)
    assert any("row 5's run diverged" in s for s in said)
    assert report.conclusion(summary, 36.82)[1].startswith("The best German")


def test_no_average_that_helped_says_so(summary):
    summary["choices"]["de-en"]["n_avg"] = 1
    said = report.what_the_table_says(summary)
    assert any("No average of snapshots beat the best snapshot" in s for s in said)


def test_the_alpha_sentence_blames_beam_search_not_greedy(summary):
    """Greedy output as long as the references, beam search without a penalty short:
    the sentence must not say that the model's translations are short."""
    sentence = report.alpha_sentence(summary, "de-en")
    assert "0.970 times the references' length" in sentence
    assert "without a length penalty 0.930" in sentence
    assert "Beam search favours short hypotheses" in sentence
    assert "translations are short" not in sentence
    summary["choices"]["de-en"]["alpha_sweep"][0] = (0.0, 38.1, 1.02)  # not short
    assert "favours short" not in report.alpha_sentence(summary, "de-en")


def test_averaging_that_wins_on_test_and_loses_on_val_is_said(summary):
    said = " ".join(report.averaging_says(summary))
    assert "disagree between the splits" in said
    assert "on test eq. 3 alone wins (37.72 against 37.36)" in said
    assert "on val the cool-down wins (38.08 against 37.90)" in said
    agree = copy.deepcopy(summary)
    agree["averaging"]["eq. 3 alone"]["val_avg"] = 38.5
    assert "disagree" not in " ".join(report.averaging_says(agree))


def test_the_choices_and_spread_lines(summary):
    lines = report.choices(summary["choices"])
    chosen = [ln for ln in lines if ln.endswith("<- chosen")]
    assert len(chosen) == 4  # n and alpha, both directions
    # with two candidate runs: each one's greedy sweep and its alpha sweep; the run
    # chosen (better with beam) marked chosen, the other its best, not chosen
    c = summary["choices"]["de-en"]
    branch = [(n, steps, bleu + 1.0, r) for n, steps, bleu, r in c["avg_sweep"]]
    worse = [(a, bleu - 0.5, r) for a, bleu, r in c["alpha_sweep"]]
    two = {
        **c,
        "run": "part4-bpe-all-eq3",
        "avg_sweep": branch,
        "candidates": {
            "part4-bpe-all": {
                "n_avg": 1,
                "sweep": c["avg_sweep"],
                "alpha": 2.5,
                "alpha_sweep": worse,
                "capped": True,
            },
            "part4-bpe-all-eq3": {
                "n_avg": 3,
                "sweep": branch,
                "alpha": 1.5,
                "alpha_sweep": c["alpha_sweep"],
                "capped": False,
            },
        },
    }
    lines = report.choices({"de-en": two})
    assert "de-en on val, greedy, part4-bpe-all:" in lines
    assert "de-en on val, greedy, part4-bpe-all-eq3:" in lines
    assert lines[1].endswith("BLEU 38.10  <- its best")
    assert lines[5] == (
        "de-en on val, the average of 1 (part4-bpe-all): greedy length ratio "
        "0.970; beam search:"
    )
    assert lines[9].endswith("BLEU 38.40, length ratio 1.010  <- its best, not chosen")
    assert lines[10].startswith("  (the best is the largest tried")
    at = lines.index("de-en on val, greedy, part4-bpe-all-eq3:")
    assert lines[at + 3].endswith("BLEU 39.30  <- chosen")
    assert lines[at + 5].startswith("de-en on val, the average of 3 (part4-bpe-all-eq3")
    assert lines[at + 8].endswith("BLEU 39.20, length ratio 0.980  <- chosen")
    assert len(lines) == at + 10
    assert report.spread({"why_not": "not measured"}, None) == [
        "seed spread: not measured"
    ]


def test_the_comparison_lists_the_published_figures_and_every_row(summary):
    lines = report.compare(summary)
    assert lines[0] == "the paper (Table 2, WMT 2014 newstest2014):"
    assert f"  {'OPUS-MT tc-big gmw-gmw, DE-EN':<34}  39.9" in lines
    rows = lines[-len(summary["rows"]) :]
    assert rows[0] == f"  {'words, tie=' + repr('tgt') + ', greedy':<34} 36.82  (de-en)"
    assert len(lines) == 1 + 4 + 1 + 3 + 1 + len(summary["rows"])


def test_bench_sentence():
    figures = {"didactic": {"tokens_per_s": 2000.0}, "fast": {"tokens_per_s": 3720.0}}
    assert "1.86 times as many" in report.bench(figures)
    assert "only one path" in report.bench({"fast": {"tokens_per_s": 1.0}})


def test_averaging_table_lines(summary):
    lines = report.averaging_table(summary)
    assert lines[0] == (
        "greedy, de-en, test_2016; the runs share their first 1120 steps and end at "
        "step 1600"
    )
    assert lines[1].split() == [
        *("schedule", "last", "rate", "best", "average", "of"),
        *("gain", "val", "best", "val", "avg"),
    ]
    # label, last rate, best, average, of n, gain, val best, val average
    assert lines[2].split() == [
        *("eq.", "3", "alone", "1.1e-03", "36.31", "37.72", "3"),
        *("+1.41", "36.93", "37.90"),
    ]
    assert lines[3].split() == [
        *("eq.", "3,", "cool-down", "0.0e+00", "37.78", "37.36", "3"),
        *("-0.42", "37.75", "38.08"),
    ]
    assert len({len(line) for line in lines[1:]}) == 1, "the columns align"
    summary["averaging"] = None
    assert report.averaging_table(summary) == [
        "not measured: one of the two runs diverged"
    ]


def test_the_committed_model_in_one_sentence():
    manifest = {
        "what": "Part 4's full recipe (shared BPE, tie='all'), the snapshot of step 8",
        "preset": "cpu",
        "machine": "AMD EPYC",
        "averaged_steps": [8],
        "bleu": {
            "exported": {"greedy": {"bleu": 38.583}, "beam": {"bleu": 39.0}},
            "pytorch": {"greedy": {"bleu": 1.0}, "beam": {"bleu": 2.0}},
        },
    }
    assert report.committed_model(manifest) == (
        "the committed model: Part 4's full recipe (shared BPE, tie='all'), the "
        "snapshot of step 8, preset cpu on AMD EPYC, steps [8]; test_2016 BLEU 38.58 "
        "greedy, 39.00 with beam search. A model you train is another model, with "
        "other attention."
    )


def test_an_unknown_word_is_scored_as_one_wrong_token():
    """atkit.scoring.corpus_bleu (the notebook's `bleu`): `<unk>` and `⁇` count as
    one token that matches nothing, where sacreBLEU's 13a would split them in three;
    the outputs holding one are counted."""
    from atkit.scoring import corpus_bleu

    refs = ["a dog runs on the grass .", "two men play ."]
    hyps = ["a <unk> runs on the grass .", "two \u2047 play ."]
    r = corpus_bleu(hyps, refs)
    assert r["score"].sys_len == r["score"].ref_len == 11  # one token each
    assert r["ratio"] == 1.0 and r["unk"] == 2 and r["hyps"] == hyps
    assert r["score"].counts[0] == 9  # the unknown words match nothing
    assert "tok:13a" in r["signature"] and r["bleu"] == round(r["score"].score, 2)
