"""sacreBLEU as the notebook scores with it (Part 3, "Translating and scoring").

sacreBLEU scores detokenized text against the raw references with its standard
tokenization (13a). One detail is the notebook's own: a word model writes `<unk>` for
a word outside its list, which 13a would split into `<`, `unk` and `>` (one wrong
word counted as three, and the output two tokens longer each time). `corpus_bleu`
scores `<unk>`, and sentencepiece's `⁇` for an unknown piece, as the single token
`UNK`, which matches no reference word, and counts the outputs that hold one.
"""

from __future__ import annotations

UNKNOWN = ("<unk>", "\u2047")  # a word model's <unk>; sentencepiece's unknown piece


def corpus_bleu(hyps: list[str], refs: list[str]) -> dict:
    """sacreBLEU of the detokenized outputs `hyps` against one reference each:
    `bleu` (rounded as printed: gains are differences of these), `ratio` (output
    length over reference length), `score` (sacreBLEU's own), `hyps`, `unk` (the
    outputs that hold an unknown mark) and `signature`."""
    import sacrebleu

    scored = [h.replace(UNKNOWN[0], "UNK").replace(UNKNOWN[1], "UNK") for h in hyps]
    metric = sacrebleu.metrics.BLEU()
    score = metric.corpus_score(scored, [refs])
    return {
        "bleu": round(score.score, 2),
        "ratio": score.sys_len / score.ref_len,
        "score": score,
        "hyps": hyps,
        "unk": sum(any(mark in h for mark in UNKNOWN) for h in hyps),
        "signature": str(metric.get_signature()),
    }
