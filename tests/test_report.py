"""atkit.report: Part 4's table and its lines, written from made-up numbers that hit
the cases a real run may hit (a diverged run, a gain exactly the seed range, no average
that helped, no seed spread)."""

from pathlib import Path

import pytest

from atkit import prose, report

ROOT = Path(__file__).resolve().parents[1]


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


def test_why_no_spread_applies_is_wrapped_to_the_page(tmp_path, monkeypatch):
    """A run in another precision than the committed spread's is told why, in lines
    that fit the page's output box (the committed bfloat16 run printed one line of
    190 characters, which wrapped on the page at 1280 px)."""
    import json

    from atkit import config, seeds

    monkeypatch.setattr(seeds, "spread_path", lambda preset: tmp_path / "s.json")
    committed = json.loads((ROOT / "runs" / "seed-spread-cpu.json").read_text())
    (tmp_path / "s.json").write_text(json.dumps(committed))
    other = "bf16" if committed["precision"] != "bf16" else "fp32"
    spread, why = seeds.load_spread("cpu", {}, config.RunConfig, other)
    lines = report.spread({"why_not": why}, None)
    assert spread is None and len(lines) > 1 and lines[0].startswith("seed spread: ")
    assert max(map(len, lines)) <= prose.WIDTH
    assert " ".join(lines) == f"seed spread: {why}"


def test_a_diverged_run_is_reported_in_its_row_and_the_rest_go_on(summary):
    summary["rows"][4].update(
        diverged="loss not finite at step 312", bleu=None, ratio=None
    )
    lines = report.table(summary)
    post = next(ln for ln in lines if ln.startswith("5 "))
    assert "diverged: loss not finite at step 312" in post
    assert next(ln for ln in lines if ln.startswith("4 ")).split()[-2] == "+1.13"
    assert "diverged" in next(ln for ln in report.compare(summary) if "post" in ln)


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
    rows = lines[10 : 10 + len(summary["rows"])]
    assert rows[0] == f"  {'words, tie=' + repr('tgt') + ', greedy':<34} 36.82  (de-en)"
    assert len(lines) == 1 + 4 + 1 + 3 + 1 + len(summary["rows"]) + 3


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


# ------------------------------------------------- a gain and its paired interval


def systems(n=300, seed=0):
    """References and systems' outputs for them: `worse` loses about a fifth of its
    words, `better` about a tenth, `unk` writes <unk> where `better` does, and
    `alike` loses as many as `worse`, other ones."""
    import random

    rng = random.Random(seed)
    words = "a dog man woman runs sits on in the grass street red two play .".split()
    refs = [" ".join(rng.choices(words, k=rng.randint(6, 14))) for _ in range(n)]

    def damaged(share):
        return [
            " ".join(
                w if rng.random() > share else rng.choice(words) for w in r.split()
            )
            for r in refs
        ]

    worse, better, alike = damaged(0.2), damaged(0.1), damaged(0.2)
    unk = [h.replace("grass", "<unk>") for h in better]
    return refs, worse, better, unk, alike


def resampled_gains(base, hyps, refs, resamples=1000, seed=12345):
    """The paired bootstrap written out from sacreBLEU's pieces: the gain on each
    resample of the sentences, the resamples drawn as sacreBLEU draws them."""
    import numpy as np
    from sacrebleu.metrics import BLEU

    from atkit.scoring import scored_text

    metric = BLEU()
    a, b = (
        np.array(metric._extract_corpus_statistics(scored_text(h), [refs]))
        for h in (base, hyps)
    )
    idx = np.random.default_rng(seed).choice(
        len(refs), size=(resamples, len(refs)), replace=True
    )
    score = metric._compute_score_from_stats
    return np.sort([score(b[i].sum(0)).score - score(a[i].sum(0)).score for i in idx])


