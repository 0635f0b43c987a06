"""The checks of exercises.ipynb: each calls the reader's function on small inputs,
compares the result with the notebook's own code (the module nbexport.py generates)
or with PyTorch's and sacreBLEU's implementations, and says in words what is wrong.

    from atkit import exercises as check
    check.attention(attention)   # -> a Verdict: correct, wrong (and why), not done

A check never raises: a stub that still raises NotImplementedError is "not done yet",
an error inside the reader's function is reported with its type, message and line,
and a wrong result names the first thing that is off (a shape, a mask, a sum, a
scaling factor, the first position that differs). ``EXERCISES`` lists every check in
the notebook's order; tests/test_exercises.py runs each against the solutions
(exercises_solutions.py) and against typical wrong answers.
"""

from __future__ import annotations

import functools
import math
import textwrap
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

NOT_DONE = (  # a no-break space keeps the code in one piece when the line wraps
    "not done yet: write the function above in place of its "
    "`raise\u00a0NotImplementedError`, run its cell, then this one"
)
MARKS = {"correct": "✓", "wrong": "✗", "not done": "…"}


@dataclass(frozen=True)
class Verdict:
    """What a check found; shown in the notebook as one line of text."""

    exercise: str
    status: str  # "correct", "wrong" or "not done"
    message: str

    @property
    def ok(self) -> bool:
        return self.status == "correct"

    def __repr__(self) -> str:  # lines of at most 88 characters, as the code's
        text = f"{MARKS[self.status]} {self.exercise}: {self.message}"
        return textwrap.fill(text, 88, subsequent_indent="  ", break_long_words=False)

    __str__ = __repr__


class _NotDone(Exception):
    pass


class _Wrong(Exception):
    pass


EXERCISES: dict[str, Callable[..., Verdict]] = {}


def _exercise(body):
    """Register a check; the public function turns its outcome into a Verdict."""
    name = body.__name__

    @functools.wraps(body)
    def check(*functions) -> Verdict:
        for fn in functions:
            if not callable(fn):
                return Verdict(name, "wrong", f"expected a function, got {_kind(fn)}")
        try:
            with torch.no_grad():
                praise = body(*functions)
        except _NotDone:
            return Verdict(name, "not done", NOT_DONE)
        except _Wrong as wrong:
            return Verdict(name, "wrong", str(wrong))
        return Verdict(name, "correct", f"correct. {praise}")

    EXERCISES[name] = check
    return check


# --------------------------------------------------------------------------- helpers


def _lib():
    """The notebook's library code (exported and imported by nbexport.py)."""
    import nbexport

    return nbexport.load()


def _kind(value) -> str:
    if value is None:
        return "None (did you forget `return`?)"
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


_MASK_HINT = {  # for multi-head attention's mask
    "must match the size": " (a mask of shape (B, T, S) needs a head dimension, "
    "mask.unsqueeze(1), to broadcast to the scores' (B, h, T, S))"
}
_HINTS = {
    "view size is not compatible": " (after a transpose the tensor is not "
    "contiguous: use .reshape, or .contiguous().view)",
    "without overflow": " (a fill value such as -1e9 does not fit in float16, whose "
    "largest magnitude is 65504: fill with torch.finfo(scores.dtype).min)",
}


