"""Solutions to exercises.ipynb. Open this file when you have tried an exercise (or
are stuck); the notebook never imports it. Each function has the name and signature
of its stub in the notebook, and plain PyTorch is all it uses.
"""

import math

import torch


# Part 1 ------------------------------------------------------------------------------
def layer_norm(x, gamma, beta, eps=1e-6):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)  # divide by d, not d - 1
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


def pre_norm(x, sublayer, norm, dropout):
    return x + dropout(sublayer(norm(x)))


def subsequent_mask(size):
    return torch.ones(size, size, dtype=torch.bool).tril().unsqueeze(0)


def attention(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    return weights @ value, weights


def split_heads(x, h):
    B, L, d_model = x.shape
    return x.view(B, L, h, d_model // h).transpose(1, 2)


def merge_heads(x):
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, h * d_k)


def multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, h, mask=None):
    q = split_heads(w_q(query), h)  # (B, h, T, d_k)
    k, v = split_heads(w_k(key), h), split_heads(w_v(value), h)  # (B, h, S, d_k)
    if mask is not None:
        mask = mask.unsqueeze(1)  # (B, 1, T, S): the same mask for every head
    x, _ = attention(q, k, v, mask)
    return w_o(merge_heads(x))


def sinusoidal_table(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    i2 = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / 10000 ** (i2 / d_model)  # (max_len, d_model / 2)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe.float()


# Part 2 ------------------------------------------------------------------------------
def rate(step, d_model, warmup):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def smoothed_target(target, K, eps):
    q = torch.full((len(target), K), eps / K)
    q[torch.arange(len(target)), target] += 1 - eps
    return q


def greedy_decode(model, src, src_mask, max_len, start_symbol):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), start_symbol, dtype=torch.long)
    for _ in range(max_len - 1):
        mask = subsequent_mask(ys.size(1))
        out = model.decode(memory, src_mask, ys, mask)  # (B, t, d_model)
        next_word = model.generator(out[:, -1]).argmax(-1)  # (B,)
        ys = torch.cat([ys, next_word.unsqueeze(1)], dim=1)
    return ys


# Part 3 ------------------------------------------------------------------------------
def brevity_penalty(c, r):
    return 1.0 if c > r else math.exp(1 - r / c)


def bleu_score(counts, totals, c, r):
    log_p = sum(math.log(m / t) for m, t in zip(counts, totals, strict=True))
    return 100 * brevity_penalty(c, r) * math.exp(log_p / len(counts))


# Part 4 ------------------------------------------------------------------------------
def length_penalty(length, alpha):
    return ((5 + length) / 6) ** alpha


def beam_candidates(score, logp, k):
    B, V = score.size(0), logp.size(-1)
    cand = (score.view(-1, 1) + logp).view(B, k * V)  # every beam x every token
    top, idx = cand.topk(2 * k, dim=-1)  # best first
    return top, idx // V, idx % V