def test_the_interval_is_sacrebleus_paired_bootstrap(monkeypatch):
    """The gain is the difference of the two BLEU scores corpus_bleu prints (<unk>
    one token); the p-value and the system's own interval are those of sacreBLEU's
    PairedTest; the bounds are the 26th and 975th of the 1,000 resampled gains;
    SACREBLEU_SEED in the environment changes nothing (the seed is fixed)."""
    import sacrebleu
    from sacrebleu.significance import PairedTest

    from atkit import scoring

    refs, worse, _, unk, _ = systems()
    monkeypatch.setenv("SACREBLEU_SEED", "none")
    r = scoring.paired_bootstrap(worse, unk, refs)
    ours = [scoring.corpus_bleu(h, refs)["score"].score for h in (worse, unk)]
    plain = sacrebleu.corpus_bleu(unk, [refs]).score  # <unk> as three tokens
    assert r["gain"] == pytest.approx(ours[1] - ours[0], abs=1e-9)
    assert abs(r["bleu"] - plain) > 0.01, "the systems are scored as corpus_bleu does"
    monkeypatch.setenv("SACREBLEU_SEED", "12345")
    test = PairedTest(
        [("a", scoring.scored_text(worse)), ("b", scoring.scored_text(unk))],
        {"BLEU": sacrebleu.metrics.BLEU()},
        references=[refs],
        test_type="bs",
        n_samples=1000,
    )
    _, results = test()
    assert r["p"] == results["BLEU"][1].p_value
    gains = resampled_gains(worse, unk, refs)
    assert (r["low"], r["high"]) == pytest.approx((gains[25], gains[974]), abs=1e-4)
    assert r["low"] < r["gain"] < r["high"]
    assert (r["resamples"], r["seed"]) == (1000, 12345)
    assert "bs:1000" in r["signature"] and "seed:12345" in r["signature"]
    assert scoring.paired_bootstrap(worse, unk, refs) == r, "the same every time"


def test_the_interval_turns_with_the_comparison_and_decides_the_verdict():
    """Swapping the systems mirrors the interval; a clear gain is a gain, a clear
    loss a loss, the same outputs a zero interval within noise, and two systems of
    the same quality an interval around 0, within noise."""
    from atkit import scoring

    refs, worse, better, _, alike = systems()
    up = scoring.paired_bootstrap(worse, better, refs)
    down = scoring.paired_bootstrap(better, worse, refs)
    assert up["verdict"] == "gain" and up["low"] > 0
    assert down["verdict"] == "loss" and down["high"] < 0
    assert down["gain"] == pytest.approx(-up["gain"])
    assert (down["low"], down["high"]) == pytest.approx((-up["high"], -up["low"]))
    same = scoring.paired_bootstrap(worse, list(worse), refs)
    assert (same["gain"], same["low"], same["high"]) == (0.0, 0.0, 0.0)
    assert same["verdict"] == "within noise"
    level = scoring.paired_bootstrap(worse, alike, refs)  # as damaged: noise
    assert level["low"] < 0 < level["high"] and level["verdict"] == "within noise"
    assert level["gain"] != 0
    with pytest.raises(ValueError, match="one per reference"):
        scoring.paired_bootstrap(worse, better[:-1], refs)


@pytest.mark.parametrize(
    "low, high, said",
    [
        (-0.21, 1.12, "within noise"),
        (0.0, 0.0, "within noise"),
        (0.004, 0.9, "within noise"),  # printed [0.00, +0.90]: it covers 0
        (0.006, 0.9, "gain"),  # printed [+0.01, +0.90]
        (-0.9, -0.006, "loss"),
        (-0.9, -0.004, "within noise"),
        (-2.0, -1.0, "loss"),
    ],
)
def test_the_verdict_follows_the_interval_as_printed(low, high, said):
    from atkit.scoring import verdict

    assert verdict(low, high) == said


