"""The exercises notebook: every check passes its solution, fails each plausible wrong
answer below with the message meant for it, says "not done yet" for a stub, and
reports an error in the reader's code without a traceback; the notebook itself runs
as Colab runs it, and its committed outputs are those of the unfilled stubs."""

import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import jupytext
import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

from conftest import (
    ROOT,
    add_commit,
    cell_errors,
    inherited_pythonpath,
    lazy,
    restarted_session,
    snapshot_repository,
)

torch = lazy("torch")
F = lazy("torch.nn.functional")
check = lazy("exercise_checks")
sol = lazy("exercises_solutions")


class Sol(str):
    """A function of exercises_solutions by name, looked up when a test runs (the
    collection of the tests loads no torch)."""

    @property
    def __name__(self):
        return str(self)


class Later:
    """A value made when the test runs (a tensor: no torch at collection)."""

    def __init__(self, make):
        self.make = make


def resolve(functions) -> tuple:
    """`functions` with each Sol replaced by the solution it names, and each Later
    by the value it makes."""
    return tuple(
        getattr(sol, f)
        if isinstance(f, Sol)
        else f.make()
        if isinstance(f, Later)
        else f
        for f in functions
    )


def solutions(name: str) -> tuple:
    """The solution's functions that the check `name` takes."""
    return resolve(SOLUTIONS[name])


MD = ROOT / "exercises.md"
IPYNB = ROOT / "exercises.ipynb"

# The functions each check takes, from the solutions (the notebook's stubs have the
# same names).
SOLUTIONS = {
    "layer_norm": (Sol("layer_norm"),),
    "pre_norm": (Sol("pre_norm"),),
    "subsequent_mask": (Sol("subsequent_mask"),),
    "attention": (Sol("attention"),),
    "heads": (Sol("split_heads"), Sol("merge_heads")),
    "multi_head_attention": (Sol("multi_head_attention"),),
    "positional_encoding": (Sol("sinusoidal_table"),),
    "rate": (Sol("rate"),),
    "label_smoothing": (Sol("smoothed_target"),),
    "greedy_decode": (Sol("greedy_decode"),),
    "bleu": (Sol("brevity_penalty"), Sol("bleu_score")),
    "length_penalty": (Sol("length_penalty"),),
    "beam_candidates": (Sol("beam_candidates"),),
}


# --------------------------------------------------------------- the wrong answers


def ln_unbiased(x, gamma, beta, eps=1e-6):
    std = (x.var(-1, keepdim=True) + eps).sqrt()  # x.var divides by d - 1
    return gamma * (x - x.mean(-1, keepdim=True)) / std + beta


def ln_eps_outside(x, gamma, beta, eps=1e-6):
    std = x.var(-1, unbiased=False, keepdim=True).sqrt()
    return gamma * (x - x.mean(-1, keepdim=True)) / (std + eps) + beta


def ln_no_affine(x, gamma, beta, eps=1e-6):
    return sol.layer_norm(x, 1.0, 0.0, eps)


def ln_2022(x, gamma, beta, eps=1e-6):  # the 2018 and 2022 versions' LayerNorm
    mean, std = x.mean(-1, keepdim=True), x.std(-1, keepdim=True)
    return gamma * (x - mean) / (std + eps) + beta


def ln_complex(x, gamma, beta, eps=1e-6):
    return sol.layer_norm(x, gamma, beta, eps) + 5j


def ln_in_place(x, gamma, beta, eps=1e-6):
    x -= x.mean(-1, keepdim=True)
    return gamma * x / (x.var(-1, unbiased=False, keepdim=True) + eps).sqrt() + beta


def ln_all_dims(x, gamma, beta, eps=1e-6):
    return gamma * (x - x.mean()) / (x.var(unbiased=False) + eps).sqrt() + beta


def post_norm(x, sublayer, norm, dropout):
    return norm(x + dropout(sublayer(x)))


def norm_after(x, sublayer, norm, dropout):
    return x + dropout(norm(sublayer(x)))


def no_dropout(x, sublayer, norm, dropout):
    return x + sublayer(norm(x))


def pre_norm_resets_norm(x, sublayer, norm, dropout):
    torch.nn.init.ones_(norm.weight)
    return sol.pre_norm(x, sublayer, norm, dropout)


def dropout_on_sum(x, sublayer, norm, dropout):
    return dropout(x + sublayer(norm(x)))


def no_residual(x, sublayer, norm, dropout):
    return dropout(sublayer(norm(x)))


def mask_no_diagonal(size):
    return torch.ones(size, size, dtype=torch.bool).tril(-1).unsqueeze(0)


def mask_future(size):
    return torch.ones(size, size, dtype=torch.bool).triu().unsqueeze(0)


def mask_swapped(size):
    return ~sol.subsequent_mask(size)


def mask_int(size):
    return torch.ones(size, size).tril().unsqueeze(0)


def mask_2d(size):
    return torch.ones(size, size, dtype=torch.bool).tril()


def _attn(q, k, v, mask, scale, fill=None, dim=-1, invert=False):
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None and fill is not None:
        scores = scores.masked_fill(mask if invert else ~mask, fill)
    w = scores.softmax(dim)
    return w @ v, w


def attn_unscaled(q, k, v, mask=None):
    return _attn(q, k, v, mask, 1.0, torch.finfo(q.dtype).min)


def attn_by_dk(q, k, v, mask=None):
    return _attn(q, k, v, mask, 1 / q.size(-1), torch.finfo(q.dtype).min)


