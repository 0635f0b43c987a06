# Generated from annotated_transformer.md by nbexport.py (make export): edit the notebook, not this file. Line N here is line N of annotated_transformer.md, so a traceback's line number is the notebook's. `python nbexport.py --check` fails while this file is stale.







































































































# --- Part 1: The model › The architecture (annotated_transformer.md:106) ---
from atkit import runtime  # noqa: I001 (first: it sets torch's thread policy)

import copy
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F








# --- Part 1: The model › The encoder–decoder frame (§3.1) (annotated_transformer.md:124) ---
class EncoderDecoder(nn.Module):
    """Embeddings, encoder stack, decoder stack and generator, wired as in Figure 1."""

    def __init__(self, encoder, decoder, src_embed, tgt_embed, generator, config=None):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.src_embed = src_embed
        self.tgt_embed = tgt_embed
        self.generator = generator
        self.config = config

    def forward(self, src, tgt, src_mask, tgt_mask):
        memory = self.encode(src, src_mask)  # (B, S, d_model)
        return self.decode(memory, src_mask, tgt, tgt_mask)  # (B, T, d_model)

    def encode(self, src, src_mask):
        return self.encoder(self.src_embed(src), src_mask)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        return self.decoder(self.tgt_embed(tgt), memory, src_mask, tgt_mask)





# --- Part 1: The model › The encoder–decoder frame (§3.1) (annotated_transformer.md:151) ---
class Generator(nn.Module):
    """Project decoder states to vocabulary log-probabilities."""

    def __init__(self, d_model, vocab):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab)

    def forward(self, x):
        return F.log_softmax(self.proj(x), dim=-1)  # (B, T, vocab)













# --- Part 1: The model › Layer normalisation (annotated_transformer.md:174) ---
class LayerNorm(nn.Module):
    """Layer normalisation: biased variance, eps inside the square root."""

    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(features))
        self.beta = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


































# --- Part 1: The model › Residual connections, and where the norm goes (annotated_transformer.md:222) ---
class SublayerConnection(nn.Module):
    """Residual connection around `sublayer`, with post-norm (paper) or pre-norm."""

    def __init__(self, d_model, P_drop, norm="post"):
        super().__init__()
        self.norm = LayerNorm(d_model)
        self.dropout = nn.Dropout(P_drop)
        self.pre = norm == "pre"

    def forward(self, x, sublayer):
        if self.pre:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))








# --- Part 1: The model › The encoder stack (§3.1) (annotated_transformer.md:244) ---
def clones(module, n):
    """n independent deep copies of a module."""
    return nn.ModuleList([copy.deepcopy(module) for _ in range(n)])


class EncoderLayer(nn.Module):
    def __init__(self, d_model, self_attn, feed_forward, P_drop, norm="post"):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.sublayer = clones(SublayerConnection(d_model, P_drop, norm), 2)

    def forward(self, x, mask):
        x = self.sublayer[0](x, lambda y: self.self_attn(y, y, y, mask))
        return self.sublayer[1](x, self.feed_forward)


class Encoder(nn.Module):
    def __init__(self, layer, N, d_model, final_norm):
        super().__init__()
        self.layers = clones(layer, N)
        self.norm = LayerNorm(d_model) if final_norm else nn.Identity()

    def forward(self, x, mask):
        for layer in self.layers:
            x = layer(x, mask)  # (B, S, d_model)
        return self.norm(x)








# --- Part 1: The model › The decoder stack (§3.1) (annotated_transformer.md:280) ---
class DecoderLayer(nn.Module):
    def __init__(self, d_model, self_attn, src_attn, feed_forward, P_drop, norm="post"):
        super().__init__()
        self.self_attn = self_attn
        self.src_attn = src_attn
        self.feed_forward = feed_forward
        self.sublayer = clones(SublayerConnection(d_model, P_drop, norm), 3)

    def forward(self, x, memory, src_mask, tgt_mask):
        m = memory
        x = self.sublayer[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
        x = self.sublayer[1](x, lambda y: self.src_attn(y, m, m, src_mask))
        return self.sublayer[2](x, self.feed_forward)


class Decoder(nn.Module):
    def __init__(self, layer, N, d_model, final_norm):
        super().__init__()
        self.layers = clones(layer, N)
        self.norm = LayerNorm(d_model) if final_norm else nn.Identity()

    def forward(self, x, memory, src_mask, tgt_mask):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)  # (B, T, d_model)
        return self.norm(x)








# --- Part 1: The model › The subsequent mask (annotated_transformer.md:314) ---
def subsequent_mask(size, device=None):
    """(1, size, size) boolean mask: row t is True at columns 0..t."""
    return torch.tril(torch.ones(1, size, size, dtype=torch.bool, device=device))





















# --- Part 1: The model › Scaled dot-product attention (§3.2.1) (annotated_transformer.md:339) ---
def attention(query, key, value, mask=None):
    """Eq. 1. query (..., T, d_k), key (..., S, d_k), value (..., S, d_v)."""
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., T, S)
    if mask is not None:  # True: may attend
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    p_attn = scores.softmax(dim=-1)  # (..., T, S), rows sum to 1
    return p_attn @ value, p_attn  # (..., T, d_v), (..., T, S)































# --- Part 1: The model › Multi-head attention (§3.2.2) (annotated_transformer.md:379) ---
class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model):
        super().__init__()
        self.d_k, self.h = d_model // h, h
        self.w_q, self.w_k, self.w_v, self.w_o = clones(nn.Linear(d_model, d_model), 4)
        self.attn = None  # (B, h, T, S) weights of the last call

    def forward(self, query, key, value, mask=None):
        q = self.split_heads(self.w_q(query))  # (B, h, T, d_k)
        k = self.split_heads(self.w_k(key))  # (B, h, S, d_k)
        v = self.split_heads(self.w_v(value))  # (B, h, S, d_k)
        if mask is not None:
            mask = mask.unsqueeze(1)  # (B, 1, T or 1, S): same mask for every head
        x, p_attn = attention(q, k, v, mask)  # (B, h, T, d_k), (B, h, T, S)
        self.attn = p_attn.detach()  # for Part 6 to read; not part of the graph
        x = x.transpose(1, 2).reshape(q.size(0), -1, self.h * self.d_k)  # (B, T, d)
        return self.w_o(x)  # Concat(head_1..head_h) W^O

    def split_heads(self, x):  # (B, len, d_model) -> (B, h, len, d_k)
        return x.view(x.size(0), -1, self.h, self.d_k).transpose(1, 2)

















































