def _call(fn, *args, context: str = "", hints: dict | None = None):
    """fn(*args); NotImplementedError means not done, any other error is reported
    with the line of the reader's code it came from."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise _NotDone from None
    except Exception as exc:  # the reader's code may raise anything
        frames = [
            f
            for f in traceback.extract_tb(exc.__traceback__)
            if f.filename != __file__ and "site-packages" not in f.filename
        ]
        where = f", at `{frames[-1].line}`" if frames and frames[-1].line else ""
        hints = {**_HINTS, **(hints or {})}
        hint = next((h for key, h in hints.items() if key in str(exc)), "")
        raise _Wrong(
            f"your function raised {type(exc).__name__}: {exc}{where}{context}{hint}"
        ) from None


def _tensor(value, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise _Wrong(f"{what} should be a tensor, got {_kind(value)}")
    return value


def _shape(t: torch.Tensor, expected, what: str, hint: str = "") -> None:
    if tuple(t.shape) != tuple(expected):
        raise _Wrong(
            f"wrong shape: {what} has shape {tuple(t.shape)}, expected "
            f"{tuple(expected)}{hint}"
        )


def _close(got, want, atol=1e-5, rtol=1e-4) -> bool:
    if got.shape != want.shape:
        return False
    return bool(torch.allclose(got.double(), want.double(), atol=atol, rtol=rtol))


def _first_difference(got, want, what, dims, atol=1e-5, rtol=1e-4, hint="") -> None:
    """Raise naming the first position where `got` and `want` differ."""
    got, want = got.double(), want.double()
    bad = ~torch.isclose(got, want, atol=atol, rtol=rtol)
    if bad.any():
        idx = tuple(bad.nonzero()[0].tolist())
        at = ", ".join(f"{d} {i}" for d, i in zip(dims, idx, strict=True))
        raise _Wrong(
            f"{what} differs at ({at}): expected {want[idx].item():.6g}, got "
            f"{got[idx].item():.6g}{hint}"
        )


def _diagnose(got, variants, atol=1e-5, rtol=1e-4) -> None:
    """If `got` matches one of the (tensor, message) variants, raise its message."""
    for want, message in variants:
        if _close(got, want, atol, rtol):
            raise _Wrong(message)


def _number(value, what: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Wrong(f"{what} should be a number, got {_kind(value)}")
    return float(value)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed), dtype=dtype)


# --------------------------------------------------------------------------- Part 1


def _ln(x, gamma, beta, eps, unbiased=False, eps_outside=False):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=unbiased, keepdim=True)
    std = var.sqrt() + eps if eps_outside else (var + eps).sqrt()
    return gamma * (x - mean) / std + beta


@_exercise
def layer_norm(fn):
    d, eps = 8, 1e-6
    x = _randn(2, 3, d, seed=1) * 3 + 1
    x[1, 2] = 1e-3 * _randn(d, seed=2)  # a row whose features barely vary
    gamma, beta = _randn(d, seed=3), _randn(d, seed=4)
    want = F.layer_norm(x, (d,), gamma, beta, eps)
    got = _tensor(_call(fn, x.clone(), gamma, beta, eps), "the result")
    _shape(got, x.shape, "the result", " (normalise over the last dimension only)")
    if not _close(got, want):
        plain = _ln(x, 1.0, 0.0, eps)
        _diagnose(
            got,
            [
                (
                    _ln(x, gamma, beta, eps, unbiased=True),
                    "you used the unbiased variance (divided by d - 1, the default "
                    "of x.var() and x.std()); LayerNorm divides by d: "
                    "x.var(-1, unbiased=False)",
                ),
                (
                    _ln(x, gamma, beta, eps, eps_outside=True),
                    "eps is added outside the square root (std + eps); LayerNorm "
                    "takes sqrt(var + eps). The two differ on rows whose features "
                    "barely vary: see row (1, 2) of the check's input",
                ),
                (plain, "gamma and beta were not applied: gamma * x_hat + beta"),
                (plain * gamma, "beta (the shift) was not added"),
                (plain + beta, "gamma (the scale) was not applied"),
            ],
        )
        _first_difference(got, want, "the result", ("batch", "row", "feature"))
    return "It matches F.layer_norm (nn.LayerNorm's function)."


def _pre(x, sub, norm, drop):
    return x + drop(sub(norm(x)))


@_exercise
def pre_norm(fn):
    torch.manual_seed(0)
    d = 8
    x = _randn(2, 5, d, seed=5)
    norm, sub = nn.LayerNorm(d), nn.Linear(d, d)
    nn.init.normal_(norm.weight)
    nn.init.normal_(norm.bias)
    halve = lambda t: 0.5 * t  # noqa: E731 (a dropout stand-in the check can see)
    got = _tensor(_call(fn, x.clone(), sub, norm, halve), "the result")
    _shape(got, x.shape, "the result")
    want = _pre(x, sub, norm, halve)
    if not _close(got, want):
        ident = lambda t: t  # noqa: E731
        _diagnose(
            got,
            [
                (
                    norm(x + halve(sub(x))),
                    "that is post-norm (the paper's, §3.1): pre-norm normalises the "
                    "sublayer's input and leaves the residual path x untouched: "
                    "x + dropout(sublayer(norm(x)))",
                ),
                (
                    x + halve(norm(sub(x))),
                    "you normalised the sublayer's output; pre-norm normalises its "
                    "input: x + dropout(sublayer(norm(x)))",
                ),
                (
                    _pre(x, sub, norm, ident),
                    "dropout was not applied (the check passes a stand-in that "
                    "halves its input): x + dropout(sublayer(norm(x)))",
                ),
                (
                    halve(_pre(x, sub, norm, ident)),
                    "dropout was applied to the sum, residual included; it belongs "
                    "on the sublayer's output only",
                ),
                (halve(sub(norm(x))), "the residual x is not added back"),
                (x + halve(sub(x)), "the norm was not applied"),
            ],
        )
        _first_difference(got, want, "the result", ("batch", "position", "feature"))
    block = _lib().SublayerConnection(d, 0.0, norm="pre").eval()
    got = _call(fn, x.clone(), sub, block.norm, block.dropout)
    _first_difference(
        _tensor(got, "the result"), block(x, sub), "the result with the notebook's "
        "own LayerNorm", ("batch", "position", "feature"),
    )  # fmt: skip
    return "It matches the notebook's SublayerConnection(norm='pre')."


@_exercise
def subsequent_mask(fn):
    for size in (4, 7, 1):
        got = _tensor(_call(fn, size, context=f" (size={size})"), "the mask")
        _shape(
            got, (1, size, size), f"subsequent_mask({size})",
            " (a leading 1 lets the mask broadcast over the batch)",
        )  # fmt: skip
        if got.dtype != torch.bool:
            raise _Wrong(
                f"the mask has dtype {got.dtype}, expected torch.bool (True means "
                "'may attend', as in F.scaled_dot_product_attention)"
            )
        want = torch.ones(size, size, dtype=torch.bool).tril()[None]
        if torch.equal(got, want):
            continue
        if torch.equal(got, ~want):
            raise _Wrong("True and False are swapped: True means 'may attend'")
        if size > 1 and torch.equal(got, want.tril(-1)):
            raise _Wrong(
                "the diagonal is False: position t may attend to itself (row t is "
                "True at columns 0..t)"
            )
        if torch.equal(got, want.transpose(1, 2)):
            raise _Wrong(
                "the mask lets each position see the future and hides the past: "
                "row t must be True at columns 0..t (a lower triangle, torch.tril)"
            )
        t, c = (got != want)[0].nonzero()[0].tolist()
        raise _Wrong(
            f"subsequent_mask({size}) at row {t}, column {c} is {bool(got[0, t, c])}"
            f", expected {bool(want[0, t, c])} (row t is True at columns 0..t)"
        )
    return "It equals torch.tril of a boolean matrix of ones."


def _attention_inputs(dtype=torch.float32):
    q = _randn(2, 3, 4, 8, seed=10, dtype=dtype)  # (B, h, T, d_k)
    k = _randn(2, 3, 5, 8, seed=11, dtype=dtype)  # (B, h, S, d_k)
    v = _randn(2, 3, 5, 6, seed=12, dtype=dtype)  # (B, h, S, d_v)
    mask = torch.rand(2, 1, 4, 5, generator=_gen(13)) > 0.4  # (B, 1, T, S)
    mask[..., 0] = True  # every query may look at some key
    return q, k, v, mask


def _weights(q, k, mask, scale):
    scores = (q @ k.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return scores.softmax(-1)


def _pair(value, what):
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise _Wrong(f"{what} should return (output, weights), got {_kind(value)}")
    return _tensor(value[0], "the output"), _tensor(value[1], "the weights")


@_exercise
def attention(fn):
    q, k, v, mask = _attention_inputs()
    d_k = q.size(-1)
    out, p = _pair(_call(fn, q, k, v, mask), "attention")
    _shape(p, (2, 3, 4, 5), "the weights", " (batch, heads, queries, keys)")
    _shape(out, (2, 3, 4, 6), "the output", " (batch, heads, queries, d_v)")
    dims = ("batch", "head", "query", "key")
    sums = p.double().sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        idx = tuple((~torch.isclose(sums, torch.ones_like(sums), atol=1e-4))
                    .nonzero()[0].tolist())  # fmt: skip
        b, h, t = idx
        zeroed = bool((p.double().abs() * ~mask).max() == 0) and bool(
            (sums < 1 + 1e-6).all()
        )
        hint = (
            "you zeroed the masked weights after the softmax; fill the masked scores "
            "before it, so that the weights left still sum to one"
            if zeroed
            else "the softmax runs over the keys, the last dimension (softmax(dim=-1))"
        )
        raise _Wrong(
            f"the weights' rows do not sum to one (batch {b}, head {h}, query {t} "
            f"sums to {sums[idx].item():.4g}): {hint}"
        )
    want = _weights(q, k, mask, d_k**-0.5)
    if not _close(p, want):
        valid = (~mask).any(-1, keepdim=True)  # rows that keep a key when inverted
        inverted = torch.where(valid, _weights(q, k, ~mask, d_k**-0.5), 0.0)
        if _close(torch.where(valid, p, 0.0), inverted):
            raise _Wrong(
                "you hid the keys where the mask is True: True means 'may attend', "
                "so fill the scores where the mask is False"
            )
        leak = (p.double() > 1e-6) & ~mask
        if leak.any():
            idx = tuple(leak.nonzero()[0].tolist())
            at = ", ".join(f"{d} {i}" for d, i in zip(dims, idx, strict=True))
            raise _Wrong(
                f"masked positions receive weight: at ({at}) the mask is False and "
                f"the weight is {p[idx].item():.4g}. Fill the masked scores with a "
                "very negative number (torch.finfo(scores.dtype).min) before the "
                "softmax"
            )
        _diagnose(
            p,
            [
                (
                    _weights(q, k, mask, 1.0),
                    f"the scores are not scaled: eq. 1 divides QK^T by sqrt(d_k) = "
                    f"sqrt({d_k}) before the softmax",
                ),
                (
                    _weights(q, k, mask, 1 / d_k),
                    f"you divided the scores by d_k = {d_k}; eq. 1 divides by its "
                    f"square root, sqrt(d_k) = {d_k**0.5:.4g}",
                ),
                (
                    _weights(q, k, mask, d_k**0.5),
                    "you multiplied the scores by sqrt(d_k); eq. 1 divides by it",
                ),
            ],
        )
        _first_difference(p, want, "the weights", dims)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if not _close(out, ref):
        _first_difference(
            out, ref, "the output (compared with F.scaled_dot_product_attention)",
            ("batch", "head", "query", "feature"), hint=": it is weights @ value",
        )  # fmt: skip
    out, p = _pair(_call(fn, q, k, v, context=" with mask=None"), "attention")
    _first_difference(
        out, F.scaled_dot_product_attention(q, k, v), "the output with mask=None",
        ("batch", "head", "query", "feature"),
    )  # fmt: skip
    q16, k16, v16, _ = _attention_inputs(torch.float16)
    out16, p16 = _pair(
        _call(fn, q16, k16, v16, mask, context=" with float16 inputs"), "attention"
    )
    if not torch.isfinite(out16).all() or (p16.float() * ~mask).abs().max() > 0:
        raise _Wrong(
            "with float16 inputs masked positions get weight or the output is not "
            "finite: fill with torch.finfo(scores.dtype).min, which every dtype holds"
        )
    return "It matches F.scaled_dot_product_attention, in float32 and float16."


def _split_ref(x, h):
    B, L, d = x.shape
    return x.view(B, L, h, d // h).transpose(1, 2)


@_exercise
def heads(split_heads, merge_heads):
    B, L, h, d_k = 2, 3, 4, 2
    x = torch.arange(B * L * h * d_k, dtype=torch.float32).view(B, L, h * d_k)
    got = _tensor(_call(split_heads, x.clone(), h), "split_heads's result")
    _shape(got, (B, h, L, d_k), f"split_heads of a {(B, L, h * d_k)} input with "
           f"h={h}", " (batch, heads, positions, d_k)")  # fmt: skip
    want = _split_ref(x, h)
    if not torch.equal(got, want):
        idx = tuple((got != want).nonzero()[0].tolist())
        b, head, pos, _ = idx
        have = [divmod(int(v) % (L * h * d_k), h * d_k) for v in got[b, head, pos]]
        lo = head * d_k
        hint = (
            " (you reshaped straight to (B, h, L, d_k), which cuts the sequence, "
            "not the features, into heads: view as (B, L, h, d_k) first, then swap "
            "dimensions 1 and 2)"
            if torch.equal(got, x.view(B, h, L, d_k))
            else ""
        )
        raise _Wrong(
            f"split_heads: head {head} at position {pos} should hold features "
            f"{lo}..{lo + d_k - 1} of position {pos}; yours holds (position, feature) "
            f"{', '.join(map(str, have))}{hint}"
        )
    back = _tensor(_call(merge_heads, want.contiguous()), "merge_heads's result")
    _shape(back, x.shape, f"merge_heads of a {tuple(want.shape)} input",
           " (batch, positions, h * d_k)")  # fmt: skip
    if not torch.equal(back, x):
        hint = (
            " (you reshaped without moving the heads back next to d_k: transpose "
            "dimensions 1 and 2 first, then reshape)"
            if torch.equal(back, want.reshape(B, L, h * d_k))
            else ""
        )
        _first_difference(back, x, "merge_heads(split_heads(x))",
                          ("batch", "position", "feature"), hint=hint)  # fmt: skip
    return "merge_heads undoes split_heads, and both match the notebook's layout."


def _mha_reference(q, kv, mask, lin, h, scale=None, w_o=True):
    B, T, d = q.shape
    split = lambda t: _split_ref(t, h)  # noqa: E731
    Q, K, V = split(lin[0](q)), split(lin[1](kv)), split(lin[2](kv))
    m = None if mask is None else mask.unsqueeze(1)
    x = F.scaled_dot_product_attention(Q, K, V, attn_mask=m, scale=scale)
    x = x.transpose(1, 2).reshape(B, T, d)
    return lin[3](x) if w_o else x


@_exercise
def multi_head_attention(fn):
    torch.manual_seed(1)
    B, T, S, d, h = 2, 4, 5, 16, 4
    q, kv = _randn(B, T, d, seed=20), _randn(B, S, d, seed=21)
    mask = torch.rand(B, T, S, generator=_gen(22)) > 0.4  # (B, T, S), True: attend
    mask[..., 0] = True
    mha = nn.MultiheadAttention(d, h, batch_first=True)
    nn.init.normal_(mha.in_proj_bias)
    nn.init.normal_(mha.out_proj.bias)
    lin = [nn.Linear(d, d) for _ in range(4)]
    for i, layer in enumerate(lin[:3]):
        layer.weight.copy_(mha.in_proj_weight[i * d : (i + 1) * d])
        layer.bias.copy_(mha.in_proj_bias[i * d : (i + 1) * d])
    lin[3].weight.copy_(mha.out_proj.weight)
    lin[3].bias.copy_(mha.out_proj.bias)
    got = _tensor(_call(fn, q, kv, kv, *lin, h, mask, hints=_MASK_HINT), "the result")
    _shape(got, (B, T, d), "the result", " (batch, queries, d_model)")
    want, _ = mha(q, kv, kv, attn_mask=(~mask).repeat_interleave(h, 0))
    if not _close(got, want):
        _diagnose(
            got,
            [
                (
                    _mha_reference(q, kv, mask, lin, h, w_o=False),
                    "the output projection W^O is missing: apply w_o to the "
                    "concatenated heads",
                ),
                (
                    _mha_reference(q, kv, mask, lin, h, scale=d**-0.5),
                    f"you scaled the scores by sqrt(d_model) = sqrt({d}); each head "
                    f"divides by sqrt(d_k) = sqrt(d_model / h) = sqrt({d // h})",
                ),
                (
                    _mha_reference(q, kv, None, lin, h),
                    "the mask was not applied (mask has shape (B, T, S); give it "
                    "a head dimension: mask.unsqueeze(1))",
                ),
            ],
        )
        _first_difference(
            got, want, "the result (compared with nn.MultiheadAttention)",
            ("batch", "query", "feature"),
        )  # fmt: skip
    return "It matches nn.MultiheadAttention with the same weights."


def _pe_variant(max_len, d, kind):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    col = torch.arange(d, dtype=torch.float64)
    pair = col - col % 2  # the 2i of the formula, for both columns of a pair
    angle = pos / 10000 ** ((col if kind == "column" else pair) / d)
    if kind == "halves":
        angle = pos / 10000 ** (2 * torch.arange(d // 2, dtype=torch.float64) / d)
        return torch.cat([angle.sin(), angle.cos()], 1)
    if kind == "times":
        angle = pos * 10000 ** (pair / d)
    even = col % 2 == 0
    if kind == "swapped":
        even = ~even
    return torch.where(even, angle.sin(), angle.cos())


@_exercise
def positional_encoding(fn):
    max_len, d = 12, 8
    got = _tensor(_call(fn, max_len, d), "the table")
    _shape(got, (max_len, d), f"sinusoidal_table({max_len}, {d})",
           " (positions, d_model)")  # fmt: skip
    want = _lib().sinusoidal_table(max_len, d)
    if not _close(got, want):
        _diagnose(
            got,
            [
                (
                    _pe_variant(max_len, d, "swapped"),
                    "sines and cosines are swapped: even columns (2i) hold sines, "
                    "odd columns (2i + 1) cosines",
                ),
                (
                    _pe_variant(max_len, d, "column"),
                    "the exponent uses the column index j; both columns 2i and "
                    "2i + 1 of a pair share the frequency 1 / 10000^(2i / d_model)",
                ),
                (
                    _pe_variant(max_len, d, "halves"),
                    "you put all sines in the first half and all cosines in the "
                    "second; §3.5 interleaves them: sin in column 2i, cos in 2i + 1",
                ),
                (
                    _pe_variant(max_len, d, "times"),
                    "you multiplied the position by 10000^(2i / d_model); it is "
                    "divided by it (the wavelengths grow with i)",
                ),
            ],
        )
        _first_difference(got, want, "the table", ("position", "column"))
    return "It matches the notebook's sinusoidal_table."


# --------------------------------------------------------------------------- Part 2


@_exercise
def rate(fn):
    lib = _lib()
    for d_model, warmup in ((512, 400), (64, 10)):
        steps = sorted({1, 2, warmup // 2, warmup - 1, warmup, warmup + 1,
                        4 * warmup, 10_000})  # fmt: skip
        got = {s: _number(_call(fn, s, d_model, warmup), f"rate({s}, ...)")
               for s in steps}  # fmt: skip
        want = {s: lib.rate(s, d_model, 1.0, warmup) for s in steps}
        if all(math.isclose(got[s], want[s], rel_tol=1e-6) for s in steps):
            continue
        ratios = [got[s] / want[s] for s in steps]
        where = f" (d_model={d_model}, warmup={warmup})"
        if all(math.isclose(r, d_model**0.5, rel_tol=1e-6) for r in ratios):
            raise _Wrong(
                f"your rate is sqrt(d_model) = {d_model**0.5:.4g} times too large at "
                f"every step{where}: the factor d_model^-0.5 is missing"
            )
        if all(math.isclose(r, ratios[0], rel_tol=1e-6) for r in ratios):
            raise _Wrong(
                f"your rate is {ratios[0]:.4g} times eq. 3's at every step{where}: "
                "the shape is right, a constant factor is not"
            )
        grid = range(1, 3 * warmup + 1)
        curve = [_number(_call(fn, s, d_model, warmup), "the rate") for s in grid]
        peak = max(grid, key=lambda s: curve[s - 1])
        if peak != warmup:
            raise _Wrong(
                f"your rate peaks at step {peak}{where}; eq. 3 rises linearly until "
                "step = warmup and decays after it, as min(step^-0.5, step * "
                "warmup^-1.5)"
            )
        s = next(s for s in steps if not math.isclose(got[s], want[s], rel_tol=1e-6))
        raise _Wrong(
            f"at step {s}{where} eq. 3 gives {want[s]:.6g}, yours {got[s]:.6g}"
        )
    return "It matches eq. 3 (the notebook's rate with factor 1, no cool-down)."


@_exercise
def label_smoothing(fn):
    K, eps = 6, 0.1
    target = torch.tensor([2, 0, 5, 3])
    got = _tensor(_call(fn, target.clone(), K, eps), "q")
    _shape(got, (len(target), K), "q", " (one row per label, one column per token)")
    crit = _lib().LabelSmoothing(K, padding_idx=-1, smoothing=eps)
    crit(torch.zeros(len(target), K).log_softmax(-1), target)
    want = crit.true_dist
    sums = got.double().sum(1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-6):
        row = int((sums - 1).abs().argmax())
        hint = ""
        if math.isclose(float(got[row, target[row]]), 1 - eps, rel_tol=1e-5):
            hint = (
                "; the label's entry is 1 - eps, but the uniform part covers the "
                "label too: (1 - eps) + eps / K"
            )
        raise _Wrong(
            f"q's rows must sum to one; row {row} sums to {sums[row].item():.6g}{hint}"
        )
    if not _close(got, want, atol=1e-6):
        others = torch.full((len(target), K), eps / (K - 1))
        others[torch.arange(len(target)), target] = 1 - eps
        _diagnose(
            got,
            [
                (
                    others,
                    "you gave the label 1 - eps and spread eps over the K - 1 other "
                    "tokens; §5.4's definition mixes in the uniform distribution "
                    "over all K: the label gets 1 - eps + eps / K, every other token "
                    "eps / K",
                ),
                (
                    F.one_hot(target, K).to(got.dtype),
                    "q is the one-hot target, not smoothed: mix it with the uniform "
                    "distribution, (1 - eps) * one_hot + eps / K",
                ),
            ],
            atol=1e-6,
        )
        _first_difference(got, want, "q", ("label", "token"), atol=1e-6)
    logits = _randn(len(target), K, seed=30)
    ours = -(got * logits.log_softmax(-1)).sum(-1).mean()
    ref = F.cross_entropy(logits, target, label_smoothing=eps)
    if not math.isclose(ours.item(), ref.item(), rel_tol=1e-5):
        raise _Wrong("the loss with your q differs from F.cross_entropy's")
    return (
        f"It is the notebook's target, and -sum(q * log p) gives "
        f"F.cross_entropy(label_smoothing={eps}): {ref.item():.4f} on random logits."
    )


def _decode_setup():
    lib = _lib()
    torch.manual_seed(5)  # a seed whose untrained model writes varied tokens
    V = 12
    model = lib.make_model(
        V, V, "tiny", N=1, d_model=32, d_ff=64, h=4, P_drop=0.0, tie="none"
    )
    src = torch.randint(2, V, (3, 6), generator=_gen(31))
    src_mask = torch.ones(3, 1, 6, dtype=torch.bool)
    return lib, model.eval(), src, src_mask


@_exercise
def greedy_decode(fn):
    lib, model, src, src_mask = _decode_setup()
    max_len, start = 7, 1
    got = _tensor(_call(fn, model, src, src_mask, max_len, start), "the result")
    _shape(
        got,
        (src.size(0), max_len),
        "the result",
        " (one row per sentence, max_len tokens counting the start symbol)",
    )
    want = lib.greedy_decode(model, src, src_mask, max_len, start)
    if not torch.equal(got[:, 0], want[:, 0]):
        raise _Wrong(f"every row must start with the start symbol {start}")
    if not torch.equal(got, want):
        b, t = (got != want).nonzero()[0].tolist()
        hint = (
            "; the earlier tokens are right: run the decoder on the whole prefix "
            "ys with subsequent_mask, and take its output at the newest position "
            "([:, -1])"
            if t > 1
            else "; the first token after the start symbol is already wrong: take "
            "the argmax of model.generator on the decoder's output at the last "
            "position"
        )
        raise _Wrong(
            f"sentence {b}, position {t}: expected token {want[b, t].item()}, got "
            f"{got[b, t].item()}{hint}"
        )
    return "It writes the same tokens as the notebook's greedy_decode."


# --------------------------------------------------------------------------- Part 3

_BLEU_CASES = [  # (outputs, references): shorter, longer and as long as the refs
    (["the cat sat on the mat today", "a dog runs in a park"],
     ["the cat sat on the mat", "a dog runs in the park"]),
    (["the cat sat on mat", "a dog runs"],
     ["the cat sat on the mat", "a dog runs in the park"]),
    (["a man rides a red bike down the street", "two girls play"],
     ["a man rides a red bike on the street", "two girls play"]),
]  # fmt: skip


def _bleu_stats():
    from sacrebleu.metrics import BLEU

    return [BLEU().corpus_score(hyp, [ref]) for hyp, ref in _BLEU_CASES]


@_exercise
def bleu(brevity_penalty, bleu_score):
    from sacrebleu.metrics import BLEU

    for st in _bleu_stats():
        c, r = st.sys_len, st.ref_len
        got = _number(_call(brevity_penalty, c, r), "brevity_penalty")
        if not math.isclose(got, st.bp, rel_tol=1e-6):
            if c < r and math.isclose(got, math.exp(1 - c / r), rel_tol=1e-6):
                raise _Wrong(
                    f"brevity_penalty({c}, {r}): you computed e^(1 - c/r) = "
                    f"{got:.4g}; the penalty is e^(1 - r/c) = {st.bp:.4g}, with c "
                    "the output's length and r the references'"
                )
            if c > r:
                raise _Wrong(
                    f"brevity_penalty({c}, {r}) = {got:.4g}: an output longer than "
                    "its references is not penalised, BP = 1 when c > r"
                )
            raise _Wrong(
                f"brevity_penalty({c}, {r}) should be {st.bp:.6g} (sacreBLEU's), "
                f"got {got:.6g}"
            )
        got = _number(_call(bleu_score, list(st.counts), list(st.totals), c, r),
                      "bleu_score")  # fmt: skip
        want = BLEU.compute_bleu(st.counts, st.totals, c, r).score
        if math.isclose(got, want, rel_tol=1e-6):
            continue
        where = f" (counts {st.counts}, totals {st.totals}, c={c}, r={r})"
        if math.isclose(100 * got, want, rel_tol=1e-6):
            raise _Wrong(
                f"your BLEU is {got:.4g}, sacreBLEU's {want:.4g}: sacreBLEU reports "
                "percent, multiply by 100"
            )
        p = [ct / t for ct, t in zip(st.counts, st.totals, strict=True)]
        arith = st.bp * sum(p) / 4 * 100
        if math.isclose(got, arith, rel_tol=1e-6):
            raise _Wrong(
                f"you averaged the precisions arithmetically{where}; BLEU takes "
                "their geometric mean, exp(sum(log p_n) / 4)"
            )
        if st.bp < 1 and math.isclose(got, want / st.bp, rel_tol=1e-6):
            raise _Wrong(f"the brevity penalty is missing{where}: BLEU = BP * mean")
        raise _Wrong(f"BLEU should be {want:.6g} (sacreBLEU's){where}, got {got:.6g}")
    return "Both match sacreBLEU on outputs shorter, longer and as long as the refs."


# --------------------------------------------------------------------------- Part 4


@_exercise
def length_penalty(fn):
    lib = _lib()
    for length in (1, 4, 12, 30):
        for alpha in (0.0, 0.6, 1.0, 2.0):
            got = _number(_call(fn, length, alpha), "length_penalty")
            want = lib.length_penalty(length, alpha)
            if math.isclose(got, want, rel_tol=1e-6):
                continue
            if math.isclose(got * want, 1.0, rel_tol=1e-6):
                raise _Wrong(
                    f"length_penalty({length}, {alpha}) = {got:.6g} is the inverse "
                    f"of lp = ((5 + |Y|) / 6)^alpha = {want:.6g}: the score divides "
                    "by lp, so return lp itself"
                )
            raise _Wrong(
                f"length_penalty({length}, {alpha}) should be ((5 + {length}) / 6)^"
                f"{alpha} = {want:.6g}, got {got:.6g}"
            )
    return "It matches the notebook's length_penalty (Wu et al., 2016)."


def _beam_inputs():
    B, k, V = 2, 3, 7
    score = _randn(B, k, seed=40).abs().neg() * 3  # running log-probabilities
    score[1, 1:] = -math.inf  # sentence 1 is at its first step: one live beam
    logp = _randn(B * k, V, seed=41).log_softmax(-1)  # (B*k, V)
    return score, logp, k


@_exercise
def beam_candidates(fn):
    score, logp, k = _beam_inputs()
    B, V = score.size(0), logp.size(-1)
    result = _call(fn, score.clone(), logp.clone(), k)
    if not isinstance(result, tuple | list) or len(result) != 3:
        raise _Wrong(f"return (top, beam, token), got {_kind(result)}")
    top, beam, token = (_tensor(t, n) for t, n in zip(result, ("top", "beam", "token"),
                                                      strict=True))  # fmt: skip
    for t, name in ((top, "top"), (beam, "beam"), (token, "token")):
        _shape(t, (B, 2 * k), name, " (sentences, 2 * k candidates)")
    cand = (score.view(-1, 1) + logp).view(B, k * V)
    want, idx = cand.topk(2 * k, dim=-1)
    if not _close(top, want):
        only_logp = logp.view(B, k * V).masked_fill(cand == -math.inf, -math.inf)
        _diagnose(
            top,
            [
                (
                    only_logp.topk(2 * k, -1).values,
                    "you ranked the extensions by the new token's log-probability "
                    "alone; add each beam's running score: score[b, beam] + logp",
                ),
                (
                    (score.view(-1, 1) + logp)
                    .topk(2, -1)
                    .values.view(B, 2 * k)
                    .sort(-1, descending=True)
                    .values,
                    "you took the best extensions of each beam separately; the 2k "
                    "best of a sentence are chosen among all k * V extensions",
                ),
            ],
        )
        _first_difference(top, want, "top", ("sentence", "candidate"),
                          hint=" (best first)")  # fmt: skip
    if beam.dtype.is_floating_point or token.dtype.is_floating_point:
        raise _Wrong("beam and token should be integer tensors (idx // V, idx % V)")
    if beam.min() < 0 or beam.max() >= k or token.min() < 0 or token.max() >= V:
        raise _Wrong(
            f"beam must lie in 0..{k - 1} and token in 0..{V - 1}: of a flat index "
            "idx into the (k * V) candidates, the beam is idx // V and the token "
            "idx % V"
        )
    rows = torch.arange(B)[:, None] * k + beam
    total = score.gather(1, beam) + logp[rows, token]
    if not _close(total, top):
        b, r = (~torch.isclose(total, top)).nonzero()[0].tolist()
        raise _Wrong(
            f"sentence {b}, candidate {r}: score[{b}, {beam[b, r].item()}] + logp of "
            f"token {token[b, r].item()} is {total[b, r].item():.4g}, but top says "
            f"{top[b, r].item():.4g}: of a flat index idx, the beam is idx // V and "
            "the token idx % V"
        )
    return "Its candidates, beams and tokens match a topk over all k * V extensions."