def attn_mask_ignored(q, k, v, mask=None):
    return _attn(q, k, v, mask, q.size(-1) ** -0.5)


def attn_mask_inverted(q, k, v, mask=None):
    return _attn(q, k, v, mask, q.size(-1) ** -0.5, -1e4, invert=True)


def attn_wrong_dim(q, k, v, mask=None):
    return _attn(q, k, v, mask, q.size(-1) ** -0.5, torch.finfo(q.dtype).min, dim=-2)


def attn_zeroed_after_softmax(q, k, v, mask=None):
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
    if mask is not None:
        w = w * mask
    return w @ v, w


def attn_fill_1e9(q, k, v, mask=None):
    return _attn(q, k, v, mask, q.size(-1) ** -0.5, -1e9)


def attn_weights_only(q, k, v, mask=None):
    return sol.attention(q, k, v, mask)[1]


def attn_keys_not_values(q, k, v, mask=None):
    out, w = sol.attention(q, k, v, mask)
    return w @ torch.ones_like(v), w


def split_no_transpose(x, h):
    B, L, d = x.shape
    return x.view(B, h, L, d // h)


def split_strided(x, h):
    B, L, d = x.shape
    return x.view(B, L, d // h, h).permute(0, 3, 1, 2)


def merge_no_transpose(x):
    B, h, L, d_k = x.shape
    return x.reshape(B, L, h * d_k)


def merge_view(x):
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).view(B, L, h * d_k)


def mha_no_wo(query, key, value, w_q, w_k, w_v, w_o, h, mask=None):
    return sol.multi_head_attention(
        query, key, value, w_q, w_k, w_v, torch.nn.Identity(), h, mask
    )


def mha_scaled_by_d_model(query, key, value, w_q, w_k, w_v, w_o, h, mask=None):
    q, k, v = (
        sol.split_heads(w(t), h) for w, t in ((w_q, query), (w_k, key), (w_v, value))
    )
    scale = query.size(-1) ** -0.5
    x = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask.unsqueeze(1), scale=scale
    )
    return w_o(sol.merge_heads(x))


def mha_no_mask(query, key, value, w_q, w_k, w_v, w_o, h, mask=None):
    return sol.multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, h)


def mha_mask_no_head_dim(query, key, value, w_q, w_k, w_v, w_o, h, mask=None):
    q, k, v = (
        sol.split_heads(w(t), h) for w, t in ((w_q, query), (w_k, key), (w_v, value))
    )
    x, _ = sol.attention(q, k, v, mask)  # (B, T, S) against (B, h, T, S)
    return w_o(sol.merge_heads(x))


def _pe(max_len, d, column_index=False, swap=False):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    j = torch.arange(d, dtype=torch.float64)
    angle = pos / 10000 ** ((j if column_index else j - j % 2) / d)
    even = (j % 2 == 0) ^ swap
    return torch.where(even, angle.sin(), angle.cos()).float()


def pe_swapped(max_len, d_model):
    return _pe(max_len, d_model, swap=True)


def pe_column_index(max_len, d_model):
    return _pe(max_len, d_model, column_index=True)


def pe_halves(max_len, d_model):
    t = sol.sinusoidal_table(max_len, d_model)
    return torch.cat([t[:, 0::2], t[:, 1::2]], 1)


def pe_transposed(max_len, d_model):
    return sol.sinusoidal_table(max_len, d_model).T


def rate_no_d_model(step, d_model, warmup):
    return min(step**-0.5, step * warmup**-1.5)


def rate_max(step, d_model, warmup):
    return d_model**-0.5 * max(step**-0.5, step * warmup**-1.5)


def rate_warmup_exponent(step, d_model, warmup):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-0.5)


def rate_factor_two(step, d_model, warmup):
    return 2 * sol.rate(step, d_model, warmup)


def rate_previous_step(step, d_model, warmup):  # raises at step 1: 0.0 ** -0.5
    step = float(step - 1)
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def rate_previous_step_2022(step, d_model, warmup):  # LambdaLR's count, step 0 -> 1
    return sol.rate(max(step - 1, 1), d_model, warmup)


def rate_next_step(step, d_model, warmup):
    return sol.rate(step + 1, d_model, warmup)


def rate_warmup_minus_one(step, d_model, warmup):
    return sol.rate(step, d_model, warmup - 1)


def rate_rising_from_zero(step, d_model, warmup):  # the line counts from 0
    return d_model**-0.5 * min(step**-0.5, (step - 1) * warmup**-1.5)


def rate_decay_plus_one(step, d_model, warmup):
    return d_model**-0.5 * min((step + 1) ** -0.5, step * warmup**-1.5)


def ls_others(target, K, eps):
    q = torch.full((len(target), K), eps / (K - 1))
    q[torch.arange(len(target)), target] = 1 - eps
    return q


def ls_label_without_uniform(target, K, eps):
    q = torch.full((len(target), K), eps / K)
    q[torch.arange(len(target)), target] = 1 - eps
    return q


def ls_k_minus_2(target, K, eps):  # the 2018 and 2022 versions' target, no padding
    q = torch.full((len(target), K), eps / (K - 2))
    q[torch.arange(len(target)), target] = 1 - eps
    return q


def ls_k_minus_2_padding(target, K, eps):  # and column 1 as their padding token
    q = ls_k_minus_2(target, K, eps)
    q[:, 1] = 0
    return q


