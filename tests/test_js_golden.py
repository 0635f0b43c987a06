"""The golden files of the JavaScript unit tests (tests/js/golden/, written by
tools/js_golden.py) are what the notebook's code gives now.

tests/js/*.test.js (`make test-js`, Node's own test runner) check
atkit/page/translator.js and atkit/page/attention_view.js against these files; a change
of the notebook's tokenizer, BPE, decoding, of the export format or of the attention
view's spec that the committed files do not show fails here, so they cannot go stale.
The fix: `make js-golden`, then `make test-js`.
"""

from __future__ import annotations

import itertools
import json
import math

import pytest

from conftest import lazy

js_golden = lazy("tools.js_golden")


GOLDEN = js_golden.GOLDEN
BUDGET = 200_000  # bytes: the golden files together stay small


def same(a, b, tol=2e-6) -> bool:
    """Equal JSON values, floats within `tol` (PyTorch's forward passes round
    differently on another CPU)."""
    if isinstance(a, float) or isinstance(b, float):
        ok = isinstance(a, (int, float)) and isinstance(b, (int, float))
        return ok and math.isclose(a, b, rel_tol=0, abs_tol=tol)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(
            same(x, y, tol) for x, y in zip(a, b, strict=True)
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], tol) for k in a)
    return a == b


@pytest.mark.training  # it learns a sentencepiece model: seconds
def test_golden_files_are_what_the_notebooks_code_gives_now(lib):
    files = js_golden.golden(lib)
    committed = sorted(p.name for p in GOLDEN.iterdir())
    assert committed == sorted(files), f"{GOLDEN}: run `python -m tools.js_golden`"
    stale = []
    for name, text in files.items():
        old = (GOLDEN / name).read_text(encoding="utf-8")
        if name == "cases.json":
            fresh = same(json.loads(old), json.loads(text))
        else:  # the model file and the attention specs: integers and exact ratios
            fresh = old == text
        if not fresh:
            stale.append(name)
    assert not stale, f"stale in {GOLDEN}: {stale}; run `python -m tools.js_golden`"
    size = sum(len(t.encode()) for t in files.values())
    assert size < BUDGET, f"the golden files take {size:,} bytes"


def test_float_tolerance_is_narrow():
    assert same({"a": [1, 0.5]}, {"a": [1, 0.5000015]})
    assert not same({"a": [1, 0.5]}, {"a": [1, 0.50001]})
    assert not same([1, 2], [1, 2, 3]) and not same({"a": 1}, {"b": 1})
    assert not same("x", "y") and not same(1, "1")


def committed(name: str) -> str:
    return (GOLDEN / name).read_text(encoding="utf-8")


def test_the_golden_model_file_and_views_are_what_the_code_writes_now(
    lib, monkeypatch, tmp_path, capsys, on_toy_corpus
):
    """The fast part of the check above: the model file (its weights from the seed,
    the settings, spaCy's rules, the detokenizer) with the committed BPE in place of
    sentencepiece's training, and the attention views; the decoding cases are
    checked on a sample below. Then the program's --out and --check."""
    proto = export_model_file().spm_proto
    asked = []

    def tokenized(split, lang, n, root):
        assert root == str(on_toy_corpus), "Multi30k is not read here"
        asked.append((split, lang, n))
        return [[f"{lang}-sentence"]]

    def learn_bpe(sentences, size):
        assert sentences == [["de-sentence"], ["en-sentence"]]
        assert size == js_golden.BPE_SIZE
        return lib.SharedBPE(proto)

    monkeypatch.setattr(lib, "tokenized", tokenized)
    monkeypatch.setattr(lib, "train_shared_bpe", learn_bpe)
    cases = json.loads(committed("cases.json"))
    monkeypatch.setattr("tools.js_golden.cases", lambda lib_, path: cases)
    files = js_golden.golden(lib)
    assert asked == [("train", lang, js_golden.BPE_SENTENCES) for lang in lib.LANGS]
    assert sorted(files) == sorted(p.name for p in GOLDEN.iterdir())
    for name, text in files.items():
        assert text == committed(name), f"{name}: run `python -m tools.js_golden`"
    monkeypatch.setattr("tools.js_golden.golden", lambda lib_: files)
    assert js_golden.main(["--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    for name, line in zip(files, printed, strict=True):
        assert (tmp_path / name).read_text(encoding="utf-8") == committed(name)
        assert line == f"{tmp_path / name}: {len(files[name].encode()):,} bytes"
    assert js_golden.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "attention.json").write_text("{}")
    (tmp_path / "cases.json").unlink()
    capsys.readouterr()
    assert js_golden.main(["--check", "--out", str(tmp_path)]) == 1
    assert capsys.readouterr().err.splitlines() == [  # issue 69: missing, not stale
        f"{tmp_path / name} is {state}: run `python -m tools.js_golden`"
        for name, state in (("cases.json", "missing"), ("attention.json", "stale"))
    ]


def export_model_file():
    from atkit import export

    return export.read_model(GOLDEN / js_golden.MODEL_FILE)


def test_a_sample_of_the_decoding_cases_is_what_the_search_gives_now(lib):
    """The committed greedy and beam-search cases (the first of each norm) decoded
    again with the committed model, pre-norm and in its post-norm form, and the
    fuzzed texts drawn again from their seed."""
    import pipeline as pl

    model, cfg, vocab, _ = pl.load_exported(GOLDEN / js_golden.MODEL_FILE)
    models = {"pre": model, "post": js_golden.post_norm(lib, cfg, model.state_dict())}
    assert not models["post"].training
    assert models["post"].config.norm == "post" and model.config.norm == "pre"
    cases = json.loads(committed("cases.json"))
    sample = [c for c in cases["greedy"] if c["norm"] == "pre"][:3]
    sample += [c for c in cases["greedy"] if c["norm"] == "post"][:3]
    for n, c in enumerate(sample):
        m = models[c["norm"]]
        out, ended = js_golden.search(lib, m, c["src"], c["limit"])
        assert (out, ended) == (c["out"], c["ended"]), c
        margin = js_golden.greedy_margin(lib, m, c["src"], out, ended)
        assert margin >= js_golden.MARGIN
        if n % 3:
            continue
        # the smallest gap over the steps: no larger for more steps (up to the
        # rounding of other shapes)
        prefixes = [
            js_golden.greedy_margin(lib, m, c["src"], out[:k], False)
            for k in range(1, len(out) + 1)
        ] + [margin]
        assert all(a >= b - 1e-5 for a, b in itertools.pairwise(prefixes)), prefixes
        assert prefixes[0] - prefixes[-1] > 1e-3 or len(out) < 3, c
    beams = [c for c in cases["beam"] if c["out"]][:2]
    beams += [c for c in cases["beam"] if c["norm"] == "post"][:2]
    for c in beams:
        beam = (c["k"], c["alpha"])
        out, _ = js_golden.search(lib, models[c["norm"]], c["src"], c["limit"], beam)
        assert out == c["out"], c
    texts = [t["text"] for t in cases["tokenize"]]
    assert texts[-40:] == js_golden.fuzz_texts(40, js_golden.SEED)
    assert texts[: len(js_golden.EDGE_TEXTS)] == js_golden.EDGE_TEXTS
