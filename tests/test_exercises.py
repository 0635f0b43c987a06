"""The exercises notebook: every check passes its solution, fails each plausible wrong
answer below with the message meant for it, says "not done yet" for a stub, and
reports an error in the reader's code without a traceback; the notebook itself runs
as Colab runs it, and its committed outputs are those of the unfilled stubs."""

import math
import os
import re
import shutil

import jupytext
import nbformat
import pytest
import torch
import torch.nn.functional as F
from nbclient import NotebookClient

import exercises_solutions as sol
from atkit import exercises as check
from conftest import DATA, ROOT, inherited_pythonpath, snapshot_repository

MD = ROOT / "exercises.md"
IPYNB = ROOT / "exercises.ipynb"

# The functions each check takes, from the solutions (the notebook's stubs have the
# same names).
SOLUTIONS = {
    "layer_norm": (sol.layer_norm,),
    "pre_norm": (sol.pre_norm,),
    "subsequent_mask": (sol.subsequent_mask,),
    "attention": (sol.attention,),
    "heads": (sol.split_heads, sol.merge_heads),
    "multi_head_attention": (sol.multi_head_attention,),
    "positional_encoding": (sol.sinusoidal_table,),
    "rate": (sol.rate,),
    "label_smoothing": (sol.smoothed_target,),
    "greedy_decode": (sol.greedy_decode,),
    "bleu": (sol.brevity_penalty, sol.bleu_score),
    "length_penalty": (sol.length_penalty,),
    "beam_candidates": (sol.beam_candidates,),
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


def ln_all_dims(x, gamma, beta, eps=1e-6):
    return gamma * (x - x.mean()) / (x.var(unbiased=False) + eps).sqrt() + beta


def post_norm(x, sublayer, norm, dropout):
    return norm(x + dropout(sublayer(x)))


def norm_after(x, sublayer, norm, dropout):
    return x + dropout(norm(sublayer(x)))


def no_dropout(x, sublayer, norm, dropout):
    return x + sublayer(norm(x))


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
    return sol.multi_head_attention(query, key, value, w_q, w_k, w_v,
                                    torch.nn.Identity(), h, mask)  # fmt: skip


def mha_scaled_by_d_model(query, key, value, w_q, w_k, w_v, w_o, h, mask=None):
    q, k, v = (sol.split_heads(w(t), h) for w, t in ((w_q, query), (w_k, key),
                                                     (w_v, value)))  # fmt: skip
    scale = query.size(-1) ** -0.5
    x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.unsqueeze(1),
                                       scale=scale)  # fmt: skip
    return w_o(sol.merge_heads(x))


def mha_no_mask(query, key, value, w_q, w_k, w_v, w_o, h, mask=None):
    return sol.multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, h)


def mha_mask_no_head_dim(query, key, value, w_q, w_k, w_v, w_o, h, mask=None):
    q, k, v = (sol.split_heads(w(t), h) for w, t in ((w_q, query), (w_k, key),
                                                     (w_v, value)))  # fmt: skip
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


def ls_others(target, K, eps):
    q = torch.full((len(target), K), eps / (K - 1))
    q[torch.arange(len(target)), target] = 1 - eps
    return q


def ls_label_without_uniform(target, K, eps):
    q = torch.full((len(target), K), eps / K)
    q[torch.arange(len(target)), target] = 1 - eps
    return q


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
    flat = logp.view(B, k * V).masked_fill(score.repeat_interleave(V, 1) == -math.inf,
                                           -math.inf)  # fmt: skip
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
    ("pre_norm", (post_norm,), r"that is post-norm"),
    ("pre_norm", (norm_after,), r"normalised the sublayer's output"),
    ("pre_norm", (no_dropout,), r"dropout was not applied"),
    ("pre_norm", (dropout_on_sum,), r"dropout was applied to the sum"),
    ("pre_norm", (no_residual,), r"residual x is not added back"),
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
    ("heads", (split_no_transpose, sol.merge_heads), r"cuts the sequence, not the"),
    (
        "heads",
        (split_strided, sol.merge_heads),
        r"features 0..1 of position 0; yours .* \(0, 0\), \(0, 4\)",
    ),
    ("heads", (sol.split_heads, merge_no_transpose), r"transpose dimensions 1 and 2"),
    ("heads", (sol.split_heads, merge_view), r"not contiguous: use .reshape"),
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
    ("label_smoothing", (ls_others,), r"spread eps over the K - 1 other tokens"),
    ("label_smoothing", (ls_label_without_uniform,), r"sums to 0.983333; .*\+ eps / K"),
    ("label_smoothing", (ls_one_hot,), r"one-hot target, not smoothed"),
    ("greedy_decode", (greedy_first_position,), r"position \d: .*earlier tokens are"),
    (
        "greedy_decode",
        (greedy_last_token_only,),
        r"position \d: expected token \d+, got",
    ),
    ("greedy_decode", (greedy_one_short,), r"wrong shape: .* \(3, 6\), expected \(3, "),
    ("bleu", (bp_inverted, sol.bleu_score), r"e\^\(1 - c/r\) = .*e\^\(1 - r/c\)"),
    ("bleu", (bp_always, sol.bleu_score), r"longer than its references is not penal"),
    ("bleu", (sol.brevity_penalty, bleu_arithmetic), r"averaged the precisions arith"),
    ("bleu", (sol.brevity_penalty, bleu_fraction), r"reports percent, multiply by 100"),
    ("bleu", (sol.brevity_penalty, bleu_no_bp), r"the brevity penalty is missing"),
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