def ls_complex(target, K, eps):  # the check itself used to raise TypeError here
    return sol.smoothed_target(target, K, eps) + 0j


def ls_one_hot(target, K, eps):
    return F.one_hot(target, K).float()


def greedy_first_position(model, src, src_mask, max_len, start_symbol):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), start_symbol, dtype=torch.long)
    for _ in range(max_len - 1):
        out = model.decode(memory, src_mask, ys, sol.subsequent_mask(ys.size(1)))
        ys = torch.cat([ys, model.generator(out[:, 0]).argmax(-1)[:, None]], 1)
    return ys


def greedy_last_token_only(model, src, src_mask, max_len, start_symbol):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), start_symbol, dtype=torch.long)
    for _ in range(max_len - 1):
        out = model.decode(memory, src_mask, ys[:, -1:], sol.subsequent_mask(1))
        ys = torch.cat([ys, model.generator(out[:, -1]).argmax(-1)[:, None]], 1)
    return ys


def _greedy(model, src, src_mask, max_len, start_symbol, mask_of, decode=None):
    decode = decode or model.decode
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), start_symbol, dtype=torch.long)
    for _ in range(max_len - 1):
        out = decode(memory, src_mask, ys, mask_of(ys.size(1)))
        ys = torch.cat([ys, model.generator(out[:, -1]).argmax(-1)[:, None]], 1)
    return ys


def greedy_no_mask(model, src, src_mask, max_len, start_symbol):
    return _greedy(model, src, src_mask, max_len, start_symbol, lambda t: None)


def greedy_all_true_mask(model, src, src_mask, max_len, start_symbol):
    def ones(t):
        return torch.ones(1, t, t, dtype=torch.bool)

    return _greedy(model, src, src_mask, max_len, start_symbol, ones)


def greedy_decoder_no_mask(model, src, src_mask, max_len, start_symbol):
    def decode(memory, src_mask, ys, mask):  # model.decode's body, mask left out
        return model.decoder(model.tgt_embed(ys), memory, src_mask, None)

    return _greedy(model, src, src_mask, max_len, start_symbol, lambda t: None, decode)


def greedy_float(model, src, src_mask, max_len, start_symbol):
    return sol.greedy_decode(model, src, src_mask, max_len, start_symbol).float()


def greedy_one_short(model, src, src_mask, max_len, start_symbol):
    return sol.greedy_decode(model, src, src_mask, max_len - 1, start_symbol)


def bp_inverted(c, r):
    return 1.0 if c > r else math.exp(1 - c / r)


def bp_always(c, r):
    return math.exp(1 - r / c)


def bleu_arithmetic(counts, totals, c, r):
    p = [m / t for m, t in zip(counts, totals, strict=True)]
    return 100 * sol.brevity_penalty(c, r) * sum(p) / 4


def bleu_fraction(counts, totals, c, r):
    return sol.bleu_score(counts, totals, c, r) / 100


def bleu_no_bp(counts, totals, c, r):
    return sol.bleu_score(counts, totals, c, r) / sol.brevity_penalty(c, r)


def lp_inverse(length, alpha):
    return 1 / sol.length_penalty(length, alpha)


def lp_no_five(length, alpha):
    return (length / 6) ** alpha


def beam_logp_only(score, logp, k):
    B, V = score.size(0), logp.size(-1)
    flat = logp.view(B, k * V).masked_fill(
        score.repeat_interleave(V, 1) == -math.inf, -math.inf
    )
    top, idx = flat.topk(2 * k, -1)
    return top, idx // V, idx % V


def beam_per_beam(score, logp, k):
    B = score.size(0)
    top, tok = (score.view(-1, 1) + logp).topk(2, -1)  # the best 2 of each beam
    beam = torch.arange(k).repeat_interleave(2).expand(B, -1)
    top, order = top.view(B, 2 * k).sort(-1, descending=True)
    return top, beam.gather(1, order), tok.view(B, 2 * k).gather(1, order)


def beam_mod_k(score, logp, k):
    top, beam, token = sol.beam_candidates(score, logp, k)
    V = logp.size(-1)
    idx = beam * V + token
    return top, idx % k, idx // k


def beam_swapped(score, logp, k):
    top, beam, token = sol.beam_candidates(score, logp, k)
    return top, token, beam


def raises(*args):
    return 1 / 0


