"""The golden files of the JavaScript unit tests (tests/js/golden/, written by
tools/js_golden.py) are what the notebook's code gives now.

tests/js/*.test.js (`make test-js`, Node's own test runner) check atkit/translator.js
and atkit/attention_view.js against these files; a change of the notebook's tokenizer,
BPE, decoding, of the export format or of the attention view's spec that the committed
files do not show fails here, so they cannot go stale. The fix: `make js-golden`, then
`make test-js`.
"""

from __future__ import annotations

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