# --- Part 1: The model › Position-wise feed-forward networks (§3.3) (annotated_transformer.md:481) ---
class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(self.w_1(x).relu())  # (B, T, d_model)















# --- Part 1: The model › Embeddings and weight sharing (§3.4) (annotated_transformer.md:505) ---
class Embeddings(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.lut = nn.Embedding(vocab, d_model)
        self.d_model = d_model
        nn.init.normal_(self.lut.weight, std=d_model**-0.5)

    def forward(self, x):
        return self.lut(x) * math.sqrt(self.d_model)  # (B, len, d_model)



















# --- Part 1: The model › Positional encoding (§3.5) (annotated_transformer.md:534) ---
def sinusoidal_table(max_len, d_model):
    """(max_len, d_model) table of §3.5's sines (even columns) and cosines (odd)."""
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    i2 = torch.arange(0, d_model, 2, dtype=torch.float64)  # the 2i of the formula
    angle = pos / 10000 ** (i2 / d_model)  # (max_len, d_model / 2)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return pe.float()


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, P_drop, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(P_drop)
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])  # (B, len, d_model)







































# --- Part 1: The model › Deep dive: Why sinusoids (annotated_transformer.md:592) ---
def offset_matrix(k, d_model):
    """M_k with PE[pos + k] = M_k @ PE[pos] for every pos (block-diagonal rotations)."""
    w = 10000 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    c, s = torch.cos(w * k), torch.sin(w * k)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    M[0::2, 0::2], M[0::2, 1::2] = torch.diag(c), torch.diag(s)
    M[1::2, 0::2], M[1::2, 1::2] = torch.diag(-s), torch.diag(c)
    return M





























# --- Part 1: The model › The full model (§3, Table 3) (annotated_transformer.md:630) ---
from dataclasses import dataclass

from atkit.settings import setting  # a default and the values it allows


@dataclass(frozen=True)
class ModelConfig:
    N: int = setting(6, low=1)  # layers in each stack
    d_model: int = setting(512, low=2)  # even, and a multiple of h
    d_ff: int = setting(2048, low=1)
    h: int = setting(8, low=1)
    P_drop: float = setting(0.1, low=0.0, below=1.0)  # §5.4
    norm: str = setting("post", choices=("post", "pre"))  # "pre": the alternative
    tie: str = setting("all", choices=("all", "tgt", "none"))  # §3.4; "tgt": one side
    max_len: int = setting(5000, low=1)  # rows of the positional-encoding table


MODEL_SIZES = {
    "tiny": dict(N=2, d_model=128, d_ff=512, h=4),
    "small": dict(N=3, d_model=256, d_ff=1024, h=4),
    "base": dict(),  # Table 3, row "base"
    "big": dict(d_model=1024, d_ff=4096, h=16, P_drop=0.3),  # Table 3, row "big"
}


def model_config(size="base", **overrides):
    """A ModelConfig from a named size plus overrides."""
    return ModelConfig(**{**MODEL_SIZES[size], **overrides})





# --- Part 1: The model › The full model (§3, Table 3) (annotated_transformer.md:664) ---
def build_model(cfg: ModelConfig, src_vocab: int, tgt_vocab: int):
    c = copy.deepcopy
    attn = MultiHeadedAttention(cfg.h, cfg.d_model)
    ff = PositionwiseFeedForward(cfg.d_model, cfg.d_ff)
    d, p, norm, pre = cfg.d_model, cfg.P_drop, cfg.norm, cfg.norm == "pre"
    model = EncoderDecoder(
        Encoder(EncoderLayer(d, c(attn), c(ff), p, norm), cfg.N, d, pre),
        Decoder(DecoderLayer(d, c(attn), c(attn), c(ff), p, norm), cfg.N, d, pre),
        nn.Sequential(Embeddings(d, src_vocab), PositionalEncoding(d, p, cfg.max_len)),
        nn.Sequential(Embeddings(d, tgt_vocab), PositionalEncoding(d, p, cfg.max_len)),
        Generator(d, tgt_vocab),
        config=cfg,
    )
    for name, param in model.named_parameters():
        if param.dim() > 1 and ".lut." not in name:
            nn.init.xavier_uniform_(param)
    if cfg.tie in ("tgt", "all"):
        model.generator.proj.weight = model.tgt_embed[0].lut.weight
    if cfg.tie == "all":
        model.src_embed[0].lut.weight = model.tgt_embed[0].lut.weight
    return model


def make_model(src_vocab, tgt_vocab, size="base", **overrides):
    """The Transformer of §3 with a named size's settings plus overrides."""
    return build_model(model_config(size, **overrides), src_vocab, tgt_vocab)






































































































































































# --- Part 2: Training › Batches and masks (annotated_transformer.md:857) ---
class Batch:
    """Source and target ids (batch first) with their attention masks."""

    def __init__(self, src, tgt=None, pad=0):
        self.src = src  # (B, S)
        self.pad = pad
        self.src_mask = (src != pad).unsqueeze(-2)  # (B, 1, S)
        if tgt is not None:
            self.tgt = tgt[:, :-1]  # (B, T) decoder input
            self.tgt_y = tgt[:, 1:]  # (B, T) labels: the next token at each position
            self.tgt_mask = self.make_std_mask(self.tgt, pad)  # (B, T, T)
            self.label_count = (self.tgt_y != pad).sum()  # a tensor, moved with .to
            self.ntokens = int(self.label_count)  # the same count, as a number

    @staticmethod
    def make_std_mask(tgt, pad):
        """Hide padding and future positions."""
        keep = (tgt != pad).unsqueeze(-2)  # (B, 1, T)
        return keep & subsequent_mask(tgt.size(-1), tgt.device)  # (B, T, T)

    def to(self, device):
        for name in ("src", "src_mask", "tgt", "tgt_y", "tgt_mask", "label_count"):
            if hasattr(self, name):
                setattr(self, name, getattr(self, name).to(device, non_blocking=True))
        return self
