# (check, its arguments with the wrong answer in place, the message it must give)
WRONG = [
    ("layer_norm", (ln_unbiased,), r"unbiased variance .*divides by d"),
    ("layer_norm", (ln_eps_outside,), r"eps is added outside the square root"),
    ("layer_norm", (ln_no_affine,), r"gamma and beta were not applied"),
    ("layer_norm", (ln_all_dims,), r"the result differs at \(batch 0, row 0, "),
    (
        "layer_norm",
        (ln_2022,),
        r"^this is the unbiased std with eps outside the square root, \(x - mean\) / "
        r"\(x.std\(-1\) \+ eps\), as the 2018 and 2022 annotated versions wrote it",
    ),
    (
        "layer_norm",
        (ln_complex,),
        r"the result is complex \(torch.complex64, with imaginary parts as large as "
        r"5\)",
    ),
    ("layer_norm", (ln_in_place,), r"changed its argument `x` in place"),
    ("pre_norm", (post_norm,), r"that is post-norm"),
    ("pre_norm", (norm_after,), r"normalised the sublayer's output"),
    ("pre_norm", (no_dropout,), r"dropout was not applied"),
    ("pre_norm", (dropout_on_sum,), r"dropout was applied to the sum"),
    ("pre_norm", (no_residual,), r"residual x is not added back"),
    (
        "pre_norm",
        (pre_norm_resets_norm,),
        r"changed the weights of its argument `norm`",
    ),
    ("subsequent_mask", (mask_no_diagonal,), r"the diagonal is False"),
    ("subsequent_mask", (mask_future,), r"see the future and hides the past"),
    ("subsequent_mask", (mask_swapped,), r"True and False are swapped"),
    ("subsequent_mask", (mask_int,), r"dtype torch.float32, expected torch.bool"),
    ("subsequent_mask", (mask_2d,), r"wrong shape: .* \(4, 4\), expected \(1, 4, 4\)"),
    ("attention", (attn_unscaled,), r"not scaled: eq. 1 divides QK\^T by sqrt\(d_k\)"),
    ("attention", (attn_by_dk,), r"divided the scores by d_k = 8; .*sqrt\(d_k\)"),
    ("attention", (attn_mask_ignored,), r"masked positions receive weight: at \("),
    ("attention", (attn_mask_inverted,), r"hid the keys where the mask is True"),
    ("attention", (attn_wrong_dim,), r"rows do not sum to one .*softmax\(dim=-1\)"),
    ("attention", (attn_zeroed_after_softmax,), r"zeroed the masked weights after"),
    ("attention", (attn_fill_1e9,), r"float16 inputs.*-1e9 does not fit in float16"),
    ("attention", (attn_weights_only,), r"should return \(output, weights\)"),
    ("attention", (attn_keys_not_values,), r"the output .* it is weights @ value"),
    ("heads", (split_no_transpose, Sol("merge_heads")), r"cuts the sequence, not the"),
    (
        "heads",
        (split_strided, Sol("merge_heads")),
        r"features 0..1 of position 0; yours .* \(0, 0\), \(0, 4\)",
    ),
    (
        "heads",
        (Sol("split_heads"), merge_no_transpose),
        r"transpose dimensions 1 and 2",
    ),
    ("heads", (Sol("split_heads"), merge_view), r"not contiguous: use .reshape"),
    ("multi_head_attention", (mha_no_wo,), r"output projection W\^O is missing"),
    ("multi_head_attention", (mha_scaled_by_d_model,), r"sqrt\(d_model\) = sqrt\(16\)"),  # noqa: E501
    ("multi_head_attention", (mha_no_mask,), r"the mask was not applied"),
    (
        "multi_head_attention",
        (mha_mask_no_head_dim,),
        r"raised RuntimeError: .*at `.*needs a head dimension",
    ),
    ("positional_encoding", (pe_swapped,), r"sines and cosines are swapped"),
    ("positional_encoding", (pe_column_index,), r"exponent uses the column index"),
    ("positional_encoding", (pe_halves,), r"all sines in the first half"),
    ("positional_encoding", (pe_transposed,), r"wrong shape: .* \(8, 12\), expected"),
    ("rate", (rate_no_d_model,), r"the factor d_model\^-0.5 is missing"),
    ("rate", (rate_max,), r"peaks at step 1 .*min\(step"),
    ("rate", (rate_warmup_exponent,), r"peaks at step 8 \(d_model=512, warmup=400\)"),
    ("rate", (rate_factor_two,), r"2 times eq. 3's at every step"),
    (
        "rate",
        (rate_previous_step,),
        r"^off by one in the step \(d_model=512, warmup=400\): at every step k from 2 "
        r"on, yours is eq. 3's rate of step k - 1 \(.*\), and at step 1 your function "
        r"raised ZeroDivisionError.*without subtracting 1",
    ),
    (
        "rate",
        (rate_previous_step_2022,),
        r"step k - 1 .* at step 1 it gives eq. 3's rate of step 1 \(step 0 moved to 1",
    ),
    (
        "rate",
        (rate_next_step,),
        r"^off by one in the step .*rate of step k \+ 1 .*peaks at step 399 instead "
        r"of 400.*without adding 1",
    ),
    (
        "rate",
        (rate_warmup_minus_one,),
        r"^off by one in warmup .*warmup = 399 instead of 400: .*peaks at step 399",
    ),
    (
        "rate",
        (rate_rising_from_zero,),
        r"^off by one in the warm-up .*at each step k < warmup yours is the rising "
        r"line's value at step k - 1.*the decay after warmup is right",
    ),
    (
        "rate",
        (rate_decay_plus_one,),
        r"^off by one in the decay .*k > warmup yours is d_model\^-0.5 \* \(k \+ "
        r"1\)\^-0.5.*the warm-up is right",
    ),
    ("label_smoothing", (ls_others,), r"spread eps over the K - 1 other tokens"),
    ("label_smoothing", (ls_label_without_uniform,), r"sums to 0.983333; .*\+ eps / K"),
    ("label_smoothing", (ls_one_hot,), r"one-hot target, not smoothed"),
    (
        "label_smoothing",
        (ls_k_minus_2,),
        r"^you spread eps over K - 2 tokens, eps / \(K - 2\) = 0.025 each, as the 2018 "
        r"and 2022 annotated versions did.* eps / K = 0.01667",
    ),
    ("label_smoothing", (ls_k_minus_2_padding,), r"^you spread eps over K - 2 tokens"),
    ("label_smoothing", (ls_complex,), r"^q is complex .*imaginary parts that are all"),
    ("greedy_decode", (greedy_first_position,), r"position \d: .*earlier tokens are"),
    (
        "greedy_decode",
        (greedy_last_token_only,),
        r"position \d: expected token \d+, got",
    ),
    ("greedy_decode", (greedy_one_short,), r"wrong shape: .* \(3, 6\), expected \(3, "),
    (
        "greedy_decode",
        (greedy_no_mask,),
        r"^the subsequent mask is missing: model.decode got tgt_mask=None .*Pass "
        r"subsequent_mask\(ys.size\(1\)\) as tgt_mask",
    ),
    ("greedy_decode", (greedy_all_true_mask,), r"is not the subsequent mask \(row t"),
    (
        "greedy_decode",
        (greedy_decoder_no_mask,),
        r"^sentence 0, position 2: .*earlier tokens are right.*subsequent_mask",
    ),
    ("greedy_decode", (greedy_float,), r"dtype torch.float32; token ids .* integers"),
    ("bleu", (bp_inverted, Sol("bleu_score")), r"e\^\(1 - c/r\) = .*e\^\(1 - r/c\)"),
    (
        "bleu",
        (bp_always, Sol("bleu_score")),
        r"longer than its references is not penal",
    ),
    (
        "bleu",
        (Sol("brevity_penalty"), bleu_arithmetic),
        r"averaged the precisions arith",
    ),
    (
        "bleu",
        (Sol("brevity_penalty"), bleu_fraction),
        r"reports percent, multiply by 100",
    ),
    ("bleu", (Sol("brevity_penalty"), bleu_no_bp), r"the brevity penalty is missing"),
    ("length_penalty", (lp_inverse,), r"is the inverse of lp"),
    ("length_penalty", (lp_no_five,), r"should be \(\(5 \+ 1\) / 6\)\^0.6 = "),
    ("beam_candidates", (beam_logp_only,), r"by the new token's log-probability alone"),
    ("beam_candidates", (beam_per_beam,), r"best extensions of each beam separately"),
    ("beam_candidates", (beam_mod_k,), r"the beam is idx // V and the token idx % V"),
    ("beam_candidates", (beam_swapped,), r"beam must lie in 0..2 and token in 0..6"),
    ("rate", (raises,), r"raised ZeroDivisionError: division by zero, at `return 1"),
]


