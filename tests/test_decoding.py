"""Decoding: one contract that every search of the notebook's SEARCHES keeps, the
searches' own properties (greedy, beam search, the decoding cache), and the checks of
what a reader hands the decoding entry points (translate_ids, translate_texts,
Translator, make_search and the searches' records).

The contract, for any model, on a padded batch with one length limit per sentence:

* layout: each row starts with <s>; after the first </s> there is only </s> (the
  padding); a row without </s> fills the whole width;
* limits: no row holds more tokens than its own limit; a model that never ends a
  sentence fills each row exactly to it;
* batch independence: a sentence decodes the same alone and in any batch;
* the cache: CachedDecoderStepper gives the tokens of DecoderStepper, the definition.

The contract runs each search at its record's defaults, and (on random models) with
each option at its bounds and beyond its default (`option_values`): a new search
added to SEARCHES, with options of its own, is tested without a change here.
"""

import copy
import itertools
import math

import pytest

from atkit import searches
from atkit.searches import PrefixModel
from atkit.settings import ConfigError
from conftest import lazy, needs, toy_corpus
from tools import train as cli

torch = lazy("torch")
fast = lazy("atkit.fast")

TINY = {"n_train": 200, "n_eval": 8, "max_len": 40, "N": 1, "d_model": 32, "h": 2}


def pytest_generate_tests(metafunc):
    """`search_name`: every name in the notebook's SEARCHES."""
    if "search_name" in metafunc.fixturenames:
        import nbexport

        metafunc.parametrize("search_name", nbexport.registry_names("SEARCHES"))


@pytest.fixture(scope="module")
@needs("training")
def half_copy(trained):
    """A copy-task model trained for 80 steps, and the sources of its data: good
    enough that some outputs end with </s>, at various lengths, not so good that all
    of them do; some run to their length limit."""
    run = trained(
        "copy",
        n_train=400,
        n_eval=16,
        max_tokens=200,
        N=1,
        d_model=32,
        d_ff=64,
        h=2,
        steps=80,
        eval_every=80,
        keep=1,
        warmup=10,
        P_drop=0.0,
        cooldown=0.0,
    )
    return run.model.eval(), [s for s, _ in run.data.val]


def never_ends(lib, model):
    """`model` with the end symbol's logit pushed down: every output runs to its
    length limit."""
    model = copy.deepcopy(model)
    with torch.no_grad():
        model.generator.proj.bias[lib.EOS] = -1e4
    return model


def padded(lib, sources):
    src = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(s) for s in sources], batch_first=True, padding_value=lib.PAD
    )
    return src, (src != lib.PAD).unsqueeze(-2)


def length(lib, row: list[int]) -> int:
    """The tokens of a row before its first </s>, <s> included (all if it has
    none). A row that ends before its limit holds </s> too; one that reaches its
    limit is padded with </s>: either way this is at most the limit."""
    return row.index(lib.EOS) if lib.EOS in row else len(row)


def check_layout(lib, out, limits):
    """Rows start with <s>; only </s> after the first </s>; each row within its
    own limit. Returns each row's length."""
    lengths = []
    for row, limit in zip(out.tolist(), limits, strict=True):
        assert row[0] == lib.BOS, row
        n = length(lib, row)
        assert set(row[n:]) <= {lib.EOS}, row
        assert n <= limit, (n, limit, row)
        lengths.append(n)
    return lengths


def option_values(record) -> list[dict]:
    """The defaults ({}), then each option alone at its low bound (half its default
    where it has none) and beyond its default (twice it, plus one, within its high
    bound): what the contract on random models runs for every search."""
    out = [{}]
    for name, bounds in record.options.items():
        default = record.defaults()[name]
        low = default / 2 if bounds.low is None else bounds.low
        high = default * 2 + 1
        high = high if bounds.high is None else min(high, bounds.high)
        out += [{name: low}, {name: type(default)(high)}]
    return out


# ------------------------------------------------------------------ the contract