def with_intervals(summary):
    """The fixture's record with what a new run adds: intervals, the rows'
    changes, the seeds' scores of rows 1 and 2."""
    bounds = {
        2: (-0.21, 1.12),
        3: (-0.12, 0.31),
        4: (0.61, 1.62),
        5: (-1.9, -0.44),
        7: (-0.4, 0.5),
        8: (0.6, 1.7),
    }
    for r in summary["rows"]:
        r["change"] = f"change {r['no']}"
        if r["no"] in bounds:
            low, high = bounds[r["no"]]
            r["interval"] = dict(
                low=low, high=high, verdict="ignored", p=0.01, resamples=1000, seed=7
            )
    spread = dict(seeds=[0, 1, 2], min=36.1, max=36.82, range=0.72)
    summary["seeds"] = {
        "words": {**spread, "values": [36.82, 36.1, 36.2], "mean": 36.37},
        "bpe": {**spread, "values": [37.78, 37.0, 37.1], "mean": 37.29},
    }
    return summary


def test_each_compared_row_prints_its_interval_and_the_verdict_it_gives(summary):
    """Below the table: per compared row the gain of the table, its 95% interval
    and the verdict read from the interval's bounds (not from a stored word), and
    what differs; the rows the seed spread measured beside their seeds. The main
    table's lines stay as they were, so a reader of older outputs reads both."""
    from test_claims import parse_rows

    old = report.table(summary)
    lines = report.table(with_intervals(summary))
    assert lines[: len(old)] == old
    assert parse_rows("\n".join(lines)) == parse_rows("\n".join(old))
    rest = lines[len(old) :]
    assert rest[0].startswith("each gain's 95% interval: sacreBLEU's paired")
    assert "(1000 resamples, seed 7); within noise: the interval covers 0" in rest[1]
    by_row = {int(ln.split()[0]): ln.split() for ln in rest[3:9]}
    assert by_row[2][:6] == ["2", "1", "+0.96", "[-0.21,", "+1.12]", "within"]
    assert by_row[4][3:6] == ["[+0.61,", "+1.62]", "gain"]
    assert by_row[5][3:6] == ["[-1.90,", "-0.44]", "loss"]
    assert " ".join(by_row[8][-2:]) == "change 8"
    assert set(by_row) == {2, 3, 4, 5, 7, 8}, "rows without a reference have none"
    assert rest[9].startswith("this run beside its seeds")
    assert rest[10] == (
        "  row 1: 36.82 here; over seeds [0, 1, 2] mean 36.37, min 36.10, max 36.82"
    )
    assert rest[11].startswith("  row 2: 37.78 here; over seeds [0, 1, 2] mean 37.29")
    assert len(rest) == 12


def test_the_final_systems_are_compared_with_the_published_at_the_seeds_mean(summary):
    """de-en's final row against OPUS-MT as scored and shifted by the full recipe's
    seeds' mean minus this run's row 2; en-de, whose seeds were not measured, as
    scored only (OPUS-MT and Wu et al.)."""
    plain = report.compare(summary)
    assert plain[-3:] == [
        "this run's final systems against them:",
        "  de-en row 4, 39.00: OPUS-MT 39.9 -0.90; no seed spread for it",
        "  en-de row 8, 35.97: Wu et al. 41.02 -5.05, OPUS-MT 35.4 +0.57; no seed "
        "spread for it",
    ]
    summary["rows"][3]["bleu"] = 40.29
    summary["rows"][1]["bleu"] = 38.85
    summary["seeds"] = {"bpe": {"mean": 38.56, "seeds": [0, 1, 2]}}
    lines = report.compare(summary)
    assert lines[-3] == (
        "  de-en row 4, 40.29: OPUS-MT 39.9 +0.39; at the seeds' mean about 40.00: "
        "+0.10"
    )
    assert lines[-1] == (
        "  (at the seeds' mean: the row shifted by -0.29, the full recipe's seeds' "
        "mean minus row 2)"
    )
    summary["rows"][3]["diverged"] = "loss not finite at step 3"
    assert "  de-en: no final system (its run diverged)" in report.compare(summary)