# --------------------------------------------------------------- the checks


def test_every_exercise_has_a_solution_and_a_wrong_answer():
    assert list(SOLUTIONS) == list(check.EXERCISES)
    assert set(SOLUTIONS) == {name for name, _, _ in WRONG}


@pytest.mark.parametrize("name", list(SOLUTIONS))
def test_the_solution_passes(name):
    verdict = check.EXERCISES[name](*solutions(name))
    assert verdict.ok, verdict
    assert repr(verdict).startswith(f"✓ {name}: correct.")


@pytest.mark.parametrize(
    "name, functions, message",
    WRONG,
    ids=[f"{n}-{fns[0].__name__}-{fns[-1].__name__}" for n, fns, _ in WRONG],
)
def test_a_wrong_answer_fails_with_its_message(name, functions, message):
    verdict = check.EXERCISES[name](*resolve(functions))
    assert verdict.status == "wrong", verdict
    assert re.search(message, verdict.message), verdict.message
    assert "Traceback" not in verdict.message


def _stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("name", list(SOLUTIONS))
def test_a_stub_is_not_done_yet(name):
    stubs = [_stub] * len(solutions(name))
    verdict = check.EXERCISES[name](*stubs)
    assert verdict.status == "not done" and "not done yet" in repr(verdict)
    # one function of two written: still not done
    if len(stubs) == 2:
        verdict = check.EXERCISES[name](solutions(name)[0], _stub)
        assert verdict.status == "not done", verdict


def test_a_value_that_is_no_function_is_named():
    verdict = check.attention(None)
    assert verdict.status == "wrong", verdict
    assert "expected a function, got None" in repr(verdict)


def test_forgotten_return_is_named():
    verdict = check.subsequent_mask(lambda size: None)
    assert "did you forget `return`?" in verdict.message, verdict


# --------------------------------------------------------------- hostile answers
# A check gives a verdict in words on whatever the reader's function does or returns,
# and never raises. The generic fallback ("the check could not compare ...") is for
# what nobody foresaw; none of these may reach it.

FALLBACK = "the check could not compare"


def _returning(value):
    def fn(*args):
        return value

    return fn


class Thing:
    pass


def _generator():
    yield 1


HOSTILE_VALUES = {  # value, words the verdict must contain
    "none": (None, r"None \(did you forget `return`\?\)"),
    "string": ("not a tensor", r"a str \('not a tensor'\)"),
    "object": (Thing(), r"an object of type Thing"),
    "generator": (_generator(), r"a generator"),
    "numpy": (np.zeros((2, 3)), r"NumPy array of shape \(2, 3\)"),
    "nested list": ([[1.0, 2.0], [3.0, 4.0]], r"list of 2 items"),
    "complex number": (1 + 2j, r"complex number \(?\(1\+2j\)"),
    "huge int": (10**5000, r"a number \(too long to show\)"),
    "bool": (True, r"a bool \(True\)"),
    "dict": ({}, r"an object of type dict"),
    "function": (Sol("rate"), r"did you return it instead of calling it"),
    "empty tensor": (Later(lambda: torch.zeros(0)), r"\(0,\)|dtype torch.float32; .*"),
}


