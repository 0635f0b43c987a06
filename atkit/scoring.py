"""sacreBLEU as the notebook scores with it (Part 3, "Translating and scoring"), and
the paired bootstrap that puts an interval on a gain between two systems (Part 4).

sacreBLEU scores detokenized text against the raw references with its standard
tokenization (13a). One detail is the notebook's own: a word model writes `<unk>` for
a word outside its list, which 13a would split into `<`, `unk` and `>` (one wrong
word counted as three, and the output two tokens longer each time). `corpus_bleu`
scores `<unk>`, and sentencepiece's `⁇` for an unknown piece, as the single token
`UNK`, which matches no reference word, and counts the outputs that hold one.
`paired_bootstrap` scores the same way, so that its gains are those printed.
"""

from __future__ import annotations

import os
from unittest import mock

UNKNOWN = ("<unk>", "\u2047")  # a word model's <unk>; sentencepiece's unknown piece
RESAMPLES = 1000  # sacreBLEU's default for its paired bootstrap
SEED = 12345  # sacreBLEU's default seed (SACREBLEU_SEED), fixed here whatever is set
WITHIN = "within noise"


def scored_text(hyps: list[str]) -> list[str]:
    """The outputs as sacreBLEU sees them here: each unknown mark one token."""
    return [h.replace(UNKNOWN[0], "UNK").replace(UNKNOWN[1], "UNK") for h in hyps]


def corpus_bleu(hyps: list[str], refs: list[str]) -> dict:
    """sacreBLEU of the detokenized outputs `hyps` against one reference each:
    `bleu` (rounded as printed: gains are differences of these), `ratio` (output
    length over reference length), `score` (sacreBLEU's own), `hyps`, `unk` (the
    outputs that hold an unknown mark) and `signature`."""
    import sacrebleu

    metric = sacrebleu.metrics.BLEU()
    score = metric.corpus_score(scored_text(hyps), [refs])
    return {
        "bleu": round(score.score, 2),
        "ratio": score.sys_len / score.ref_len,
        "score": score,
        "hyps": hyps,
        "unk": sum(any(mark in h for mark in UNKNOWN) for h in hyps),
        "signature": str(metric.get_signature()),
    }


def verdict(low: float, high: float) -> str:
    """What an interval on a gain says, read as printed (two decimals): "within
    noise" when it covers 0 (a bound that prints as 0.00 covers it), else "gain" or
    "loss"."""
    low, high = round(low, 2), round(high, 2)
    if low > 0:
        return "gain"
    if high < 0:
        return "loss"
    return WITHIN


def paired_bootstrap(
    base: list[str], hyps: list[str], refs: list[str], resamples: int = RESAMPLES
) -> dict:
    """The gain in BLEU of the outputs `hyps` over `base` (two systems' outputs for
    the same source sentences, against the same references `refs`) and its 95 %
    interval, by sacreBLEU's paired bootstrap resampling (`PairedTest` with
    test_type "bs": both systems scored on the same resampled sentence sets, seed
    SEED). sacreBLEU reports each system's interval and a p-value; the interval of
    the gain is read from the same resamples: the differences, sorted, at the
    positions sacreBLEU's `estimate_ci` reads (the 26th and the 975th of 1,000).

    Returns `gain` (hyps' BLEU minus base's, unrounded), `low`, `high`, `verdict`
    (see `verdict`), `p` (sacreBLEU's p-value), `bleu` and `base_bleu`,
    `resamples`, `seed` and `signature`."""
    import numpy as np
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest, estimate_ci

    if not len(base) == len(hyps) == len(refs) > 0:
        raise ValueError(
            f"paired_bootstrap: {len(base)} and {len(hyps)} outputs for {len(refs)} "
            "references; give both systems' outputs for the same sentences, one per "
            "reference"
        )

    class Seen(BLEU):
        """sacreBLEU's BLEU, keeping every score it computes, in order."""

        def __init__(self):
            super().__init__()
            self.scores = []

        def _compute_score_from_stats(self, stats):
            score = super()._compute_score_from_stats(stats)
            self.scores.append(score.score)
            return score

    metric = Seen()
    with mock.patch.dict(os.environ, {"SACREBLEU_SEED": str(SEED)}):
        test = PairedTest(
            [("base", scored_text(base)), ("system", scored_text(hyps))],
            {"BLEU": metric},
            references=[refs],
            test_type="bs",
            n_samples=resamples,
        )
    signatures, results = test()
    first, second = results["BLEU"]
    # In its paired test sacreBLEU scores the base system on every resample, then the
    # other system on the same resamples: the last 2 x n scores it computed.
    n = resamples
    paired = np.array(metric.scores[-2 * n :])
    base_scores, scores = paired[:n], paired[n:]
    mean, ci = estimate_ci(scores)
    if len(metric.scores) < 2 * n or (mean, ci) != (second.mean, second.ci):
        import sacrebleu

        raise RuntimeError(
            f"sacreBLEU {sacrebleu.__version__} no longer computes its paired "
            "bootstrap's scores in the order atkit.scoring.paired_bootstrap reads "
            "them; pin the sacreBLEU of requirements.txt, or read its resamples anew"
        )
    diffs = np.sort(scores - base_scores)
    low, high = diffs[n // 40], diffs[n - n // 40 - 1]
    return {
        "gain": second.score - first.score,
        "low": float(low),
        "high": float(high),
        "verdict": verdict(low, high),
        "p": second.p_value,
        "bleu": second.score,
        "base_bleu": first.score,
        "resamples": n,
        "seed": SEED,
        "signature": str(signatures["BLEU"]),
    }