def test_every_search_keeps_the_decoding_contract(lib, half_copy, search_name):
    model, sources = half_copy
    search = lib.make_search(search_name)
    sources = sources[:10]
    src, mask = padded(lib, sources)
    limits = [2, 3, 5, 8, 13, 21, *(len(s) + 50 for s in sources[6:])]
    limit_t = torch.tensor(limits)

    def decode(model, src, mask, limits, stepper=lib.CachedDecoderStepper):
        return search(model, src, mask, limits, lib.BOS, lib.EOS, stepper=stepper)

    # layout and limits
    out = decode(model, src, mask, limit_t)
    assert out.size(0) == len(sources)
    lengths = check_layout(lib, out, limits)
    ended = [n for n, limit in zip(lengths, limits, strict=True) if n < limit]
    assert len(set(ended)) >= 2, f"too few outputs end, at too few lengths: {lengths}"
    assert lengths != ended, "no output reaches its limit"
    # a model that never ends a sentence fills each row exactly to its limit
    endless = never_ends(lib, model)
    full = decode(endless, src, mask, limit_t)
    assert check_layout(lib, full, limits) == limits
    # batch independence: each sentence alone gives its row of the batch
    for i, limit in enumerate(limits):
        for m, batch in ((model, out), (endless, full)):
            n = len(sources[i])
            alone = decode(m, src[i : i + 1, :n], mask[i : i + 1, :, :n], limit)
            n = alone.size(1)
            assert batch[i, :n].tolist() == alone[0].tolist(), (i, limit)
            assert set(batch[i, n:].tolist()) <= {lib.EOS}
    # ... also through translate_ids, which buckets the sources into batches
    together = lib.translate_ids(model, sources, decode_tokens=1000, search=search)
    alone = lib.translate_ids(model, sources, decode_tokens=1, search=search)
    assert together == alone
    assert all(lib.EOS not in ids and lib.BOS not in ids for ids in together)
    outs = lib.translate_ids(endless, sources, decode_tokens=1000, search=search)
    assert [len(o) - len(s) for o, s in zip(outs, sources, strict=True)] == [49] * 10
    # the cache gives the tokens of the definition
    plain = decode(model, src, mask, limit_t, stepper=lib.DecoderStepper)
    assert torch.equal(out, plain)


def test_a_limit_of_one_is_the_start_symbol_alone(lib, half_copy, search_name):
    model, sources = half_copy
    search = lib.make_search(search_name)
    src, mask = padded(lib, sources[:3])
    out = search(model, src, mask, torch.tensor([1, 9, 9]), lib.BOS, lib.EOS)
    assert length(lib, out[0].tolist()) == 1, out[0].tolist()


def test_searches_are_chosen_by_name(lib):
    """SEARCHES maps names to records; make_search checks the name and the options;
    search_name says which search and options a function is (tools.train records
    it); the command line offers exactly these names."""
    assert lib.make_search("greedy") is lib.greedy_decode
    assert searches.search_name(lib.make_search("greedy"), lib.SEARCHES) == "greedy"
    three = lib.make_search("beam", beam_size=3, alpha=0.0)
    assert searches.search_name(three, lib.SEARCHES) == "beam(beam_size=3, alpha=0.0)"
    assert searches.search_name(lib.make_search("beam"), lib.SEARCHES) == (
        "beam(beam_size=4, alpha=0.6)"  # the paper's, from beam_search's defaults
    )
    for name, record in lib.SEARCHES.items():
        made = lib.make_search(name)
        assert searches.search_name(made, lib.SEARCHES).startswith(name)
        assert getattr(made, "keywords", {}) == record.defaults()
    with pytest.raises(ConfigError, match="greedy"):
        lib.make_search("sampling")
    with pytest.raises(ConfigError, match=r"greedy has no option\(s\) \['beam_size'\]"):
        lib.make_search("greedy", beam_size=3)
    with pytest.raises(ConfigError, match=r"options: \['beam_size', 'alpha'\]"):
        lib.make_search("beam", width=3)
    parser = cli.make_parser(tuple(lib.SEARCHES))
    choices = next(a for a in parser._actions if a.dest == "search").choices
    assert tuple(choices) == tuple(lib.SEARCHES)