def _transform(fns, i, f):
    """The solutions `fns` with the i-th's result passed through f (each element of
    a tuple result)."""

    def fn(*args):
        result = fns[i](*args)
        return tuple(map(f, result)) if isinstance(result, tuple) else f(result)

    fns = list(fns)
    out = list(fns)
    out[i] = fn
    return tuple(out)


def _other_dtype(t):
    if t.dtype == torch.float32:
        return t.double()
    return t.float()


TENSOR_RESULTS = {  # for the checks whose functions return tensors
    "complex": (lambda t: t + 5j, r"complex \(torch.complex\d+, with imaginary parts"),
    "dtype": (_other_dtype, r"dtype torch.float(64|32)"),
    "meta": (lambda t: t.to("meta"), r"on device meta"),
    "sparse": (lambda t: t.to_sparse(), r"sparse_coo tensor; return an ordinary"),
    "numpy": (lambda t: t.numpy(), r"a NumPy array .*torch.from_numpy"),
    "list": (lambda t: t.tolist(), r"should be a tensor, got a list .*torch"),
}
NUMBER_RESULTS = {  # for the checks whose functions return numbers
    "complex": (lambda x: x + 5j, r"real number, got the complex number"),
    "numpy": (lambda x: np.array([x, x]), r"NumPy array .*a Python float"),
    "two numbers": (lambda x: torch.tensor([x, x]), r"number, got a tensor of shape"),
    "string": (str, r"a number, got a str"),
}
NUMBER_CHECKS = {"rate", "bleu", "length_penalty"}


def _positions():
    return [(n, i) for n, fns in SOLUTIONS.items() for i in range(len(fns))]


def _ids(pairs):
    return [f"{n}-{i}" for n, i in pairs]


def _assert_wrong(verdict, words):
    assert verdict.status == "wrong", verdict
    assert FALLBACK not in verdict.message, verdict
    assert "Traceback" not in verdict.message
    assert re.search(words, verdict.message), verdict.message


@pytest.mark.parametrize("name, i", _positions(), ids=_ids(_positions()))
@pytest.mark.parametrize("value", list(HOSTILE_VALUES))
def test_any_returned_value_gets_a_verdict_in_words(name, i, value):
    returned, words = HOSTILE_VALUES[value]
    if value == "generator":  # a fresh one each time: an earlier test may have run it
        returned = _generator()
    (returned,) = resolve((returned,))
    fns = list(solutions(name))
    fns[i] = _returning(returned)
    _assert_wrong(check.EXERCISES[name](*fns), words)


FORMS = [
    (n, i, change)
    for n, i in _positions()
    for change in (NUMBER_RESULTS if n in NUMBER_CHECKS else TENSOR_RESULTS)
]


@pytest.mark.parametrize(
    "name, i, change", FORMS, ids=[f"{n}-{i}-{c}" for n, i, c in FORMS]
)
def test_a_right_answer_in_the_wrong_form_is_wrong(name, i, change):
    """The solution's own result made complex, of another dtype, on another device,
    sparse, a NumPy array, a list: each is wrong, and said so."""
    table = NUMBER_RESULTS if name in NUMBER_CHECKS else TENSOR_RESULTS
    f, words = table[change]
    if name == "subsequent_mask" and change == "complex":
        f = lambda t: t.to(torch.complex64) + 5j  # noqa: E731 (bool + 5j is an error)
    _assert_wrong(check.EXERCISES[name](*_transform(solutions(name), i, f)), words)


class BadMessage(Exception):
    def __str__(self):
        raise RuntimeError("no message")


def _raise(exc):
    def fn(*args):
        raise exc

    return fn


def _recurse(*args):
    return _recurse(*args)


HOSTILE_FUNCTIONS = {  # function, status, words
    "ValueError": (_raise(ValueError("bad")), "wrong", r"raised ValueError: bad, at `"),
    "bad message": (_raise(BadMessage()), "wrong", r"raised BadMessage: \(its message"),
    "exit": (_raise(SystemExit(3)), "wrong", r"called exit\(\) or sys.exit\(\)"),
    "recursion": (_recurse, "wrong", r"raised RecursionError"),
    "interrupt": (_raise(KeyboardInterrupt()), "not done", r"^interrupted before"),
}


@pytest.mark.parametrize("name, i", _positions(), ids=_ids(_positions()))
@pytest.mark.parametrize("kind", list(HOSTILE_FUNCTIONS))
def test_any_function_gets_a_verdict_in_words(name, i, kind):
    fn, status, words = HOSTILE_FUNCTIONS[kind]
    fns = list(solutions(name))
    fns[i] = fn
    verdict = check.EXERCISES[name](*fns)
    assert verdict.status == status, verdict
    assert re.search(words, verdict.message), verdict.message


def test_what_no_check_foresaw_still_gets_a_verdict():
    class Unreadable(torch.Tensor):
        """A tensor on which every torch operation fails: what no check foresees."""

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            raise RuntimeError("unreadable")

    def fn(*args):
        return torch.zeros(2, 3, 8).as_subclass(Unreadable)

    verdict = check.layer_norm(fn)
    assert verdict.status == "wrong", verdict
    assert re.search(
        FALLBACK + r" .*\(RuntimeError: unreadable\); make it return what the "
        "exercise asks for",
        verdict.message,
    ), verdict


def _mutating(fn):
    """fn, then every tensor argument changed in place (the result is fn's)."""

    def mutate(*args):
        result = fn(*args)
        for a in args:
            if isinstance(a, torch.Tensor):
                a.logical_not_() if a.dtype == torch.bool else a.add_(1)
        return result

    return mutate