@pytest.mark.parametrize("name", list(check.EXERCISES))
def test_the_solution_passes(name):
    verdict = check.EXERCISES[name](*SOLUTIONS[name])
    assert verdict.ok, verdict
    assert repr(verdict).startswith(f"✓ {name}: correct.")


@pytest.mark.parametrize(
    "name, functions, message",
    WRONG,
    ids=[f"{n}-{fns[0].__name__}-{fns[-1].__name__}" for n, fns, _ in WRONG],
)
def test_a_wrong_answer_fails_with_its_message(name, functions, message):
    verdict = check.EXERCISES[name](*functions)
    assert verdict.status == "wrong", verdict
    assert re.search(message, verdict.message), verdict.message
    assert "Traceback" not in verdict.message


def _stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("name", list(check.EXERCISES))
def test_a_stub_is_not_done_yet(name):
    stubs = [_stub] * len(SOLUTIONS[name])
    verdict = check.EXERCISES[name](*stubs)
    assert verdict.status == "not done" and "not done yet" in repr(verdict)
    # one function of two written: still not done
    if len(stubs) == 2:
        verdict = check.EXERCISES[name](SOLUTIONS[name][0], _stub)
        assert verdict.status == "not done", verdict


def test_a_value_that_is_no_function_is_named():
    verdict = check.attention(None)
    assert verdict.status == "wrong", verdict
    assert "expected a function, got None" in repr(verdict)


def test_forgotten_return_is_named():
    verdict = check.subsequent_mask(lambda size: None)
    assert "did you forget `return`?" in verdict.message, verdict


# --------------------------------------------------------------- the notebook


def notebook_cells():
    return jupytext.read(MD).cells


def test_the_notebook_has_a_stub_and_a_check_per_exercise():
    """Each exercise of atkit.exercises has one check cell, in the same order; each
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
    assert all(src.count("raise NotImplementedError") == len(d)
               for src, d in zip(stubs, defined, strict=True))  # fmt: skip
    assert not any("exercises_solutions" in src for src in code)


def test_the_setup_cell_is_the_main_notebooks():
    """Both notebooks fetch the repository on Colab with the same code."""
    first = lambda path: next(c for c in jupytext.read(path).cells
                              if c.cell_type == "code")  # fmt: skip
    assert first(MD).source == first(ROOT / "annotated_transformer.md").source


def test_committed_outputs_are_the_unfilled_stubs():
    nb = nbformat.read(IPYNB, as_version=4)
    verdicts = [
        "".join(o.get("data", {}).get("text/plain", "") + o.get("text", "")
                for o in c.outputs)
        for c in nb.cells
        if c.cell_type == "code" and re.search(r"^check\.", c.source, re.M)
    ]  # fmt: skip
    assert len(verdicts) == len(check.EXERCISES)
    for name, text in zip(check.EXERCISES, verdicts, strict=True):
        assert text.strip() == repr(check.Verdict(name, "not done", check.NOT_DONE))


def test_the_notebook_runs_alone_as_on_colab(tmp_path):
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
            owner = next(n for n, fns in SOLUTIONS.items()
                         if names[0] in {f.__name__ for f in fns})  # fmt: skip
            if owner in solved:
                cell.source += f"\n\nfrom exercises_solutions import {', '.join(names)}"
    nbformat.write(nb, colab / IPYNB.name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if inherited_pythonpath():
        env["PYTHONPATH"] = os.pathsep.join(inherited_pythonpath())
    env.update(AT_REPO_URL=f"file://{repo}", AT_PRESET="ci", MULTI30K_DIR=str(DATA))
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": colab}})  # fmt: skip
    client.execute(cwd=str(colab), env=env)
    errors = [o for c in nb.cells for o in c.get("outputs", [])
              if o.output_type == "error"]  # fmt: skip
    assert not errors, f"{errors[0].ename}: {errors[0].evalue}"
    assert (colab / "at-repo" / "atkit" / "exercises.py").is_file()
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
    assert (colab / "at-repo" / "build" / "annotated_transformer_lib.py").is_file()


@pytest.fixture(autouse=True)
def _git_available():
    if shutil.which("git") is None:
        pytest.fail("git is needed: the Colab test clones the repository with it")
