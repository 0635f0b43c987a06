"""A RunConfig's data: tokenized, encoded with the book's vocabularies (Part 3's
words or Part 4's shared BPE, as `cfg.vocab` says) and framed with <s> and </s>."""

from __future__ import annotations

import annotated_transformer_lib as book
from atkit import data as corpus  # read through the module: tests put made-up lines in
from atkit.data import (
    EVAL_SPLITS,
    LANGS,
    TranslationData,
    frame,
    other_lang,
    tokenized,
)
from atkit.settings import ConfigError

# RunConfig.vocab -> (the book's class, with from_state; its builder
# (cfg, src_sentences, tgt_sentences) -> (src_vocab, tgt_vocab))
VOCABS = {
    "words": (book.Vocab, book.build_word_vocabs),  # Part 3
    "bpe": (book.SharedBPE, book.build_shared_bpe),  # Part 4, §5.1
}


def prepare_data(cfg, root=None, vocabs=None) -> TranslationData:
    """The data of a RunConfig `cfg`; with `vocabs` (source, target), encoded with
    those, as a trained model needs, instead of with newly built ones (by the builder
    of `cfg.vocab`). Training pairs longer than `max_sent_len` ids are left out;
    evaluation sentences are never cut."""
    root = str(corpus.data_root(root))
    src_lang, tgt_lang = cfg.src_lang, other_lang(cfg.src_lang)
    tok = {lang: tokenized("train", lang, cfg.n_train, root) for lang in LANGS}
    if vocabs is None:
        build = VOCABS[cfg.vocab][1]
        vocabs = build(cfg, tok[src_lang], tok[tgt_lang])
    vs, vt = vocabs
    train = [
        (frame(vs.encode(s)), frame(vt.encode(t)))
        for s, t in zip(tok[src_lang], tok[tgt_lang], strict=True)
    ]
    train = [(s, t) for s, t in train if max(len(s), len(t)) <= cfg.max_sent_len]
    if not train:
        raise ConfigError(
            f"RunConfig.max_sent_len={cfg.max_sent_len}: no training pair fits; "
            "give a larger max_sent_len"
        )
    sources, text = {}, {}
    for split in EVAL_SPLITS:
        sides = dict(zip(LANGS, corpus.read_split(split, root), strict=True))
        text[split] = (sides[src_lang][: cfg.n_eval], sides[tgt_lang][: cfg.n_eval])
        src_tok = tokenized(split, src_lang, cfg.n_eval, root)
        sources[split] = [frame(vs.encode(s)) for s in src_tok]
    val_tgt = tokenized("val", tgt_lang, cfg.n_eval, root)
    val = [
        (s, frame(vt.encode(t))) for s, t in zip(sources["val"], val_tgt, strict=True)
    ]
    return TranslationData(vs, vt, train, val, sources, text, src_lang)


def vocab_from_state(state: dict):
    """The vocabulary a checkpoint stored (its `state()`), of the book's class for
    its kind."""
    kind = state.get("kind") if isinstance(state, dict) else None
    if kind not in VOCABS:
        raise ConfigError(f"unknown vocabulary kind {kind!r} in a checkpoint")
    return VOCABS[kind][0].from_state(state)