TAKES_TENSORS = [
    (n, i)
    for n, i in _positions()
    if n not in {"subsequent_mask", "positional_encoding"} | NUMBER_CHECKS
]


@pytest.mark.parametrize("name, i", TAKES_TENSORS, ids=_ids(TAKES_TENSORS))
def test_a_function_that_changes_its_inputs_is_told(name, i):
    fns = list(solutions(name))
    fns[i] = _mutating(fns[i])
    _assert_wrong(
        check.EXERCISES[name](*fns), r"changed its argument (`\w+`|number \d) in place"
    )


def test_printing_a_lot_changes_nothing(capsys):
    def chatty(*args):
        for i in range(20_000):
            print("step", i)
        return sol.layer_norm(*args)

    assert check.layer_norm(chatty).ok
    assert capsys.readouterr().out.count("\n") == 20_000


def _forever(*args):
    while True:
        pass


def _forever_swallowing(*args):
    while True:
        try:
            time.sleep(0.01)
        except Exception:  # a reader's catch-all does not keep the loop alive
            pass


def _sleeping(*args):
    time.sleep(3600)


class NetFired(BaseException):  # through a reader's `except Exception`, as the check's
    pass


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no SIGALRM timer")
@pytest.mark.parametrize("fn", [_forever, _forever_swallowing, _sleeping])
def test_a_function_that_never_ends_is_stopped(fn, monkeypatch):
    """Stopped after TIME_LIMIT_S with a message; then the process is as before: the
    previous SIGALRM handler and timer back, and checks work again. (The previous
    timer is this test's safety net: were the check's own timer broken, it ends the
    endless call after 30 s and the test fails instead of hanging.)"""

    def net(signum, frame):
        raise NetFired("the check did not stop the endless function")

    monkeypatch.setattr("exercise_checks.TIME_LIMIT_S", 1.0)
    before = signal.signal(signal.SIGALRM, net)
    signal.setitimer(signal.ITIMER_REAL, 30.0, 1.0)
    try:
        start = time.monotonic()
        verdict = check.rate(fn)
        elapsed = time.monotonic() - start
        assert signal.getsignal(signal.SIGALRM) is net
        assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 30.0 - elapsed + 0.1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    _assert_wrong(
        verdict,
        r"^your function ran longer than 1 s \(called as rate\(1, 512, 400\)\); "
        r"look for a loop that never ends",
    )
    monkeypatch.undo()  # the usual limit: a loaded machine may take a second or two
    assert check.rate(sol.rate).ok
    assert check.greedy_decode(sol.greedy_decode).ok


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no SIGALRM timer")
def test_an_outer_timer_keeps_running(monkeypatch):
    """A timer someone else armed before the check still fires after it."""
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *a: fired.append(True))
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        assert check.length_penalty(sol.length_penalty).ok
        assert not fired and 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 1.0
        time.sleep(1.5)
        assert fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_check_in_another_thread_runs_without_a_limit():
    """Off the main thread no SIGALRM handler can be set: the check still works."""
    import threading

    verdicts = []
    worker = threading.Thread(target=lambda: verdicts.append(check.rate(sol.rate)))
    worker.start()
    worker.join(timeout=60)
    assert verdicts and verdicts[0].ok


@pytest.mark.process
def test_an_endless_loop_is_stopped_in_a_jupyter_kernel():
    """In a real kernel, as the notebook runs: the cell with the endless loop ends
    with a verdict, and the next cell's check works."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import exercise_checks as check, exercises_solutions as sol\n"
            "check.TIME_LIMIT_S = 0.5"
        ),
        nbformat.v4.new_code_cell(
            "def rate(step, d_model, warmup):\n    while True:\n        pass\n\n\n"
            "check.rate(rate)"
        ),
        nbformat.v4.new_code_cell("check.rate(sol.rate)"),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path[1:]])}
    client = NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT)}},
    )
    client.execute(cwd=str(ROOT), env=env)
    text = [
        "".join(o.get("data", {}).get("text/plain", "") for o in c.outputs)
        for c in nb.cells
    ]
    assert text[1].startswith("✗ rate: your function ran longer than 0.5 s"), text
    assert text[2].startswith("✓ rate: correct."), text


# --------------------------------------------------------------- the notebook


def notebook_cells():
    return jupytext.read(MD).cells


def test_the_notebook_has_a_stub_and_a_check_per_exercise():
    """Each exercise of exercise_checks has one check cell, in the same order; each
    stub cell raises NotImplementedError and defines a function of the solutions'."""
    code = [c.source for c in notebook_cells() if c.cell_type == "code"]
    called = [m for src in code for m in re.findall(r"^check\.(\w+)\(", src, re.M)]
    assert called == list(check.EXERCISES)
    stubs = [src for src in code if "raise NotImplementedError" in src]
    defined = [re.findall(r"^def (\w+)\(", src, re.M) for src in stubs]
    names = [n for d in defined for n in d]
    assert sorted(names) == sorted(
        f.__name__ for fns in SOLUTIONS.values() for f in fns
    )
    assert all(
        src.count("raise NotImplementedError") == len(d)
        for src, d in zip(stubs, defined, strict=True)
    )
    assert not any("exercises_solutions" in src for src in code)


