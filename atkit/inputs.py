"""Checks of what a reader hands the notebook's translation functions (Part 3's
`translate_ids`, `translate_texts` and `Translator`): input the model cannot handle is
rejected before it reaches torch, with an error that says what is wrong and what to
pass instead. Unknown words are no error: they become `<unk>`, as in training."""

from __future__ import annotations

import inspect

from atkit.settings import check_setting


def check_search(owner: str, search) -> None:
    """A search is called as search(model, src, src_mask, max_len, start, end,
    stepper=...): `greedy_decode`, or what make_search(name, ...) returns for a name
    in the notebook's SEARCHES."""
    name = getattr(search, "__name__", type(search).__name__)
    try:
        params = inspect.signature(search).parameters.values()
    except (TypeError, ValueError):  # not callable, or a function without one
        params = None if callable(search) else []
    if params is not None and not any(
        p.name == "stepper" or p.kind is p.VAR_KEYWORD for p in params
    ):
        raise TypeError(
            f"{owner}: search={name} is not a decoding function (it takes no "
            "stepper); pass greedy_decode, or make_search(name) with the search's "
            "options as keywords (make_search('beam', beam_size=4, alpha=0.6))"
        )


def check_sources(sources, max_len: int, vocab_size: int | None = None) -> None:
    """Framed source id lists for translate_ids: a non-empty list of non-empty lists
    of ids below `vocab_size`, none longer than the model's positional encoding
    (`max_len`)."""
    if not isinstance(sources, list) or not all(isinstance(s, list) for s in sources):
        raise TypeError("sources must be a list of id lists")
    if not sources or not all(sources):
        raise ValueError("nothing to translate: no sentences, or an empty one")
    longest = max(map(len, sources))
    if longest > max_len:
        raise ValueError(
            f"a source has {longest} ids; this model's positional "
            f"encoding covers {max_len}"
        )
    if vocab_size is not None:
        bad = [
            (n, i)
            for n, s in enumerate(sources)
            for i in s
            if not isinstance(i, int) or not 0 <= i < vocab_size
        ]
        if bad:
            n, i = bad[0]
            raise ValueError(
                f"source {n} holds the id {i!r}, outside this model's vocabulary of "
                f"{vocab_size} (ids 0 to {vocab_size - 1}); encode text with the "
                "model's own vocabulary (vocab.encode)"
            )


def check_translation(model, sources, decode_tokens, search) -> None:
    """What translate_ids is handed: a search (check_search), framed sources that fit
    the model (check_sources: its vocabulary, its positional encoding's max_len) and
    a decoding budget of at least one token."""
    check_search("translate_ids", search)
    vocab_size = model.src_embed[0].lut.num_embeddings
    check_sources(sources, model.config.max_len, vocab_size)
    check_setting("translate_ids", "decode_tokens", decode_tokens, int, low=1)


def check_options(owner: str, src_lang: str, search) -> None:
    """translate_texts' and Translator's options: a source language of Multi30k's
    and a search (check_search)."""
    from atkit.data import LANGS

    check_setting(owner, "src_lang", src_lang, str, choices=LANGS)
    check_search(owner, search)


def text_list(texts) -> list[str]:
    """The sentences of translate_texts as a list; a single string is an error,
    because iterating over it would translate it character by character."""
    if isinstance(texts, str):
        raise TypeError(
            "translate_texts takes a list of strings; for one sentence use Translator"
        )
    texts = list(texts)
    if not all(isinstance(t, str) for t in texts):
        raise TypeError("translate_texts takes a list of strings")
    return texts


def check_tokenized(tokens: list[list[str]]) -> None:
    """Every sentence has at least one token."""
    empty = [i for i, t in enumerate(tokens) if not t]
    if empty:
        raise ValueError(f"nothing to translate in sentence(s) {empty[:5]}: empty text")


def one_text(text) -> str:
    """Translator's input: one string."""
    if not isinstance(text, str):
        raise TypeError(f"translate() takes a string, not {type(text).__name__}")
    return text


def check_ids(ids: list[int], limit: int) -> list[int]:
    """The ids of one sentence (words or subword pieces): at least one, at most
    `limit` (the positional encoding's length, less <s> and </s>)."""
    if not ids:
        raise ValueError("nothing to translate: the text is empty or only whitespace")
    if len(ids) > limit:
        raise ValueError(
            f"the text is {len(ids)} ids long (words or subword pieces); this "
            f"model takes at most {limit}. Split it into sentences."
        )
    return ids