# --- Part 2: Training › Computing the loss (annotated_transformer.md:899) ---
class SimpleLossCompute:
    def __init__(self, generator, criterion):
        self.generator, self.criterion = generator, criterion

    def __call__(self, x, y, norm):
        logp = self.generator(x)  # (B, T, vocab)
        loss = self.criterion(logp.reshape(-1, logp.size(-1)), y.reshape(-1))
        return loss.detach(), loss / norm








# --- Part 2: Training › One training step (annotated_transformer.md:916) ---
def train_step(model, batch, loss_compute, optimizer, scheduler):
    """One optimiser step on a Batch; returns the summed loss of its label tokens
    (a detached tensor)."""
    model.train()  # dropout on
    optimizer.zero_grad(set_to_none=True)
    out = model(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask)  # (B, T, d_model)
    loss_sum, loss = loss_compute(out, batch.tgt_y, batch.ntokens)
    loss.backward()
    optimizer.step()
    scheduler.step()
    return loss_sum







# --- Part 2: Training › The training loop (annotated_transformer.md:935) ---
from atkit import runner
from atkit.prose import say  # printed sentences wrapped to the page's width


def run_epoch(batches, model, loss_compute, optimizer, scheduler, desc=""):
    """One training pass over `batches`; returns (summed loss, label tokens, steps)."""
    total, ntokens = 0.0, 0
    for batch in runner.progress(batches, desc):  # a bar; off in the committed run
        total += train_step(model, batch, loss_compute, optimizer, scheduler)
        ntokens += batch.ntokens
    return float(total), ntokens, len(batches)



















# --- Part 2: Training › Optimiser and learning-rate schedule (§5.3) (annotated_transformer.md:966) ---
from torch.optim.lr_scheduler import LambdaLR


def rate(step, d_model, factor=1.0, warmup=4000, total=None, cooldown=0.0):
    """Eq. 3, times `factor`, times a linear cool-down over the last `cooldown`
    share of `total` steps (none when cooldown is 0). Steps count from 1."""
    step = max(step, 1)
    lr = factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
    if cooldown and total:
        start = total * (1 - cooldown)  # the step where the cool-down begins
        lr *= min(1.0, max(0.0, (total - step) / (total - start)))
    return lr


def make_optimizer(model, d_model, factor=1.0, warmup=4000, fused=False, **options):
    """Adam with the §5.3 settings and eq. 3's schedule. `options`: `total` and
    `cooldown` (of `rate`), and `weight_decay` (which switches to AdamW)."""
    decay = options.pop("weight_decay", 0.0)
    adam = torch.optim.AdamW if decay else torch.optim.Adam
    kw = dict(betas=(0.9, 0.98), eps=1e-9, weight_decay=decay, fused=fused or None)
    optimizer = adam(model.parameters(), lr=1.0, **kw)
    at = lambda s: rate(s + 1, d_model, factor, warmup, **options)  # s counts from 0
    return optimizer, LambdaLR(optimizer, at)




































# --- Part 2: Training › Label smoothing (§5.4) (annotated_transformer.md:1026) ---
class LabelSmoothing(nn.Module):
    """Cross-entropy against the smoothed target q, summed over non-padding labels."""

    def __init__(self, size, padding_idx, smoothing=0.1):
        super().__init__()
        self.size, self.padding_idx, self.smoothing = size, padding_idx, smoothing
        self.true_dist = None  # the last q, kept for plots

    def forward(self, x, target):
        """x: (n, size) log-probabilities; target: (n,) token ids."""
        q = torch.full_like(x, self.smoothing / self.size)
        q.scatter_(
            1, target.unsqueeze(1), 1 - self.smoothing + self.smoothing / self.size
        )
        self.true_dist = q.detach()
        loss = -(q * x).sum(dim=1)  # (n,)
        return loss.masked_fill(target == self.padding_idx, 0.0).sum()













































# --- Part 2: Training › Greedy decoding (annotated_transformer.md:1089) ---
from atkit.kvcache import CachedDecoderStepper


class DecoderStepper:
    """The decoder's output at the newest position of `ys`, rerun on the prefix."""

    def __init__(self, model, memory, src_mask):
        self.model, self.memory, self.src_mask = model, memory, src_mask

    def __call__(self, ys):  # ys (B, t) -> (B, d_model)
        mask = subsequent_mask(ys.size(1), ys.device)
        return self.model.decode(self.memory, self.src_mask, ys, mask)[:, -1]

    def reorder(self, rows):
        """Keep only `rows` (a (B',) index), in that order."""
        self.memory, self.src_mask = self.memory[rows], self.src_mask[rows]




# --- Part 2: Training › Greedy decoding (annotated_transformer.md:1110) ---
@torch.no_grad()
def greedy_decode(
    model, src, src_mask, max_len, start_symbol, end_symbol=None, stepper=DecoderStepper
):
    """(B, <= max_len) token ids, each row starting with start_symbol."""
    B, dev = src.size(0), src.device
    limits = torch.as_tensor(max_len, device=dev).expand(B)  # (B,) per sentence
    memory = model.encode(src, src_mask)  # (B, S, d_model)
    step = stepper(model, memory, src_mask)
    ys = torch.full((B, 1), start_symbol, dtype=torch.long, device=dev)
    done = limits <= 1  # (B,) a row whose limit is 1 holds <s> alone
    for t in range(1, int(limits.max())):
        next_word = model.generator(step(ys)).argmax(dim=-1)  # (B,)
        if end_symbol is not None:
            next_word = next_word.masked_fill(done, end_symbol)
            done |= (next_word == end_symbol) | (limits <= t + 1)
        ys = torch.cat([ys, next_word.unsqueeze(1)], dim=1)  # (B, t + 1)
        if end_symbol is not None and bool(done.all()):
            break
    return ys








