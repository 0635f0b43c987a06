"""The same step, faster: fused kernels swapped into the notebook's model, a cheaper
dropout, the loss without its largest tensor, a precision and compilation.

The notebook's Part 1 classes are the paper's, written to be read; its deep dive "The
same step, faster" explains each piece here and why it computes the same function
(the tests compare outputs and gradients). atkit never imports the notebook, so the
model comes in as an argument and its modules are recognised by what they hold:

* an *attention* holds `w_q`, `w_k`, `w_v`, `w_o` and `split_heads` (Part 1's
  `MultiHeadedAttention`);
* a *layer norm* holds `gamma`, `beta` and `eps` (Part 1's `LayerNorm`);
* a dropout is an `nn.Dropout`.

A class that computes something else with those names says so with the class
attribute `keeps_forward = True` (since_2017.ipynb's `Attention`, which rotates,
normalises or groups its queries and keys): its modules keep their own forward.

`set_fast_path` changes only the class of such a module, to a subclass whose `forward`
is the fused one, so the weights, the state dict's keys and `isinstance` stay as they
were, and checkpoints move freely between the paths.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from atkit import config, runtime
from atkit.settings import ConfigError

ATTENTION = ("w_q", "w_k", "w_v", "w_o", "split_heads")
LAYER_NORM = ("gamma", "beta", "eps")


def attend(mha, q, k, v, mask=None):
    """Eq. 1 for all heads in one fused kernel, then Concat(heads) W^O.
    q (B, h, T, d_k), k and v (B, h, S, d_k), mask (B, T or 1, S) or None."""
    if mask is not None:
        mask = mask.unsqueeze(1)  # (B, 1, T or 1, S): the same mask for every head
    x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, h, T, d_k)
    x = x.transpose(1, 2).reshape(q.size(0), -1, mha.h * mha.d_k)  # (B, T, d_model)
    return mha.w_o(x)


class FusedAttention:
    """Part 1's MultiHeadedAttention through F.scaled_dot_product_attention, which
    returns no weights (`attn` keeps the last plain call's)."""

    def forward(self, query, key, value, mask=None):
        q = self.split_heads(self.w_q(query))  # (B, h, T, d_k)
        k = self.split_heads(self.w_k(key))  # (B, h, S, d_k)
        v = self.split_heads(self.w_v(value))  # (B, h, S, d_k)
        return attend(self, q, k, v, mask)


class FusedLayerNorm:
    """Part 1's LayerNorm through one fused kernel: same parameters, same function."""

    def forward(self, x):
        return F.layer_norm(x, self.gamma.shape, self.gamma, self.beta, self.eps)


class CheapDropout(nn.Dropout):
    """nn.Dropout with a cheaper random mask on the CPU (16 random bits per element)."""

    def forward(self, x):
        if not self.training or self.p == 0 or x.device.type != "cpu":
            return super().forward(x)
        if torch.compiler.is_compiling():  # compiled kernels draw their own numbers
            return super().forward(x)
        n = x.numel()
        bits = torch.empty((n + 3) // 4, dtype=torch.int64)
        bits.random_(-(2**63), 2**63 - 1)  # 64 random bits per draw
        u = bits.view(torch.int16)[:n].view(x.shape)  # uniform in [-2**15, 2**15)
        dropped = round(self.p * 2**16)  # of the 2**16 values u can take
        keep = (u >= dropped - 2**15).to(x.dtype)  # 1 kept, 0 dropped
        return x * keep.mul_(1 / (1 - dropped / 2**16))  # scaled: same expectation


CheapDropout.plain_class = nn.Dropout
_SUBCLASSES: dict = {}


def _with_forward(fused, plain):
    """`plain` with the `forward` of `fused`: a subclass, made once per pair."""
    if (fused, plain) not in _SUBCLASSES:
        made = type(fused.__name__, (fused, plain), {"plain_class": plain})
        _SUBCLASSES[fused, plain] = made
    return _SUBCLASSES[fused, plain]


def _holds(module, names) -> bool:
    return all(hasattr(module, name) for name in names)


def fast_class(module, attn_impl="sdpa"):
    """(plain class, fast class) of a module; the fast one is None where there is
    none (and the plain one where `attn_impl` keeps Part 1's attention)."""
    plain = getattr(type(module), "plain_class", type(module))
    if getattr(plain, "keeps_forward", False):
        return plain, None
    if plain is nn.Dropout:
        return plain, CheapDropout
    if _holds(module, ATTENTION):
        return plain, _with_forward(
            FusedAttention, plain
        ) if attn_impl == "sdpa" else plain
    if _holds(module, LAYER_NORM):
        return plain, _with_forward(FusedLayerNorm, plain)
    return plain, None


def set_fast_path(model, fast=True, attn_impl="sdpa"):
    """Switch every attention to `attn_impl` ("sdpa": fused; "didactic": Part 1's),
    every layer norm to the fused kernel and every Dropout to CheapDropout (or all
    back to Part 1's classes, with fast=False). The weights are untouched; returns
    the model."""
    if attn_impl not in ("sdpa", "didactic"):
        raise ConfigError(f"attn_impl={attn_impl!r}: choose 'sdpa' or 'didactic'")
    for module in model.modules():
        plain, faster = fast_class(module, attn_impl)
        if faster is not None:
            module.__class__ = faster if fast else plain
    return model


@contextlib.contextmanager
def plain_forward(model):
    """Within the block, every module of `model` runs Part 1's forward (for Part 6:
    only the plain attention keeps its weights); the fast classes come back after."""
    swapped = [(m, type(m)) for m in model.modules() if hasattr(type(m), "plain_class")]
    try:
        for module, _ in swapped:
            module.__class__ = type(module).plain_class
        yield model
    finally:
        for module, cls in swapped:
            module.__class__ = cls


class FastLossCompute:
    """Generator projection + label-smoothed cross-entropy in one fused call: the
    loss of the notebook's SimpleLossCompute with LabelSmoothing, without building
    the smoothed target; the softmax stays in float32 under bfloat16."""

    def __init__(self, generator, padding_idx, smoothing=0.1):
        self.generator, self.padding_idx = generator, padding_idx
        self.smoothing = smoothing

    def __call__(self, x, y, norm):
        logits = self.generator.proj(x)  # (B, T, vocab): no log_softmax here
        loss = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(),  # (B*T, vocab)
            y.reshape(-1),  # (B*T,)
            ignore_index=self.padding_idx,
            label_smoothing=self.smoothing,
            reduction="sum",
        )
        return loss.detach(), loss / norm


@dataclass
class Precision:
    """An autocast dtype (None: float32) and, for float16 on CUDA, a GradScaler."""

    dtype: torch.dtype | None
    device_type: str
    scaler: torch.amp.GradScaler | None = None

    def autocast(self):
        return torch.autocast(
            self.device_type,
            self.dtype or torch.float32,
            enabled=self.dtype is not None,
        )

    @property
    def name(self):
        return next(name for name, dtype in DTYPES.items() if dtype == self.dtype)


# the dtype of each name in config.PRECISIONS but "auto" (a test holds the two equal)
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def choose_precision(device, precision="auto"):
    """The Precision of a name ("auto", "fp32", "bf16", "fp16") on `device`: "auto"
    asks the hardware (`runtime.auto_precision`); a precision the device only
    emulates is refused."""
    device = torch.device(device)
    if precision == "auto":
        precision, _ = runtime.auto_precision(device)
    if precision not in DTYPES:
        raise ConfigError(
            f"precision={precision!r}: choose one of {list(config.PRECISIONS)}"
        )
    if precision == "fp16" and device.type != "cuda":
        raise ConfigError("precision='fp16' needs a CUDA device; use bf16 or fp32")
    if precision == "bf16" and device.type == "cuda":
        major, minor = runtime.gpu_capability(device)
        if major < 8:
            raise ConfigError(
                f"precision='bf16': this GPU (sm{major}{minor}) only emulates "
                "bfloat16; use 'auto' (float16 with a GradScaler) or 'fp32'"
            )
    dtype = DTYPES[precision]
    scaler = torch.amp.GradScaler("cuda") if dtype == torch.float16 else None
    return Precision(dtype, device.type, scaler)


def fast_attention_impl(precision):
    """sdpa, except in bfloat16 on a CPU, where the explicit matrix products win
    (measured with tools/bench.py)."""
    cpu_bf16 = precision.device_type == "cpu" and precision.dtype == torch.bfloat16
    return "didactic" if cpu_bf16 else "sdpa"


def pad_to_multiple(src, tgt, multiple: int, pad: int):
    """A batch's (src, tgt) padded with `pad` so that the source length and the
    decoder's length (tgt's, less one) are multiples of `multiple`: an epoch's batches
    then take a few distinct shapes, and a compiled step few recompilations."""
    if multiple <= 1:
        return src, tgt
    S, T = src.size(1), tgt.size(1) - 1  # (B, S), (B, T + 1)
    src = F.pad(src, (0, -S % multiple), value=pad)
    tgt = F.pad(tgt, (0, -T % multiple), value=pad)
    return src, tgt


def maybe_compile(model, enabled=False, device="cpu", log=None):
    """torch.compile(model, dynamic=True) without duck sizing, when enabled and
    possible here; else the model itself (and `log` says why)."""
    works, why = runtime.compile_works(device) if enabled else (False, "")
    if not works:
        if enabled and log:
            log(f"not compiled: {why}")
        return model
    if log:
        log(
            f"compiling the model for {device} (torch.compile): the first steps "
            "take a minute or more"
        )
    torch.fx.experimental._config.use_duck_shape = False  # one symbol per size
    # torch.compile(model, dynamic=True), or the model itself where compiling fails
    return runtime.compiled_or_eager(model, log or print, dynamic=True)