def test_the_setup_cell_is_the_main_notebooks():
    """Both notebooks fetch the repository on Colab with the same code: the
    exercises' one Setup cell is the main notebook's two (the fetch, folded in a deep
    dive, then runtime.setup)."""
    code = lambda path: [c for c in jupytext.read(path).cells if c.cell_type == "code"]
    fetch, setup = code(ROOT / "annotated_transformer.md")[:2]
    assert "git" in fetch.source and "runtime.setup(" in setup.source
    assert code(MD)[0].source == fetch.source + "\n" + setup.source


def test_committed_outputs_are_the_unfilled_stubs():
    nb = nbformat.read(IPYNB, as_version=4)
    verdicts = [
        "".join(
            o.get("data", {}).get("text/plain", "") + o.get("text", "")
            for o in c.outputs
        )
        for c in nb.cells
        if c.cell_type == "code" and re.search(r"^check\.", c.source, re.M)
    ]
    assert len(verdicts) == len(check.EXERCISES)
    for name, text in zip(check.EXERCISES, verdicts, strict=True):
        assert text.strip() == repr(check.Verdict(name, "not done", check.NOT_DONE))


@pytest.mark.notebook
def test_the_notebook_runs_alone_as_on_colab(tmp_path, multi30k):
    """exercises.ipynb alone in an empty folder, as Colab opens it: the Setup cell
    clones the repository (from a file:// snapshot of this tree). Every other
    exercise's stub is replaced by its solution (the reader who has done those):
    their checks say correct, the others not done yet; no cell errs."""
    repo = tmp_path / "github"
    repo.mkdir()
    snapshot_repository(repo)
    colab = tmp_path / "content"
    colab.mkdir()
    nb = nbformat.read(IPYNB, as_version=4)
    solved = set(list(check.EXERCISES)[::2])
    for cell in nb.cells:
        if cell.cell_type == "code" and "raise NotImplementedError" in cell.source:
            names = re.findall(r"^def (\w+)\(", cell.source, re.M)
            owner = next(
                n
                for n, fns in SOLUTIONS.items()
                if names[0] in {f.__name__ for f in fns}
            )
            if owner in solved:
                cell.source += f"\n\nfrom exercises_solutions import {', '.join(names)}"
    nbformat.write(nb, colab / IPYNB.name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if inherited_pythonpath():
        env["PYTHONPATH"] = os.pathsep.join(inherited_pythonpath())
    env.update(AT_REPO_URL=f"file://{repo}", AT_PRESET="ci", MULTI30K_DIR=str(multi30k))
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": colab}}
    )
    client.execute(cwd=str(colab), env=env)
    errors = [
        o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"
    ]
    assert not errors, f"{errors[0].ename}: {errors[0].evalue}"
    assert (colab / "at-repo" / "exercise_checks.py").is_file()
    for cell in nb.cells:
        called = re.findall(r"^check\.(\w+)\(", cell.source, re.M)
        if not called:
            continue
        text = "".join(o.get("data", {}).get("text/plain", "") for o in cell.outputs)
        print(text)  # shown with pytest -s
        if called[0] in solved:
            assert text.startswith(f"✓ {called[0]}: correct."), text
        else:
            assert text == repr(check.Verdict(called[0], "not done", check.NOT_DONE))
    assert (colab / "at-repo" / "annotated_transformer_lib.py").is_file()  # the book


@pytest.mark.notebook  # runs the notebook's cells in Jupyter kernels
def test_a_restarted_session_reuses_its_clone(tmp_path):
    """Colab's "Restart session" keeps the disk: Setup, run again in a fresh kernel,
    finds at-repo/ instead of cloning into it again. It updates the clone only where
    that is safe; without GitHub (here: its stand-in moved away) it says in one line
    that the clone is used as it is, and the session goes on."""
    repo = tmp_path / "github"
    repo.mkdir()
    snapshot_repository(repo)
    colab = tmp_path / "content"
    colab.mkdir()
    code = [c.source for c in notebook_cells() if c.cell_type == "code"][:4]
    assert code[-1].startswith("check.layer_norm(")
    done = repr(check.Verdict("layer_norm", "not done", check.NOT_DONE))
    kept = "at-repo, kept from before the restart"

    def session(origin=repo):
        nb = restarted_session(colab, origin, code)
        errors = cell_errors(nb)
        assert not errors, f"{len(errors)} of {len(nb.cells)} cells failed: {errors}"
        assert nb.cells[-1].outputs[0].data["text/plain"] == done
        return [o.text for o in nb.cells[0].outputs if o.output_type == "stream"]

    assert session() == []  # the first: it clones, quietly
    first = head(colab / "at-repo")
    assert session() == [f"{kept}: up to date (commit {first})\n"]
    newer = add_commit(repo, "NEWER.md", "a newer version\n")
    offline = tmp_path / "unreachable"
    repo.rename(offline)
    said = session(origin=offline)
    assert len(said) == 1 and said[0].startswith(f"{kept}: not updated ("), said
    assert said[0].endswith(f"; used as it is (commit {first})\n"), said
    assert not (colab / "at-repo" / "NEWER.md").exists()
    offline.rename(repo)
    assert session() == [
        f"{kept}: updated from commit {first} to {newer}; your checkpoints stay\n"
    ]
    assert (colab / "at-repo" / "NEWER.md").exists()


def head(clone) -> str:
    out = subprocess.run(
        ["git", "-C", str(clone), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


@pytest.fixture(autouse=True)
def _git_available():
    if shutil.which("git") is None:
        pytest.fail("git is needed: the Colab test clones the repository with it")