# --- Part 2: Training › A first example: the copy task (annotated_transformer.md:1139) ---
def copy_batches(V, batch_size, n_batches, length=10, generator=None):
    """Random sequences that start with the start symbol 1; target = source."""
    for _ in range(n_batches):
        data = torch.randint(2, V, (batch_size, length), generator=generator)
        data[:, 0] = 1  # (B, length)
        yield Batch(data, data.clone(), pad=0)


def train_copy_task(
    V=11, epochs=20, batches_per_epoch=30, batch_size=128, seed=0, cooldown=0.3
):
    """Train a tiny model to copy its input; returns (model in eval mode, losses)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = make_model(V, V, "tiny", N=2, d_model=64, d_ff=256, h=4, P_drop=0.0)
    criterion = LabelSmoothing(size=V, padding_idx=0, smoothing=0.0)
    optimizer, scheduler = make_optimizer(
        model, 64, warmup=200, total=epochs * batches_per_epoch, cooldown=cooldown
    )
    loss_compute = SimpleLossCompute(model.generator, criterion)
    losses = []
    for epoch in range(epochs):
        data = list(copy_batches(V, batch_size, batches_per_epoch, generator=gen))
        desc = f"copy epoch {epoch + 1}"
        total, n, _ = run_epoch(data, model, loss_compute, optimizer, scheduler, desc)
        losses.append(total / n)
    return model.eval(), losses







































































































































# --- Part 3: A real task — Multi30k German→English › The run configuration (annotated_transformer.md:1302) ---
from atkit import config
from atkit import data as corpus
from atkit.config import PRESETS, RunConfig, expected_time
from atkit.data import LANGS  # ("de", "en")










































































# --- Part 3: A real task — Multi30k German→English › From text to tokens (annotated_transformer.md:1381) ---
import re

from atkit.data import EVAL_SPLITS, TranslationData, tokenize_all, tokenized










# --- Part 3: A real task — Multi30k German→English › From text to tokens (annotated_transformer.md:1395) ---
_NO_SPACE_BEFORE = re.compile(r" ([.,!?;:%)\]}]|'s|'re|'m|'ve|'d|'ll|n't)(?=\s|$)")
_NO_SPACE_AFTER = re.compile(r"([(\[{]) ")


def detokenize(tokens: list[str]) -> str:
    text = " ".join(tokens)
    text = _NO_SPACE_BEFORE.sub(r"\1", text)
    return _NO_SPACE_AFTER.sub(r"\1", text)




















# --- Part 3: A real task — Multi30k German→English › Vocabulary (annotated_transformer.md:1424) ---
from collections import Counter

from atkit.data import BOS, EOS, PAD, SPECIALS, UNK, check_itos  # the specials: 0-3


class Vocab:
    kind = "words"

    def __init__(self, itos: list[str]):
        self.itos = check_itos(itos)  # the specials first, no duplicates
        self.stoi = {tok: i for i, tok in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: list[str]) -> list[int]:
        return [self.stoi.get(tok, UNK) for tok in tokens]

    def decode(self, ids) -> list[str]:
        return [self.itos[i] for i in ids if i not in (BOS, EOS, PAD)]

    def state(self) -> dict:
        return {"kind": self.kind, "itos": self.itos}

    @classmethod
    def from_state(cls, state: dict) -> "Vocab":
        return cls(state["itos"])


def build_vocab(sentences: list[list[str]], min_freq: int) -> Vocab:
    counts = Counter(tok for sentence in sentences for tok in sentence)
    words = sorted(
        (w for w, c in counts.items() if c >= min_freq and w not in SPECIALS),
        key=lambda w: (-counts[w], w),
    )  # frequent first, ties alphabetical
    return Vocab(list(SPECIALS) + words)


def build_word_vocabs(cfg, src_sentences, tgt_sentences):
    return tuple(build_vocab(s, cfg.min_freq) for s in (src_sentences, tgt_sentences))













# --- Part 3: A real task — Multi30k German→English › Vocabulary (annotated_transformer.md:1478) ---
from atkit.data import frame



















# --- Part 3: A real task — Multi30k German→English › Batches by length, under a token budget (annotated_transformer.md:1499) ---
from atkit.data import epoch_order, pair_lengths


def bucket_batches(lengths: list[tuple[int, ...]], max_tokens: int, pad_multiple=1):
    """Index lists, in length order, whose padded size (items x longest, rounded up
    to pad_multiple) stays within max_tokens on every side; an item longer than the
    budget gets a batch of its own."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, current, longest = [], [], 0
    for i in order:
        item = -(-max(lengths[i]) // pad_multiple) * pad_multiple  # rounded up
        need = max(longest, item)
        if current and (len(current) + 1) * need > max_tokens:
            batches.append(current)
            current, need = [], item
        current.append(i)
        longest = need
    return batches + [current] if current else batches















# --- Part 3: A real task — Multi30k German→English › Batches by length, under a token budget (annotated_transformer.md:1533) ---
from torch.nn.utils.rnn import pad_sequence

from atkit.fast import pad_to_multiple


def collate(pairs, batch: list[int], pad_multiple: int = 1) -> Batch:
    """One Batch (on the CPU) from the pairs at the indices `batch`."""
    src, tgt = ([torch.tensor(pairs[i][side]) for i in batch] for side in (0, 1))
    src = pad_sequence(src, batch_first=True, padding_value=PAD)  # (B, S)
    tgt = pad_sequence(tgt, batch_first=True, padding_value=PAD)  # (B, T + 1)
    src, tgt = pad_to_multiple(src, tgt, pad_multiple, PAD)  # for compiled kernels
    return Batch(src, tgt, PAD)


def make_batches(pairs, cfg: RunConfig, device) -> list[Batch]:
    """All batches of `pairs`, collated once and moved to `device`."""
    buckets = bucket_batches(pair_lengths(pairs), cfg.max_tokens, cfg.pad_multiple)
    return [collate(pairs, b, cfg.pad_multiple).to(device) for b in buckets]

































# --- Part 3: A real task — Multi30k German→English › The training loop on a real corpus (annotated_transformer.md:1585) ---
from itertools import count


def training_parts(cfg, data, device, model=None):
    """Part 1's model (or `model`, one built another way) and Part 2's loss,
    optimiser and schedule for a RunConfig."""
    torch.manual_seed(cfg.seed)  # the same seed, the same initial weights
    if model is None:
        model = build_model(cfg.model, len(data.vocab_src), len(data.vocab_tgt))
    criterion = LabelSmoothing(len(data.vocab_tgt), PAD, cfg.eps_ls)
    loss_compute = SimpleLossCompute(model.generator, criterion)
    optimizer, scheduler = make_optimizer(
        model.to(device),
        cfg.model.d_model,
        cfg.factor,
        cfg.warmup,
        fused=cfg.fast,
        total=cfg.steps,
        cooldown=cfg.cooldown,
        weight_decay=cfg.weight_decay,
    )
    return model, loss_compute, optimizer, scheduler


def batch_stream(n_batches, seed):
    """Batch indices, epoch after epoch, each epoch in its own shuffled order."""
    for epoch in count():
        yield from epoch_order(n_batches, seed, epoch)


def validation_loss(model, batches, loss_compute) -> float:
    """The loss per label token over `batches`, dropout off, no gradients."""
    model.eval()
    total, ntokens = 0.0, 0
    with torch.no_grad():
        for b in batches:
            out = model(b.src, b.tgt, b.src_mask, b.tgt_mask)
            total += loss_compute(out, b.tgt_y, b.ntokens)[0]  # the summed loss
            ntokens += b.ntokens
    return float(total) / ntokens


def train(cfg, data, device):
    """Returns the model with the best validation loss, and the history: (step,
    training loss, validation loss) at each evaluation."""
    model, loss_compute, optimizer, scheduler = training_parts(cfg, data, device)
    batches = make_batches(data.train, cfg, device)
    val_batches = make_batches(data.val, cfg, device)
    stream, history, best = batch_stream(len(batches), cfg.seed), [], None
    for start in range(0, cfg.steps, cfg.eval_every):
        n = min(cfg.eval_every, cfg.steps - start)  # the last window may be short
        window = [batches[next(stream)] for _ in range(n)]
        loss, ntokens, steps = run_epoch(
            window, model, loss_compute, optimizer, scheduler
        )
        val = validation_loss(model, val_batches, loss_compute)
        history.append((start + steps, loss / ntokens, val))
        if best is None or val < best[0]:
            best = (val, copy.deepcopy(model.state_dict()))
    model.load_state_dict(best[1])
    return model.eval(), history






















































































































# --- Part 3: A real task — Multi30k German→English › Translating (annotated_transformer.md:1765) ---
from atkit import inputs  # checks of what a reader hands in

MAX_EXTRA = 50  # §6.1


def translate_ids(
    model,
    sources,
    decode_tokens=8000,
    search=greedy_decode,
    stepper=CachedDecoderStepper,
):
    """Translations (ids without <s>/</s>) of framed source id lists."""
    inputs.check_translation(model, sources, decode_tokens, search)
    device = next(model.parameters()).device
    model.eval()
    out = [None] * len(sources)
    for idx in bucket_batches([(len(s),) for s in sources], decode_tokens):
        src = pad_sequence(
            [torch.tensor(sources[i]) for i in idx], batch_first=True, padding_value=PAD
        ).to(device)  # (B, S)
        limits = [min(model.config.max_len, len(sources[i]) + MAX_EXTRA) for i in idx]
        limits, mask = torch.tensor(limits, device=device), (src != PAD).unsqueeze(-2)
        ys = search(model, src, mask, limits, BOS, EOS, stepper=stepper)
        for i, row in zip(idx, ys[:, 1:].tolist(), strict=True):  # drop <s>
            out[i] = row[: row.index(EOS)] if EOS in row else row
    return out





# --- Part 3: A real task — Multi30k German→English › Translating (annotated_transformer.md:1798) ---
def translate_texts(
    model, texts, vocab_src, vocab_tgt, src_lang="de", search=greedy_decode
) -> list[str]:
    texts = inputs.text_list(texts)
    inputs.check_options("translate_texts", src_lang, search)
    tokens = tokenize_all(src_lang, texts)
    inputs.check_tokenized(tokens)
    sources = [frame(vocab_src.encode(t)) for t in tokens]
    return [
        detokenize(vocab_tgt.decode(ids))
        for ids in translate_ids(model, sources, search=search)
    ]













# --- Part 3: A real task — Multi30k German→English › Deep dive: Decoding methods by name (annotated_transformer.md:1824) ---
from atkit.searches import Search  # a decoding function with its options' bounds
from atkit.settings import check_setting

SEARCHES = {"greedy": Search(greedy_decode)}


def make_search(name="greedy", **options):
    """The search called `name` in SEARCHES, its options set and checked."""
    check_setting("make_search", "name", name, str, choices=tuple(SEARCHES))
    return SEARCHES[name].make(name, **options)













# --- Part 3: A real task — Multi30k German→English › Scoring with sacreBLEU (annotated_transformer.md:1848) ---
import sacrebleu

from atkit.scoring import corpus_bleu


def bleu(
    model, data, split="test_2016_flickr", search=greedy_decode, decode_tokens=8000
) -> dict:
    """sacreBLEU of `model` on one split of `data`, with its hypotheses."""
    ids = translate_ids(model, data.sources[split], decode_tokens, search)
    hyps = [detokenize(data.vocab_tgt.decode(out)) for out in ids]
    return corpus_bleu(hyps, data.text[split][1])  # <unk> scored as one token






































# --- Part 3: A real task — Multi30k German→English › Deep dive: BLEU by hand, and what it misses (annotated_transformer.md:1899) ---
def bleu_by_hand(stats) -> tuple[list[float], float, float]:
    """(p_1..p_4 in %, BP, BLEU) from the counts of a sacreBLEU score `stats`."""
    p = [c / t if t else 0.0 for c, t in zip(stats.counts, stats.totals, strict=True)]
    c, r = stats.sys_len, stats.ref_len
    bp = 1.0 if c > r else math.exp(1 - r / c)
    mean = math.exp(sum(math.log(x) for x in p) / 4) if min(p) > 0 else 0.0
    return [100 * x for x in p], bp, 100 * bp * mean
















































# --- Part 3: A real task — Multi30k German→English › `Translator`: the model as a function of one sentence (annotated_transformer.md:1955) ---
class Translator:
    def __init__(
        self, model, vocab_src, vocab_tgt, src_lang="de", search=greedy_decode
    ):
        inputs.check_options("Translator", src_lang, search)
        self.model, self.vocab_src, self.vocab_tgt = model, vocab_src, vocab_tgt
        self.src_lang, self.search = src_lang, search

    def __call__(self, text: str) -> str:
        tokens = tokenize_all(self.src_lang, [inputs.one_text(text)])[0]
        limit = self.model.config.max_len - 2  # room for <s> and </s>
        ids = inputs.check_ids(self.vocab_src.encode(tokens), limit)
        out = translate_ids(self.model, [frame(ids)], search=self.search)
        return detokenize(self.vocab_tgt.decode(out[0]))



































# --- Part 4: The paper's full recipe › One subword vocabulary for both languages (§5.1) (annotated_transformer.md:2005) ---
import sentencepiece as spm


class SharedBPE:
    """A sentencepiece BPE model behind Part 3's Vocab interface."""

    kind = "bpe"

    def __init__(self, model_proto: bytes):
        self.model_proto = bytes(model_proto)
        self.sp = spm.SentencePieceProcessor(model_proto=self.model_proto)
        n = self.sp.get_piece_size()
        self.itos = check_itos(self.sp.id_to_piece(i) for i in range(n))
        self.stoi = {piece: i for i, piece in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: list[str]) -> list[int]:
        return self.sp.encode(" ".join(tokens))

    def pieces(self, tokens: list[str]) -> list[str]:
        return self.sp.encode(" ".join(tokens), out_type=str)

    def decode(self, ids) -> list[str]:
        return self.sp.decode([int(i) for i in ids]).split()

    def state(self) -> dict:
        blob = torch.frombuffer(bytearray(self.model_proto), dtype=torch.uint8)
        return {"kind": self.kind, "model": blob.clone()}

    @classmethod
    def from_state(cls, state: dict) -> "SharedBPE":
        return cls(state["model"].numpy().tobytes())





# --- Part 4: The paper's full recipe › One subword vocabulary for both languages (§5.1) (annotated_transformer.md:2045) ---
def train_shared_bpe(sentences: list[list[str]], vocab_size: int) -> SharedBPE:
    """BPE pieces learnt from tokenized sentences of both languages."""
    return SharedBPE(corpus.learn_bpe([" ".join(s) for s in sentences], vocab_size))


def build_shared_bpe(cfg, src_sentences, tgt_sentences):
    bpe = train_shared_bpe(src_sentences + tgt_sentences, cfg.bpe_size)
    return bpe, bpe






























































































































# --- Part 4: The paper's full recipe › Beam search (§6.1) (annotated_transformer.md:2180) ---
from atkit.searches import Option, PrefixModel


def length_penalty(length, alpha: float):
    """Wu et al. (2016): ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha





# --- Part 4: The paper's full recipe › Beam search (§6.1) (annotated_transformer.md:2192) ---
@torch.no_grad()
def beam_search(
    model, src, mask, limits, bos, eos, beam_size=4, alpha=0.6, stepper=DecoderStepper
):
    """(B, <= limits) ids of each sentence's best hypothesis (§6.1)."""
    B, k, dev = src.size(0), beam_size, src.device
    limits = torch.as_tensor(limits, device=dev).expand(B)  # (B,) per sentence
    memory = model.encode(src, mask).repeat_interleave(k, 0)  # (B*k, S, d_model)
    step = stepper(model, memory, mask.repeat_interleave(k, 0))
    ys = torch.full((B * k, 1), bos, dtype=torch.long, device=dev)
    score = torch.full((B, k), -math.inf, device=dev)
    score[:, 0] = 0.0  # (B, k): one live beam to start with
    finished, done = [[] for _ in range(B)], (limits <= 1).tolist()  # <s> alone
    top_lp = length_penalty(limits - 1, alpha)  # (B,) the largest lp a beam can reach
    lim = limits.tolist()
    for t in range(1, int(limits.max())):
        logp = model.generator(step(ys)).float()  # (B*k, V)
        V = logp.size(-1)
        cand = (score.view(-1, 1) + logp).view(B, k * V)  # (B, k*V)
        top, idx = cand.topk(min(2 * k, k * V), dim=-1)  # (B, 2k), best first
        beam, token = idx // V, idx % V  # (B, 2k)
        ends = token == (-1 if eos is None else eos)  # (B, 2k) end here
        ends |= (limits <= t + 1).unsqueeze(1)  # ... or reach their limit
        for b, r in (ends[:, :k] & (top[:, :k] > -math.inf)).nonzero().tolist():
            if not done[b]:  # a finished hypothesis, scored with the length penalty
                ids = ys[b * k + beam[b, r]].tolist() + [token[b, r].item()]
                finished[b].append((top[b, r].item() / length_penalty(t, alpha), ids))
        rank = torch.arange(top.size(1), device=dev) + ends * top.size(1)
        keep = rank.argsort(dim=-1)[:, :k]  # (B, k): best k that go on
        score = top.gather(1, keep)  # (B, k)
        rows = torch.arange(B, device=dev).unsqueeze(1) * k + beam.gather(1, keep)
        ys = torch.cat([ys[rows.view(-1)], token.gather(1, keep).view(-1, 1)], 1)
        # ys: (B*k, t + 1), each live beam's prefix with its new token
        step.reorder(rows.view(-1))  # the stepper's state follows its beams
        hope = (score.max(1).values / top_lp).tolist()  # (B,) best a live beam can do
        for b, hyps in enumerate(finished):
            best = max((s for s, _ in hyps), default=-math.inf)
            done[b] = done[b] or len(hyps) >= k or hope[b] < best or t + 1 >= lim[b]
        if all(done):
            break
    best = [max(h, key=lambda hyp: hyp[0])[1] if h else [bos] for h in finished]
    out = [torch.tensor(ids, device=dev) for ids in best]
    pad = bos if eos is None else eos  # no end: rows are full
    return pad_sequence(out, batch_first=True, padding_value=pad)  # (B, longest)































# --- Part 4: The paper's full recipe › Deep dive: Beam search and sampling by name (annotated_transformer.md:2268) ---
MAX_BEAM = 256  # each step ranks beam_size x vocabulary candidates per sentence
SEARCHES["beam"] = Search(
    beam_search, {"beam_size": Option(low=1, high=MAX_BEAM), "alpha": Option(low=0.0)}
)










# --- Part 4: The paper's full recipe › Deep dive: Beam search and sampling by name (annotated_transformer.md:2283) ---
class GumbelNoised:
    """`model` whose generator adds Gumbel noise to the log-probabilities scaled by
    1 / temperature, row b from random stream `gens[b]`: its argmax is a sample
    (never the start symbol: a sentence does not begin again)."""

    def __init__(self, model, gens, temperature, start_symbol):
        self.model, self.gens, self.temperature = model, gens, temperature
        self.start_symbol = start_symbol

    def __getattr__(self, name):  # encode, decode, decoder: the model's own
        return getattr(self.model, name)

    def generator(self, x):  # (B, d_model) -> (B, V)
        logp = self.model.generator(x).float() / self.temperature
        u = [
            torch.rand(logp.size(-1), generator=g, device=logp.device)
            for g in self.gens
        ]
        logp[:, self.start_symbol] = -math.inf
        return logp - (-torch.stack(u).log()).log()


def sample_decode(
    model,
    src,
    src_mask,
    max_len,
    start_symbol,
    end_symbol=None,
    temperature=1.0,
    seed=0,
    stepper=DecoderStepper,
):
    """(B, <= max_len) ids, each token drawn from softmax(logits / temperature)."""
    gens = [
        torch.Generator(src.device).manual_seed(hash((seed, *s[m[0]].tolist())) % 2**63)
        for s, m in zip(src, src_mask, strict=True)
    ]  # one stream per sentence, from its own ids (its padding left out)
    noised = GumbelNoised(model, gens, temperature, start_symbol)
    return greedy_decode(
        noised, src, src_mask, max_len, start_symbol, end_symbol, stepper
    )


SEARCHES["sample"] = Search(
    sample_decode, {"temperature": Option(low=0.05, high=20.0), "seed": Option(low=0)}
)


















# --- Part 4: The paper's full recipe › Checkpoint averaging (§6.1) (annotated_transformer.md:2349) ---
from atkit import checkpoints  # what may be averaged: one run's, the same shapes


def average_checkpoints(sources) -> dict:
    """Mean of the floating-point entries of several state dicts (§6.1)."""
    states = checkpoints.states_to_average(sources, RunConfig)  # one run, one shape
    out = {}
    for name, ref in states[0].items():
        if torch.is_tensor(ref) and ref.is_floating_point():
            total = sum(state[name].double() for state in states)
            out[name] = (total / len(states)).to(ref.dtype)
        else:
            out[name] = states[-1][name]  # counters, masks, non-tensors: the newest
    return out































































# --- Part 4: The paper's full recipe › The table, trained and scored (annotated_transformer.md:2427) ---
from atkit import report  # the table, printed from its numbers



















































































































































# --- Part 5: Faster and distributed training › Deep dive: How the processes share a step (annotated_transformer.md:2576) ---
def shard_batches(order, rank, world_size):
    """Rank `rank`'s share: items rank, rank + W, rank + 2W, ...; every rank gets
    len(order) // W of them (the remainder is dropped)."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got {rank}, {world_size}")
    usable = len(order) // world_size * world_size
    return [order[i] for i in range(rank, usable, world_size)]






















# --- Part 5: Faster and distributed training › Deep dive: How the processes share a step (annotated_transformer.md:2606) ---
import inspect

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class DataParallel(runner.SingleProcess):
    def __init__(self, rank, size, local_rank, local_size, device):
        self.rank, self.size, self.device = rank, size, device
        self.local_rank, self.local_size = local_rank, local_size
        self.is_main = rank == 0

    def shard(self, order):
        return shard_batches(order, self.rank, self.size)

    def wrap(self, model):
        ids = [self.device.index] if self.device.type == "cuda" else None
        # the buffers (positional encodings) are constant: no copy at each forward;
        # torch 2.13 renamed the switch, older versions know only the first name
        sync = "broadcast_buffers"
        if "forward_sync_buffers" in inspect.signature(DDP).parameters:
            sync = "forward_sync_buffers"
        return DDP(model, device_ids=ids, **{sync: False})

    def norm(self, label_count):
        """The global label-token count over W, so that DDP's mean is the
        single-process loss of the global batch; `label_count`: this rank's."""
        n = torch.as_tensor(label_count, dtype=torch.float32, device=self.device)
        dist.all_reduce(n)  # sum over ranks
        return n / self.size

    def all_sum(self, values):
        values = values.to(self.device)
        dist.all_reduce(values)
        return values.cpu()

    def gather(self, obj):
        out = [None] * self.size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def barrier(self):
        dist.barrier()









# --- Part 5: Faster and distributed training › Deep dive: How the processes share a step (annotated_transformer.md:2659) ---
def copy_task_data(cfg: RunConfig, V=16, max_len=12, seed=0) -> TranslationData:
    """TranslationData of random sequences whose translation is themselves."""
    config.check_copy_task(cfg)  # no languages, no subwords
    vocab = Vocab([*SPECIALS, *(f"s{i}" for i in range(V - len(SPECIALS)))])
    gen = torch.Generator().manual_seed(seed)

    def pairs(n):
        lengths = torch.randint(2, max_len - 1, (n,), generator=gen).tolist()
        seqs = [torch.randint(len(SPECIALS), V, (k,), generator=gen) for k in lengths]
        return [(frame(s.tolist()), frame(s.tolist())) for s in seqs]

    train_pairs, val_pairs = pairs(cfg.n_train or 4000), pairs(cfg.n_eval or 200)
    text = {split: ([], []) for split in EVAL_SPLITS}
    sources = {split: [] for split in EVAL_SPLITS}
    return TranslationData(vocab, vocab, train_pairs, val_pairs, sources, text)












































# --- Part 6: Looking inside the trained model › Collecting the weights (annotated_transformer.md:2719) ---
from atkit import heads


def attention_maps(model, src_ids, tgt_ids):
    """Weights for one sentence pair: {'encoder': (N, h, S, S), 'decoder': (N, h, T, T),
    'cross': (N, h, T, S)}; tgt_ids is the decoder input (it starts with <s>)."""
    device = next(model.parameters()).device
    src = torch.tensor([src_ids], device=device)  # (1, S)
    tgt = torch.tensor([tgt_ids], device=device)  # (1, T)
    masks = (src != PAD).unsqueeze(-2), subsequent_mask(tgt.size(1), device)
    return heads.kept_weights(model, lambda: model(src, tgt, *masks))





# --- Part 6: Looking inside the trained model › Collecting the weights (annotated_transformer.md:2736) ---
def text_pair(model, data, text):
    """(src_ids, tgt_ids, src_tokens, tgt_tokens) of a source text and the model's
    translation of it; tgt_ids is the decoder input: <s> followed by the translation."""
    src_ids = frame(data.vocab_src.encode(tokenize_all(data.src_lang, [text])[0]))
    tgt_ids = [BOS] + translate_ids(model, [src_ids])[0]
    src_tok = [data.vocab_src.itos[i] for i in src_ids]  # labels, specials included
    tgt_tok = [data.vocab_tgt.itos[i] for i in tgt_ids]
    return src_ids, tgt_ids, src_tok, tgt_tok


def example_pair(model, data, index, split="val"):
    """text_pair of sentence `index` of `split`."""
    return text_pair(model, data, data.text[split][0][index])






# --- Part 6: Looking inside the trained model › Plotting heads (annotated_transformer.md:2756) ---
from atkit.figures import plot_heads  # heatmaps with readable labels and a colour bar


def show_attention(model, data, index=0, layer=1, kind="cross", head=None, split="val"):
    """Plot one sentence of `split`: one layer, one kind of attention, all heads (or
    one). Layers and heads count from 1."""
    heads.check_choice(kind, layer, head, model.config.N, model.config.h)
    src_ids, tgt_ids, src_tok, tgt_tok = example_pair(model, data, index, split)
    w = attention_maps(model, src_ids, tgt_ids)[kind][layer - 1]  # (h, q, k)
    rows = src_tok if kind == "encoder" else tgt_tok
    cols = tgt_tok if kind == "decoder" else src_tok
    chosen = None if head is None else [head]
    plot_heads(w, rows, cols, f"{kind} attention, layer {layer}", chosen)








# --- Part 6: Looking inside the trained model › Exploring the attention (annotated_transformer.md:2778) ---
from atkit.attention_view import AttentionView


def attention_view(model, data, indices, split="val", extra=()):
    """An interactive view of the attention of `model` on sentences of `split` (and
    on `extra` source texts, translated first)."""
    pairs = [(f"{split} {i}", example_pair(model, data, i, split)) for i in indices]
    pairs += [(text, text_pair(model, data, text)) for text in extra]
    sentences = []
    for label, (s, t, s_tok, t_tok) in pairs:
        maps = attention_maps(model, s, t)
        sentences.append(dict(src_tokens=s_tok, tgt_tokens=t_tok, label=label, **maps))
    return AttentionView(sentences)































# --- Part 6: Looking inside the trained model › Deep dive: Measuring what the heads do (annotated_transformer.md:2823) ---
def attention_statistics(model, data, n_sentences, split="val"):
    """Argmax statistics per (layer, head): (N, h) tensors of fractions, and the
    chance levels."""
    N, h = model.config.N, model.config.h
    hits = {k: torch.zeros(N, h) for k in ("previous", "same", "next", "aligned")}
    n_enc = torch.zeros(3)  # positions that have a previous / same / next token
    chance_enc = torch.zeros(3)  # sum of 1/S over those positions
    n_aligned, chance = 0, 0.0
    for index in range(min(n_sentences, len(data.text[split][0]))):
        src_ids, tgt_ids, src_tok, tgt_tok = example_pair(model, data, index, split)
        w = attention_maps(model, src_ids, tgt_ids)
        enc = w["encoder"].argmax(-1)  # (N, h, S): key chosen at each query
        S = enc.size(-1)
        pos = torch.arange(S)
        for k, (name, shift) in enumerate((("previous", -1), ("same", 0), ("next", 1))):
            valid = (pos + shift >= 0) & (pos + shift < S)
            hits[name] += ((enc == pos + shift) & valid).sum(-1).float()
            n_enc[k] += valid.sum()
            chance_enc[k] += valid.sum() / S
        cross = w["cross"].argmax(-1)  # (N, h, T)
        produced = tgt_tok[1:] + ["</s>"]  # the word written at each decoder position
        for t, word in enumerate(produced):
            where = [i for i, s in enumerate(src_tok) if s == word]
            if word in SPECIALS or len(where) != 1:
                continue
            hits["aligned"] += (cross[:, :, t] == where[0]).float()
            n_aligned += 1
            chance += 1 / len(src_tok)
    names = ("previous", "same", "next")
    stats = {name: hits[name] / n_enc[k] for k, name in enumerate(names)}
    stats["aligned"] = hits["aligned"] / max(n_aligned, 1)
    stats["chance"] = {
        name: (chance_enc[k] / n_enc[k]).item() for k, name in enumerate(names)
    }
    stats["chance"]["aligned"] = chance / max(n_aligned, 1)
    stats["n_aligned"] = n_aligned
    return stats












# --- Part 6: Looking inside the trained model › Deep dive: Measuring what the heads do (annotated_transformer.md:2873) ---
from atkit.heads import describe_heads, strongest_head