# ------------------------------------------------------- the decoding cache


def padding_mask(lengths, S):
    """(B, 1, S) bool, True where a real token is."""
    return (torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]).unsqueeze(1)


def stepper_model(lib, norm, attn_impl, tie="none"):
    """A random model: Part 1's classes ("didactic") or the fast path's ("sdpa")."""
    torch.manual_seed(0)
    model = lib.make_model(
        13, 13, "tiny", N=2, d_model=32, d_ff=64, h=4, norm=norm, tie=tie
    )
    if attn_impl == "sdpa":
        fast.set_fast_path(model)
    return model.eval()


@pytest.mark.parametrize("attn_impl", ["didactic", "sdpa"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_stepper_matches_full_decode_at_every_step(lib, norm, attn_impl):
    model = stepper_model(lib, norm, attn_impl)
    src = torch.randint(2, 13, (3, 7))
    src_mask = padding_mask([7, 4, 1], 7)  # padded sources: the cache must mask them
    ys = torch.randint(2, 13, (3, 9))
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.decode(memory, src_mask, ys, lib.subsequent_mask(9))  # (B, T, d)
        step = lib.CachedDecoderStepper(model, memory, src_mask)
        for t in range(1, 10):
            torch.testing.assert_close(step(ys[:, :t]), full[:, t - 1])
    assert step.cache[0][0].k.shape[2] == 9  # one cached key per position
    # the model is left as it was: each attention's own forward again
    assert all("forward" not in vars(m) for m in model.modules())


def test_decoder_stepper_reorder_follows_the_rows(lib):
    model = stepper_model(lib, "pre", "sdpa")
    src = torch.randint(2, 13, (4, 6))
    src_mask = padding_mask([6, 5, 3, 2], 6)
    ys = torch.randint(2, 13, (4, 5))
    rows = torch.tensor([2, 2, 0, 3])  # duplicates and drops, as beam search does
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        step = lib.CachedDecoderStepper(model, memory, src_mask)
        for t in range(1, 4):
            step(ys[:, :t])
        step.reorder(rows)
        got = step(ys[rows, :4])
        want = model.decode(
            memory[rows], src_mask[rows], ys[rows, :4], lib.subsequent_mask(4)
        )[:, -1]
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_the_cache_follows_the_beams_on_random_models(lib, norm, search_name):
    """Random models of both layer orders, tied weights, padded sources: the cache
    changes no token of any search, also when beams are re-ranked (reorder)."""
    model = stepper_model(lib, norm, "didactic", tie="all")
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(3, 13, (6, 8), generator=gen)
    src[3:, 5:] = 0  # padding
    mask = (src != 0).unsqueeze(-2)
    for kw in option_values(lib.SEARCHES[search_name]):
        search = lib.make_search(search_name, **kw)
        cached = search(model, src, mask, 20, 1, 2, stepper=lib.CachedDecoderStepper)
        plain = search(model, src, mask, 20, 1, 2, stepper=lib.DecoderStepper)
        assert torch.equal(cached, plain), kw


# ------------------------------------------------------------------ beam search


def random_model(lib, seed, V=13):
    torch.manual_seed(seed)
    return lib.make_model(V, V, "tiny", N=1, d_model=16, d_ff=32, h=2).eval()


@pytest.mark.parametrize("seed", range(4))
def test_beam_size_one_is_greedy_on_a_random_model(lib, seed):
    model = random_model(lib, seed)
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 13, (6, 7), generator=gen)
    src[1, 5:] = 0  # some padding
    mask = (src != 0).unsqueeze(-2)
    for max_len, end in ((1, 2), (9, 2), (15, 3), (6, None)):
        greedy = lib.greedy_decode(model, src, mask, max_len, 1, end)
        beam = lib.beam_search(model, src, mask, max_len, 1, end, beam_size=1)
        assert torch.equal(beam, greedy), (max_len, end)


def test_greedy_and_beam_copy_with_the_trained_copy_model(lib, copy_model):
    """The copy model is trained to convergence (the notebook's 20 epochs), so both
    searches must copy every sequence, on any CPU's rounding."""
    copy_model, losses = copy_model
    assert losses[-1] < 0.01 * losses[0], "the copy task did not converge"
    gen = torch.Generator().manual_seed(4321)
    fresh = next(lib.copy_batches(11, 16, 1, generator=gen))
    greedy = lib.greedy_decode(copy_model, fresh.src, fresh.src_mask, 10, 1)
    beam1 = lib.beam_search(copy_model, fresh.src, fresh.src_mask, 10, 1, None, 1)
    assert torch.equal(beam1, greedy)
    beam4 = lib.beam_search(copy_model, fresh.src, fresh.src_mask, 10, 1, None, 4)
    for out in (greedy, beam4):
        assert int((out == fresh.src).all(1).sum()) == 16


S, E, A, B = 0, 1, 2, 3


def greedy_trap(src_id, prefix):
    """Greedy takes A (0.6) then ends with 0.34; B then </s> is 0.4 * 0.9."""
    if prefix == ():
        return [0, 0.001, 0.6, 0.399]
    if prefix == (A,):
        return [0, 0.34, 0.33, 0.33]
    if prefix == (B,):
        return [0, 0.9, 0.05, 0.05]
    return [0, 1.0, 0.0, 0.0]


def run(lib, model, k, alpha=0.0, max_len=6, n=1):
    src = torch.full((n, 3), 5, dtype=torch.long)
    mask = torch.ones(n, 1, 3, dtype=torch.bool)
    if k == 0:
        return lib.greedy_decode(model, src, mask, max_len, S, E)
    return lib.beam_search(model, src, mask, max_len, S, E, beam_size=k, alpha=alpha)


def test_beam_finds_the_sequence_greedy_misses(lib):
    model = PrefixModel(greedy_trap)
    assert run(lib, model, 0).tolist() == [[S, A, E]]
    assert run(lib, model, 1).tolist() == [[S, A, E]]
    for k, alpha in ((2, 0.0), (2, 0.6), (4, 0.6)):
        assert run(lib, model, k, alpha).tolist() == [[S, B, E]], (k, alpha)


def random_table(src_id, prefix):
    """Next-token probabilities over {</s>, 2, 3, 4} drawn from the prefix."""
    gen = torch.Generator().manual_seed(hash((src_id, prefix)) % 2**31)
    p = torch.rand(4, generator=gen) ** 3 + 0.01
    return [0.0, *(p / p.sum()).tolist()]


def best_by_enumeration(src_id, max_len, alpha):
    """The best length-normalised score over every possible output."""
    best = -math.inf
    for n in range(1, max_len):
        for body in itertools.product((2, 3, 4), repeat=n - 1):
            for last in (E, 2, 3, 4) if n == max_len - 1 else (E,):
                ys = (*body, last)
                logp = sum(
                    math.log(random_table(src_id, ys[:i])[tok])
                    for i, tok in enumerate(ys)
                )
                best = max(best, logp / ((5 + n) / 6) ** alpha)
    return best


def score(src_id, row, alpha):
    ys = row[1:]
    ys = ys[: ys.index(E) + 1] if E in ys else ys
    logp = sum(
        math.log(random_table(src_id, tuple(ys[:i]))[t]) for i, t in enumerate(ys)
    )
    return logp / ((5 + len(ys)) / 6) ** alpha


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_a_wide_beam_finds_the_best_scored_output(lib, alpha):
    """With more beams than prefixes, beam search is exhaustive: it must find the
    best output under the length penalty, which keeps finished hypotheses."""
    model, max_len = PrefixModel(random_table), 5
    src = torch.tensor([[7, 0], [8, 0], [9, 0]])
    mask = torch.ones(3, 1, 2, dtype=torch.bool)
    out = lib.beam_search(model, src, mask, max_len, S, E, beam_size=64, alpha=alpha)
    for src_id, row in zip((7, 8, 9), out.tolist(), strict=True):
        expected = best_by_enumeration(src_id, max_len, alpha)
        assert score(src_id, row, alpha) == pytest.approx(expected, abs=1e-5)


def test_length_penalty_changes_the_winner(lib):
    def table(src_id, prefix):  # short: A </s> = 0.5; long: B B B </s> = 0.405
        if prefix == ():
            return [0, 0.0, 0.5, 0.5]
        if prefix in ((B,), (B, B)):
            return [0, 0.1, 0.0, 0.9]
        return [0, 1.0, 0.0, 0.0]

    model = PrefixModel(table)
    assert run(lib, model, 4, alpha=0.0, max_len=8).tolist() == [[S, A, E]]
    # lp(2) = (7/6)^2, lp(4) = (9/6)^2: log 0.5 / lp(2) < log 0.405 / lp(4)
    assert run(lib, model, 4, alpha=2.0, max_len=8).tolist() == [[S, B, B, B, E]]


def test_beam_batched_over_hand_built_tables_equals_one_by_one(lib):
    """Sentences whose next-token tables differ, so the batch holds beams that
    finish at different steps."""
    model = PrefixModel(random_table)
    src = torch.tensor([[7, 1], [8, 1], [9, 1], [10, 1], [11, 1]])
    mask = torch.ones(5, 1, 2, dtype=torch.bool)
    batched = lib.beam_search(model, src, mask, 7, S, E, beam_size=3, alpha=0.6)
    for i in range(5):
        one = lib.beam_search(model, src[i : i + 1], mask[i : i + 1], 7, S, E, 3, 0.6)
        assert torch.equal(batched[i, : one.size(1)], one[0]), i
        assert (batched[i, one.size(1) :] == E).all()


def test_sampling_is_seeded_and_follows_the_temperature(lib):
    """The same seed gives the same tokens; a low temperature is greedy on the hand
    model, a high one draws B (probability 0.4) often; never <s>."""
    model = PrefixModel(greedy_trap)
    src, mask = torch.full((200, 3), 5), torch.ones(200, 1, 3, dtype=torch.bool)
    src[:, 0] = torch.arange(200)  # 200 sentences: 200 random streams

    def firsts(**options):
        out = lib.make_search("sample", **options)(model, src, mask, 6, S, E)
        assert (out[:, 1:] != S).all()
        return out[:, 1].tolist()

    one = firsts(seed=1)
    assert firsts(seed=1) == one and firsts(seed=2) != one
    assert 0.5 < one.count(A) / 200 < 0.7  # about 0.6
    assert firsts(temperature=0.05).count(A) == 200
    assert 0.3 < firsts(temperature=20.0).count(B) / 200 < 0.5  # about 0.33


def test_a_search_record_takes_its_defaults_from_its_function():
    from atkit.searches import Option, Search

    def decode(model, src, mask, max_len, start, end, width=3, stepper=None):
        return (width,)

    record = Search(decode, {"width": Option(low=1)})
    assert record.defaults() == {"width": 3}
    assert searches.manifest_entry({"w": record}, "w") == {"width": 3}
    assert searches.manifest_entry({"w": record}, "w", width=5) == {"width": 5}
    assert (
        searches.search_name(record.make("w", width=5), {"w": record}) == "w(width=5)"
    )
    with pytest.raises(ValueError, match=r"w.width=0: must be an integer >= 1"):
        record.make("w", width=0)
    with pytest.raises(TypeError, match="keyword parameter depth"):
        Search(decode, {"depth": Option(low=1)})


def test_length_penalty_formula(lib):
    assert lib.length_penalty(1, 0.6) == pytest.approx(1.0)
    assert lib.length_penalty(7, 0.0) == 1.0
    assert lib.length_penalty(13, 0.6) == pytest.approx(3.0**0.6)


# ---------------------------------------- what the decoding entry points accept


@pytest.fixture(scope="module")
def words_model(lib, cfg, toy_data):
    """An untrained model of word vocabularies (of the made-up sentences): the
    checks come before it computes anything, and what it computes is not under
    test."""
    data = toy_data
    torch.manual_seed(0)
    model = lib.build_model(cfg.model, len(data.vocab_src), len(data.vocab_tgt))
    return model.eval()


@pytest.fixture(scope="module")
def translate(lib, toy_data, words_model):
    return lib.Translator(words_model, toy_data.vocab_src, toy_data.vocab_tgt)


@pytest.mark.parametrize(
    "beam_size, alpha, word",
    [
        (0, 0.6, "beam_size"),
        (-2, 0.6, "beam_size"),
        (2.5, 0.6, "beam_size"),
        (True, 0.6, "beam_size"),
        (100_000, 0.6, "beam_size=100000"),  # issue 47: refused before any work
        (4, -0.1, "alpha"),
        (4, float("nan"), "alpha"),
        (4, float("inf"), "alpha"),
    ],
)
def test_bad_beam_settings(lib, beam_size, alpha, word):
    with pytest.raises(ConfigError, match=word) as err:
        lib.make_search("beam", beam_size=beam_size, alpha=alpha)
    if beam_size == 100_000:
        assert f"<= {lib.MAX_BEAM}" in str(err.value)


def test_decoding_entry_points_refuse_what_is_not_a_search(lib, toy_data, words_model):
    data = toy_data
    model, vs, vt = words_model, data.vocab_src, data.vocab_tgt
    ids = [[lib.BOS, 5, lib.EOS]]
    for call in (
        lambda: lib.Translator(model, vs, vt, search=lib.SEARCHES["beam"]),  # record
        lambda: lib.translate_ids(model, ids, search=lib.SEARCHES["beam"]),
        lambda: lib.translate_texts(model, ["Ein Hund"], vs, vt, search="beam"),
        lambda: lib.bleu(model, data, "val", search=lib.length_penalty),
    ):
        with pytest.raises(TypeError, match=r"make_search\('beam'"):
            call()
    beam = lib.make_search("beam", beam_size=2)
    assert lib.translate_ids(model, ids, decode_tokens=10, search=beam)


def test_translate_ids_refuses_what_it_cannot_decode(lib, words_model):
    model = words_model
    vocab = model.src_embed[0].lut.num_embeddings
    with pytest.raises(ValueError, match="nothing to translate"):
        lib.translate_ids(model, [])
    with pytest.raises(ValueError, match="nothing to translate"):
        lib.translate_ids(model, [[lib.BOS, 5, lib.EOS], []])
    with pytest.raises(TypeError, match="id lists"):
        lib.translate_ids(model, "abc")
    with pytest.raises(TypeError, match="id lists"):
        lib.translate_ids(model, [torch.tensor([lib.BOS, 5, lib.EOS])])
    with pytest.raises(ConfigError, match="decode_tokens"):
        lib.translate_ids(model, [[lib.BOS, 5, lib.EOS]], decode_tokens=0)
    too_long = [lib.BOS] + [5] * model.config.max_len + [lib.EOS]
    with pytest.raises(ValueError, match="positional"):
        lib.translate_ids(model, [too_long])
    # issue 47: ids outside the vocabulary get our message, not torch's IndexError
    for bad in (vocab, vocab + 5, -1, 2.0, "5"):
        with pytest.raises(ValueError, match="outside this model's vocabulary") as e:
            lib.translate_ids(model, [[lib.BOS, 5, lib.EOS], [lib.BOS, bad, lib.EOS]])
        assert f"source 1 holds the id {bad!r}" in str(e.value)
        assert f"ids 0 to {vocab - 1}" in str(e.value)


def test_translate_texts_takes_a_list_of_texts(lib, toy_data, words_model):
    model, vs, vt = words_model, toy_data.vocab_src, toy_data.vocab_tgt
    with pytest.raises(TypeError, match="list"):
        lib.translate_texts(model, "Ein Hund läuft.", vs, vt)
    with pytest.raises(TypeError, match="list"):
        lib.translate_texts(model, [b"bytes"], vs, vt)
    for bad in ([""], ["Ein Hund", "  "]):
        with pytest.raises(ValueError, match="empty"):
            lib.translate_texts(model, bad, vs, vt)
    with pytest.raises(ConfigError, match="lang"):
        lib.translate_texts(model, ["Bonjour"], vs, vt, src_lang="fr")
    texts = ["Ein Hund läuft.", "Zwei Männer"]
    as_list = lib.translate_texts(model, texts, vs, vt)
    assert lib.translate_texts(model, (t for t in texts), vs, vt) == as_list
    assert len(as_list) == 2 and all(isinstance(t, str) for t in as_list)


@pytest.mark.parametrize("bad", [None, 42, b"Ein Hund", ["Ein", "Hund"]])
def test_translator_takes_one_string(translate, bad):
    with pytest.raises(TypeError, match="string"):
        translate(bad)


@pytest.mark.parametrize("blank", ["", "   ", "\n\t "])
def test_translator_refuses_empty_text(translate, blank):
    with pytest.raises(ValueError, match="empty"):
        translate(blank)


def test_translator_length_limit_and_unseen_words(lib, translate):
    limit = translate.model.config.max_len - 2  # room for <s> and </s>
    assert isinstance(translate(" ".join(["Hund"] * limit)), str)  # at the limit
    with pytest.raises(ValueError, match=f"at most {limit}"):
        translate(" ".join(["Hund"] * (limit + 1)))
    word = "Quetzalcoatlverkleidung"
    assert translate.vocab_src.encode([word]) == [lib.UNK]
    out = translate(f"Ein {word} läuft.")
    assert isinstance(out, str) and "<s>" not in out and "</s>" not in out
    with pytest.raises(ConfigError, match="src_lang"):
        lib.Translator(translate.model, None, None, src_lang="fr")


def test_translator_counts_subword_pieces_not_words(lib, cfg):
    """A BPE model reads pieces: a text of few words but many pieces is refused with
    the count of pieces, never cut to fit."""
    import pipeline as pl

    bpe_cfg = cfg.updated(vocab="bpe", bpe_size=200, tie="all", max_len=256)
    with toy_corpus():  # the made-up sentences
        bpe_data = pl.prepare_data(bpe_cfg)
    torch.manual_seed(0)
    vocab = len(bpe_data.vocab_src)
    model = lib.build_model(bpe_cfg.model, vocab, vocab).eval()
    translate = lib.Translator(model, bpe_data.vocab_src, bpe_data.vocab_tgt)
    words = "Donaudampfschifffahrtsgesellschaftskapitänsmützenabzeichen " * 12
    pieces = len(bpe_data.vocab_src.encode(words.split()))
    assert len(words.split()) < 254 < pieces
    with pytest.raises(ValueError, match=f"{pieces} ids"):
        translate(words)
    assert isinstance(translate("Ein Hund."), str)


# ------------------------------------------------------------------ scoring


def test_bleu_by_hand_is_sacrebleus_score(lib):
    """The arithmetic of "What a BLEU score counts" gives sacreBLEU's own number:
    for a corpus (also one shorter than its references) and for a sentence."""
    import sacrebleu

    hyps = ["a dog runs on the grass .", "two men are talking", "a red car"]
    refs = ["a dog is running on the grass .", "two men talk", "a red car parked"]
    for pairs in ((hyps, refs), (hyps[2:], refs[2:])):
        score = sacrebleu.metrics.BLEU().corpus_score(pairs[0], [pairs[1]])
        p, bp, by_hand = lib.bleu_by_hand(score)
        assert by_hand == pytest.approx(score.score, abs=1e-9)
        assert p == pytest.approx(score.precisions, abs=1e-9)
    assert bp < 1.0  # "a red car" is shorter than its reference
    one = sacrebleu.metrics.BLEU(effective_order=True).sentence_score(
        hyps[0], [refs[0]]
    )
    assert lib.bleu_by_hand(one)[2] == pytest.approx(one.score, abs=1e-9)
